// Durable steps: a step's result is recorded under the live claim (a fenced write), at most once
// per job and name, and a later attempt of the job gets it back without running the step again.
import { spawn, type ChildProcess } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { cancelJob, claimJobs, enqueueJob, type ClaimedJob, InvalidJobError, jobSteps, recordStep, sweepExpiredClaims } from "../src/db/index.ts";
import { StepFencedError } from "../src/runtime/steps.ts";
import { defineTask } from "../src/runtime/task.ts";
import { CLI } from "./support/cli.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, expireLease, row, want } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("recordStep", () => {
  it("records under the live claim, keeps the first result of a name, and refuses a stale or cancelled claim", async () => {
    const [job] = await claimed(db.pool, "steps-record");
    const claim = { id: job!.id, token: job!.claimToken };
    expect(await recordStep(db.pool, claim, { name: "a", result: { n: 1 }, attempt: 1 })).toEqual({ outcome: "recorded" });
    expect(await recordStep(db.pool, claim, { name: "b", result: undefined, attempt: 1 })).toEqual({ outcome: "recorded" });
    expect(await recordStep(db.pool, claim, { name: "c", result: null, attempt: 1 })).toEqual({ outcome: "recorded" });
    expect(await recordStep(db.pool, claim, { name: "a", result: { n: 2 }, attempt: 1 })).toEqual({ outcome: "exists" });
    const stale = { id: job!.id, token: "00000000-0000-4000-8000-000000000000" };
    expect(await recordStep(db.pool, stale, { name: "d", result: 1, attempt: 1 })).toEqual({ outcome: "fenced" });
    expect(await recordStep(db.pool, { id: "999999999", token: job!.claimToken }, { name: "d", result: 1, attempt: 1 })).toEqual({ outcome: "fenced" });
    const steps = await jobSteps(db.pool, job!.id);
    expect(steps.map((s) => [s.name, s.result, s.attempt, s.claimToken])).toEqual([
      ["a", { n: 1 }, 1, job!.claimToken],
      ["b", undefined, 1, job!.claimToken],
      ["c", null, 1, job!.claimToken],
    ]);
    await cancelJob(db.pool, job!.id);
    expect(await recordStep(db.pool, claim, { name: "e", result: 1, attempt: 1 })).toEqual({ outcome: "cancelled" });
    expect((await jobSteps(db.pool, job!.id)).map((s) => s.name)).toEqual(["a", "b", "c"]);
  });

  it("refuses a bad name or a result PostgreSQL cannot store before touching the row", async () => {
    const [job] = await claimed(db.pool, "steps-bad");
    const claim = { id: job!.id, token: job!.claimToken };
    await expect(recordStep(db.pool, claim, { name: "", result: 1, attempt: 1 })).rejects.toThrow(/step name must be a string of 1 to 200/);
    // Stored as U+FFFD, the record would never be found under its name: the step would rerun on every retry.
    await expect(recordStep(db.pool, claim, { name: "s\ud800", result: 1, attempt: 1 })).rejects.toThrow('picket: step name "s\\ud800" contains a lone UTF-16 surrogate');
    await expect(recordStep(db.pool, claim, { name: "s\u0000", result: 1, attempt: 1 })).rejects.toThrow('picket: step name "s\\u0000" contains a NUL character');
    await expect(recordStep(db.pool, claim, { name: "x", result: { s: "nul\u0000" }, attempt: 1 })).rejects.toThrow(InvalidJobError);
    await expect(recordStep(db.pool, claim, { name: "x", result: { s: "nul\u0000" }, attempt: 1 })).rejects.toThrow(/result of step "x"\.s contains a NUL/);
    expect(await jobSteps(db.pool, job!.id)).toEqual([]);
  });

  it("never waits on a row another session holds: busy while a reclaim is in flight, fenced once it committed", async () => {
    const [job] = await claimed(db.pool, "steps-vs-reclaim", 1, { want: { leaseMs: 60_000 } });
    await expireLease(db.pool, job!.id);
    const sweeper = await db.connect();
    try {
      await sweeper.query("BEGIN");
      expect(await sweepExpiredClaims(sweeper, 10)).toHaveLength(1);
      const write = () => recordStep(db.pool, { id: job!.id, token: job!.claimToken }, { name: "late", result: 1, attempt: 1 }, { timeoutMs: 2_000 });
      expect(await write()).toEqual({ outcome: "busy" });
      await sweeper.query("COMMIT");
      expect(await write()).toEqual({ outcome: "fenced" });
      expect(await jobSteps(db.pool, job!.id)).toEqual([]);
    } finally {
      await sweeper.end();
    }
  });
});

