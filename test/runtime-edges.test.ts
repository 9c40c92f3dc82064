// Runtime edges found by mutation testing: LISTEN reconnecting after its connection is killed, a
// write that keeps failing transiently giving up at the lease, the health server's own logging,
// what a failed progress write does, schema validators' messages, the pool's size, and the bare
// machines' refusal to run actors the runtime did not provide.
import pg from "pg";
import { createActor, waitFor } from "xstate";
import { describe, expect, it } from "vitest";
import { enqueueJob, openPool, runStatement } from "../src/db/index.ts";
import { jobMachine } from "../src/machines/job-machine.ts";
import { supervisorMachine } from "../src/machines/supervisor-machine.ts";
import { checkPayload, defineTask, type StandardSchema } from "../src/runtime/task.ts";
import { interceptedPool, useTestDatabase } from "./support/db.ts";
import { claimed, row } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A caller's pool whose first claim that takes a job commits on the server but answers `delayMs` late. */
const lateFirstClaim = (delayMs: number) => {
  let first = true;
  return interceptedPool(db.url, async (statement, forward) => {
    const result = await forward();
    if (first && statement.name.startsWith("picket_claim_") && result.rows.length > 0) {
      first = false;
      await sleep(delayMs);
    }
    return result;
  });
};

describe("runtime edges", () => {
  it("reconnects LISTEN after its connection is killed, and NOTIFY wakes the worker again", async () => {
    const task = defineTask({ name: "edge-relisten", handler: async () => "ok" });
    const { logs, outcomes, supervisor } = await startWorker({ connectionString: `${db.url}?application_name=edge-relisten`, tasks: [task], pollIntervalMs: 60_000 });
    await expect.poll(() => logs.some((l) => l.msg === "listening for new jobs"), { timeout: 5_000 }).toBe(true);
    await db.pool.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'edge-relisten' AND query LIKE 'LISTEN%'");
    await expect.poll(() => logs.find((l) => l.msg === "LISTEN connection lost; polling continues while it reconnects"), { timeout: 5_000 }).toMatchObject({
      level: 40,
      err: expect.objectContaining({ message: expect.stringContaining("terminat") }),
    });
    await expect.poll(() => logs.filter((l) => l.msg === "listening for new jobs").length, { timeout: 5_000 }).toBe(2);
    const before = supervisor.stats().lastPollAt!.getTime();
    const job = await enqueueJob(db.pool, { type: "edge-relisten" });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
    expect(supervisor.stats().lastPollAt!.getTime()).toBeGreaterThan(before);
    expect(logs.filter((l) => l.msg === "LISTEN connection lost; polling continues while it reconnects")).toHaveLength(1);
  });

  it("keeps retrying an outcome write that fails transiently, renewing the claim meanwhile, until it is written", async () => {
    await db.pool.query(`
      CREATE FUNCTION picket.always_busy() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'busy, try again' USING ERRCODE = '40001'; END $$;
      CREATE TRIGGER always_busy BEFORE UPDATE ON picket.jobs
        FOR EACH ROW WHEN (NEW.status = 'completed' AND NEW.type = 'edge-busy') EXECUTE FUNCTION picket.always_busy();`);
    // A lease of 1 s: a shorter one can lapse before the handler starts on a loaded machine (the
    // claim's reply later than the lease's margin), and the job is then released, not run.
    const task = defineTask({ name: "edge-busy", leaseMs: 1_000, handler: async () => "ok" });
    const job = await enqueueJob(db.pool, { type: "edge-busy" });
    // The worker's own sweep runs every 100 ms: it must leave the claim alone while the outcome waits.
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 5_000 }).toBe("processing");
    const claimedRow = await row(db.pool, job.id);
    await new Promise((r) => setTimeout(r, 3_000)); // three leases
    expect(outcomes).toEqual([]);
    const waiting = await row(db.pool, job.id);
    expect(waiting).toMatchObject({ status: "processing", attempts: 1, claim_token: claimedRow.claim_token, errors: [] });
    const { rows } = await db.pool.query("SELECT lock_until > now() AS alive FROM picket.jobs WHERE id = $1", [job.id]);
    expect(rows[0].alive).toBe(true);
    await db.pool.query("DROP TRIGGER always_busy ON picket.jobs");
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 1, result: "ok" });
  });

  it("never sweeps its own claim whose outcome waits to be written, though its lease ran out on the server", async () => {
    // Renewals and completions cannot reach the database for a while (refused as a dropped
    // connection would be); the worker's own sweep, every 100 ms, runs throughout.
    let down = true;
    const { pool, end } = interceptedPool(db.url, (statement, forward) =>
      down && /^picket_(renew|complete)_/.test(statement.name) ? Promise.reject(Object.assign(new Error("connection lost"), { code: "08006" })) : forward(),
    );
    try {
      const task = defineTask({ name: "edge-own-sweep", leaseMs: 1_000, handler: async () => "ok" });
      const job = await enqueueJob(db.pool, { type: "edge-own-sweep", maxAttempts: 1 });
      const { outcomes, logs } = await startWorker({ pool, tasks: [task] });
      await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 5_000 }).toBe("processing");
      await sleep(3_000); // three leases: long expired on the server
      const { rows } = await db.pool.query("SELECT lock_until < now() AS expired FROM picket.jobs WHERE id = $1", [job.id]);
      expect(rows[0].expired).toBe(true);
      expect(logs.some((l) => l.msg === "sweep reclaimed jobs whose lease expired")).toBe(false);
      down = false;
      await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
      expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 1, errors: [] });
    } finally {
      await end();
    }
  });

  // The first claim that takes a job commits on the server, and its reply is lost; the next poll
  // is a minute away and nothing wakes the worker, so only stop() can give the job back.
  const lostFirstClaim = () => {
    let first = true;
    return interceptedPool(db.url, async (statement, forward) => {
      const result = await forward();
      if (first && statement.name.startsWith("picket_claim_") && result.rows.length > 0) {
        first = false;
        throw new Error("claim reply lost by test");
      }
      return result;
    });
  };

  it("gives back at stop() the jobs of a claim whose reply never came, when no later poll did", async () => {
    const { pool, end } = lostFirstClaim();
    try {
      const task = defineTask({ name: "edge-lost-claim-stop", leaseMs: 60_000, handler: async () => "ok" });
      const job = await enqueueJob(db.pool, { type: "edge-lost-claim-stop" });
      const { supervisor, logs } = await startWorker({ pool, tasks: [task], listen: false, pollIntervalMs: 60_000 });
      await expect.poll(() => logs.some((l) => l.msg === "poll failed; polling again after the interval"), { timeout: 5_000 }).toBe(true);
      expect(await row(db.pool, job.id)).toMatchObject({ status: "processing", attempts: 1 });
      await supervisor.stop();
      expect(await row(db.pool, job.id)).toMatchObject({ status: "pending", attempts: 0, claim_token: null });
      expect(logs.find((l) => /^a claim's reply never arrived: gave back 1 job/.test(l.msg))).toMatchObject({ level: 40, jobs: [job.id] });
    } finally {
      await end();
    }
  });

  it("leaves them to the sweep when the stop is forced: a forced stop makes no statement it can skip", async () => {
    const { pool, end } = lostFirstClaim();
    try {
      const task = defineTask({ name: "edge-lost-claim-force", leaseMs: 60_000, handler: async () => "ok" });
      const job = await enqueueJob(db.pool, { type: "edge-lost-claim-force" });
      const { supervisor, logs } = await startWorker({ pool, tasks: [task], listen: false, pollIntervalMs: 60_000 });
      await expect.poll(() => logs.some((l) => l.msg === "poll failed; polling again after the interval"), { timeout: 5_000 }).toBe(true);
      supervisor.force();
      await supervisor.stop();
      expect(await row(db.pool, job.id)).toMatchObject({ status: "processing", attempts: 1 });
    } finally {
      await end();
    }
  });

  it("gives back, unrun and uncharged, the jobs of a claim whose reply came too late", async () => {
    // The first claim commits on the server, but its reply reaches the worker after the claim's
    // bound: the worker never runs those jobs under that claim.
    const { pool, end } = lateFirstClaim(1_500);
    try {
      const runs: string[] = [];
      const task = defineTask({ name: "edge-late-claim", leaseMs: 60_000, handler: async (_p, { job }) => void runs.push(job.id) });
      const job = await enqueueJob(db.pool, { type: "edge-late-claim", maxAttempts: 1 });
      const { outcomes, logs } = await startWorker({ pool, tasks: [task], statementTimeoutMs: 500 });
      await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 10_000 }).toMatchObject({ outcome: "completed" });
      expect(logs.find((l) => /^a claim's reply never arrived: gave back 1 job/.test(l.msg))).toMatchObject({ level: 40, jobs: [job.id] });
      // Run once, in its one attempt: the lost claim was not charged.
      expect(runs).toEqual([job.id]);
      expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 1 });
    } finally {
      await end();
    }
  });

  it("never starts a handler on a claim that came back after its lease could be proven: the job goes back uncharged", async () => {
    // The first claim's reply arrives after the worker's own deadline for its lease (a fifth of
    // 500 ms before it runs out), though within the statement's bound.
    const { pool, end } = lateFirstClaim(600);
    try {
      const starts: number[] = [];
      const task = defineTask({ name: "edge-late-start", leaseMs: 500, handler: async (_p, { job }) => void starts.push(job.attempt) });
      const job = await enqueueJob(db.pool, { type: "edge-late-start", maxAttempts: 1 });
      // No sweep after the first (at start): nobody else takes the job while its claim is late.
      const { outcomes } = await startWorker({ pool, tasks: [task], statementTimeoutMs: 5_000, sweepIntervalMs: 60_000 });
      await expect.poll(() => outcomes.filter((o) => o.id === job.id).map((o) => o.outcome), { timeout: 10_000 }).toEqual(["released", "completed"]);
      expect(starts).toEqual([1]);
      expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 1 });
    } finally {
      await end();
    }
  });

  it("cancels only its own statements when it stops: others on a shared pool go on", async () => {
    const pool = new pg.Pool({ connectionString: db.url });
    try {
      const task = defineTask({ name: "edge-shared", handler: async () => undefined });
      const { supervisor } = await startWorker({ pool, tasks: [task] });
      // The application's own statement on the same pool, in flight while the worker stops.
      const theirs = runStatement(pool, { text: "SELECT pg_sleep(0.5) AS slept" });
      await sleep(50);
      await supervisor.stop();
      expect((await theirs).rows).toEqual([{ slept: "" }]);
    } finally {
      await pool.end();
    }
  });

  it("cancels its own statements still in flight when it stops, on a caller's pool too", async () => {
    const pool = new pg.Pool({ connectionString: `${db.url}?application_name=edge-own-cancel` });
    const blocker = await db.connect();
    try {
      const task = defineTask({ name: "edge-own-cancel", leaseMs: 400, timeoutMs: 60_000, handler: (_p, { signal }) => new Promise((_r, reject) => signal.addEventListener("abort", () => reject(new Error("stopped")))) });
      await enqueueJob(db.pool, { type: "edge-own-cancel" });
      const { supervisor } = await startWorker({ pool, tasks: [task], drainTimeoutMs: 0, statementTimeoutMs: 60_000 });
      await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(1);
      // Every UPDATE of the table now waits: the renewal (every 100 ms) gets stuck behind it.
      await blocker.query("BEGIN");
      await blocker.query("LOCK TABLE picket.jobs IN SHARE MODE");
      const stuck = "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'edge-own-cancel' AND state = 'active' AND wait_event_type = 'Lock'";
      await expect.poll(async () => (await db.pool.query(stuck)).rows[0].n, { timeout: 5_000 }).toBeGreaterThan(0);
      supervisor.force();
      await supervisor.stop();
      // Cancelled on the server: nothing of the worker's still waits, though the lock is still held.
      await expect.poll(async () => (await db.pool.query(stuck)).rows[0].n, { timeout: 1_000 }).toBe(0);
    } finally {
      await blocker.query("COMMIT").catch(() => undefined);
      await pool.end();
    }
  });

  it("keeps a job going when its progress cannot be written, and says so", async () => {
    await db.pool.query(`
      CREATE FUNCTION picket.refuse_progress() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'progress refused by test'; END $$;
      CREATE TRIGGER refuse_progress BEFORE UPDATE ON picket.jobs
        FOR EACH ROW WHEN (NEW.progress IS NOT NULL AND NEW.type = 'edge-progress-fail') EXECUTE FUNCTION picket.refuse_progress();`);
    const task = defineTask({
      name: "edge-progress-fail",
      handler: async (_p, { reportProgress }) => {
        await reportProgress({ step: 1 });
        return "done anyway";
      },
    });
    const job = await enqueueJob(db.pool, { type: "edge-progress-fail" });
    const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
    expect(logs.find((l) => l.msg === "progress write failed; the job goes on")).toMatchObject({ level: 40, job_id: job.id, err: expect.objectContaining({ message: "progress refused by test" }) });
  });

  it("logs the health server's start at debug under component health, and not each request", async () => {
    const task = defineTask({ name: "edge-health-logs", handler: async () => undefined });
    const { logs, supervisor } = await startWorker({ connectionString: db.url, tasks: [task], health: { port: 0, host: "127.0.0.1" } });
    await expect.poll(() => logs.filter((l) => l.component === "health").length, { timeout: 5_000 }).toBeGreaterThan(0);
    expect(logs.filter((l) => l.component === "health").every((l) => l.level === 20)).toBe(true);
    const started = logs.find((l) => l.component === "health")!;
    const port = Number(/:(\d+)/.exec(String(started.msg))?.[1]);
    expect(port).toBeGreaterThan(0);
    const count = logs.filter((l) => l.component === "health").length;
    for (let i = 0; i < 3; i++) expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(200);
    expect(logs.filter((l) => l.component === "health")).toHaveLength(count);
    await supervisor.stop();
  });

  it("renders a Standard Schema's issues with their paths, and an Effect Schema's failure message", async () => {
    const validator: StandardSchema = {
      "~standard": {
        version: 1,
        vendor: "test",
        validate: () => ({ issues: [{ message: "must be text", path: [{ key: "user" }, "name"] }, { message: "too many keys" }, { message: "odd", path: [] }] }),
      },
    };
    const task = defineTask({ name: "edge-std", schema: validator, handler: async () => undefined });
    await expect(checkPayload(task, {})).rejects.toThrow(new Error("must be text at user.name; too many keys; odd"));
    const ok = defineTask({ name: "edge-std-ok", schema: { "~standard": { version: 1, vendor: "t", validate: (v: unknown) => ({ value: v }) } }, handler: async () => undefined });
    await expect(checkPayload(ok, { a: 1 })).resolves.toBeUndefined();
    const { Schema } = await import("effect");
    const effectTask = defineTask({ name: "edge-effect-schema", schema: Schema.Struct({ n: Schema.Number }), handler: async () => undefined });
    await expect(checkPayload(effectTask as never, { n: "x" })).rejects.toThrow(/Expected number/);
  });

  it("opens a pool of ten connections by default, or the size asked for", async () => {
    const pool = await openPool({ connectionString: db.url });
    const small = await openPool({ connectionString: db.url, max: 3 });
    try {
      expect(pool.options.max).toBe(10);
      expect(small.options.max).toBe(3);
    } finally {
      await Promise.all([pool.end(), small.end()]);
    }
  });
});

