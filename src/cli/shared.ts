// Options every command shares, and running a command against a pool it opens and closes.
import { hostname, userInfo } from "node:os";
import type { Command } from "commander";
import type pg from "pg";
import { checkSchemaName, isMissingPicketSchema, openPool, SchemaNotSetUpError, type StatementOptions } from "../db/index.ts";
import { describeEmbedded, resolveDatabase, type ResolvedDatabase } from "./database.ts";

export interface DatabaseOptions {
  databaseUrl?: string;
  schema: string;
  transactionPooling?: boolean;
  statementTimeout?: number;
}

export const withDatabaseOptions = (command: Command): Command =>
  command
    .option("--database-url <url>", "PostgreSQL connection string (default: DATABASE_URL, else the embedded server in ./.picket)")
    // Checked as it is parsed: a reserved word fails here, with picket's message, not as SQL.
    .option("--schema <name>", "schema of picket's tables", (name: string) => checkSchemaName(name), "picket")
    .option("--transaction-pooling", "the database URL goes through a pooler in transaction mode (PgBouncer): no prepared statements, no session settings")
    .option("--statement-timeout <ms>", "longest any statement may take before it is cancelled (default 10000)", (v: string) => integerOption("--statement-timeout", 1)(v));

/** How a command's statements run: its schema, its bound, prepared or not. */
export const statementOptions = (options: DatabaseOptions): StatementOptions => ({
  schema: options.schema,
  preparedStatements: !options.transactionPooling,
  ...(options.statementTimeout !== undefined ? { timeoutMs: options.statementTimeout } : {}),
});

/** Opens the database, runs, closes (and stops the embedded server if one was started). */
export const withPool = async <T>(
  options: DatabaseOptions,
  run: (pool: pg.Pool, database: ResolvedDatabase) => Promise<T>,
  embedded: { temporary: boolean } = { temporary: false },
): Promise<T> => {
  const database = await resolveDatabase(options.databaseUrl, embedded);
  // Which embedded server, and its URL: on stderr, so a command's output (--json) stays data.
  const described = embedded.temporary ? undefined : describeEmbedded(database, "command");
  if (described !== undefined) process.stderr.write(`picket: ${described}\n`);
  try {
    const pool = await openPool({
      connectionString: database.url,
      max: 4,
      transactionPooling: options.transactionPooling ?? false,
      ...(options.statementTimeout !== undefined ? { statementTimeoutMs: options.statementTimeout } : {}),
    });
    try {
      return await run(pool, database);
    } catch (error) {
      // A database nobody migrated: say so, and what to do, rather than pass on PostgreSQL's words.
      if (isMissingPicketSchema(error, options.schema)) throw new SchemaNotSetUpError(options.schema, { cause: error });
      throw error;
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

/** Parses a TCP port (1–65535), so that a typo such as 99999 is refused before anything starts. */
export const portOption = (name: string) => (value: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 65_535) throw new Error(`${name} must be a port number from 1 to 65535 (got "${value}")`);
  return n;
};

/** The OS user running the command; a uid without a passwd entry (containers) has no name to read. */
const osUser = (): string => {
  try {
    return userInfo().username;
  } catch {
    return process.env["USER"] ?? process.env["LOGNAME"] ?? `uid ${process.getuid?.() ?? "unknown"}`;
  }
};

/** Who an operator action (retry, cancel, pause) names: --by, else the OS user at this host. */
export const operator = (by: string | undefined): string => by ?? `${osUser()}@${hostname()}`.slice(0, 200);

export const byOption = ["--by <name>", "who the record names as asking (default: your OS user@host)"] as const;

/** Rows under a header, each column as wide as its widest cell, two spaces apart. */
export const table = (header: string[], rows: string[][]): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  return `${[header, ...rows].map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n")}\n`;
};
