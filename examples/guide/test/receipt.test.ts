// test/receipt.test.ts: run with `npx vitest run`.
import { afterAll, beforeAll, expect, it } from "vitest";
import { checkTask, expectEnqueued, runUntilIdle, useTestDatabase } from "picket/testing";
import { createShop, tables } from "../shop.ts";

// A fresh, migrated database for this file, with the service's tables made in the same hook.
const db = useTestDatabase({ beforeAll, afterAll }, { prepare: (created) => created.pool.query(tables) });

it("an order enqueues its receipt, and running the job sends it", async () => {
  const shop = createShop(db.pool);
  const { orderId } = await shop.placeOrder({ email: "ada@example.com", totalCents: 1250 });
  await expectEnqueued(db.pool, { type: "send-receipt", payload: { orderId }, count: 1 });

  const runs = await runUntilIdle({ db: db.pool, tasks: [shop.sendReceipt] });
  expect(runs).toMatchObject([{ outcome: "completed", result: { sentTo: "ada@example.com" } }]);
  expect((await shop.getOrder(orderId)).receiptSentAt).toBeInstanceOf(Date);
});

it("sends one receipt, whatever happens to the job", async () => {
  const shop = createShop(db.pool);
  const { rows } = await db.pool.query("INSERT INTO orders (email, total_cents) VALUES ('grace@example.com', 990) RETURNING id");
  const report = await checkTask(shop.sendReceipt, {
    db: db.pool,
    payload: { orderId: rows[0].id },
    // What one job did to the world: the mails sent under its idempotency key. After a timeout, a
    // lost lease, a crash or a drain, and the runs that follow, it must equal one clean run's: 1.
    idempotent: {
      effect: async ({ idempotencyKey }) =>
        (await db.pool.query("SELECT count(*)::int AS n FROM sent_mails WHERE idempotency_key = $1", [idempotencyKey])).rows[0].n,
    },
  });
  console.log(`checkTask: ${report.passed} paths passed, ${report.skipped} skipped`);
  expect(report.failed).toBe(0);
});
