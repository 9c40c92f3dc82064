// Options every command shares, and running a command against a pool it opens and closes.
import type { Command } from "commander";
import type pg from "pg";
import { openPool } from "../db/index.ts";
import { resolveDatabase, type ResolvedDatabase } from "./database.ts";

export interface DatabaseOptions {
  databaseUrl?: string;
  schema: string;
}

export const withDatabaseOptions = (command: Command): Command =>
  command
    .option("--database-url <url>", "PostgreSQL connection string (default: DATABASE_URL, else the embedded server in ./.picket)")
    .option("--schema <name>", "schema of picket's tables", "picket");

/** Opens the database, runs, closes (and stops the embedded server if one was started). */
export const withPool = async <T>(
  options: DatabaseOptions,
  run: (pool: pg.Pool, database: ResolvedDatabase) => Promise<T>,
  embedded: { temporary: boolean } = { temporary: false },
): Promise<T> => {
  const database = await resolveDatabase(options.databaseUrl, embedded);
  try {
    const pool = await openPool({ connectionString: database.url, max: 4 });
    try {
      return await run(pool, database);
    } finally {
      await pool.end();
    }
  } finally {
    await database.stop();
  }
};

/** Parses a non-negative integer option with a message naming the option. */
export const integerOption = (name: string, min = 0) => (value: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) throw new Error(`${name} must be an integer ≥ ${min} (got "${value}")`);
  return n;
};
