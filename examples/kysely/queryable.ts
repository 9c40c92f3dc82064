// The recipe: picket's enqueue takes a Queryable (anything with pg's `query(config)`), and this
// turns a Kysely transaction into one, so the job is written on the transaction's own connection
// and commits or rolls back with the rows written through Kysely. Copy it into your app: picket
// does not ship it, so that Kysely never becomes a dependency of picket.
import type { QueryResult, QueryResultRow } from "pg";
import { CompiledQuery, type Kysely, type Transaction } from "kysely";
import type { Queryable } from "../../src/index.ts";

export const kyselyQueryable = (trx: Transaction<any> | Kysely<any>): Queryable => {
  // Without the app's plugins: CamelCasePlugin or ParseJSONResultsPlugin would rewrite the job
  // rows picket reads back (their columns are already aliased; a string payload is not JSON).
  const raw = trx.withoutPlugins();
  return {
    // `config.name` (a prepared statement's name, picket's optimisation for hot statements) is
    // dropped: Kysely's driver runs every statement unnamed, which is always correct. Enqueueing
    // names no statement anyway.
    async query<R extends QueryResultRow>(config: { text: string; values?: unknown[] }): Promise<QueryResult<R>> {
      const result = await raw.executeQuery<R>(CompiledQuery.raw(config.text, config.values ?? []));
      return {
        rows: result.rows as R[],
        rowCount: result.numAffectedRows === undefined ? result.rows.length : Number(result.numAffectedRows),
        command: "",
        oid: 0,
        fields: [],
      };
    },
  };
};
