import { describe, expect, it } from "vitest";
import { completeJobs, enqueueJob } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { interceptedPool, useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

/**
 * Another worker steals the job: in one statement, as a sweep followed by another worker's claim
 * would leave it (two statements would race this worker's own renewal and poll).
 */
const steal = async (id: string, _type: string) => {
  const { rows } = await db.pool.query(
    "UPDATE picket.jobs SET claim_token = gen_random_uuid(), locked_by = 'thief', attempts = attempts + 1 WHERE id = $1 AND status = 'processing' RETURNING claim_token",
    [id],
  );
  expect(rows).toHaveLength(1);
  // Kept completed: the row shows the thief's outcome stands.
  await completeJobs(db.pool, [{ id, token: rows[0].claim_token, result: "thief's outcome" }], { keepCompleted: true });
};

describe("lost claims", () => {
  it("interrupts the stale execution when its lease renewal is fenced, and warns with job and token", async () => {
    let aborted = false;
    let running: () => void = () => undefined;
    const isRunning = new Promise<void>((resolve) => (running = resolve));
    const task = defineTask({
      name: "stolen",
      leaseMs: 300, // renewed every 100 ms
      timeoutMs: 60_000,
      handler: (_p, { signal }) =>
        new Promise((_resolve, reject) => {
          running();
          signal.addEventListener("abort", () => {
            aborted = true;
            reject(new Error("aborted"));
          });
        }),
    });
    const job = await enqueueJob(db.pool, { type: "stolen" });
    const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await isRunning;
    const { claimToken: ours } = await row(db.pool, job.id).then((r) => ({ claimToken: r.claim_token as string }));
    await steal(job.id, "stolen");
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "fenced" });
    expect(aborted).toBe(true);
    expect(logs).toContainEqual(
      expect.objectContaining({ level: 40, job_id: job.id, claim_token: ours, msg: expect.stringContaining(`job ${job.id} (claim ${ours})`) }),
    );
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", result: "thief's outcome", locked_by: "thief" });
  });

  it("fences the completion of a stale execution that finished after its claim was stolen", async () => {
    let finish: () => void = () => undefined;
    let running: () => void = () => undefined;
    const isRunning = new Promise<void>((resolve) => (running = resolve));
    const task = defineTask({
      name: "late",
      leaseMs: 60_000, // no renewal during the test: the completion write is what meets the fence
      handler: () =>
        new Promise((resolve) => {
          running();
          finish = () => resolve("stale outcome");
        }),
    });
    const job = await enqueueJob(db.pool, { type: "late" });
    const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await isRunning;
    const ours = (await row(db.pool, job.id)).claim_token as string;
    await steal(job.id, "late");
    finish();
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "fenced" });
    expect(logs).toContainEqual(expect.objectContaining({ level: 40, job_id: job.id, claim_token: ours, intended: "completed" }));
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", result: "thief's outcome" });
  });

  it("renews the leases of running jobs, so a long job is never swept from a live worker", async () => {
    const task = defineTask({
      name: "long",
      // Four leases long. A lease of 200 ms (renewed every 50) lapsed on a loaded machine in CI: a
      // renewal late by 120 ms interrupts the handler, as it must.
      leaseMs: 600,
      handler: () => new Promise((resolve) => setTimeout(() => resolve("done"), 2_400)),
    });
    const job = await enqueueJob(db.pool, { type: "long" });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 15_000 }).toMatchObject({ outcome: "completed" });
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 1, result: "done" });
  });

  it("does not report a renewal fenced by the job's own completion as a lost claim", async () => {
    // The completion commits, but its reply reaches the worker 700 ms late: the renewals sent
    // meanwhile (every 200 ms) find the row finished, and are fenced by the job's own write.
    let replyHeld = false;
    let renewalsWhileHeld = 0;
    const { pool, end } = interceptedPool(db.url, async (statement, forward) => {
      if (replyHeld && statement.name.startsWith("picket_renew")) renewalsWhileHeld++;
      const result = await forward();
      if (statement.name.startsWith("picket_complete")) {
        replyHeld = true;
        await new Promise((r) => setTimeout(r, 700));
        replyHeld = false;
      }
      return result;
    });
    try {
      const task = defineTask({ name: "own-finish", leaseMs: 600, handler: async () => "done" });
      const job = await enqueueJob(db.pool, { type: "own-finish", payload: {} });
      const { outcomes, logs } = await startWorker({ pool, tasks: [task] });
      await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
      expect(renewalsWhileHeld).toBeGreaterThan(0);
      expect(logs.filter((l) => /lease renewal fenced/.test(l.msg))).toEqual([]);
    } finally {
      await end();
    }
  });
});
