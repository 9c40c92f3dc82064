// Whether picket's tables exist in the schema a worker or a command is about to use: a cheap
// look-up at start, so that a database nobody migrated is named once, with what to do, instead
// of as `relation "picket.jobs" does not exist` on every poll.
import type { Queryable, StatementOptions } from "./queryable.ts";
import { SchemaNotSetUpError } from "./errors.ts";
import { DEFAULT_SCHEMA } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

/** True when `schema`.jobs exists (to_regclass is null for a missing table or schema, without an error). */
export const picketSchemaExists = async (db: Queryable, options: StatementOptions = {}): Promise<boolean> => {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  // The name is quoted as an identifier so that to_regclass reads it exactly as the queue's SQL does.
  const { rows } = await runStatement<{ ok: boolean }>(
    db,
    { text: "SELECT to_regclass($1::text) IS NOT NULL AS ok", values: [`"${schema}".jobs`] },
    options,
  );
  return rows[0]?.ok === true;
};

/** Fails with SchemaNotSetUpError when picket's tables are missing from the schema. */
export const requirePicketSchema = async (db: Queryable, options: StatementOptions = {}): Promise<void> => {
  if (!(await picketSchemaExists(db, options))) throw new SchemaNotSetUpError(options.schema ?? DEFAULT_SCHEMA);
};