describe("bare machines", () => {
  it("the job machine without the runtime's actors fails its handler and its write, and ends abandoned", async () => {
    const [job] = await claimed(db.pool, "bare");
    const actor = createActor(jobMachine, { input: { job: job!, hasHandler: true, hasSchema: false, timeoutMs: 5_000, slotFree: true } });
    actor.start();
    const done = await waitFor(actor, (s) => s.status === "done", { timeout: 2_000 });
    expect(done.output).toMatchObject({ outcome: "abandoned", error: { kind: "error", message: 'picket: the runtime did not provide the "runHandler" actor' } });
    expect(done.context.writeError).toBe('picket: the runtime did not provide the "writeFailure" actor');
  });

  it("the supervisor machine without the runtime's actors runs until STOP, then fails for want of pollEnded", async () => {
    const actor = createActor(supervisorMachine, { input: { drainTimeoutMs: 1_000, releaseGraceMs: 1_000 } });
    const failed = new Promise<unknown>((resolve) => actor.subscribe({ error: resolve }));
    actor.start();
    expect(actor.getSnapshot().value).toBe("running");
    actor.send({ type: "STOP" });
    expect(await failed).toEqual(new Error('picket: the runtime did not provide the "pollEnded" actor'));
    expect(actor.getSnapshot().status).toBe("error");
  });
});
