import pg from "pg";
import { DatabaseUnreachableError, isAuthFailure, isMissingDatabase, isUnsupportedStartupParameter } from "./errors.ts";
import { DEFAULT_STATEMENT_TIMEOUT_MS, destroySocket, runStatement } from "./statement.ts";

export interface PoolOptions {
  connectionString: string;
  /** Most connections the pool opens; default 10. */
  max?: number;
  /** Called for errors on idle connections (a server restart, a network blip). */
  onIdleError?: (error: Error) => void;
  /**
   * The connection string goes through a pooler in transaction mode (PgBouncer, ...): picket
   * sets no session state on its connections. Default false.
   */
  transactionPooling?: boolean;
  /** The server-side statement and lock timeout of each connection (not set under transactionPooling); default 10 s. */
  statementTimeoutMs?: number;
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
    : isUnsupportedStartupParameter(error)
      ? "This looks like a pooler (PgBouncer) that refuses session settings: if it runs in transaction mode, set transactionPooling: true (--transaction-pooling)."
    : isAuthFailure(error)
      ? "The server refused the user or password in DATABASE_URL."
      : "Check DATABASE_URL (or --database-url) and that the server is running and reachable.";
  return new DatabaseUnreachableError(`picket: cannot connect to PostgreSQL at ${where} (${reason}). ${what}`, {
    cause: error,
  });
};

/**
 * Session settings every picket connection starts with, sent in the startup packet (no extra
 * round trip, and nothing a pooler could hand to another client: PgBouncer refuses the packet
 * rather than share it, which is why they are left out under transactionPooling).
 * - Each prepared statement is planned once per connection. picket's statements are written to
 *   have a good plan without their parameters' values (test/explain.test.ts plans them so); left
 *   to choose, PostgreSQL re-plans the claim at every call (~0.3 ms of a ~1 ms claim).
 * - Sequential scans are the planner's last resort (invariant 14). A plan made once is kept for the
 *   connection's life, and one made while the job table was new (under ten pages, never analyzed)
 *   priced a scan of the whole table below ten index probes: that plan read all 100,000 rows of
 *   the table at every claim and completion once they had arrived (test/explain.test.ts). picket's
 *   statements reach their rows through an index or a LATERAL probe, never by a join the planner
 *   might turn into a scan; a query with no index to use still scans.
 * - A statement or lock wait is cut off by the server at the same bound picket's own timer keeps
 *   (src/db/statement.ts), so a worker killed mid-statement leaves nothing waiting to commit later.
 */
const sessionSettings = (statementTimeoutMs: number): string =>
  `-c plan_cache_mode=force_generic_plan -c enable_seqscan=off -c statement_timeout=${statementTimeoutMs} -c lock_timeout=${statementTimeoutMs}`;

/**
 * Opens a pool and proves it can connect, so a bad DATABASE_URL fails at start with a clear
 * message instead of at the first claim. TCP keepalive finds a connection whose peer vanished.
 */
export const openPool = async (options: PoolOptions): Promise<pg.Pool> => {
  try {
    new URL(options.connectionString);
  } catch {
    throw new DatabaseUnreachableError(
      `picket: the connection string is not a URL (expected postgres://user:password@host:5432/database).`,
    );
  }
  const statementTimeoutMs = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
  const pool = new pg.Pool({
    connectionString: options.connectionString,
    max: options.max ?? 10,
    connectionTimeoutMillis: 10_000,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    ...(options.transactionPooling ? {} : { options: sessionSettings(statementTimeoutMs) }),
  });
  // Without a listener, an error on an idle connection would crash the process.
  pool.on("error", options.onIdleError ?? (() => undefined));
  try {
    await runStatement(pool, { text: "SELECT 1" }, { timeoutMs: 10_000 });
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw unreachable(options.connectionString, error);
  }
  return pool;
};

/**
 * Opens a connection of its own (not a pool's), runs SELECT 1 and closes it, within `timeoutMs`:
 * whether the server answers a newcomer now. Resolves with null when it does, else with why not.
 */
export const probeConnection = (config: pg.ClientConfig, timeoutMs: number): Promise<string | null> =>
  new Promise((resolve) => {
    const client = new pg.Client({ ...config, connectionTimeoutMillis: timeoutMs });
    client.on("error", () => undefined);
    const finish = (reason: string | null) => {
      clearTimeout(timer);
      resolve(reason);
      // A server that stopped answering would keep end() waiting for its reply: close the socket.
      if (reason === null) client.end().catch(() => undefined);
      else destroySocket(client);
    };
    const timer = setTimeout(() => finish(`no answer to SELECT 1 on a new connection within ${timeoutMs} ms`), timeoutMs);
    client
      .connect()
      .then(() => client.query("SELECT 1"))
      .then(
        () => finish(null),
        (error: unknown) => finish(error instanceof Error ? error.message : String(error)),
      );
  });

/**
 * Ends a pool picket opened without waiting on a server that does not answer: a connection still
 * opening after `graceMs` (to a paused server, it would wait out its connect timeout) is closed at
 * once. (pg-pool lists its connections only in a field of its own, _clients.)
 */
export const endPool = async (pool: pg.Pool, graceMs: number): Promise<void> => {
  // pg-pool resolves end() once it has asked its idle connections to close, not once they have
  // (it drops them from _clients at once): wait for each one's "remove", which comes when its
  // socket has closed, or a caller that stops the server next sees them fail.
  const clients = [...((pool as unknown as { _clients?: unknown[] })._clients ?? [])];
  const open = new Set(clients);
  const closed = new Promise<void>((resolve) => {
    const onRemove = (client: unknown) => {
      open.delete(client);
      if (open.size === 0) (pool.off("remove", onRemove), resolve());
    };
    pool.on("remove", onRemove);
    if (open.size === 0) (pool.off("remove", onRemove), resolve());
  });
  const ended = pool.end();
  let timer: NodeJS.Timeout | undefined;
  const late = await Promise.race([
    Promise.all([ended, closed]).then(() => false),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), graceMs))),
  ]);
  clearTimeout(timer);
  if (!late) return;
  for (const client of open) destroySocket(client);
  await ended;
};
