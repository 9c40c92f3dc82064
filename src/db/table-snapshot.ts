// checkTask's isolation of paths: a copy of every table outside picket's schema, taken before the
// handler's first run, and put back before each path. Each path then starts from the world the
// clean run started from, so what the user's effect counts (by job, by order id, by anything) is
// that path's own doing, and a handler idempotent by a key from its payload meets that key fresh
// on every path instead of finding it already done. Test-only: nothing in a worker runs it.
//
// The copy lives in a schema of its own (unlogged tables) on the same database, because the user's
// handler writes through its own pool: a per-path database cloned from a template would not be the
// one the handler writes to.
import { randomBytes } from "node:crypto";
import type pg from "pg";
import { PicketError } from "./errors.ts";
import type { StatementOptions } from "./queryable.ts";
import { runStatement } from "./statement.ts";

interface TableRow {
  name: string;
  /** ONLY for a plain table (not its inheritance children); a partitioned table is read through its partitions. */
  only: boolean;
  /** The columns an INSERT may set (generated ones are computed again). */
  columns: string[];
  /** The user triggers that fire now, with the ALTER TABLE form that enables each as it was. */
  triggers: Array<{ name: string; enable: "" | "ALWAYS" | "REPLICA" }>;
}

interface SequenceRow {
  name: string;
  value: string;
  called: boolean;
}

// The user's tables: every plain or partitioned table (partitions come with their parent) outside
// the excluded schemas, the system's, extensions' and snapshots' (one a crashed check left behind).
// Names come quoted by the server.
const tablesSql = `
  SELECT format('%I.%I', n.nspname, c.relname) AS name,
         c.relkind = 'r' AS only,
         array(SELECT quote_ident(a.attname) FROM pg_attribute AS a
               WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
               ORDER BY a.attnum) AS columns,
         coalesce((SELECT json_agg(json_build_object('name', quote_ident(t.tgname),
                                                     'enable', CASE t.tgenabled WHEN 'A' THEN 'ALWAYS' WHEN 'R' THEN 'REPLICA' ELSE '' END)
                                   ORDER BY t.tgname)
                   FROM pg_trigger AS t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal AND t.tgenabled <> 'D'), '[]') AS triggers
  FROM pg_class AS c
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
  WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relpersistence <> 't'
    AND n.nspname <> ALL ($1::text[]) AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'
    AND n.nspname NOT LIKE 'picket\\_check\\_%'
    AND NOT EXISTS (SELECT 1 FROM pg_depend AS d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
  ORDER BY 1`;

// Their sequences' positions (a serial id is then the same on every path as on the clean run).
const sequencesSql = `
  SELECT format('%I.%I', s.schemaname, s.sequencename) AS name,
         coalesce(s.last_value, s.start_value)::text AS value,
         s.last_value IS NOT NULL AS called
  FROM pg_sequences AS s
  JOIN pg_namespace AS n ON n.nspname = s.schemaname
  JOIN pg_class AS c ON c.relnamespace = n.oid AND c.relname = s.sequencename
  WHERE s.schemaname <> ALL ($1::text[]) AND s.schemaname NOT IN ('pg_catalog', 'information_schema') AND s.schemaname NOT LIKE 'pg\\_%'
    AND s.schemaname NOT LIKE 'picket\\_check\\_%'
    AND NOT EXISTS (SELECT 1 FROM pg_depend AS d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')`;

/** A sequence's position spliced into SQL text: only digits (and a sign) get through. */
const checkedInteger = (value: string): string => {
  if (!/^-?[0-9]{1,19}$/.test(String(value))) throw new Error(`picket/testing: not an integer: ${JSON.stringify(value)}`);
  return String(value);
};

export interface TableSnapshot {
  /** The tables it puts back, schema-qualified and quoted. */
  readonly tables: readonly string[];
  /** Puts every table's rows and every sequence back as they were when the snapshot was taken. */
  restore(): Promise<void>;
  /** Drops the copy. */
  drop(): Promise<void>;
}

/**
 * Copies the rows of every table outside `excludeSchemas` (and the positions of their sequences).
 * restore() empties those tables and puts the copy back, in one transaction.
 */
