// Every statement picket runs goes through runStatement: it is bounded in time on any pool (picket's
// own or the caller's) and through a pooler, and it is named (prepared) only where that is safe.
//
// The bound is kept on the client: a server-side statement_timeout is session state, which a
// caller's pool or a pooler in transaction mode must not be given. When the bound passes, the
// statement is cancelled on the server (a cancel request, which PgBouncer forwards) so it cannot
// commit later, and a connection picket checked out of a pool is destroyed (its state is unknown).
// A black-holed connection cannot be cancelled; destroying it still ends the wait.
import { connect as connectSocket } from "node:net";
import type pg from "pg";
import {
  InvalidConfigError,
  isPreparedStatementMismatch,
  isTimeout,
  StatementTimeoutError,
} from "./errors.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";

export const DEFAULT_STATEMENT_TIMEOUT_MS = 10_000;

/** One statement: a name makes it a prepared statement where options allow. */
export interface Statement {
  name?: string;
  text: string;
  values?: unknown[];
}

type PoolLike = pg.Pool;

const isPool = (db: Queryable): db is PoolLike =>
  typeof (db as Partial<pg.Pool>).connect === "function" && "totalCount" in (db as object);

/** The connection details a cancel request needs; pg keeps them on every connected client. */
interface Cancellable {
  processID: number | null;
  secretKey: number | null;
  host?: string;
  port?: number;
}

/**
 * Asks the server to cancel what `client` is running: PostgreSQL's CancelRequest, sent on a
 * connection of its own (16 bytes: length, the cancel code, the backend's pid and secret key).
 * Fire and forget: a server that cannot be reached cannot be asked, and the caller does not wait.
 */
const sendCancel = (client: unknown): void => {
  const { processID, secretKey, host, port } = client as Cancellable;
  if (typeof processID !== "number" || typeof secretKey !== "number" || typeof port !== "number") return;
  const socket = host?.startsWith("/") ? connectSocket(`${host}/.s.PGSQL.${port}`) : connectSocket(port, host ?? "localhost");
  socket.setTimeout(2_000, () => socket.destroy());
  socket.on("error", () => undefined);
  socket.on("connect", () => {
    const request = Buffer.alloc(16);
    request.writeInt32BE(16, 0);
    request.writeInt32BE(80877102, 4);
    request.writeInt32BE(processID, 8);
    request.writeInt32BE(secretKey, 12);
    socket.end(request);
  });
};

/** Closes a connection's socket at once, whatever the peer does (a paused or black-holed server). */
export const destroySocket = (client: unknown): void => {
  (client as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
};

/** Statements in flight on connections picket checked out of each pool, each with the way to end it now. */
const inFlight = new WeakMap<PoolLike, Map<pg.PoolClient, (error: StatementTimeoutError) => void>>();

const giveUp = (client: pg.PoolClient, reason: Error): void => {
  sendCancel(client);
  client.release(reason);
  destroySocket(client);
};

/**
 * Cancels and destroys every connection picket has checked out of `pool` for a statement still in
 * flight, so a pool can be ended (or left to its owner) at once whatever the database does. The
 * statements fail with a StatementTimeoutError.
 */
export const abortStatements = (pool: Queryable): void => {
  if (!isPool(pool)) return;
  for (const end of [...(inFlight.get(pool)?.values() ?? [])]) end(new StatementTimeoutError("picket: the statement was abandoned: the worker is stopping."));
};

const timeoutError = (statement: Statement, timeoutMs: number, cause?: unknown): StatementTimeoutError =>
  new StatementTimeoutError(
    `picket: statement ${statement.name ?? statement.text.trim().split(/\s+/, 3).join(" ")} did not finish within ${timeoutMs} ms ` +
      `(a lock held by another session, or a slow, paused or unreachable server); it was cancelled.`,
    cause === undefined ? undefined : { cause },
  );

/** Runs on a pool: checks a connection out, so a statement past its bound can be cancelled and its connection destroyed. */
const onPool = <R extends pg.QueryResultRow>(pool: PoolLike, config: pg.QueryConfig, statement: Statement, timeoutMs: number) =>
  new Promise<pg.QueryResult<R>>((resolve, reject) => {
    let client: pg.PoolClient | undefined;
    let settled = false;
    // A checked-out connection has no listener of the pool's: an error it emits outside the
    // statement (the server closing it) is the statement's, as in pg-pool's own query().
    const onError = (error: Error) => finish(error);
    const finish = (error: unknown, result?: pg.QueryResult<R>) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (client !== undefined) {
        inFlight.get(pool)?.delete(client);
        client.removeListener("error", onError);
        if (error instanceof StatementTimeoutError) giveUp(client, error);
        // As pg-pool's own query() does: a connection that saw an error is not reused.
        else client.release(error === undefined ? undefined : error instanceof Error ? error : new Error(String(error)));
      }
      if (error === undefined) resolve(result!);
      else reject(error);
    };
    const timer = setTimeout(() => finish(timeoutError(statement, timeoutMs)), timeoutMs);
    // The callback form: it runs as the pool hands the connection over, so the error listener is
    // in place before anything else the server sent in the same read (a promise would leave a gap).
    pool.connect((error, connection) => {
      if (error !== undefined || connection === undefined) return finish(error);
      // The bound passed while waiting for a connection: give it back unused.
      if (settled) return connection.release();
      client = connection;
      connection.on("error", onError);
      let statements = inFlight.get(pool);
      if (statements === undefined) inFlight.set(pool, (statements = new Map()));
      statements.set(connection, finish);
      // The callback form again: it runs as the reply is read, so a result that arrived is kept
      // even when the server closes the connection in the same read (the error event comes after).
      connection.query<R>(config, (failure: Error | undefined, result: pg.QueryResult<R>) => finish(failure ?? undefined, result));
    });
  });

