// The same tests under node:test: node --test examples/testing/signup.node-test.ts
// (with --test-global-setup=<picket/testing/global-setup> for one server across files; without,
// the file starts an embedded PostgreSQL of its own and stops it when its database is dropped).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { checkTask, expectEnqueued, runUntilIdle, useTestDatabase } from "../../src/testing/index.ts";
import { sendWelcome, signUp, welcomeTables } from "./signup.ts";

// Tables made in the same hook as the database (node:test runs top-level before() hooks at once).
const db = useTestDatabase({ before, after }, { prepare: (created) => created.pool.query(welcomeTables) });

test("signing up enqueues the welcome mail, and running it sends one", async () => {
  const userId = await signUp(db.pool, "ada@example.com");
  await expectEnqueued(db.pool, { type: "send-welcome", payload: { userId }, count: 1 });
  const runs = await runUntilIdle({ db: db.pool, tasks: [sendWelcome(db.pool)] });
  assert.deepEqual(
    runs.map((r) => [r.outcome, r.result]),
    [["completed", { sent: "ada@example.com" }]],
  );
});

test("sends the welcome once on every path a job can take", async () => {
  const { rows } = await db.pool.query("INSERT INTO users (email) VALUES ('grace@example.com') RETURNING id");
  const report = await checkTask(sendWelcome(db.pool), {
    db: db.pool,
    payload: { userId: rows[0].id },
    idempotent: { effect: async ({ idempotencyKey }) => (await db.pool.query("SELECT count(*)::int AS n FROM outbox WHERE idempotency_key = $1", [idempotencyKey])).rows[0].n },
  });
  assert.equal(report.failed, 0);
  console.log(`checkTask: ${report.passed} paths passed, ${report.skipped} skipped`);
});
