import { InvalidConfigError } from "./errors.ts";

export const DEFAULT_SCHEMA = "picket";

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

// PostgreSQL's keywords that are not unreserved (pg_get_keywords() catcode R, C or T, as of
// PostgreSQL 18): as an unquoted schema name they fail to parse in some of picket's statements
// ("user.jobs" is a syntax error). test/faults-values.test.ts checks the server's own list against it.
const KEYWORDS = new Set(
  (
    "all analyse analyze and any array as asc asymmetric authorization between bigint binary bit " +
    "boolean both case cast char character check coalesce collate collation column concurrently " +
    "constraint create cross current_catalog current_date current_role current_schema current_time " +
    "current_timestamp current_user dec decimal default deferrable desc distinct do else end except " +
    "exists extract false fetch float for foreign freeze from full grant greatest group grouping " +
    "having ilike in initially inner inout int integer intersect interval into is isnull join json " +
    "json_array json_arrayagg json_exists json_object json_objectagg json_query json_scalar " +
    "json_serialize json_table json_value lateral leading least left like limit localtime " +
    "localtimestamp merge_action national natural nchar none normalize not notnull null nullif " +
    "numeric offset on only or order out outer overlaps overlay placing position precision primary " +
    "real references returning right row select session_user setof similar smallint some substring " +
    "symmetric system_user table tablesample then time timestamp to trailing treat trim true union " +
    "unique user using values varchar variadic verbose when where window with xmlattributes xmlconcat " +
    "xmlelement xmlexists xmlforest xmlnamespaces xmlparse xmlpi xmlroot xmlserialize xmltable"
  ).split(" "),
);

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
  if (KEYWORDS.has(schema)) {
    throw new InvalidConfigError(`picket: schema name "${schema}" is a keyword PostgreSQL reserves; pick another name, e.g. "${schema}_jobs".`);
  }
  if (schema.startsWith("pg_")) {
    throw new InvalidConfigError(`picket: schema name "${schema}" starts with pg_, which PostgreSQL reserves for system schemas; pick another name.`);
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
