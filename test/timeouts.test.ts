import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { enqueueJob } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("timeouts cancel", () => {
  it("aborts a handler at its timeout, retries with the backoff, and frees the slot at once", async () => {
    let abortedAfterMs: number | null = null;
    const slow = defineTask({
      name: "slow",
      timeoutMs: 200,
      concurrency: 1,
      backoff: { baseMs: 60_000, maxMs: 60_000 },
      handler: async (_payload, { signal }) => {
        const started = Date.now();
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(resolve, 10_000);
          signal.addEventListener("abort", () => {
            abortedAfterMs = Date.now() - started;
            clearTimeout(timer);
            reject(new Error("aborted"));
          });
        });
      },
    });
    const quick = defineTask({ name: "after-slow", handler: async () => "ok" });
    const job = await enqueueJob(db.pool, { type: "slow" });
    const started = Date.now();
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [slow, quick], concurrency: 1 });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "retried" });
    const freedAfterMs = Date.now() - started;
    // The worker's only slot is free again: another job runs right away.
    const next = await enqueueJob(db.pool, { type: "after-slow" });
    await expect.poll(() => outcomes.find((o) => o.id === next.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });

    expect(abortedAfterMs).not.toBeNull();
    expect(abortedAfterMs!).toBeLessThan(2_000);
    expect(freedAfterMs).toBeLessThan(5_000);
    const after = await row(db.pool, job.id);
    expect(after).toMatchObject({ status: "pending", attempts: 1, claim_token: null });
    expect(after.last_error).toMatch(/^timeout: timed out after 200 ms/);
    // The backoff was applied: attempt 1 with base 60 s runs again 30–60 s later.
    const delay = after.run_at.getTime() - after.updated_at.getTime();
    expect(delay).toBeGreaterThanOrEqual(29_000);
    expect(delay).toBeLessThanOrEqual(61_000);
  });

  it("does not let a handler that ignores its signal hold the slot past the deadline", async () => {
    let released: () => void = () => undefined;
    const stubborn = defineTask({
      name: "stubborn",
      timeoutMs: 150,
      concurrency: 1,
      handler: () => new Promise<void>((resolve) => (released = resolve)), // never looks at the signal
    });
    const job = await enqueueJob(db.pool, { type: "stubborn", maxAttempts: 1 });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [stubborn] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 3_000 }).toMatchObject({ outcome: "dead" });
    // The handler's promise is still pending, yet its slot is free.
    expect(supervisor.stats().running).toBe(0);
    released();
    expect(await row(db.pool, job.id)).toMatchObject({ status: "dead", last_error: expect.stringMatching(/^timeout/) });
  });

  it("gives a handler that first reads its signal after the deadline an aborted one", async () => {
    // The signal is made when first read (most handlers never read it): made after the timeout, it
    // must still say the run was aborted, with the same reason-free abort XState gives.
    let seen: boolean | undefined;
    const late = defineTask({
      name: "late-reader",
      timeoutMs: 100,
      handler: async (_payload, ctx) => {
        await new Promise((resolve) => setTimeout(resolve, 600));
        seen = ctx.signal.aborted;
      },
    });
    const job = await enqueueJob(db.pool, { type: "late-reader", maxAttempts: 1 });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [late] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 3_000 }).toMatchObject({ outcome: "dead" });
    await expect.poll(() => seen, { timeout: 3_000 }).toBe(true);
  });

  it("terminates an isolated handler's busy loop at the deadline", async () => {
    const markFile = path.join(tmpdir(), `picket-busy-${process.pid}-${Date.now()}`);
    const busy = defineTask({
      name: "busy",
      timeoutMs: 300,
      isolate: { module: new URL("./fixtures/busy-task.ts", import.meta.url), export: "spin" },
    });
    const job = await enqueueJob(db.pool, { type: "busy", payload: { spinMs: 1_000, markFile }, maxAttempts: 1 });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [busy] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "dead" });
    // Well past the loop's natural end: a thread that was not terminated would have left its mark.
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    expect(existsSync(markFile)).toBe(false);
  });

  it("runs an isolated handler to completion when it finishes in time", async () => {
    const markFile = path.join(tmpdir(), `picket-busy-ok-${process.pid}-${Date.now()}`);
    const busy = defineTask({
      name: "busy-ok",
      timeoutMs: 5_000,
      isolate: { module: new URL("./fixtures/busy-task.ts", import.meta.url), export: "spin" },
    });
    const job = await enqueueJob(db.pool, { type: "busy-ok", payload: { spinMs: 10, markFile } });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [busy] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", result: "finished" });
    expect(existsSync(markFile)).toBe(true);
  });
});
