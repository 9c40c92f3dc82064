// The Kysely recipe, tested against a real PostgreSQL: the order and its job commit together, and
// anything that throws in the transaction (after the enqueue, or picket refusing the job) leaves
// neither.
import { CamelCasePlugin, Kysely, ParseJSONResultsPlugin, PostgresDialect, sql } from "kysely";
import { afterAll, beforeAll, expect, it } from "vitest";
import { enqueueJob, InvalidJobError, StatementTimeoutError } from "../../src/index.ts";
import { expectEnqueued, runUntilIdle, useTestDatabase } from "../../src/testing/index.ts";
import { createShop, type Database, orderTables, OutOfStockError } from "./orders.ts";
import { kyselyQueryable } from "./queryable.ts";

const test = useTestDatabase({ beforeAll, afterAll }, { prepare: (created) => created.pool.query(orderTables) });
// Kysely on the test database's pool; not destroyed here, as that would end the pool the test database closes.
const kysely = () => new Kysely<Database>({ dialect: new PostgresDialect({ pool: test.pool }) });

const count = async (table: "orders" | "jobs", sku: string) =>
  (
    await test.pool.query<{ n: number }>(
      table === "orders" ? "SELECT count(*)::int AS n FROM orders WHERE sku = $1" : "SELECT count(*)::int AS n FROM picket.jobs WHERE payload->>'sku' = $1",
      [sku],
    )
  ).rows[0]!.n;

it("commits the order and its job together, and the job runs to completed", async () => {
  const db = kysely();
  await test.pool.query("INSERT INTO stock VALUES ('SKU-1', 5)");
  const shop = createShop(db, test.pool);

  const { orderId, jobId } = await shop.placeOrder({ sku: "SKU-1", qty: 2 });

  const [job] = await expectEnqueued(test.pool, { type: "fulfil-order", payload: { orderId, sku: "SKU-1" }, count: 1 });
  expect(job!.id).toBe(jobId);
  expect(job!.key).toBe(`fulfil-order:${orderId}`);
  expect(job!.runAt).toBeInstanceOf(Date);
  expect((await test.pool.query("SELECT available FROM stock WHERE sku = 'SKU-1'")).rows[0].available).toBe(3);

  const runs = await runUntilIdle({ db: test.pool, tasks: shop.tasks });
  expect(runs).toMatchObject([{ id: jobId, outcome: "completed", result: { shipped: true } }]);
  expect((await test.pool.query("SELECT status FROM orders WHERE id = $1", [orderId])).rows[0].status).toBe("shipped");
});

it("a transaction that throws after the enqueue leaves neither the order nor the job", async () => {
  const db = kysely();
  await test.pool.query("INSERT INTO stock VALUES ('SKU-2', 1)");
  const shop = createShop(db, test.pool);

  // The order row and the job are written, then the stock is short: Kysely rolls back.
  await expect(shop.placeOrder({ sku: "SKU-2", qty: 3 })).rejects.toBeInstanceOf(OutOfStockError);

  expect(await count("orders", "SKU-2")).toBe(0);
  expect(await count("jobs", "SKU-2")).toBe(0);
  expect((await test.pool.query("SELECT available FROM stock WHERE sku = 'SKU-2'")).rows[0].available).toBe(1);
});

it("a job picket refuses (its payload fails the task's schema) rolls back the order too", async () => {
  const db = kysely();
  await test.pool.query("INSERT INTO stock VALUES ('bad sku', 5)");
  const shop = createShop(db, test.pool);

  await expect(shop.placeOrder({ sku: "bad sku", qty: 1 })).rejects.toThrow(InvalidJobError);
  await expect(shop.placeOrder({ sku: "bad sku", qty: 1 })).rejects.toThrow(/payload does not match the task's schema/);

  expect(await count("orders", "bad sku")).toBe(0);
  expect(await count("jobs", "bad sku")).toBe(0);
  expect((await test.pool.query("SELECT available FROM stock WHERE sku = 'bad sku'")).rows[0].available).toBe(5);
});

it("the app's Kysely plugins do not rewrite the job picket returns", async () => {
  // ParseJSONResultsPlugin would turn a payload's string "[1, 2]" into an array.
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: test.pool }), plugins: [new CamelCasePlugin(), new ParseJSONResultsPlugin()] });
  const job = await db.transaction().execute((trx) => enqueueJob(kyselyQueryable(trx), { type: "note", payload: { text: "[1, 2]", in_snake: true } }));
  expect(job.payload).toEqual({ text: "[1, 2]", in_snake: true });
  expect(job.runAt).toBeInstanceOf(Date);
  await expectEnqueued(test.pool, { type: "note", payload: { text: "[1, 2]" }, count: 1 });
});

it("add_job through Kysely's sql template commits and rolls back with the transaction (no task checks)", async () => {
  const db = kysely();
  await db.transaction().execute((trx) => sql`SELECT picket.add_job(${"audit"}, ${JSON.stringify({ sku: "SKU-9" })}::jsonb, job_key => ${"audit:9"})`.execute(trx));
  await expect(
    db.transaction().execute(async (trx) => {
      await sql`SELECT picket.add_job(${"audit"}, ${JSON.stringify({ sku: "SKU-10" })}::jsonb)`.execute(trx);
      throw new OutOfStockError("after add_job");
    }),
  ).rejects.toBeInstanceOf(OutOfStockError);
  await expectEnqueued(test.pool, { type: "audit", payload: { sku: "SKU-9" }, count: 1 });
  expect(await count("jobs", "SKU-10")).toBe(0);
});

it("picket's time bound fails an enqueue stuck on a lock, but cannot cancel it: the rollback waits for the lock", async () => {
  const db = kysely();
  // Another transaction holds the dedupe key, uncommitted: an enqueue of the same key waits for it.
  const holder = await test.connect();
  await holder.query("BEGIN");
  await enqueueJob(holder, { type: "audit", key: "audit:held", payload: { by: "holder" } });

  let failure: unknown;
  const placed = db.transaction().execute(async (trx) => {
    await trx.insertInto("orders").values({ sku: "SKU-11", qty: 1 }).execute();
    try {
      await enqueueJob(kyselyQueryable(trx), { type: "audit", key: "audit:held", payload: { by: "kysely" } }, { timeoutMs: 200 });
    } catch (error) {
      failure = error;
      throw error;
    }
  });
  const settled = placed.then(() => "committed", () => "rolled back");
  // The bound fires while the holder still holds the key (no cancel reaches the server, so the
  // error comes once picket stops waiting for one, ~2 s later).
  await expect.poll(() => failure, { timeout: 10_000, interval: 50 }).toBeInstanceOf(StatementTimeoutError);
  // The statement is still waiting on the server, and Kysely's ROLLBACK queues behind it.
  const waiting = await test.pool.query("SELECT query FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
  expect(waiting.rows.map((r) => r.query)).toEqual([expect.stringContaining("INSERT INTO picket.jobs")]);
  await holder.query("ROLLBACK");
  await holder.end();
  expect(await settled).toBe("rolled back");
  expect(await count("orders", "SKU-11")).toBe(0);
  expect((await test.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE key = 'audit:held'")).rows[0].n).toBe(0);
});
