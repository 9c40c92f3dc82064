import pg from "pg";
import { DatabaseUnreachableError, isAuthFailure, isMissingDatabase } from "./errors.ts";

export interface PoolOptions {
  connectionString: string;
  /** Most connections the pool opens; default 10. */
  max?: number;
  /** Called for errors on idle connections (a server restart, a network blip). */
  onIdleError?: (error: Error) => void;
}

/** Where a connection string points, without its password, for error messages and logs. */
export const describeConnection = (connectionString: string): string => {
  try {
    const url = new URL(connectionString);
    return `${url.hostname || "localhost"}:${url.port || "5432"}${url.pathname || "/"}`;
  } catch {
    return "(unparseable connection string)";
  }
};

/** Turns a failure to connect into an error that says where, why, and what to do. */
export const unreachable = (connectionString: string, error: unknown): DatabaseUnreachableError => {
  const where = describeConnection(connectionString);
  const reason = error instanceof Error ? error.message : String(error);
  const what = isMissingDatabase(error)
    ? "The server is up but that database does not exist: create it, or fix the name in DATABASE_URL."
    : isAuthFailure(error)
      ? "The server refused the user or password in DATABASE_URL."
      : "Check DATABASE_URL (or --database-url) and that the server is running and reachable.";
  return new DatabaseUnreachableError(`picket: cannot connect to PostgreSQL at ${where} (${reason}). ${what}`, {
    cause: error,
  });
};

/**
 * Opens a pool and proves it can connect, so a bad DATABASE_URL fails at start with a clear
 * message instead of at the first claim.
 */
export const openPool = async (options: PoolOptions): Promise<pg.Pool> => {
  try {
    new URL(options.connectionString);
  } catch {
    throw new DatabaseUnreachableError(
      `picket: the connection string is not a URL (expected postgres://user:password@host:5432/database).`,
    );
  }
  const pool = new pg.Pool({
    connectionString: options.connectionString,
    max: options.max ?? 10,
    connectionTimeoutMillis: 10_000,
    // Each connection plans each prepared statement once. picket's statements are written to have
    // a good plan without their parameters' values (test/explain.test.ts plans them so); left to
    // choose, PostgreSQL re-plans the claim at every call (~0.3 ms of a ~1 ms claim). pg-pool runs
    // this before handing the connection out, with its error listener attached, and closes the
    // connection if it fails. Session state: behind PgBouncer in transaction mode it would reach
    // other clients' sessions, so point picket's own pool at PostgreSQL (or use session mode).
    onConnect: async (client) => void (await client.query("SET plan_cache_mode = force_generic_plan")),
  });
  // Without a listener, an error on an idle connection would crash the process.
  pool.on("error", options.onIdleError ?? (() => undefined));
  try {
    await pool.query("SELECT 1");
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw unreachable(options.connectionString, error);
  }
  return pool;
};
