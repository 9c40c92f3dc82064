// Runtime behaviours that hand-made mutants showed untested (a review that deleted or bent each
// enforcing line); each test here fails under its mutant.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Effect } from "effect";
import { describe, expect, it } from "vitest";
import { claimJobs, completeJobs, enqueueJob, enqueueJobs, sweepExpiredClaims } from "../src/db/index.ts";
import { createSupervisor } from "../src/runtime/supervisor.ts";
import { createJobRuntime } from "../src/runtime/job-runtime.ts";
import { observeJob } from "./support/job-run.ts";
import { defineTask, PermanentError } from "../src/runtime/task.ts";
import { interceptedPool, useTestDatabase } from "./support/db.ts";
import { claimed, row, want } from "./support/factory.ts";
import { captureLogs, startWorker } from "./support/worker.ts";
import { freePort } from "./support/ports.ts";

const db = useTestDatabase();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("runtime behaviours", () => {
  it("T-M39: refuses a claim without a token and never runs its handler", async () => {
    let runs = 0;
    const task = defineTask({ name: "tokenless", handler: async () => void runs++ });
    const [job] = await claimed(db.pool, "tokenless");
    const { logger } = captureLogs();
    const runtime = createJobRuntime({ db: db.pool, statements: { schema: "picket" }, logger, logPayloads: false, taskFor: () => task, leaseLost: () => undefined, cancelled: () => undefined, stepRecorded: () => undefined, handlerSettled: () => undefined, leaseProvable: () => true, leaseConfirmed: () => undefined });
    const { run, done } = observeJob(runtime, { ...job!, claimToken: null as never }, true);
    run.start();
    expect((await done).outcome).toBe("refused");
    await sleep(100);
    expect(runs).toBe(0);
  });

  it.each([
    { write: "completing", slotFree: true, handler: async () => "result" },
    { write: "failing", slotFree: true, handler: async () => Promise.reject(new Error("boom")) },
    { write: "deadLettering", slotFree: true, handler: async () => Promise.reject(new PermanentError("never")) },
    { write: "releasing", slotFree: false, handler: async () => "result" },
  ])("writes nothing once an outcome write in $write was given up (ABANDON) before its statement went out", async ({ write, slotFree, handler }) => {
    const task = defineTask({ name: `given-up-${write}`, handler });
    const [job] = await claimed(db.pool, task.name);
    const before = await row(db.pool, job!.id);
    const { logger } = captureLogs();
    const runtime = createJobRuntime({ db: db.pool, statements: { schema: "picket" }, logger, logPayloads: false, taskFor: () => task, leaseLost: () => undefined, cancelled: () => undefined, stepRecorded: () => undefined, handlerSettled: () => undefined, leaseProvable: () => true, leaseConfirmed: () => undefined });
    // In the same turn as the write began: its statement is queued or waiting for a connection.
    let sent = false;
    const { run, done } = observeJob(runtime, job!, slotFree, (state, run) => {
      if (!sent && state === write) {
        sent = true;
        run.send({ type: "ABANDON" });
      }
    });
    run.start();
    if (!slotFree) run.send({ type: "DRAIN_DEADLINE" });
    expect((await done).outcome).toBe("abandoned");
    // Past any retry's spacing: the row still holds the claim, untouched, for the sweep.
    await sleep(1_500);
    expect(await row(db.pool, job!.id)).toMatchObject({ status: "processing", claim_token: before.claim_token, updated_at: before.updated_at, attempts: before.attempts });
  });

  it("T-M26: a task's concurrency holds across polls while its jobs run", async () => {
    let now = 0;
    let peak = 0;
    const limited = defineTask({ name: "limited-long", concurrency: 2, handler: async () => { peak = Math.max(peak, ++now); await sleep(300); now--; } });
    await enqueueJobs(db.pool, Array.from({ length: 6 }, () => ({ type: "limited-long" })));
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [limited], concurrency: 8, pollIntervalMs: 20 });
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(6);
    expect(peak).toBe(2);
  });

  it("T-M35: an idle worker stops at once, not at the drain deadline", async () => {
    const task = defineTask({ name: "idle", handler: async () => "ok" });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], drainTimeoutMs: 20_000 });
    await sleep(200);
    const t0 = Date.now();
    await supervisor.stop();
    expect(Date.now() - t0).toBeLessThan(2_000);
  });

  it("T-M23: a fenced progress write interrupts the handler at once", async () => {
    let aborted = false;
    let atProgress: () => void = () => undefined;
    const reached = new Promise<void>((r) => (atProgress = r));
    let go: () => void = () => undefined;
    const proceed = new Promise<void>((r) => (go = r));
    const task = defineTask({
      name: "progress-fenced", leaseMs: 60_000, timeoutMs: 60_000,
      handler: async (_p, { reportProgress, signal }) => {
        atProgress();
        await proceed;
        await reportProgress({ pct: 10 });
        if (signal.aborted) { aborted = true; return; }
        await new Promise<void>((resolve) => { const t = setTimeout(resolve, 5_000); signal.addEventListener("abort", () => { aborted = true; clearTimeout(t); resolve(); }); });
      },
    });
    const job = await enqueueJob(db.pool, { type: "progress-fenced" });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await reached;
    await db.pool.query("UPDATE picket.jobs SET claim_token = gen_random_uuid() WHERE id = $1", [job.id]); // claim taken over
    go();
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 2_000 }).toMatchObject({ outcome: "fenced" });
    expect(aborted).toBe(true);
  });

  it("T-M11: a handler returning an Effect is interrupted at the timeout", async () => {
    let interrupted = false;
    const task = defineTask({ name: "effect-slow", timeoutMs: 200, handler: () => Effect.sleep("10 seconds").pipe(Effect.onInterrupt(() => Effect.sync(() => (interrupted = true)))) });
    const job = await enqueueJob(db.pool, { type: "effect-slow" });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "retried" });
    await expect.poll(() => interrupted, { timeout: 1_000 }).toBe(true);
  });

  it("T-M16: /health is 503 when the poll is stuck", async () => {
    const port = await freePort();
    const task = defineTask({ name: "stuck-poll", handler: async () => "ok" });
    const blocker = await db.connect();
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE picket.jobs IN EXCLUSIVE MODE");
    try {
      await startWorker({ connectionString: db.url, tasks: [task], health: { port, host: "127.0.0.1", stalePollMs: 300 } });
      await expect.poll(async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => ({ status: 0 }))).status, { timeout: 5_000 }).toBe(503);
    } finally {
      await blocker.query("COMMIT");
    }
  });

  it("T-M06/M48: a short-lease task is renewed with its own lease, beside a long-lease task", async () => {
    let release: () => void = () => undefined;
    // 1 s: short beside a minute, and long enough for a loaded machine to renew it in time.
    const short = defineTask({ name: "short-lease", leaseMs: 1_000, handler: () => new Promise<string>((r) => (release = () => r("done"))) });
    const long = defineTask({ name: "long-lease", leaseMs: 60_000, handler: async () => "ok" });
    const job = await enqueueJob(db.pool, { type: "short-lease" });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [short, long], sweepIntervalMs: 100 });
    await sleep(3_000); // three leases
    const { rows } = await db.pool.query("SELECT status, attempts, extract(epoch FROM lock_until - now()) * 1000 AS left_ms FROM picket.jobs WHERE id = $1", [job.id]);
    release();
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
    expect(rows[0]).toMatchObject({ status: "processing", attempts: 1 });
    expect(Number(rows[0].left_ms)).toBeLessThanOrEqual(1_000);
  });

  it("T-M21: a transient error on the completion write is retried", async () => {
    await db.pool.query(`
      CREATE SEQUENCE picket.flaky_seq;
      CREATE FUNCTION picket.flaky_completion() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF nextval('picket.flaky_seq') = 1 THEN RAISE EXCEPTION 'try again' USING ERRCODE = '40001'; END IF; RETURN NEW; END $$;
      CREATE TRIGGER flaky_completion BEFORE UPDATE ON picket.jobs
        FOR EACH ROW WHEN (NEW.status = 'completed' AND NEW.type = 'flaky-write') EXECUTE FUNCTION picket.flaky_completion();`);
    const task = defineTask({ name: "flaky-write", handler: async () => "ok" });
    const job = await enqueueJob(db.pool, { type: "flaky-write" });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
  });

  it("T-M03: a fenced renewal interrupts the job it names, not another", async () => {
    const aborted = new Set<number>();
    const finish = new Map<number, () => void>();
    const task = defineTask({
      name: "pair", leaseMs: 300, timeoutMs: 60_000,
      handler: (p: { n: number }, { signal }) => new Promise((resolve, reject) => {
        finish.set(p.n, () => resolve("ok"));
        signal.addEventListener("abort", () => { aborted.add(p.n); reject(new Error("aborted")); });
      }),
    });
    const [a, b] = await enqueueJobs(db.pool, [{ type: "pair", payload: { n: 0 } }, { type: "pair", payload: { n: 1 } }]);
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => finish.size, { timeout: 5_000 }).toBe(2);
    await db.pool.query("UPDATE picket.jobs SET claim_token = gen_random_uuid() WHERE id = $1", [b!.id]);
    await expect.poll(() => outcomes.find((o) => o.id === b!.id), { timeout: 3_000 }).toMatchObject({ outcome: "fenced" });
    expect([...aborted]).toEqual([1]);
    finish.get(0)!();
    await expect.poll(() => outcomes.find((o) => o.id === a!.id), { timeout: 3_000 }).toMatchObject({ outcome: "completed" });
  });

  it("T-M17: a freed slot is refilled at once when work was left behind", async () => {
    const task = defineTask({ name: "refill", handler: () => sleep(30) });
    await enqueueJobs(db.pool, Array.from({ length: 10 }, () => ({ type: "refill" })));
    const t0 = Date.now();
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 2, pollIntervalMs: 3_000, listen: false });
    await expect.poll(() => outcomes.length, { timeout: 20_000 }).toBe(10);
    expect(Date.now() - t0).toBeLessThan(2_500);
  });

  it("T-M40: the second signal interrupts and releases at once, well before the drain deadline", { tags: ["spawns"], timeout: 30_000 }, async () => {
    const CLI = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
    const TASKS = fileURLToPath(new URL("./fixtures/crash-tasks.ts", import.meta.url));
    await db.pool.query("CREATE TABLE IF NOT EXISTS executions (job_id bigint, worker_pid int, at timestamptz DEFAULT now())");
    const job = await enqueueJob(db.pool, { type: "crashy" });
    const child = spawn(process.execPath, [CLI, "worker", "--tasks", TASKS], { env: { ...process.env, DATABASE_URL: db.url, PICKET_LOG_LEVEL: "warn", CRASHY_MS: "60000" }, stdio: "ignore" });
    const exited = new Promise((r) => child.once("exit", r));
    await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 20_000, interval: 50 }).toBe("processing");
    child.kill("SIGTERM");
    await sleep(300);
    const t0 = Date.now();
    child.kill("SIGINT");
    await exited;
    expect(Date.now() - t0).toBeLessThan(5_000); // the drain deadline is 10 s
  });
});

