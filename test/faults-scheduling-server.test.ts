// A step write and a cancel while the whole server is paused (SIGSTOP to the postmaster and every
// backend), on a PostgreSQL of this file's own: each is bounded by the statement timeout, and after
// SIGCONT nothing is lost or doubled. A statement sent during the pause may still run when the
// server wakes (it was already in the backend's socket): the step's write is then found recorded
// ("exists") by its retry, and a second cancel finds the job cancelled.
import { describe, expect, it } from "vitest";
import { cancelJob, enqueueJob, jobSteps, StatementTimeoutError } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { interceptedPool } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { useOwnServer } from "./support/own-server.ts";
import { startWorker } from "./support/worker.ts";

const server = useOwnServer();

const signal = <T = void>() => {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
};

describe("the server paused (SIGSTOP)", () => {
  it("during a step write: the write is bounded and tried again; after SIGCONT the step is recorded once and the job completes", async () => {
    const ran: string[] = [];
    const afterOne = signal();
    const goOn = signal();
    const twoDone = signal();
    const task = defineTask({
      name: "paused-step",
      // Longer than the pause: the claim stays provable, so the handler is not stopped for it.
      leaseMs: 30_000,
      handler: async (_p, { step }) => {
        const one = await step("one", () => (ran.push("one"), 1));
        afterOne.resolve();
        await goOn.promise;
        const two = await step("two", () => (ran.push("two"), one + 1));
        twoDone.resolve();
        return two;
      },
    });
    // The worker's own statements, counted as they go to the (real) server: each step write sent,
    // and each that ended without a reply (its connection closed once its bound had passed).
    const writes = { sent: 0, cutOff: 0 };
    const { pool, end } = interceptedPool(server.url, (statement, forward) => {
      if (!(statement.text.includes("INSERT INTO") && statement.text.includes("job_steps"))) return forward();
      writes.sent++;
      return forward().catch((error: unknown) => {
        writes.cutOff++;
        throw error;
      });
    });
    try {
      const { supervisor, outcomes } = await startWorker({ pool, tasks: [task], statementTimeoutMs: 1_000 });
      const job = await enqueueJob(server.pool, { type: "paused-step" });
      await afterOne.promise;
      expect(writes).toEqual({ sent: 1, cutOff: 0 });
      await server.pause();
      let stepDoneWhilePaused = false;
      void twoDone.promise.then(() => (stepDoneWhilePaused = true));
      try {
        goOn.resolve();
        // The write of "two" is sent and ends at its bound while the server is still paused.
        await expect.poll(() => writes.cutOff, { timeout: 10_000 }).toBeGreaterThanOrEqual(1);
        expect(stepDoneWhilePaused).toBe(false);
        expect(outcomes).toEqual([]);
      } finally {
        await server.resume();
      }
      await expect.poll(() => outcomes.map((o) => o.outcome), { timeout: 20_000 }).toEqual(["completed"]);
      await supervisor.stop();
      // Tried again after the cut-off one: at least one more write of "two" was sent.
      expect(writes.sent).toBeGreaterThanOrEqual(3);
      expect(ran).toEqual(["one", "two"]);
      expect((await jobSteps(server.pool, job.id)).map((s) => [s.name, s.result, s.attempt])).toEqual([
        ["one", 1, 1],
        ["two", 2, 1],
      ]);
      expect(await row(server.pool, job.id)).toMatchObject({ status: "completed", attempts: 1, result: 2 });
    } finally {
      await end();
    }
  }, 60_000);

  it("during a cancel: the cancel ends at its bound; after SIGCONT the job ends cancelled once, its handler run once", async () => {
    const started = signal<string>();
    let runs = 0;
    const task = defineTask({
      name: "paused-cancel",
      leaseMs: 30_000,
      timeoutMs: 120_000,
      handler: (_p, { job, signal: aborted }) =>
        new Promise((_resolve, reject) => {
          runs++;
          aborted.addEventListener("abort", () => reject(new Error("interrupted")));
          started.resolve(job.id);
        }),
    });
    const { supervisor, outcomes } = await startWorker({ connectionString: server.url, tasks: [task], statementTimeoutMs: 1_000 });
    const job = await enqueueJob(server.pool, { type: "paused-cancel" });
    expect(await started.promise).toBe(job.id);
    await server.pause();
    try {
      const at = performance.now();
      const cancel = cancelJob(server.pool, job.id, { timeoutMs: 1_000 });
      await expect(cancel).rejects.toThrow(StatementTimeoutError);
      await expect(cancel).rejects.toThrow(/did not finish within 1000 ms/);
      expect(performance.now() - at).toBeLessThan(1_000 + 3_000);
    } finally {
      await server.resume();
    }
    // The first cancel may have run when the server woke; a second one either applies or finds it so.
    const again = await cancelJob(server.pool, job.id);
    expect(again.outcome === "applied" || (again.outcome === "wrong_status" && again.status === "cancelled")).toBe(true);
    await expect.poll(() => outcomes.map((o) => o.outcome), { timeout: 20_000 }).toEqual(["cancelled"]);
    await supervisor.stop();
    expect(runs).toBe(1);
    expect(await row(server.pool, job.id)).toMatchObject({ status: "cancelled", attempts: 1 });
  }, 60_000);
});
