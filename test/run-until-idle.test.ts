// picket/testing's runUntilIdle at its edges: another schema, a job cancelled or taken while its
// handler runs (found by its next step write, as a worker's runtime finds them), and the options it
// refuses. test/testing-kit.test.ts holds its ordinary use.
import { describe, expect, it } from "vitest";
import { cancelJob, enqueueJob, InvalidConfigError, migrate } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { runUntilIdle, TestRuntime } from "../src/testing/run-jobs.ts";
import { useTestDatabase } from "./support/db.ts";
import { rejectionOf } from "./support/errors.ts";
import { captureLogs } from "./support/worker.ts";

const db = useTestDatabase();

describe("runUntilIdle", () => {
  it("runs the jobs of the schema it is given, and reads their results from there", async () => {
    const schema = "kit_run_elsewhere";
    await migrate(db.pool, { schema });
    const task = defineTask<{ n: number }>({ name: "run-elsewhere", handler: async ({ n }, { step }) => step("double", () => n * 2) });
    await enqueueJob(db.pool, { type: "run-elsewhere", payload: { n: 21 } }, { schema });
    await enqueueJob(db.pool, { type: "run-elsewhere", payload: { n: 1 } });
    expect(await runUntilIdle({ db: db.pool, tasks: [task], schema })).toEqual([expect.objectContaining({ outcome: "completed", result: 42, error: null })]);
    // Time travel in that schema too.
    await enqueueJob(db.pool, { type: "run-elsewhere", payload: { n: 5 }, delayMs: 60_000 }, { schema });
    expect(await runUntilIdle({ db: db.pool, tasks: [task], schema, advance: 120_000 })).toEqual([expect.objectContaining({ outcome: "completed", result: 10 })]);
    // The job in picket's own schema was left alone.
    expect((await db.pool.query("SELECT status FROM picket.jobs WHERE type = 'run-elsewhere'")).rows).toEqual([{ status: "pending" }]);
  });

  it("ends a job cancelled while its handler runs as cancelled, and one whose claim was taken as fenced, when a step write finds out", async () => {
    const cancelled = defineTask({
      name: "run-cancelled",
      handler: async (_p, { job, step }) => {
        await cancelJob(db.pool, job.id);
        await step("after the cancel", () => "never recorded");
      },
    });
    const taken = defineTask({
      name: "run-taken",
      handler: async (_p, { job, step }) => {
        await db.pool.query("UPDATE picket.jobs SET claim_token = gen_random_uuid() WHERE id = $1", [job.id]);
        await step("after the loss", () => "never recorded");
      },
    });
    await enqueueJob(db.pool, { type: "run-cancelled" });
    await enqueueJob(db.pool, { type: "run-taken" });
    // Two tasks with a job due each: both run (a claim of one per task once ran the first and held
    // the second, claimed and never run, until its lease ran out).
    const results = await runUntilIdle({ db: db.pool, tasks: [cancelled, taken] });
    expect(results.map((r) => [r.type, r.outcome])).toEqual([["run-cancelled", "cancelled"], ["run-taken", "fenced"]]);
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.job_steps")).rows[0].n).toBe(0);
  });

  it("reports no result for a run whose claim was lost, though the row holds the result another claim wrote", async () => {
    const task = defineTask({
      name: "run-finished-elsewhere",
      handler: async (_p, { job, step }) => {
        // Another worker's claim took the job and completed it meanwhile.
        await db.pool.query(`UPDATE picket.jobs SET status = 'completed', result = '"theirs"', claim_token = NULL, locked_by = NULL, locked_at = NULL, lock_until = NULL WHERE id = $1`, [job.id]);
        await step("after the loss", () => "never recorded");
      },
    });
    await enqueueJob(db.pool, { type: "run-finished-elsewhere" });
    expect(await runUntilIdle({ db: db.pool, tasks: [task] })).toEqual([expect.objectContaining({ outcome: "fenced", result: null })]);
  });

  it("stops the handler (its signal aborted) when a progress write finds the job cancelled or its claim taken, as a worker does", async () => {
    const stoppedAtOnce: Record<string, boolean> = {};
    const progressing = (name: string, meanwhile: (id: string) => Promise<unknown>) =>
      defineTask({
        name,
        handler: async (_p, { job, reportProgress, signal }) => {
          await meanwhile(job.id);
          // Progress never throws into the handler: what stops it is the machine leaving running.
          await reportProgress({ done: 1 });
          stoppedAtOnce[name] = signal.aborted;
          return "went on";
        },
      });
    const cancelled = progressing("progress-cancelled", (id) => cancelJob(db.pool, id));
    const taken = progressing("progress-taken", (id) => db.pool.query("UPDATE picket.jobs SET claim_token = gen_random_uuid() WHERE id = $1", [id]));
    await enqueueJob(db.pool, { type: "progress-cancelled" });
    await enqueueJob(db.pool, { type: "progress-taken" });
    const results = await runUntilIdle({ db: db.pool, tasks: [cancelled, taken] });
    expect(results.map((r) => [r.type, r.outcome])).toEqual([["progress-cancelled", "cancelled"], ["progress-taken", "fenced"]]);
    expect(stoppedAtOnce).toEqual({ "progress-cancelled": true, "progress-taken": true });
  });

  it("takes an advance from 0 to a hundred years, and refuses any other, saying so", async () => {
    const task = defineTask({ name: "run-advance-bounds", handler: async () => "ran" });
    const hundredYears = 100 * 365 * 24 * 3_600_000;
    await enqueueJob(db.pool, { type: "run-advance-bounds", runAt: new Date(Date.now() + 50 * 365 * 24 * 3_600_000) });
    expect(await runUntilIdle({ db: db.pool, tasks: [task], advance: 0 })).toEqual([]);
    expect(await runUntilIdle({ db: db.pool, tasks: [task], advance: hundredYears })).toEqual([expect.objectContaining({ outcome: "completed", result: "ran" })]);
    for (const advance of [hundredYears + 1, -1, 1.5, Number.NaN]) {
      const error = await rejectionOf(runUntilIdle({ db: db.pool, tasks: [task], advance }));
      expect(error).toBeInstanceOf(InvalidConfigError);
      expect((error as Error).message).toBe(`picket/testing: runUntilIdle's advance must be a whole number of milliseconds from 0 to ${hundredYears} (got ${advance}).`);
    }
  });

  it("writes the runtime's log lines to the logger it is given", async () => {
    const { lines, logger } = captureLogs();
    const task = defineTask({ name: "run-logged", maxAttempts: 1, handler: async () => Promise.reject(new Error("boom")) });
    await enqueueJob(db.pool, { type: "run-logged", payload: { token: "secret-in-payload" } });
    expect(await runUntilIdle({ db: db.pool, tasks: [task], logger })).toEqual([expect.objectContaining({ outcome: "dead", error: "error: boom" })]);
    expect(lines.find((l) => l.job_id !== undefined)).toMatchObject({ task: "run-logged" });
    // Payloads stay out of the lines, as a worker's default.
    expect(JSON.stringify(lines)).not.toContain("secret-in-payload");
  });

  it("claims as picket-testing, and with keepCompleted: false runs as a default worker: the completed row is gone, its result with it", async () => {
    const lockedBy: string[] = [];
    const task = defineTask({
      name: "run-default-worker",
      handler: async (_p, { job }) => {
        lockedBy.push((await db.pool.query("SELECT locked_by FROM picket.jobs WHERE id = $1", [job.id])).rows[0].locked_by);
        return "done";
      },
    });
    const job = await enqueueJob(db.pool, { type: "run-default-worker" });
    expect(await runUntilIdle({ db: db.pool, tasks: [task], keepCompleted: false })).toEqual([expect.objectContaining({ id: job.id, outcome: "completed", result: null })]);
    expect(lockedBy).toEqual(["picket-testing"]);
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE id = $1", [job.id])).rows[0].n).toBe(0);
  });

  it("refuses a maxJobs that is no integer ≥ 1, saying so, and takes 1", async () => {
    const task = defineTask({ name: "run-refused", handler: async () => undefined });
    await enqueueJob(db.pool, { type: "run-refused" });
    expect(await runUntilIdle({ db: db.pool, tasks: [task], maxJobs: 1 })).toEqual([expect.objectContaining({ outcome: "completed" })]);
    for (const maxJobs of [0, 1.5, -3]) {
      const error = await rejectionOf(runUntilIdle({ db: db.pool, tasks: [task], maxJobs }));
      expect(error).toBeInstanceOf(InvalidConfigError);
      expect((error as Error).message).toBe(`picket/testing: runUntilIdle's maxJobs must be an integer ≥ 1 (got ${maxJobs}).`);
    }
  });

  it("sends an event to a job only while it runs here, and says whether one took it", async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const task = defineTask({
      name: "run-send",
      handler: async () => {
        started();
        await released;
        return "done";
      },
    });
    await enqueueJob(db.pool, { type: "run-send" });
    const runtime = new TestRuntime({ db: db.pool, tasks: [task] });
    const job = await runtime.claimOne();
    expect(job).not.toBeNull();
    const run = runtime.run(job!);
    await running;
    // An event the running job ignores but for noting it: the send reached a machine.
    expect(runtime.send(job!.id, { type: "STEP_RECORDED", name: "noted" })).toBe(true);
    release();
    expect(await run).toEqual(expect.objectContaining({ outcome: "completed" }));
    // The run ended: its machine is gone from the runtime, and nothing takes the event.
    expect(runtime.send(job!.id, { type: "CANCEL" })).toBe(false);
    expect(runtime.send(-1 as never, { type: "CANCEL" })).toBe(false);
  });
});