describe("defects found by the review, fixed", () => {
  const within = <T>(p: Promise<T>, ms: number) => Promise.race([p.then(() => "resolved"), sleep(ms).then(() => "hung")]);
  it("D1: stop() called while start() is in progress stops the worker", async () => {
    const task = defineTask({ name: "d1", handler: async () => "ok" });
    const { logger } = captureLogs();
    const s = createSupervisor({ connectionString: db.url, tasks: [task], logger, pollIntervalMs: 50, retention: false });
    const starting = s.start();
    await s.stop();
    await starting;
    const job = await enqueueJob(db.pool, { type: "d1" });
    await sleep(500);
    const status = (await row(db.pool, job.id)).status;
    expect(status).toBe("pending"); // a stopped worker claims nothing
  });

  it("D2: a claim without a token (refused) does not wedge the drain", async () => {
    const task = defineTask({ name: "d2", handler: async () => "ok" });
    // A pool that hands the supervisor claims without tokens, as a broken trigger/row would.
    const { pool, end } = interceptedPool(db.url, async ({ name }, forward) => {
      const result = await forward();
      if (name.startsWith("picket_claim_")) for (const r of result.rows) r.claimToken = null;
      return result;
    });
    try {
      await enqueueJob(db.pool, { type: "d2" });
      const { outcomes, supervisor, logs } = await startWorker({ pool, tasks: [task], drainTimeoutMs: 200 });
      await expect.poll(() => outcomes.map((o) => o.outcome), { timeout: 5_000 }).toEqual(["refused"]);
      const refused = outcomes[0]!.id;
      expect(logs).toContainEqual(expect.objectContaining({ level: 50, job_id: refused, msg: `job ${refused} has no claim token; refused, never run unfenced` }));
      expect(await within(supervisor.stop(), 3_000)).toBe("resolved");
    } finally {
      await end();
    }
  });

  it("D3: a task's own concurrency limit does not throttle it to one batch per poll interval", async () => {
    const task = defineTask({ name: "d3", concurrency: 2, handler: () => sleep(20) });
    await enqueueJobs(db.pool, Array.from({ length: 10 }, () => ({ type: "d3" })));
    const started = Date.now();
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 8, pollIntervalMs: 2_000, listen: false });
    await expect.poll(() => outcomes.length, { timeout: 15_000 }).toBe(10);
    expect(Date.now() - started).toBeLessThan(3_000); // 10 jobs x 20 ms, 2 at a time
  });

  it("D4: a job stuck in payload validation is bounded by its timeout and by the drain deadline", async () => {
    const schema = { "~standard": { version: 1 as const, vendor: "t", validate: () => new Promise(() => undefined) } };
    const task = defineTask({ name: "d4", timeoutMs: 200, schema, handler: async () => "ran" });
    const job = await enqueueJob(db.pool, { type: "d4", maxAttempts: 1 });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], drainTimeoutMs: 200 });
    await expect.poll(() => outcomes.length, { timeout: 5_000 }).toBe(1);
    const running = supervisor.stats().running;
    supervisor.force();
    const stopped = await within(supervisor.stop(), 3_000);
    expect({ running, stopped, outcomes: outcomes.map((o) => o.outcome), status: (await row(db.pool, job.id)).status }).toEqual({ running: 0, stopped: "resolved", outcomes: ["dead"], status: "dead" });
  });

  it("D5: a throwing onJobFinished listener neither crashes the process nor wedges the drain", async () => {
    const task = defineTask({ name: "d5", handler: async () => "ok" });
    const uncaught: unknown[] = [];
    const onUncaught = (e: unknown) => uncaught.push(e);
    const saved = process.listeners("uncaughtException");
    process.removeAllListeners("uncaughtException");
    process.on("uncaughtException", onUncaught);
    try {
      const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], drainTimeoutMs: 300 });
      supervisor.onJobFinished(() => {
        throw new Error("listener bug");
      });
      await enqueueJob(db.pool, { type: "d5" });
      await sleep(800);
      const stopped = await within(supervisor.stop(), 3_000);
      expect({ uncaught: uncaught.map(String), stopped }).toEqual({ uncaught: [], stopped: "resolved" });
    } finally {
      process.off("uncaughtException", onUncaught);
      for (const l of saved) process.on("uncaughtException", l);
    }
  });

  it("D10: force() during the in-flight poll of a drain is not lost", async () => {
    const task = defineTask({ name: "d10", timeoutMs: 60_000, handler: (_p, { signal }) => new Promise((_r, reject) => signal.addEventListener("abort", () => reject(new Error("x")))) });
    await enqueueJob(db.pool, { type: "d10" });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], drainTimeoutMs: 4_000, pollIntervalMs: 20 });
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    const blocker = await db.connect();
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE picket.jobs IN EXCLUSIVE MODE"); // the next claim blocks: a poll is in flight
    await sleep(100);
    const t0 = Date.now();
    const stopping = supervisor.stop();
    supervisor.force();
    await sleep(100);
    await blocker.query("COMMIT");
    await stopping;
    expect(Date.now() - t0).toBeLessThan(2_000);
  });
  it("a job re-claimed by the same worker while its old machine is alive keeps the bookkeeping right", async () => {
    const finishers: Array<() => void> = [];
    const task = defineTask({
      name: "d11",
      leaseMs: 60_000,
      backoff: { baseMs: 0, maxMs: 0 },
      handler: () => new Promise<string>((resolve) => finishers.push(() => resolve("done"))),
    });
    const job = await enqueueJob(db.pool, { type: "d11" });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], drainTimeoutMs: 500 });
    await expect.poll(() => finishers.length, { timeout: 5_000 }).toBe(1);
    // The lease runs out under the first execution (a stalled event loop, a slow renewal) and a sweep requeues it.
    await db.pool.query("UPDATE picket.jobs SET lock_until = now() - interval '1 second' WHERE id = $1", [job.id]);
    await sweepExpiredClaims(db.pool, 10);
    await expect.poll(() => finishers.length, { timeout: 5_000 }).toBe(2); // this worker claimed it again
    const statsBoth = supervisor.stats().running;
    finishers[0]!(); // the stale execution ends: its completion is fenced
    await expect.poll(() => outcomes.length, { timeout: 5_000 }).toBe(1);
    const statsAfterStale = supervisor.stats().running;
    finishers[1]!(); // the live execution completes
    await sleep(500);
    const status = (await db.pool.query("SELECT status FROM picket.jobs WHERE id = $1", [job.id])).rows[0].status;
    const stopped = await Promise.race([supervisor.stop().then(() => "resolved"), sleep(3_000).then(() => "hung")]);
    expect({ statsBoth, statsAfterStale, outcomes: outcomes.map((o) => o.outcome), status, stopped }).toEqual({
      statsBoth: 2,
      statsAfterStale: 1,
      outcomes: ["fenced", "completed"],
      status: "completed",
      stopped: "resolved",
    });
  });
});
