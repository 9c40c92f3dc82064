// Every statement picket runs goes through runStatement: it is bounded in time on any pool (picket's
// own or the caller's) and through a pooler, and it is named (prepared) only where that is safe.
//
// The bound is kept on the client: a server-side statement_timeout is session state, which a
// caller's pool or a pooler in transaction mode must not be given. When the bound passes (or the
// caller's signal aborts), the statement is cancelled on the server with a cancel request, which
// PgBouncer forwards, so it cannot commit later; the caller hears of it at once. The connection is
// kept until the statement has ended on the server (a second or two at most): PgBouncer forgets
// the cancel of a client that is gone. Then a connection picket checked out of a pool is
// destroyed (its state is unknown). A black-holed connection cannot be cancelled; destroying it
// still ends the wait.
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

/** How long a cancelled statement is given to end on the server before its connection is closed. */
const CANCEL_WAIT_MS = 2_000;

/** One statement: a name makes it a prepared statement where options allow. */
export interface Statement {
  name?: string;
  text: string;
  values?: unknown[];
}

/** Whether `db` is a pg pool (a statement gets a connection of its own) rather than a caller's client. */
export const isPool = (db: Queryable): db is pg.Pool =>
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
 * connection of its own (16 bytes: length, the cancel code, the backend's pid and secret key). The
 * connection stays open until the other end closes it, as PostgreSQL does once it has acted on the
 * request (PgBouncer dropped requests whose connection closed at once: 1 cancel in 5 took effect).
 */
const sendCancel = (client: unknown): void => {
  const { processID, secretKey, host, port } = client as Cancellable;
  if (typeof processID !== "number" || typeof secretKey !== "number" || typeof port !== "number") return;
  const socket = host?.startsWith("/") ? connectSocket(`${host}/.s.PGSQL.${port}`) : connectSocket(port, host ?? "localhost");
  socket.setTimeout(CANCEL_WAIT_MS, () => socket.destroy());
  socket.on("error", () => undefined);
  socket.on("end", () => socket.destroy());
  socket.on("connect", () => {
    const request = Buffer.alloc(16);
    request.writeInt32BE(16, 0);
    request.writeInt32BE(80877102, 4);
    request.writeInt32BE(processID, 8);
    request.writeInt32BE(secretKey, 12);
    socket.write(request);
  });
};

/** Closes a connection's socket at once, whatever the peer does (a paused or black-holed server). */
export const destroySocket = (client: unknown): void => {
  (client as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
};

const timeoutError = (statement: Statement, timeoutMs: number, cause?: unknown): StatementTimeoutError =>
  new StatementTimeoutError(
    `picket: statement ${statement.name ?? statement.text.trim().split(/\s+/, 3).join(" ")} did not finish within ${timeoutMs} ms ` +
      `(a lock held by another session, or a slow, paused or unreachable server); it was cancelled.`,
    cause === undefined ? undefined : { cause },
  );

const abandonedError = (statement: Statement): StatementTimeoutError =>
  new StatementTimeoutError(`picket: statement ${statement.name ?? statement.text.trim().split(/\s+/, 3).join(" ")} was abandoned: its caller stopped waiting; it was cancelled.`);

/**
 * Runs `query` on `client`, settling when its reply is read, when `waitMs` passes (what is left of
 * the statement's bound of `timeoutMs`, which its error names), or when `signal` aborts; in the
 * last two cases the statement is cancelled on the server and `ended` is told once it has finished
 * there (or after CANCEL_WAIT_MS), so the connection can be let go. The caller hears of a cancel
 * at once when the connection will be closed (`answerEarly`), else only once the statement has
 * ended: a late cancel must not hit the caller's next statement.
 */
const bounded = <R extends pg.QueryResultRow>(
  client: Queryable,
  config: pg.QueryConfig,
  statement: Statement,
  timeoutMs: number,
  waitMs: number,
  signal: AbortSignal | undefined,
  answerEarly: boolean,
  ended: (failure: unknown, result?: pg.QueryResult<R>) => void,
): Promise<pg.QueryResult<R>> =>
  new Promise((resolve, reject) => {
    let answered = false;
    let givenUp: Error | undefined;
    let waited: NodeJS.Timeout | undefined;
    const settle = (failure: unknown, result?: pg.QueryResult<R>) => {
      if (answered) return;
      answered = true;
      clearTimeout(timer);
      clearTimeout(waited);
      signal?.removeEventListener("abort", onAbort);
      if (givenUp === undefined) {
        if (failure === undefined) resolve(result!);
        else reject(failure);
      } else if (!answerEarly) {
        reject(givenUp);
      }
      ended(givenUp ?? failure, result);
    };
    const giveUp = (error: Error) => {
      if (answered || givenUp !== undefined) return;
      givenUp = error;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      if (answerEarly) reject(error);
      sendCancel(client);
      waited = setTimeout(() => settle(error), CANCEL_WAIT_MS);
    };
    // Nothing sent yet: nothing to cancel (a cancel could hit the connection's next statement), and
    // the connection is as clean as it was.
    if (signal?.aborted) {
      reject(abandonedError(statement));
      return ended(undefined);
    }
    const onAbort = () => giveUp(abandonedError(statement));
    const timer = setTimeout(() => giveUp(timeoutError(statement, timeoutMs)), waitMs);
    signal?.addEventListener("abort", onAbort, { once: true });
    // A pg client's callback form runs as the reply is read, so a result that arrived is kept even
    // when the server closes the connection in the same read (the error event comes after).
    if ("processID" in client) {
      (client as unknown as pg.ClientBase).query<R>(config, (failure: Error | undefined, result: pg.QueryResult<R>) => settle(failure ?? undefined, result));
    } else {
      client.query<R>(config).then(
        (result) => settle(undefined, result),
        (failure: unknown) => settle(failure),
      );
    }
  });

/** Runs on a pool: checks a connection out for the statement, and destroys it if the statement was cancelled or failed. */
const onPool = <R extends pg.QueryResultRow>(pool: pg.Pool, config: pg.QueryConfig, statement: Statement, timeoutMs: number, signal: AbortSignal | undefined) =>
  new Promise<pg.QueryResult<R>>((resolve, reject) => {
    const started = performance.now();
    let waiting = true;
    const stopWaiting = (error: Error) => {
      if (!waiting) return;
      waiting = false;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      reject(error);
    };
    const onAbort = () => stopWaiting(abandonedError(statement));
    const timer = setTimeout(() => stopWaiting(timeoutError(statement, timeoutMs)), timeoutMs);
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    // The callback form: it runs as the pool hands the connection over, so the error listener is
    // in place before anything else the server sent in the same read (a promise would leave a gap).
    pool.connect((error, client) => {
      // An abandoned wait gives the connection back after pg-pool's hand-over has returned: released
      // inside it, the connection went straight to the next wait, one stack frame deeper each time,
      // and thousands of abandoned waits (a forced drain of thousands of jobs) overflowed the stack.
      if (!waiting) {
        if (client !== undefined) queueMicrotask(() => client.release());
        return;
      }
      waiting = false;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      if (error !== undefined || client === undefined) return reject(error);
      // A checked-out connection has no listener of the pool's: an error it emits outside the
      // statement (the server closing it) is the statement's, as in pg-pool's own query().
      const onError = () => undefined;
      client.on("error", onError);
      const left = Math.max(1, timeoutMs - Math.round(performance.now() - started));
      bounded<R>(client, config, statement, timeoutMs, left, signal, true, (failure) => {
        client.removeListener("error", onError);
        // As pg-pool's own query() does: a connection that saw an error is not reused.
        client.release(failure === undefined ? undefined : failure instanceof Error ? failure : new Error(String(failure)));
        if (failure instanceof StatementTimeoutError) destroySocket(client);
      }).then(resolve, reject);
    });
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
        reject(error);
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
    return await (isPool(db)
      ? onPool<R>(db, config, statement, timeoutMs, options.signal)
      : // A client the caller holds (perhaps inside their transaction): cancelled, never destroyed.
        bounded<R>(db, config, statement, timeoutMs, timeoutMs, options.signal, false, () => undefined));
  } catch (error) {
    throw explain(error, statement, timeoutMs);
  }
};
