// Whether picket's tables exist in the schema a worker or a command is about to use: a cheap
// look-up at start, so that a database nobody migrated is named once, with what to do, instead
// of as `relation "picket.jobs" does not exist` on every poll.
import type { Queryable, StatementOptions } from "./queryable.ts";
import { SchemaNotSetUpError, SchemaOutOfDateError } from "./errors.ts";
import { readMigrations } from "./migrate.ts";
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

/**
 * Fails with SchemaNotSetUpError when picket's tables are missing from the schema, and with
 * SchemaOutOfDateError when migrations this version ships were not applied to it (a worker started
 * before `picket migrate` ran would otherwise fail one statement again and again).
 */
export const requirePicketSchema = async (db: Queryable, options: StatementOptions = {}): Promise<void> => {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  if (!(await picketSchemaExists(db, options))) throw new SchemaNotSetUpError(schema);
  const { rows } = await runStatement<{ version: number }>(db, { text: `SELECT version FROM "${schema}".migrations` }, options);
  const applied = new Set(rows.map((row) => row.version));
  const missing = (await readMigrations()).filter((file) => !applied.has(file.version)).map((file) => file.name);
  if (missing.length > 0) throw new SchemaOutOfDateError(schema, missing);
};
