// The Drizzle recipe, tested against a real PostgreSQL: the order and its job commit together, and
// anything that throws in the transaction (after the enqueue, or picket refusing the job) leaves
// neither.
import { sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/node-postgres";
import { afterAll, beforeAll, expect, it } from "vitest";
import { enqueueJob, InvalidJobError, StatementTimeoutError } from "../../src/index.ts";
import { expectEnqueued, runUntilIdle, useTestDatabase } from "../../src/testing/index.ts";
import { createShop, orderTables, OutOfStockError } from "./orders.ts";

const test = useTestDatabase({ beforeAll, afterAll }, { prepare: (created) => created.pool.query(orderTables) });

const count = async (table: "orders" | "jobs", sku: string) =>
  (
    await test.pool.query<{ n: number }>(
      table === "orders" ? "SELECT count(*)::int AS n FROM orders WHERE sku = $1" : "SELECT count(*)::int AS n FROM picket.jobs WHERE payload->>'sku' = $1",
      [sku],
    )
  ).rows[0]!.n;

it("commits the order and its job together, and the job runs to completed", async () => {
  const db = drizzle({ client: test.pool });
  await test.pool.query("INSERT INTO stock VALUES ('SKU-1', 5)");
  const shop = createShop(db, test.pool);

  const { orderId, jobId } = await shop.placeOrder({ sku: "SKU-1", qty: 2 });

  const [job] = await expectEnqueued(test.pool, { type: "fulfil-order", payload: { orderId, sku: "SKU-1" }, count: 1 });
  expect(job!.id).toBe(jobId);
  expect(job!.key).toBe(`fulfil-order:${orderId}`);
  expect((await test.pool.query("SELECT available FROM stock WHERE sku = 'SKU-1'")).rows[0].available).toBe(3);

  const runs = await runUntilIdle({ db: test.pool, tasks: shop.tasks });
  expect(runs).toMatchObject([{ id: jobId, outcome: "completed", result: { shipped: true } }]);
  expect((await test.pool.query("SELECT status FROM orders WHERE id = $1", [orderId])).rows[0].status).toBe("shipped");
});

it("a transaction that throws after the enqueue leaves neither the order nor the job", async () => {
  const db = drizzle({ client: test.pool });
  await test.pool.query("INSERT INTO stock VALUES ('SKU-2', 1)");
  const shop = createShop(db, test.pool);

  // The order row and the job are written, then the stock is short: Drizzle rolls back.
  await expect(shop.placeOrder({ sku: "SKU-2", qty: 3 })).rejects.toBeInstanceOf(OutOfStockError);

  expect(await count("orders", "SKU-2")).toBe(0);
  expect(await count("jobs", "SKU-2")).toBe(0);
  expect((await test.pool.query("SELECT available FROM stock WHERE sku = 'SKU-2'")).rows[0].available).toBe(1);
});

it("a job picket refuses (its payload fails the task's schema) rolls back the order too", async () => {
  const db = drizzle({ client: test.pool });
  await test.pool.query("INSERT INTO stock VALUES ('bad sku', 5)");
  const shop = createShop(db, test.pool);

  await expect(shop.placeOrder({ sku: "bad sku", qty: 1 })).rejects.toThrow(InvalidJobError);
  await expect(shop.placeOrder({ sku: "bad sku", qty: 1 })).rejects.toThrow(/payload does not match the task's schema/);

  expect(await count("orders", "bad sku")).toBe(0);
  expect(await count("jobs", "bad sku")).toBe(0);
  expect((await test.pool.query("SELECT available FROM stock WHERE sku = 'bad sku'")).rows[0].available).toBe(5);
});

it("picket's time bound cancels an enqueue stuck on a lock on the server, and the transaction rolls back", async () => {
  // Another transaction holds the dedupe key, uncommitted: an enqueue of the same key waits for it.
  const holder = await test.connect();
  await holder.query("BEGIN");
  await enqueueJob(holder, { type: "audit", key: "audit:held", payload: { by: "holder" } });

  // The recipe's shape: picket is handed the client the Drizzle transaction runs on, so it can
  // cancel its own statement there when the bound passes.
  const client = await test.pool.connect();
  const placed = drizzle({ client })
    .transaction(async (tx) => {
      await tx.execute(sql`INSERT INTO orders (sku, qty) VALUES ('SKU-11', 1)`);
      await enqueueJob(client, { type: "audit", key: "audit:held", payload: { by: "drizzle" } }, { timeoutMs: 200 });
    })
    .finally(() => client.release());
  await expect(placed).rejects.toBeInstanceOf(StatementTimeoutError);
  // Nothing waits on the lock any more: the statement was cancelled on the server, not abandoned.
  const waiting = await test.pool.query("SELECT query FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
  expect(waiting.rows).toEqual([]);
  await holder.query("ROLLBACK");
  await holder.end();
  expect(await count("orders", "SKU-11")).toBe(0);
  expect((await test.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE key = 'audit:held'")).rows[0].n).toBe(0);
});

it("add_job through Drizzle's sql template commits and rolls back with the transaction (no task checks)", async () => {
  const db = drizzle({ client: test.pool });
  await db.transaction((tx) => tx.execute(sql`SELECT picket.add_job(${"audit"}, ${JSON.stringify({ sku: "SKU-9" })}::jsonb, job_key => ${"audit:9"})`));
  await expect(
    db.transaction(async (tx) => {
      await tx.execute(sql`SELECT picket.add_job(${"audit"}, ${JSON.stringify({ sku: "SKU-10" })}::jsonb)`);
      throw new OutOfStockError("after add_job");
    }),
  ).rejects.toBeInstanceOf(OutOfStockError);
  await expectEnqueued(test.pool, { type: "audit", payload: { sku: "SKU-9" }, count: 1 });
  expect(await count("jobs", "SKU-10")).toBe(0);
});