export const snapshotTables = async (db: pg.Pool, excludeSchemas: readonly string[], options: StatementOptions = {}): Promise<TableSnapshot> => {
  const copySchema = `picket_check_${randomBytes(5).toString("hex")}`;
  const tables = (await runStatement<TableRow>(db, { text: tablesSql, values: [excludeSchemas] }, options)).rows;
  const sequences = (await runStatement<SequenceRow>(db, { text: sequencesSql, values: [excludeSchemas] }, options)).rows;
  await runStatement(db, { text: `CREATE SCHEMA ${copySchema}` }, options);
  const filled: Array<{ table: TableRow; copy: string }> = [];
  try {
    for (const [i, table] of tables.entries()) {
      const copy = `${copySchema}.t${i}`;
      const from = `${table.only ? "ONLY " : ""}${table.name}`;
      const { rowCount } = await runStatement(db, { text: `CREATE UNLOGGED TABLE ${copy} AS SELECT ${table.columns.join(", ") || "1"} FROM ${from}` }, options);
      // An empty table is only emptied: nothing to put back (nor in a table without a column to set).
      if ((rowCount ?? 0) > 0 && table.columns.length > 0) filled.push({ table, copy });
    }
  } catch (error) {
    await runStatement(db, { text: `DROP SCHEMA ${copySchema} CASCADE` }, options).catch(() => undefined);
    throw error;
  }

  // The whole restore is one query string, so one round trip and one implicit transaction: a
  // failure anywhere rolls all of it back. Rows go by DELETE, not TRUNCATE: on a test's small
  // tables a TRUNCATE, which makes new files, took ~5 ms where a DELETE took under 1 ms, per path.
  const target = (t: TableRow) => `${t.only ? "ONLY " : ""}${t.name}`;
  const triggers = (state: "DISABLE" | "ENABLE") =>
    tables.flatMap((t) => t.triggers.map((tr) => `ALTER TABLE ${t.name} ${state === "ENABLE" ? `ENABLE ${tr.enable}` : "DISABLE"} TRIGGER ${tr.name}`));
  const restoreSql = [
    // The user's triggers are off meanwhile: putting a row back is not a new event.
    ...triggers("DISABLE"),
    // Each of these is one statement, so foreign keys between the tables are checked once all of
    // them are empty, then once all are full, whatever order they come in.
    ...(tables.length === 0 ? [] : [`WITH ${tables.map((t, i) => `d${i} AS (DELETE FROM ${target(t)})`).join(", ")} SELECT 1`]),
    ...(filled.length === 0
      ? []
      : [
          `WITH ${filled
            .map(({ table, copy }, i) => `c${i} AS (INSERT INTO ${table.name} (${table.columns.join(", ")}) OVERRIDING SYSTEM VALUE SELECT ${table.columns.join(", ")} FROM ${copy})`)
            .join(", ")} SELECT 1`,
        ]),
    ...(sequences.length === 0
      ? []
      : [`SELECT ${sequences.map((q) => `setval('${q.name.replaceAll("'", "''")}'::regclass, ${checkedInteger(q.value)}, ${q.called})`).join(", ")}`]),
    ...triggers("ENABLE"),
  ].join(";\n");

  return {
    tables: tables.map((t) => t.name),
    restore: async () => {
      // Bounded as every statement is (options.timeoutMs, 10 s by default, then cancelled on the
      // server): a lock another session holds (a handler's transaction left open) fails it.
      try {
        await runStatement(db, { text: restoreSql }, options);
      } catch (error) {
        throw new PicketError(
          `picket/testing: checkTask puts your tables (${tables.map((t) => t.name).join(", ")}) back as they were before each path, and could not: ${(error as Error).message.replace(/\.+$/, "")}. ` +
            `It needs the test's database role to own them (DELETE, ALTER TABLE ... TRIGGER); a lock wait means an earlier path's handler still holds a transaction open. ` +
            `To run the paths on shared tables instead, pass restoreTables: false (and give each path a payload of its own: payload: ({ index }) => ...).`,
          { cause: error },
        );
      }
    },
    drop: async () => {
      await runStatement(db, { text: `DROP SCHEMA IF EXISTS ${copySchema} CASCADE` }, options);
    },
  };
};
