import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import type pg from "pg";
import { MigrationChecksumError, StatementTimeoutError, UnknownMigrationError } from "./errors.ts";
import type { StatementOptions } from "./queryable.ts";
import { checkSchemaName, DEFAULT_SCHEMA } from "./schema-name.ts";
import { checkOut, runStatement } from "./statement.ts";

/** A migration may rebuild an index on a large table: its statements get minutes, not seconds. */
export const DEFAULT_MIGRATION_TIMEOUT_MS = 300_000;

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
 * a failed start. Every wait (for a connection, the advisory lock, a table lock, a statement) is
 * bounded by `timeoutMs` (default 5 minutes); the transaction's own lock and statement timeouts
 * are set with SET LOCAL, so nothing outlives it on a pooled connection.
 */
export const migrate = async (
  db: pg.Pool | pg.ClientBase,
  options: StatementOptions & { migrations?: MigrationFile[] } = {},
): Promise<MigrateResult> => {
  const schema = checkSchemaName(options.schema ?? DEFAULT_SCHEMA);
  const files = options.migrations ?? (await readMigrations());
  const timeoutMs = options.timeoutMs ?? DEFAULT_MIGRATION_TIMEOUT_MS;
  const client = "totalCount" in db ? await checkOut(db, timeoutMs) : db;
  // A connection checked out of a pool has no listener of the pool's: a server closing it between
  // the migration's statements must fail the migration, not the process.
  const onError = () => undefined;
  if (client !== db) client.on("error", onError);
  const run = <R extends pg.QueryResultRow>(text: string, values?: unknown[]) => runStatement<R>(client, { text, ...(values ? { values } : {}) }, { timeoutMs });
  let failure: unknown;
  try {
    await run("BEGIN");
    try {
      // SET takes no parameters; timeoutMs is a checked integer (milliseconds, the setting's unit).
      await run(`SET LOCAL lock_timeout = ${timeoutMs}`);
      await run(`SET LOCAL statement_timeout = ${timeoutMs}`);
      const result = await applyPending(run, schema, files);
      await run("COMMIT");
      return result;
    } catch (error) {
      failure = error;
      await run("ROLLBACK").catch(() => undefined);
      if (error instanceof StatementTimeoutError) {
        throw new StatementTimeoutError(
          `picket: migrating schema "${schema}" waited more than ${timeoutMs} ms (for another migrator, or for a lock held on picket's tables by a long query); nothing was changed. ` +
            `Find the blocking session in pg_stat_activity, or pass a longer timeout.`,
          { cause: error },
        );
      }
      throw error;
    }
  } finally {
    // A connection whose statement timed out is in an unknown state: the pool destroys it.
    if (client !== db) {
      client.removeListener("error", onError);
      (client as pg.PoolClient).release(failure instanceof StatementTimeoutError ? failure : undefined);
    }
  }
};

type Run = <R extends pg.QueryResultRow>(text: string, values?: unknown[]) => Promise<pg.QueryResult<R>>;

const applyPending = async (run: Run, schema: string, files: MigrationFile[]): Promise<MigrateResult> => {
  await run("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [`picket:migrate:${schema}`]);
  await run(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
  await run(
    `CREATE TABLE IF NOT EXISTS ${schema}.migrations (
       version    integer PRIMARY KEY,
       name       text NOT NULL,
       checksum   text NOT NULL,
       applied_at timestamptz NOT NULL DEFAULT now()
     )`,
  );
  const { rows: applied } = await run<AppliedRow>(`SELECT version, name, checksum FROM ${schema}.migrations ORDER BY version`);
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
    await run(file.sql.replaceAll("{{schema}}", schema));
    await run(`INSERT INTO ${schema}.migrations (version, name, checksum) VALUES ($1, $2, $3)`, [file.version, file.name, file.checksum]);
  }
  return { applied: pending.map((file) => file.name) };
};
