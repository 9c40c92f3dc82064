import { InvalidConfigError } from "./errors.ts";

export const DEFAULT_SCHEMA = "picket";

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * The schema name is spliced into SQL text (identifiers cannot be bound parameters), so it is
 * checked against a strict identifier shape first and never quoted from user input.
 */
export const checkSchemaName = (schema: string): string => {
  if (typeof schema !== "string" || !IDENTIFIER.test(schema)) {
    throw new InvalidConfigError(
      `picket: schema name ${JSON.stringify(schema)} is not allowed; use lower-case letters, digits and _ ` +
        `(starting with a letter or _), at most 63 characters, e.g. "picket".`,
    );
  }
  return schema;
};

const builtStatements = new Set<Map<string, unknown>>();

/**
 * Forgets every statement text built so far; each is built again on its next use. For the test
 * suite: mutation testing learns which tests reach a statement's builder from who builds it, and
 * a text cached by an earlier test would credit only that test.
 */
export const forgetBuiltStatements = (): void => {
  for (const cache of builtStatements) cache.clear();
};

/**
 * Builds a statement's text once per schema. Statement modules keep their SQL next to their row
 * types and call this to get the text for the schema in use.
 */
export const perSchema = <T>(build: (schema: string) => T): ((schema: string) => T) => {
  const cache = new Map<string, T>();
  builtStatements.add(cache);
  return (schema) => {
    let built = cache.get(schema);
    if (built === undefined) {
      built = build(checkSchemaName(schema));
      cache.set(schema, built);
    }
    return built;
  };
};

/** The NOTIFY channel enqueues signal on; one per schema. */
export const notifyChannel = (schema: string): string => `picket:${checkSchemaName(schema)}`;
