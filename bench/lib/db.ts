// A fresh database per benchmark run, on the embedded server or DATABASE_URL's.
import { randomBytes } from "node:crypto";
import pg from "pg";

export const withDatabase = (url: string, database: string): string => {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
};

export const createFreshDatabase = async (adminUrl: string, prefix: string): Promise<{ url: string; drop: () => Promise<void> }> => {
  const name = `${prefix}_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  return {
    url: withDatabase(adminUrl, name),
    drop: async () => {
      const c = new pg.Client({ connectionString: adminUrl });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
};

/** Prints one result line the orchestrator reads. */
export const report = (result: Record<string, unknown>): void => {
  process.stdout.write(`BENCH_RESULT ${JSON.stringify(result)}\n`);
};

export const percentile = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

interface Queries {
  query(sql: string): Promise<pg.QueryResult>;
}

// Ordinary tables of a schema (a partitioned table's leaves are ordinary tables; its parent is not).
const tablesOf = async (db: Queries, schema: string): Promise<string[]> => {
  const { rows } = await db.query(
    `SELECT format('%I.%I', n.nspname, c.relname) AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = ${pg.escapeLiteral(schema)} AND c.relkind = 'r' ORDER BY 1`,
  );
  return rows.map((r: { name: string }) => r.name);
};

// Table statistics: by default the benchmarks run on fresh tables that were never analyzed, as a
// new deployment does. Autovacuum would analyze them mid-run, so in that mode it is turned off for
// the queue's tables (disableAutovacuum, before the enqueue). With --analyze, autovacuum stays on
// and analyzeSchema runs after the enqueue, before the drain.
export const disableAutovacuum = async (db: Queries, schema: string): Promise<void> => {
  for (const table of await tablesOf(db, schema)) await db.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
};

export const analyzeSchema = async (db: Queries, schema: string): Promise<void> => {
  for (const table of await tablesOf(db, schema)) await db.query(`ANALYZE ${table}`);
};

/**
 * synchronous_commit for every connection opened to the database from now on (the enqueuer's and
 * the worker's alike): set on the database, so it holds whatever pool or library opens them.
 */
export const setSynchronousCommit = async (url: string, value: "on" | "off"): Promise<void> => {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const { rows } = await client.query("SELECT current_database() AS db");
  await client.query(`ALTER DATABASE ${pg.escapeIdentifier(rows[0].db)} SET synchronous_commit = ${value}`);
  await client.end();
};
