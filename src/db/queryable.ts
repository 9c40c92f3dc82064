import type pg from "pg";

/**
 * Anything picket can run a statement on: a Pool, a Client, or a PoolClient checked out by the
 * caller (so an enqueue commits or rolls back with the caller's own transaction).
 */
export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    config: pg.QueryConfig,
  ): Promise<pg.QueryResult<R>>;
}

/** Options every statement takes: where the job table lives, and how statements may run. */
export interface StatementOptions {
  /** Schema of picket's tables; default "picket". */
  schema?: string;
  /**
   * Longest a statement may take, waiting for a connection and for locks included; past it the
   * statement is cancelled on the server and fails with a StatementTimeoutError. Default 10 s.
   */
  timeoutMs?: number;
  /**
   * Name hot statements, so each connection parses and plans them once. false for connections
   * shared by a pooler in transaction mode (PgBouncer), where a named statement prepared on one
   * server connection is missing on the next. Default true.
   */
  preparedStatements?: boolean;
  /**
   * Aborting it ends the statement now: it fails with a StatementTimeoutError and is cancelled on
   * the server. A supervisor aborts its own statements this way when it stops.
   */
  signal?: AbortSignal;
}
