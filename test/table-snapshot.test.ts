// checkTask's isolation of paths (src/db/table-snapshot.ts): every table outside picket's schema is
// put back as it was, whatever the rows, keys, sequences, triggers and constraints.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { enqueueJob, getJob } from "../src/db/index.ts";
import { snapshotTables } from "../src/db/table-snapshot.ts";
import { useTestDatabase } from "../src/testing/index.ts";

const tables = `
  CREATE TABLE b_parent (id int PRIMARY KEY, manager int REFERENCES b_parent (id), name text NOT NULL);
  -- Named so that the child sorts before its parent: filling them one by one in name order would
  -- break the key, and RESTRICT (checked at once, never deferred) refuses emptying the parent first.
  CREATE TABLE a_child (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES b_parent (id) ON DELETE RESTRICT, note text);
  -- And a grandchild that sorts after both: emptying them one by one in name order would break its key.
  CREATE TABLE z_note (child_id int NOT NULL REFERENCES a_child (id) ON DELETE RESTRICT);
  -- A table inherited by another: each is copied and put back as itself, never its rows twice.
  CREATE TABLE events (what text NOT NULL);
  CREATE TABLE events_archived () INHERITS (events);
  CREATE TABLE counted (id bigserial PRIMARY KEY, fixed bigint GENERATED ALWAYS AS IDENTITY, n int NOT NULL, twice int GENERATED ALWAYS AS (n * 2) STORED);
  CREATE TABLE audit (what text NOT NULL);
  CREATE FUNCTION audit_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO audit VALUES ('inserted ' || NEW.name); RETURN NEW; END $$;
  CREATE TRIGGER audited AFTER INSERT ON b_parent FOR EACH ROW EXECUTE FUNCTION audit_insert();
  CREATE TRIGGER off_by_choice AFTER INSERT ON b_parent FOR EACH ROW EXECUTE FUNCTION audit_insert();
  ALTER TABLE b_parent DISABLE TRIGGER off_by_choice;
  CREATE SCHEMA shop;
  CREATE TABLE shop.orders (id text PRIMARY KEY) PARTITION BY LIST (id);
  CREATE TABLE shop.orders_a PARTITION OF shop.orders FOR VALUES IN ('a');
  CREATE TABLE shop.orders_b PARTITION OF shop.orders FOR VALUES IN ('b');`;

const db = useTestDatabase({ beforeAll, afterAll }, { prepare: (d) => d.pool.query(tables) });

const q = async (sql: string) => (await db.pool.query(sql)).rows;
const state = async () => ({
  child: await q("SELECT * FROM a_child ORDER BY id"),
  parent: await q("SELECT * FROM b_parent ORDER BY id"),
  counted: await q("SELECT * FROM counted ORDER BY id"),
  audit: await q("SELECT * FROM audit ORDER BY what"),
  orders: await q("SELECT tableoid::regclass::text AS part, id FROM shop.orders ORDER BY id"),
  notes: await q("SELECT * FROM z_note"),
  events: await q("SELECT tableoid::regclass::text AS part, what FROM events ORDER BY what"),
});

describe("a snapshot of the user's tables", () => {
  beforeAll(async () => {
    await db.pool.query(`
      INSERT INTO b_parent VALUES (1, NULL, 'ada'), (2, 1, 'grace');
      INSERT INTO a_child VALUES (10, 2, 'first');
      INSERT INTO z_note VALUES (10);
      INSERT INTO events VALUES ('started'); INSERT INTO events_archived VALUES ('archived');
      INSERT INTO counted (n) VALUES (1), (2);
      INSERT INTO shop.orders VALUES ('a')`);
  });

  it("puts rows, keys, sequences and partitions back, in one go whatever the foreign keys' order", async () => {
    const before = await state();
    // A copy a crashed check left behind is nobody's table: it is not copied again.
    const leftover = await snapshotTables(db.pool, ["picket"]);
    const snapshot = await snapshotTables(db.pool, ["picket"]);
    try {
      expect(snapshot.tables).toEqual(["public.a_child", "public.audit", "public.b_parent", "public.counted", "public.events", "public.events_archived", "public.z_note", "shop.orders"]);
      await db.pool.query(`
        INSERT INTO b_parent VALUES (3, 2, 'alan');
        UPDATE b_parent SET name = 'ADA' WHERE id = 1;
        DELETE FROM z_note; DELETE FROM a_child; INSERT INTO a_child VALUES (11, 3, 'second');
        INSERT INTO events_archived VALUES ('later');
        INSERT INTO counted (n) VALUES (3); DELETE FROM counted WHERE n = 1;
        INSERT INTO shop.orders VALUES ('b')`);
      const job = await enqueueJob(db.pool, { type: "snapshot.untouched" });
      await snapshot.restore();
      expect(await state()).toEqual(before);
      // The sequences too: the next serial and identity values are the ones the first run got.
      expect(await q("INSERT INTO counted (n) VALUES (9) RETURNING id::int, fixed::int, twice")).toEqual([{ id: 3, fixed: 3, twice: 18 }]);
      // picket's own tables are not the user's: the job enqueued meanwhile is still there.
      expect(await getJob(db.pool, job.id)).toMatchObject({ status: "pending" });
      // And again: a snapshot serves every path.
      await snapshot.restore();
      expect(await state()).toEqual(before);
    } finally {
      await snapshot.drop();
      await leftover.drop();
    }
    expect(await q("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'picket_check_%'")).toEqual([]);
  });

  it("fires none of the user's triggers while it puts rows back, and leaves each trigger as it was", async () => {
    const audit = await q("SELECT what FROM audit ORDER BY what");
    expect(audit).toEqual([{ what: "inserted ada" }, { what: "inserted grace" }]);
    const snapshot = await snapshotTables(db.pool, ["picket"]);
    try {
      await db.pool.query("DELETE FROM z_note; DELETE FROM a_child; DELETE FROM b_parent");
      await snapshot.restore();
      // Putting ada and grace back is not inserting them: the audit table holds what it held.
      expect(await q("SELECT what FROM audit ORDER BY what")).toEqual(audit);
      expect(await q("SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'b_parent'::regclass AND NOT tgisinternal ORDER BY tgname")).toEqual([
        { tgname: "audited", tgenabled: "O" },
        { tgname: "off_by_choice", tgenabled: "D" },
      ]);
      await db.pool.query("INSERT INTO b_parent VALUES (4, NULL, 'edsger')");
      expect(await q("SELECT what FROM audit ORDER BY what")).toEqual([audit[0], { what: "inserted edsger" }, audit[1]]);
      await snapshot.restore();
    } finally {
      await snapshot.drop();
    }
  });

  it("says what to do when a lock held elsewhere keeps it from putting the tables back", async () => {
    const snapshot = await snapshotTables(db.pool, ["picket"], { timeoutMs: 500 });
    const other = await db.connect();
    try {
      await other.query("BEGIN");
      await other.query("SELECT * FROM counted FOR UPDATE");
      await expect(snapshot.restore()).rejects.toThrow(
        /^picket\/testing: checkTask puts your tables \(public\.a_child, .*\) back as they were before each path, and could not: picket: statement .* did not finish within 500 ms \(a lock held by another session.*\); it was cancelled\. It needs .*a lock wait means an earlier path's handler still holds a transaction open\. .*restoreTables: false/,
      );
      await other.query("ROLLBACK");
      await snapshot.restore();
    } finally {
      await other.query("ROLLBACK").catch(() => undefined);
      await snapshot.drop();
    }
  });
});
