// Cancelling a job: a pending one never runs; a running one's handler is interrupted by its worker
// (at once on the cancel's notification, at its next lease renewal without LISTEN) and its row
// ends cancelled; a cancel racing with the job's own completion leaves exactly one of the two.
import pg from "pg";
import { describe, expect, it } from "vitest";
import { cancelJob, completeJobs, enqueueJob, enqueueJobs, getJob, notifyChannel } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, row } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

/** A handler that runs until its signal aborts, and records when it saw the abort. */
const interruptible = () => {
  const started = new Map<string, number>();
  const aborted = new Map<string, number>();
  const handler = (_payload: unknown, { job, signal }: { job: { id: string }; signal: AbortSignal }) =>
    new Promise<never>((_resolve, reject) => {
      started.set(job.id, performance.now());
      signal.addEventListener("abort", () => {
        aborted.set(job.id, performance.now());
        reject(new Error("interrupted"));
      });
    });
  return { started, aborted, handler };
};

describe("cancelJob", () => {
  it("cancels a pending or a processing job, keeps the claim's token, and refuses a finished one", async () => {
    const pending = await enqueueJob(db.pool, { type: "cancel-admin" });
    expect(await cancelJob(db.pool, pending.id)).toMatchObject({ outcome: "applied", job: { status: "cancelled", claimToken: null } });
    const [running] = await claimed(db.pool, "cancel-admin-running");
    const result = await cancelJob(db.pool, running!.id);
    expect(result).toMatchObject({ outcome: "applied", job: { status: "cancelled", claimToken: running!.claimToken, lockUntil: null } });
    expect((await row(db.pool, running!.id)).finished_at).not.toBeNull();
    expect(await cancelJob(db.pool, running!.id)).toEqual({ outcome: "wrong_status", status: "cancelled" });
    expect(await cancelJob(db.pool, "999999999")).toEqual({ outcome: "not_found" });
    await expect(cancelJob(db.pool, "abc")).rejects.toThrow(/job id must be a positive integer/);
  });

  for (const keepCompleted of [true, false]) {
    it(`waits for a completion in flight and then finds the job ${keepCompleted ? "completed" : "gone (deleted by its completion)"}, never overwriting it`, async () => {
      const [job] = await claimed(db.pool, "cancel-vs-completion");
      const completer = await db.connect();
      try {
        await completer.query("BEGIN");
        // The worker's own fenced completion, not yet committed.
        expect(await completeJobs(completer, [{ id: job!.id, token: job!.claimToken, result: 1 }], { keepCompleted })).toMatchObject([{ outcome: "applied" }]);
        const cancel = cancelJob(db.pool, job!.id);
        // The cancel is waiting on the completion's row lock before the completion commits.
        await expect
          .poll(async () => (await db.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%WITH target AS%'")).rows[0].n, { timeout: 5_000 })
          .toBe(1);
        await completer.query("COMMIT");
        if (keepCompleted) {
          expect(await cancel).toEqual({ outcome: "wrong_status", status: "completed" });
          expect(await row(db.pool, job!.id)).toMatchObject({ status: "completed", result: 1 });
        } else {
          expect(await cancel).toEqual({ outcome: "not_found" });
          expect(await row(db.pool, job!.id)).toBeUndefined();
        }
      } finally {
        await completer.end();
      }
    });
  }

  it("tells the worker of a processing job (id and claim token) at commit, and says nothing of a pending one", async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    try {
      const heard: string[] = [];
      // Enqueues wake workers on the same channel: only the cancel notifications are looked at.
      listener.on("notification", (message) => message.payload?.startsWith("!") && heard.push(message.payload));
      await listener.query(`LISTEN "${notifyChannel("picket")}"`);
      const pending = await enqueueJob(db.pool, { type: "cancel-notify-pending" });
      const [running] = await claimed(db.pool, "cancel-notify-running");
      await cancelJob(db.pool, pending.id);
      await cancelJob(db.pool, running!.id);
      await expect.poll(() => heard, { timeout: 5_000 }).toEqual([`!cancel:${running!.id}:${running!.claimToken}`]);
    } finally {
      await listener.end();
    }
  });
});

describe("a running job cancelled", () => {
  it("is interrupted within a second with LISTEN, leaves running through CANCEL, and its row ends cancelled", async () => {
    const { started, aborted, handler } = interruptible();
    // A long lease: renewals (every 15 s) cannot be what tells the worker.
    const task = defineTask({ name: "cancel-listen", handler, leaseMs: 60_000 });
    const { supervisor, outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task], listen: true });
    const job = await enqueueJob(db.pool, { type: "cancel-listen" });
    await expect.poll(() => started.has(job.id), { timeout: 10_000 }).toBe(true);
    // A notification naming another claim of the job (a forged or stale one) stops nothing.
    await db.pool.query("SELECT pg_notify($1, $2)", [notifyChannel("picket"), `!cancel:${job.id}:00000000-0000-4000-8000-000000000000`]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(aborted.has(job.id)).toBe(false);
    const cancelledAt = performance.now();
    expect(await cancelJob(db.pool, job.id)).toMatchObject({ outcome: "applied" });
    await expect.poll(() => outcomes.length, { timeout: 5_000 }).toBe(1);
    expect(outcomes[0]).toMatchObject({ id: job.id, outcome: "cancelled" });
    expect(aborted.get(job.id)! - cancelledAt).toBeLessThan(1_000);
    expect(logs.filter((l) => l.msg.startsWith(`job ${job.id} was cancelled`)).map((l) => [l.level, l.msg])).toEqual([
      [30, `job ${job.id} was cancelled while claimed; its handler was interrupted and nothing more is written for it`],
    ]);
    await supervisor.stop();
    expect(await getJob(db.pool, job.id)).toMatchObject({ status: "cancelled", result: null, lastError: null });
  });

  it("is interrupted at the worker's next lease renewal without LISTEN", async () => {
    const { started, aborted, handler } = interruptible();
    const task = defineTask({ name: "cancel-poll", handler, leaseMs: 2_000 });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], listen: false });
    const job = await enqueueJob(db.pool, { type: "cancel-poll" });
    await expect.poll(() => started.has(job.id), { timeout: 10_000 }).toBe(true);
    const cancelledAt = performance.now();
    await cancelJob(db.pool, job.id);
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(1);
    // Renewals run every 500 ms (a quarter of the lease); "cancelled", not "fenced": the renewal
    // found the job cancelled under its claim, not taken by another worker.
    expect(outcomes[0]).toMatchObject({ id: job.id, outcome: "cancelled" });
    expect(aborted.get(job.id)! - cancelledAt).toBeLessThan(2_000);
    await supervisor.stop();
    expect(await row(db.pool, job.id)).toMatchObject({ status: "cancelled" });
  });

  it("racing with its own completion leaves exactly one of the two outcomes", async () => {
    // Each handler returns when the test says: the completion write and the cancel reach the row
    // in either order, or at about the same moment, and whichever locks it first decides.
    const go = new Map<string, () => void>();
    const task = defineTask({
      name: "cancel-race",
      leaseMs: 60_000,
      handler: (_p, { job }) => new Promise((resolve) => go.set(job.id, () => resolve({ done: job.id }))),
    });
    const jobs = await enqueueJobs(db.pool, Array.from({ length: 40 }, () => ({ type: "cancel-race" })));
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 40, listen: true });
    await expect.poll(() => go.size, { timeout: 10_000 }).toBe(40);
    const cancels = await Promise.all(
      jobs.map(async (job, i) => {
        const finish = go.get(job.id)!;
        switch (i % 4) {
          // Decided one way and the other, so that both sides are seen whatever the machine's load
          // (racing alone, the completions once won all 40 on a loaded CI machine).
          case 0:
            finish();
            await expect.poll(() => outcomes.some((o) => o.id === job.id), { timeout: 10_000 }).toBe(true);
            return cancelJob(db.pool, job.id);
          case 1: {
            const result = await cancelJob(db.pool, job.id);
            finish();
            return result;
          }
          // Racing: the handler finishes just before the cancel is sent, or just after.
          case 2:
            finish();
            return cancelJob(db.pool, job.id);
          default: {
            const result = cancelJob(db.pool, job.id);
            setImmediate(finish);
            return result;
          }
        }
      }),
    );
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(40);
    await supervisor.stop();
    const byId = new Map(outcomes.map((o) => [o.id, o.outcome]));
    let cancelled = 0;
    for (const [i, job] of jobs.entries()) {
      const final = await row(db.pool, job.id);
      if (cancels[i]!.outcome === "applied") {
        cancelled++;
        expect(final).toMatchObject({ status: "cancelled", result: null });
        expect(byId.get(job.id)).toBe("cancelled");
      } else {
        expect(cancels[i]).toEqual({ outcome: "wrong_status", status: "completed" });
        expect(final).toMatchObject({ status: "completed", result: { done: job.id } });
        expect(byId.get(job.id)).toBe("completed");
      }
    }
    expect(cancels.filter((_, i) => i % 4 === 0)).toEqual(Array(10).fill({ outcome: "wrong_status", status: "completed" }));
    expect(cancels.filter((_, i) => i % 4 === 1).map((c) => c.outcome)).toEqual(Array(10).fill("applied"));
    expect(cancelled).toBeGreaterThanOrEqual(10);
  });
});
