// test/receipt.node-test.ts: the same tests under node:test, run with
//   node --test --test-global-setup=./node_modules/picket/dist/testing/global-setup.js test/receipt.node-test.ts
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { checkTask, expectEnqueued, runUntilIdle, useTestDatabase } from "picket/testing";
import { createShop, tables } from "../shop.ts";

// Make your tables in `prepare`: node runs a file's top-level before() hooks concurrently.
const db = useTestDatabase({ before, after }, { prepare: (created) => created.pool.query(tables) });

test("an order enqueues its receipt, and running the job sends it", async () => {
  const shop = createShop(db.pool);
  const { orderId } = await shop.placeOrder({ email: "ada@example.com", totalCents: 1250 });
  await expectEnqueued(db.pool, { type: "send-receipt", payload: { orderId }, count: 1 });

  const runs = await runUntilIdle({ db: db.pool, tasks: [shop.sendReceipt] });
  assert.deepEqual(runs.map((run) => [run.outcome, run.result]), [["completed", { sentTo: "ada@example.com" }]]);
});

test("sends one receipt, whatever happens to the job", async () => {
  const shop = createShop(db.pool);
  const { rows } = await db.pool.query("INSERT INTO orders (email, total_cents) VALUES ('grace@example.com', 990) RETURNING id");
  const report = await checkTask(shop.sendReceipt, {
    db: db.pool,
    payload: { orderId: rows[0].id },
    idempotent: {
      effect: async ({ idempotencyKey }) =>
        (await db.pool.query("SELECT count(*)::int AS n FROM sent_mails WHERE idempotency_key = $1", [idempotencyKey])).rows[0].n,
    },
  });
  console.log(`checkTask: ${report.passed} paths passed, ${report.skipped} skipped`);
  assert.equal(report.failed, 0);
});
