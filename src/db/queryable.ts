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

/** Options every statement takes: which schema the job table lives in. */
export interface SchemaOption {
  /** Schema of picket's tables; default "picket". */
  schema?: string;
}
