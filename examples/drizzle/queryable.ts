// The recipe: picket's enqueue takes a Queryable (anything with pg's `query(config)`), and this
// turns a Drizzle transaction (drizzle-orm/node-postgres) into one, so the job is written on the
// transaction's own connection and commits or rolls back with the rows written through Drizzle.
// Copy it into your app: picket does not ship it, so that Drizzle never becomes a dependency of
// picket.
import { type SQL, sql } from "drizzle-orm";
import type { NodePgQueryResultHKT } from "drizzle-orm/node-postgres";
import type { PgTransaction, PgDatabase } from "drizzle-orm/pg-core";
import pg from "pg";
import type { Queryable } from "../../src/index.ts";

// Drizzle's node-postgres driver hands these types back as the server's text (its own columns map
// them); picket's rows expect pg's own parsing (a timestamptz is a Date), so they are parsed again
// with pg's parsers: timestamp(tz), date, interval and their arrays, and numeric[].
const LEFT_AS_TEXT_BY_DRIZZLE = new Set([1082, 1114, 1184, 1186, 1115, 1182, 1185, 1187, 1231]);

export const drizzleQueryable = (tx: PgTransaction<NodePgQueryResultHKT, any, any> | PgDatabase<NodePgQueryResultHKT, any>): Queryable => ({
  // `config.name` (a prepared statement's name, picket's optimisation for hot statements) is
  // dropped: tx.execute runs statements unnamed, which is always correct. Enqueueing names none.
  async query<R extends pg.QueryResultRow>(config: { text: string; values?: unknown[] }): Promise<pg.QueryResult<R>> {
    // picket's statement with its $n placeholders becomes Drizzle SQL with each value bound as a
    // parameter (sql.param: an array stays one array parameter, as picket's unnest() needs; a
    // plain array in a sql`` template would be spread into a list). picket's statements hold no
    // "$<digit>" inside a string literal, so splitting on them is exact.
    const values = config.values ?? [];
    const chunks: SQL[] = config.text.split(/(\$[0-9]+)/).map((part) => (/^\$[0-9]+$/.test(part) ? sql`${sql.param(values[Number(part.slice(1)) - 1])}` : sql.raw(part)));
    const result = (await tx.execute<R>(sql.join(chunks))) as pg.QueryResult<R>;
    for (const field of result.fields) {
      if (!LEFT_AS_TEXT_BY_DRIZZLE.has(field.dataTypeID)) continue;
      const parse = pg.types.getTypeParser(field.dataTypeID, "text");
      for (const row of result.rows as Record<string, unknown>[]) {
        if (typeof row[field.name] === "string") row[field.name] = parse(row[field.name] as string);
      }
    }
    return result;
  },
});