/** Runs on a client the caller holds (perhaps inside their transaction): cancelled past the bound, never destroyed. */
const onConnection = <R extends pg.QueryResultRow>(db: Queryable, config: pg.QueryConfig, statement: Statement, timeoutMs: number) =>
  new Promise<pg.QueryResult<R>>((resolve, reject) => {
    const timer = setTimeout(() => {
      sendCancel(db);
      reject(timeoutError(statement, timeoutMs));
    }, timeoutMs);
    db.query<R>(config).then(
      (result) => {
        clearTimeout(timer);
        resolve(result);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });

/** Errors that need picket's words: a timeout of the server's, a named statement lost to a pooler. */
const explain = (error: unknown, statement: Statement, timeoutMs: number): unknown => {
  if (isTimeout(error)) return timeoutError(statement, timeoutMs, error);
  if (statement.name !== undefined && isPreparedStatementMismatch(error)) {
    return new InvalidConfigError(
      `picket: the prepared statement ${statement.name} was missing or already present on its connection (${(error as Error).message}): ` +
        `the connection goes through a pooler in transaction mode (PgBouncer?). Set transactionPooling: true ` +
        `(--transaction-pooling on the command line) so picket names no statements.`,
      { cause: error },
    );
  }
  return error;
};

/**
 * Checks a connection out of a pool for a transaction of several statements, waiting at most
 * `timeoutMs` for it. Run the transaction's statements with runStatement on the connection; if one
 * of them times out, release the connection with an error so the pool destroys it.
 */
export const checkOut = (pool: pg.Pool, timeoutMs: number): Promise<pg.PoolClient> =>
  new Promise((resolve, reject) => {
    let late = false;
    const timer = setTimeout(() => {
      late = true;
      reject(new StatementTimeoutError(`picket: no database connection within ${timeoutMs} ms (a slow, paused or unreachable server, or a pool with no connection free).`));
    }, timeoutMs);
    pool.connect((error, client) => {
      clearTimeout(timer);
      if (error !== undefined || client === undefined) {
        if (!late) reject(error);
      } else if (late) {
        client.release();
      } else {
        resolve(client);
      }
    });
  });

/**
 * Runs one statement, bounded by `options.timeoutMs` (default 10 s) from the moment it asks for a
 * connection. Named only when `options.preparedStatements` is not false.
 */
export const runStatement = async <R extends pg.QueryResultRow = pg.QueryResultRow>(
  db: Queryable,
  statement: Statement,
  options: StatementOptions = {},
): Promise<pg.QueryResult<R>> => {
  const timeoutMs = options.timeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 2_147_483_647) {
    throw new InvalidConfigError(`picket: statement timeoutMs must be an integer from 1 to 2147483647 (got ${String(options.timeoutMs)}).`);
  }
  const config: pg.QueryConfig =
    statement.name !== undefined && options.preparedStatements !== false
      ? { name: statement.name, text: statement.text, values: statement.values ?? [] }
      : { text: statement.text, values: statement.values ?? [] };
  try {
    return await (isPool(db) ? onPool<R>(db, config, statement, timeoutMs) : onConnection<R>(db, config, statement, timeoutMs));
  } catch (error) {
    throw explain(error, statement, timeoutMs);
  }
};
