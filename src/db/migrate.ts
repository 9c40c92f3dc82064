import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import type pg from "pg";
import { MigrationChecksumError, UnknownMigrationError } from "./errors.ts";
import type { SchemaOption } from "./queryable.ts";
import { checkSchemaName, DEFAULT_SCHEMA } from "./schema-name.ts";

const MIGRATIONS_DIR = new URL("./migrations/", import.meta.url);
const FILE_NAME = /^(\d{4})_[a-z0-9_]+\.sql$/;

export interface MigrationFile {
  version: number;
  name: string;
  checksum: string;
  sql: string;
}

interface AppliedRow {
  version: number;
  name: string;
  checksum: string;
}

export interface MigrateResult {
  /** File names applied by this call, in order; empty when the schema was already current. */
  applied: string[];
}

/** Reads the numbered .sql files in order; the checksum covers the file exactly as shipped. */
export const readMigrations = async (dir: URL = MIGRATIONS_DIR): Promise<MigrationFile[]> => {
  const names = (await readdir(dir)).filter((name) => FILE_NAME.test(name)).sort();
  return Promise.all(
    names.map(async (name) => {
      const sql = await readFile(new URL(name, dir), "utf8");
      return {
        version: Number(FILE_NAME.exec(name)![1]),
        name,
        checksum: createHash("sha256").update(sql).digest("hex"),
        sql,
      };
    }),
  );
};

/**
 * Brings the schema up to date. All pending files run in one transaction under an advisory lock
 * keyed by the schema, so concurrent migrators queue behind each other and the later ones find
 * nothing to do. A file whose checksum differs from the one recorded when it was applied is
 * refused: released migrations are never edited, and silently diverging schemas are worse than
 * a failed start.
 */
export const migrate = async (
  db: pg.Pool | pg.ClientBase,
  options: SchemaOption & { migrations?: MigrationFile[] } = {},
): Promise<MigrateResult> => {
  const schema = checkSchemaName(options.schema ?? DEFAULT_SCHEMA);
  const files = options.migrations ?? (await readMigrations());
  const client = "totalCount" in db ? await db.connect() : db;
  try {
    await client.query("BEGIN");
    try {
      const result = await applyPending(client, schema, files);
      await client.query("COMMIT");
      return result;
    } catch (error) {
      await client.query("ROLLBACK").catch(() => undefined);
      throw error;
    }
  } finally {
    if (client !== db) (client as pg.PoolClient).release();
  }
};

const applyPending = async (
  client: pg.ClientBase,
  schema: string,
  files: MigrationFile[],
): Promise<MigrateResult> => {
  await client.query({
    text: "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
    values: [`picket:migrate:${schema}`],
  });
  await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
  await client.query(
    `CREATE TABLE IF NOT EXISTS ${schema}.migrations (
       version    integer PRIMARY KEY,
       name       text NOT NULL,
       checksum   text NOT NULL,
       applied_at timestamptz NOT NULL DEFAULT now()
     )`,
  );
  const { rows: applied } = await client.query<AppliedRow>(
    `SELECT version, name, checksum FROM ${schema}.migrations ORDER BY version`,
  );
  const known = new Map(files.map((file) => [file.version, file]));
  for (const row of applied) {
    const file = known.get(row.version);
    if (file === undefined) {
      throw new UnknownMigrationError(
        `picket: schema "${schema}" has migration ${row.name}, which this version of picket does not ship. ` +
          `A newer picket migrated this database; upgrade picket rather than running an older one against it.`,
      );
    }
    if (file.checksum !== row.checksum) {
      throw new MigrationChecksumError(
        `picket: migration ${file.name} was changed after it was applied to schema "${schema}" ` +
          `(recorded checksum ${row.checksum.slice(0, 12)}…, file now ${file.checksum.slice(0, 12)}…). ` +
          `Released migrations must not be edited: restore the file and add a new numbered migration instead.`,
      );
    }
  }
  const done = new Set(applied.map((row) => row.version));
  const pending = files.filter((file) => !done.has(file.version));
  for (const file of pending) {
    await client.query(file.sql.replaceAll("{{schema}}", schema));
    await client.query({
      text: `INSERT INTO ${schema}.migrations (version, name, checksum) VALUES ($1, $2, $3)`,
      values: [file.version, file.name, file.checksum],
    });
  }
  return { applied: pending.map((file) => file.name) };
};