describe("ctx.step in a worker", () => {
  it("a stale claim's step write is fenced: the step's function ran, nothing is recorded, and the run is stopped", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let reachedGate!: () => void;
    const atGate = new Promise<void>((resolve) => (reachedGate = resolve));
    const calls: string[] = [];
    let stepError: unknown;
    const task = defineTask({
      name: "steps-stale",
      leaseMs: 60_000,
      handler: async (_p, { step, signal }) => {
        await step("one", () => calls.push("one"));
        reachedGate();
        await gate;
        try {
          await step("two", () => calls.push("two"));
        } catch (error) {
          stepError = error;
        }
        // A handler that swallows the error is still stopped: the machine left running.
        await new Promise((resolve) => (signal.aborted ? resolve(undefined) : signal.addEventListener("abort", resolve)));
        return "stopped";
      },
    });
    const job = await enqueueJob(db.pool, { type: "steps-stale" });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], listen: false });
    await atGate;
    // Another worker takes the job over: the lease runs out, the sweep requeues it, a thief claims
    // it, in one transaction (so the worker's own polls never see the job pending in between).
    const thiefSession = await db.connect();
    let thief: ClaimedJob | undefined;
    try {
      await thiefSession.query("BEGIN");
      await expireLease(thiefSession, job.id);
      await sweepExpiredClaims(thiefSession, 10);
      await thiefSession.query("UPDATE picket.jobs SET run_at = now() WHERE id = $1", [job.id]);
      [thief] = await claimJobs(thiefSession, "thief", [want("steps-stale", { limit: 1 })]);
      await thiefSession.query("COMMIT");
    } finally {
      await thiefSession.end();
    }
    expect(thief?.id).toBe(job.id);
    release();
    await expect.poll(() => outcomes.length, { timeout: 5_000 }).toBe(1);
    await supervisor.stop();
    expect(calls).toEqual(["one", "two"]);
    expect(stepError).toBeInstanceOf(StepFencedError);
    expect(outcomes[0]).toMatchObject({ id: job.id, outcome: "fenced" });
    expect((await jobSteps(db.pool, job.id)).map((s) => s.name)).toEqual(["one"]);
    expect(await row(db.pool, job.id)).toMatchObject({ status: "processing", claim_token: thief!.claimToken });
  });

  it("a step whose row another session holds is retried until it is recorded, and the job completes", async () => {
    let reachedStep!: () => void;
    const atStep = new Promise<void>((resolve) => (reachedStep = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const task = defineTask({
      name: "steps-busy",
      leaseMs: 60_000,
      handler: async (_p, { step }) => {
        await atStep;
        return step("held", () => "done");
      },
    });
    const job = await enqueueJob(db.pool, { type: "steps-busy" });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 5_000 }).toBe("processing");
    const operator = await db.connect();
    try {
      await operator.query("BEGIN");
      await operator.query("SELECT 1 FROM picket.jobs WHERE id = $1 FOR UPDATE", [job.id]);
      reachedStep();
      // Held for a while: the step is tried again and again, and nothing is recorded meanwhile.
      setTimeout(release, 500);
      await released;
      expect(await jobSteps(db.pool, job.id)).toEqual([]);
      await operator.query("COMMIT");
    } finally {
      await operator.end();
    }
    await expect.poll(() => outcomes.map((o) => o.outcome), { timeout: 10_000 }).toEqual(["completed"]);
    await supervisor.stop();
    expect((await jobSteps(db.pool, job.id)).map((s) => [s.name, s.result])).toEqual([["held", "done"]]);
  });

  it("a name asked for twice in a run runs once; a step recorded earlier is not run again on the next attempt", async () => {
    let runs = 0;
    const calls: string[] = [];
    const task = defineTask({
      name: "steps-retry",
      backoff: { baseMs: 0, maxMs: 0 },
      handler: async (_p, { step, job }) => {
        runs++;
        const [a, again] = await Promise.all([step("a", () => (calls.push("a"), `a@${job.attempt}`)), step("a", () => (calls.push("a"), "second"))]);
        expect(again).toBe(a);
        const b = await step("b", () => (calls.push("b"), `b@${job.attempt}`));
        if (job.attempt === 1) throw new Error("first attempt fails after its steps");
        return { a, b };
      },
    });
    const job = await enqueueJob(db.pool, { type: "steps-retry" });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.map((o) => o.outcome), { timeout: 10_000 }).toEqual(["retried", "completed"]);
    await supervisor.stop();
    expect(runs).toBe(2);
    expect(calls).toEqual(["a", "b"]);
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", result: { a: "a@1", b: "b@1" } });
  });

  it("SIGKILLed between step 2 and step 3 of four: the next attempt skips steps 1 and 2 and returns their recorded results", { tags: ["spawns"], timeout: 60_000 }, async () => {
    await db.pool.query("CREATE TABLE step_calls (job_id bigint, step text, pid int, at timestamptz DEFAULT now())");
    const pause = join(tmpdir(), `picket-steps-${process.pid}-${Date.now()}`);
    writeFileSync(pause, "");
    const tasks = fileURLToPath(new URL("./fixtures/step-tasks.ts", import.meta.url));
    const start = (env: Record<string, string> = {}) =>
      spawn(process.execPath, [CLI, "worker", "--tasks", tasks], { env: { ...process.env, DATABASE_URL: db.url, PICKET_LOG_LEVEL: "warn", ...env }, stdio: "ignore" });
    const exited = (child: ChildProcess) => new Promise((resolve) => child.once("exit", resolve));
    const job = await enqueueJob(db.pool, { type: "four-steps" });
    const first = start({ STEPS_PAUSE: pause });
    let second: ChildProcess | undefined;
    try {
      // Steps 1 and 2 are recorded; the handler waits before step 3.
      await expect.poll(async () => (await jobSteps(db.pool, job.id)).map((s) => s.name), { timeout: 20_000, interval: 50 }).toEqual(["one", "two"]);
      const died = exited(first);
      first.kill("SIGKILL");
      await died;
      rmSync(pause);
      second = start();
      await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 30_000, interval: 100 }).toBe("completed");
      const { rows: calls } = await db.pool.query("SELECT step, pid FROM step_calls ORDER BY at, step");
      expect(calls.map((c) => c.step)).toEqual(["one", "two", "three", "four"]);
      const [pid1, pid2] = [first.pid, second.pid];
      expect(calls.map((c) => c.pid)).toEqual([pid1, pid1, pid2, pid2]);
      // The re-run got steps 1 and 2 back as the first run recorded them (with the first pid).
      expect((await row(db.pool, job.id)).result).toEqual({
        steps: [
          { step: "one", pid: pid1 },
          { step: "two", pid: pid1 },
          { step: "three", pid: pid2 },
          { step: "four", pid: pid2 },
        ],
        finishedBy: pid2,
      });
      expect((await jobSteps(db.pool, job.id)).map((s) => [s.name, s.attempt])).toEqual([
        ["one", 1],
        ["two", 1],
        ["three", 2],
        ["four", 2],
      ]);
    } finally {
      rmSync(pause, { force: true });
      first.kill("SIGKILL");
      if (second) {
        const done = exited(second);
        second.kill("SIGTERM");
        await done;
      }
    }
  });
});
