// A handler that blocks the event loop for longer than its lease (CPU-bound code run without
// isolate), scenario 5 of the lease review. While the loop is blocked the worker can neither renew
// nor interrupt anything; what must hold is what the fence and the sweep can guarantee around it.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { enqueueJob } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

const block = (ms: number) => {
  const until = Date.now() + ms;
  while (Date.now() < until);
};

describe("a handler that blocks the event loop past its lease", () => {
  it("alone: its own sweep leaves the claim, the returned result is written in its one attempt, and the stall is logged naming the task", async () => {
    const task = defineTask({ name: "stall-alone", leaseMs: 1_000, handler: async () => (block(2_500), "computed") });
    const job = await enqueueJob(db.pool, { type: "stall-alone", maxAttempts: 1 });
    const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 10_000 }).toMatchObject({ outcome: "completed" });
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 1, result: "computed", errors: [] });
    expect(logs.find((l) => /^the event loop was blocked for \d+ ms while handlers of "stall-alone" ran \(lease 1000 ms\)/.test(l.msg))).toMatchObject({
      level: 40,
      tasks: ["stall-alone"],
      msg: expect.stringContaining("Run CPU-bound handlers with isolate"),
    });
  });

  it("alone, then awaiting: the worker renews its claim when its loop comes back, before judging the lease, and the run completes in its one attempt", async () => {
    const task = defineTask({
      name: "stall-then-await",
      leaseMs: 1_000,
      handler: async () => {
        block(2_500);
        await new Promise((resolve) => setTimeout(resolve, 50));
        return "computed";
      },
    });
    const job = await enqueueJob(db.pool, { type: "stall-then-await", maxAttempts: 1 });
    const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 10_000 }).toMatchObject({ outcome: "completed" });
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 1, result: "computed", errors: [] });
    // The watch, late, renewed before judging. Which renewal confirmed the claim is not fixed: the
    // watch's (confirmed 1), or the worker's own overdue round, which held the row at that moment
    // (the watch's then answers busy, confirmed 0, and finds the lease confirmed by the round).
    // Without the renewal first, the run is interrupted as unconfirmed (the line below).
    expect(logs.find((l) => String(l.msg).startsWith("the lease watch ran late"))).toMatchObject({ jobs: [job.id] });
    expect(logs.filter((l) => String(l.msg).startsWith("lease not confirmed in time"))).toEqual([]);
  });

  it("alone, then awaiting, when the claim was taken while it blocked: the renewal is fenced and the run stopped as lost", { tags: ["spawns"], timeout: 40_000 }, async () => {
    const cli = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
    const tasks = fileURLToPath(new URL("./fixtures/fault-tasks.ts", import.meta.url));
    const job = await enqueueJob(db.pool, { type: "fault-block-then-await", maxAttempts: 3 });
    // Its own process, so that its blocked loop is not the test's, which takes the claim meanwhile.
    const blocked = spawn(process.execPath, [cli, "worker", "--tasks", tasks], {
      env: { ...process.env, DATABASE_URL: db.url, PICKET_LOG_LEVEL: "info", FAULT_LEASE_MS: "1000", FAULT_BLOCK_MS: "3000" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    blocked.stdout!.on("data", (c: Buffer) => (output += c.toString()));
    blocked.stderr!.on("data", (c: Buffer) => (output += c.toString()));
    try {
      await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 20_000, interval: 50 }).toBe("processing");
      const first = await row(db.pool, job.id);
      // Another worker's claim, once the lease ran out (as its sweep and claim would write it).
      await expect.poll(async () => (await db.pool.query("SELECT lock_until < now() AS expired FROM picket.jobs WHERE id = $1", [job.id])).rows[0].expired, { timeout: 5_000, interval: 20 }).toBe(true);
      const { rows: [taken] } = await db.pool.query(
        "UPDATE picket.jobs SET claim_token = gen_random_uuid(), locked_by = 'other-worker', lock_until = now() + interval '1 minute' WHERE id = $1 AND claim_token = $2 RETURNING claim_token",
        [job.id, first.claim_token],
      );
      expect(taken).toBeDefined();
      await expect.poll(() => output, { timeout: 15_000 }).toContain(`lease renewal fenced: job ${job.id} (claim ${first.claim_token}) was reclaimed`);
      // The worker's own renewal round (its timer as overdue as the watch's) may report the fence
      // first: the watch's renewal answers a moment later.
      await expect.poll(() => output, { timeout: 5_000 }).toContain("the lease watch ran late");
      // The other worker's claim stands; the blocked worker wrote nothing under its own.
      expect(await row(db.pool, job.id)).toMatchObject({ status: "processing", claim_token: taken.claim_token, locked_by: "other-worker", attempts: 1 });
    } finally {
      blocked.kill("SIGKILL");
    }
  });

  it("beside a second worker: the second takes the job over and completes it; the blocked worker's late completion is fenced", { tags: ["spawns"], timeout: 40_000 }, async () => {
    const cli = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
    const tasks = fileURLToPath(new URL("./fixtures/fault-tasks.ts", import.meta.url));
    const job = await enqueueJob(db.pool, { type: "fault-block", maxAttempts: 3 });
    // The blocking worker: its own process, so its blocked loop is not the test's.
    const blocked = spawn(process.execPath, [cli, "worker", "--tasks", tasks], {
      env: { ...process.env, DATABASE_URL: db.url, PICKET_LOG_LEVEL: "warn", FAULT_LEASE_MS: "1000", FAULT_BLOCK_MS: "4000" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    blocked.stdout!.on("data", (c: Buffer) => (output += c.toString()));
    blocked.stderr!.on("data", (c: Buffer) => (output += c.toString()));
    try {
      await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 20_000, interval: 50 }).toBe("processing");
      const first = await row(db.pool, job.id);
      // The second worker runs the same task quickly; its sweep finds the blocked worker's lease expired.
      const quick = defineTask({ name: "fault-block", leaseMs: 1_000, handler: async () => "done by the second worker" });
      const { outcomes } = await startWorker({ connectionString: db.url, tasks: [quick] });
      await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 10_000 }).toMatchObject({ outcome: "completed" });
      // When its loop runs again, the blocked worker's own completion meets the fence.
      await expect.poll(() => output, { timeout: 10_000 }).toContain(`claim lost: job ${job.id} (claim ${first.claim_token})`);
      expect(output).toMatch(/the event loop was blocked for \d+ ms while handlers of \\"fault-block\\" ran/);
      expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", result: "done by the second worker", attempts: 2 });
    } finally {
      blocked.kill("SIGKILL");
    }
  });
});
