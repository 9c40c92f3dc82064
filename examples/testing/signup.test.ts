// Testing with picket/testing under vitest: a database of this file's own, the jobs the code
// enqueued, the jobs run in the test, and the task checked on every path of the job machine.
// In an app: import { ... } from "picket/testing", and in vitest.config.ts
//   test: { globalSetup: ["picket/testing/global-setup"] }   (one server for the run; optional)
import { afterAll, beforeAll, expect, it } from "vitest";
import { checkTask, expectEnqueued, runUntilIdle, useTestDatabase } from "../../src/testing/index.ts";
import { sendWelcome, signUp, welcomeTables } from "./signup.ts";

const db = useTestDatabase({ beforeAll, afterAll }, { prepare: (created) => created.pool.query(welcomeTables) });

it("signing up enqueues the welcome mail, and running it sends one", async () => {
  const userId = await signUp(db.pool, "ada@example.com");
  await expectEnqueued(db.pool, { type: "send-welcome", payload: { userId }, count: 1 });

  const runs = await runUntilIdle({ db: db.pool, tasks: [sendWelcome(db.pool)] });
  expect(runs).toMatchObject([{ type: "send-welcome", outcome: "completed", result: { sent: "ada@example.com" } }]);
  expect((await db.pool.query("SELECT email, sent_count FROM outbox")).rows).toEqual([{ email: "ada@example.com", sent_count: 1 }]);
});

it("sends the welcome once on every path a job can take: timeouts, lost leases, crashes, a drain", async () => {
  const { rows } = await db.pool.query("INSERT INTO users (email) VALUES ('grace@example.com') RETURNING id");
  const report = await checkTask(sendWelcome(db.pool), {
    db: db.pool,
    payload: { userId: rows[0].id },
    idempotent: {
      // What the job did to the world: the mails sent under its key.
      effect: async ({ idempotencyKey }) => (await db.pool.query("SELECT count(*)::int AS n FROM outbox WHERE idempotency_key = $1", [idempotencyKey])).rows[0].n,
    },
  });
  expect(report.failed).toBe(0);
  expect(report.passed).toBeGreaterThan(20);
});
