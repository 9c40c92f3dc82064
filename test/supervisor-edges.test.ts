// The supervisor's edges, each pinned by what an operator or an embedding service would see: the
// health report's thresholds, what stop() leaves behind, force() during a drain, listeners, a
// fenced renewal or progress write interrupting exactly the job it names, a custom schema end to
// end, LISTEN off, a health port already taken, the inspection hook, and fairness between tasks.
import { createServer, type Server } from "node:net";
import pg from "pg";
import { afterEach, describe, expect, it, onTestFinished, vi } from "vitest";
import { claimJobs, enqueueJob, enqueueJobs, migrate } from "../src/db/index.ts";
import { PollLoop } from "../src/runtime/poll-loop.ts";
import { createSupervisor } from "../src/runtime/supervisor.ts";
import { defineTask } from "../src/runtime/task.ts";
import { interceptedPool, useTestDatabase, type Statement } from "./support/db.ts";
import { row, want } from "./support/factory.ts";
import { captureLogs, startWorker } from "./support/worker.ts";

const db = useTestDatabase();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const steal = (id: string) => db.pool.query("UPDATE picket.jobs SET claim_token = gen_random_uuid() WHERE id = $1", [id]);

afterEach(() => {
  vi.restoreAllMocks();
});

describe("the health report", () => {
  it("is healthy between polls, and unhealthy once no poll has happened for the stale threshold plus one interval", async () => {
    const task = defineTask({ name: "edge-health", handler: async () => undefined });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], pollIntervalMs: 60_000, health: { port: 0, host: "127.0.0.1", stalePollMs: 1_000 } });
    await expect.poll(() => supervisor.stats().lastPollAt, { timeout: 5_000 }).not.toBeNull();
    const last = supervisor.stats().lastPollAt!.getTime();
    expect(await supervisor.health()).toEqual({
      healthy: true,
      ready: true,
      lastPollAt: new Date(last).toISOString(),
      draining: false,
      inFlight: {},
      checks: { database: { ok: true }, poll: { ok: true }, leases: { ok: true } },
    });
    vi.spyOn(Date, "now").mockReturnValue(last + 1_000 + 60_000);
    expect(await supervisor.health()).toMatchObject({ healthy: true, checks: { poll: { ok: true } } });
    vi.spyOn(Date, "now").mockReturnValue(last + 1_000 + 60_000 + 1);
    expect(await supervisor.health()).toMatchObject({
      healthy: false,
      checks: { database: { ok: true }, poll: { ok: false, reason: "no poll for 61001 ms (threshold 61000 ms)" } },
    });
    vi.restoreAllMocks();
  });

  it("reports a poll in flight for longer than the threshold as stuck, and not a moment before", async () => {
    const task = defineTask({ name: "edge-stuck", handler: async () => undefined });
    const blocker = await db.connect();
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE picket.jobs IN EXCLUSIVE MODE");
    try {
      const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], health: { port: 0, host: "127.0.0.1", stalePollMs: 60_000 } });
      const inner = supervisor as unknown as { pollStartedAt: number | null };
      await expect.poll(() => inner.pollStartedAt, { timeout: 5_000 }).not.toBeNull();
      const started = inner.pollStartedAt!;
      vi.spyOn(Date, "now").mockReturnValue(started + 60_000);
      expect(await supervisor.health()).toMatchObject({ healthy: true, checks: { poll: { ok: true } }, lastPollAt: null });
      vi.spyOn(Date, "now").mockReturnValue(started + 60_001);
      expect(await supervisor.health()).toMatchObject({
        healthy: false,
        checks: { poll: { ok: false, reason: "a poll has been running for 60001 ms (threshold 60000 ms)" } },
      });
      vi.restoreAllMocks();
    } finally {
      await blocker.query("COMMIT");
    }
  });

  it("is not stale while draining, however long ago the last poll was", async () => {
    let release: () => void = () => undefined;
    const held = defineTask({ name: "edge-drain-health", handler: () => new Promise<void>((r) => (release = r)) });
    await enqueueJob(db.pool, { type: "edge-drain-health" });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [held], health: { port: 0, host: "127.0.0.1", stalePollMs: 1 } });
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    const stopping = supervisor.stop();
    vi.spyOn(Date, "now").mockReturnValue(Date.now() + 3_600_000);
    expect(await supervisor.health()).toMatchObject({ healthy: true, ready: false, draining: true, checks: { poll: { ok: true } }, inFlight: { "edge-drain-health": 1 } });
    vi.restoreAllMocks();
    release();
    await stopping;
  });
});

describe("stopping", () => {
  it("reports the database unreachable before start(), without throwing", async () => {
    const task = defineTask({ name: "edge-health-early", handler: async () => undefined });
    const supervisor = createSupervisor({ connectionString: db.url, tasks: [task], logger: captureLogs().logger });
    expect(await supervisor.health()).toMatchObject({ healthy: false, checks: { database: { ok: false, reason: "the database does not answer: not started" } } });
    await supervisor.stop();
  });

  it("takes force() before start() without throwing, and stops without having run", async () => {
    const logs = captureLogs();
    const task = defineTask({ name: "edge-force-early", handler: async () => undefined });
    const supervisor = createSupervisor({ connectionString: db.url, tasks: [task], logger: logs.logger });
    expect(() => supervisor.force()).not.toThrow();
    await supervisor.stop();
    expect(logs.lines.map((l) => l.msg)).toEqual(["worker stopped"]);
  });

  it("force() without a stop() cancels only the poll in flight: the polls after it claim and run jobs", async () => {
    const task = defineTask({ name: "edge-force-running", handler: async () => undefined });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], pollIntervalMs: 50 });
    supervisor.force();
    await enqueueJobs(db.pool, [{ type: "edge-force-running" }, { type: "edge-force-running" }]);
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(2);
    await supervisor.stop();
  });

  it("resolves stop() on a supervisor that never started", async () => {
    const logs = captureLogs();
    const task = defineTask({ name: "edge-never", handler: async () => undefined });
    const supervisor = createSupervisor({ connectionString: db.url, tasks: [task], logger: logs.logger });
    await supervisor.stop();
    expect(logs.lines.find((l) => l.msg === "worker stopped")).toBeDefined();
  });

  it("closes its health port and its own pool's connections, and its background loops log nothing after", async () => {
    const task = defineTask({ name: "edge-close", handler: async () => undefined });
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, "127.0.0.1", () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const backends = async () =>
      (await db.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'edge-close'")).rows[0].n as number;
    const { supervisor, logs } = await startWorker({
      connectionString: `${db.url}?application_name=edge-close`,
      tasks: [task],
      sweepIntervalMs: 20,
      health: { port, host: "127.0.0.1" },
    });
    await expect.poll(async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => ({ status: 0 }))).status, { timeout: 5_000 }).toBe(200);
    expect(await backends()).toBeGreaterThan(0);
    await supervisor.stop();
    await expect(fetch(`http://127.0.0.1:${port}/health`)).rejects.toThrow();
    await expect.poll(backends, { timeout: 3_000 }).toBe(0);
    const count = logs.length;
    await sleep(200);
    expect(logs.slice(count)).toEqual([]);
  });

  it("claims nothing once stop() is called, even in a poll that has just begun", async () => {
    const late = defineTask({ name: "edge-late", handler: async () => undefined });
    let stopNow: () => void = () => undefined;
    let armed = false;
    // stop() in the same turn as the NOTIFY below starts a poll, just before it does.
    const wake = PollLoop.prototype.wake;
    const spy = vi.spyOn(PollLoop.prototype, "wake").mockImplementation(function (this: PollLoop) {
      if (armed) {
        armed = false;
        stopNow();
      }
      wake.call(this);
    });
    onTestFinished(() => spy.mockRestore());
    const { supervisor, outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [late], pollIntervalMs: 60_000 });
    await expect.poll(() => logs.some((l) => l.msg === "listening for new jobs"), { timeout: 5_000 }).toBe(true);
    // And the first poll is over: under load it could still be in flight, and its claim could
    // read the table after the job below was committed and run it before any STOP.
    await expect.poll(() => supervisor.stats().lastPollAt, { timeout: 5_000 }).not.toBeNull();
    let stopped: Promise<void> | undefined;
    stopNow = () => void (stopped = supervisor.stop());
    armed = true;
    const job = await enqueueJob(db.pool, { type: "edge-late" });
    await expect.poll(() => stopped !== undefined, { timeout: 5_000 }).toBe(true);
    await stopped;
    expect(outcomes).toEqual([]);
    expect(await row(db.pool, job.id)).toMatchObject({ status: "pending", attempts: 0 });
  });

  it("force() after the drain began interrupts and releases at once", async () => {
    const held = defineTask({ name: "edge-force", handler: () => new Promise(() => undefined) });
    const job = await enqueueJob(db.pool, { type: "edge-force" });
    const { supervisor, outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [held], drainTimeoutMs: 60_000 });
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    const stopping = supervisor.stop();
    await expect.poll(() => logs.some((l) => l.msg.startsWith("draining")), { timeout: 5_000 }).toBe(true);
    const forcedAt = Date.now();
    supervisor.force();
    await stopping;
    expect(Date.now() - forcedAt).toBeLessThan(5_000);
    expect(outcomes).toEqual([expect.objectContaining({ id: job.id, outcome: "released" })]);
  });
});

describe("the health report's database check", () => {
  it("asks a connection of its own, not the worker's pool: a pool with no connection free does not make the worker unhealthy", async () => {
    const task = defineTask({ name: "edge-dbcheck", handler: async () => undefined });
    // A caller's pool of one connection, held by the test: every statement of the worker's waits.
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const { supervisor } = await startWorker({ pool, tasks: [task], statementTimeoutMs: 60_000 });
      const held = await pool.connect();
      try {
        expect(await supervisor.health()).toMatchObject({ healthy: true, checks: { database: { ok: true } } });
      } finally {
        held.release();
      }
      await supervisor.stop();
    } finally {
      await pool.end();
    }
  });

});

describe("listeners", () => {
  it("hears each outcome with its error text until unsubscribed, and logs a listener that throws", async () => {
    const failing = defineTask({ name: "edge-listen", handler: async (payload: { fail: boolean }) => {
      if (payload.fail) throw new Error("boom");
      return "ok";
    } });
    const { supervisor, logs } = await startWorker({ connectionString: db.url, tasks: [failing] });
    const heard: Array<{ id: string; outcome: string; error: string | null }> = [];
    const unsubscribe = supervisor.onJobFinished(({ job, outcome, error }) => heard.push({ id: job.id, outcome, error }));
    supervisor.onJobFinished(() => {
      throw new Error("listener bug");
    });
    const bad = await enqueueJob(db.pool, { type: "edge-listen", payload: { fail: true }, maxAttempts: 1 });
    await expect.poll(() => heard.length, { timeout: 5_000 }).toBe(1);
    expect(heard[0]).toEqual({ id: bad.id, outcome: "dead", error: "error: boom" });
    expect(logs.find((l) => l.msg === "an onJobFinished listener threw; ignored")).toMatchObject({ level: 50, job_id: bad.id, err: { message: "listener bug" } });
    unsubscribe();
    const good = await enqueueJob(db.pool, { type: "edge-listen", payload: { fail: false } });
    await expect.poll(async () => (await row(db.pool, good.id)).status, { timeout: 5_000 }).toBe("completed");
    await sleep(50);
    expect(heard).toHaveLength(1);
  });
});

describe("lost claims interrupt exactly the job they name", () => {
  it("a fenced renewal interrupts a running handler, logs the lost claim, and writes nothing", async () => {
    let aborted = false;
    // A lease long enough that a loaded machine renews it in time: only the steal below ends the claim.
    const long = defineTask({
      name: "edge-renew",
      leaseMs: 1_500,
      handler: (_payload, { signal }) =>
        new Promise((_, reject) =>
          signal.addEventListener("abort", () => {
            aborted = true;
            reject(new Error("interrupted"));
          }),
        ),
    });
    const job = await enqueueJob(db.pool, { type: "edge-renew" });
    const { outcomes, logs, supervisor } = await startWorker({ connectionString: db.url, tasks: [long] });
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    const { claim_token: token } = await row(db.pool, job.id);
    await steal(job.id);
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "fenced" });
    expect(aborted).toBe(true);
    expect(logs.find((l) => String(l.msg).startsWith("lease renewal fenced"))).toMatchObject({
      level: 40,
      job_id: job.id,
      task: "edge-renew",
      claim_token: token,
      msg: `lease renewal fenced: job ${job.id} (claim ${token}) was reclaimed; interrupting its handler`,
    });
    expect(await row(db.pool, job.id)).toMatchObject({ status: "processing", attempts: 1 });
  });

  it("a fenced renewal interrupts a job still checking its payload, before its handler runs", async () => {
    let ran = false;
    let validating: () => void = () => undefined;
    const isValidating = new Promise<void>((resolve) => (validating = resolve));
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    // A validator that answers only when the test is done: the claim is lost while it works, and
    // only the fenced renewal can end the job (a validator that answered after a fixed time raced
    // the renewal on a loaded machine).
    const schema = {
      "~standard": {
        version: 1 as const,
        vendor: "test",
        validate: (value: unknown) => (validating(), released.then(() => ({ value }))),
      },
    };
    // Renewed every half second or so: often enough to notice the loss, not so often that a loaded
    // machine misses a renewal before the claim is taken.
    const task = defineTask({ name: "edge-renew-check", leaseMs: 1_500, schema, handler: async () => void (ran = true) });
    const job = await enqueueJob(db.pool, { type: "edge-renew-check" });
    const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    try {
      await isValidating;
      // Another claim with a long lease: the sweep never hands the job back to this worker.
      await db.pool.query("UPDATE picket.jobs SET claim_token = gen_random_uuid(), lock_until = now() + interval '1 hour' WHERE id = $1", [job.id]);
      await expect.poll(() => logs.find((l) => String(l.msg).startsWith("lease renewal fenced")), { timeout: 15_000 }).toMatchObject({ job_id: job.id });
      // Ended by the fenced renewal itself (no error), not later by the lease running out unrenewed.
      await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 15_000 }).toMatchObject({ outcome: "fenced", error: null });
      expect(ran).toBe(false);
    } finally {
      release();
    }
  });

  it("a fenced progress write interrupts its own job, and the job beside it completes", async () => {
    const gates = new Map<number, () => void>();
    const task = defineTask({
      name: "edge-progress",
      handler: async (payload: { n: number }, { reportProgress, signal }) => {
        await new Promise<void>((resolve) => gates.set(payload.n, resolve));
        await reportProgress({ n: payload.n });
        signal.throwIfAborted();
        return payload.n;
      },
    });
    const [a, b] = await enqueueJobs(db.pool, [{ type: "edge-progress", payload: { n: 1 } }, { type: "edge-progress", payload: { n: 2 } }]);
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => gates.size, { timeout: 5_000 }).toBe(2);
    await steal(a!.id);
    gates.get(1)!();
    await expect.poll(() => outcomes.find((o) => o.id === a!.id), { timeout: 5_000 }).toMatchObject({ outcome: "fenced" });
    gates.get(2)!();
    await expect.poll(() => outcomes.find((o) => o.id === b!.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
  });
});

describe("background failures are logged by name", () => {
  // A caller's pool whose statements of one kind fail: the loop that runs them must say which it is.
  const failing = (fails: (statement: Statement) => boolean) =>
    interceptedPool(db.url, (statement, forward) => (fails(statement) ? Promise.reject(new Error("refused by test")) : forward()));

  it("a failing lease renewal", async () => {
    const { pool, end } = failing(({ name }) => name.startsWith("picket_renew"));
    try {
      const task = defineTask({ name: "edge-renew-fails", leaseMs: 300, handler: () => sleep(400) });
      await enqueueJob(db.pool, { type: "edge-renew-fails" });
      const { logs, supervisor } = await startWorker({ pool, tasks: [task] });
      await expect.poll(() => logs.find((l) => l.loop === "lease renewal"), { timeout: 5_000 }).toMatchObject({
        level: 50,
        msg: "lease renewal failed; it will run again",
        err: { type: "Error", message: "refused by test", stack: expect.stringContaining("refused by test") },
      });
      await supervisor.stop(); // before its pool ends: the job's completion still needs it
    } finally {
      await end();
    }
  });

  it("a failing retention run", async () => {
    const { pool, end } = failing(({ text }) => text.includes("DELETE FROM"));
    try {
      const task = defineTask({ name: "edge-retention-fails", handler: async () => undefined });
      const { logs, supervisor } = await startWorker({ pool, tasks: [task], retention: { olderThanMs: 0, intervalMs: 60_000 } });
      await expect.poll(() => logs.find((l) => l.loop === "retention"), { timeout: 5_000 }).toMatchObject({
        level: 50,
        msg: "retention failed; it will run again",
        err: { type: "Error", message: "refused by test", stack: expect.stringContaining("refused by test") },
      });
      await supervisor.stop();
    } finally {
      await end();
    }
  });

  it("an idle connection of the worker's own pool that the server closes", async () => {
    const task = defineTask({ name: "edge-idle", handler: async () => undefined });
    // Polls a minute apart and no LISTEN: the pool's connections sit idle between statements.
    const { supervisor, logs } = await startWorker({ connectionString: `${db.url}?application_name=edge-idle`, tasks: [task], pollIntervalMs: 60_000, listen: false });
    await expect.poll(() => supervisor.stats().lastPollAt, { timeout: 5_000 }).not.toBeNull();
    const idleLog = () => logs.find((l) => l.msg === "idle database connection failed; the pool replaces it");
    await expect
      .poll(
        async () => {
          // A connection caught mid-statement (a renewal, the sweep) fails that statement instead: try again.
          await db.pool.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'edge-idle' AND state = 'idle'");
          return idleLog();
        },
        { timeout: 5_000 },
      )
      .toBeDefined();
    expect(idleLog()).toMatchObject({
      level: 40,
      err: expect.objectContaining({ message: expect.stringContaining("terminat") }),
    });
  });
});

describe("configuration reaching the runtime", () => {
  it("runs in its own schema end to end when asked to migrate: claim, renewal and sweep", async () => {
    const schema = "edge_schema";
    // Renewed every 375 ms: two renewals in this schema while the handler runs, and a lease long
    // enough that a loaded machine renews it in time.
    const slow = defineTask({ name: "edge-slow", leaseMs: 1_500, handler: async () => {
      await sleep(1_000);
      return "slow";
    } });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [slow], schema, migrate: true });
    // The worker created the schema itself (the test's own migrate below must find nothing to do).
    expect((await db.pool.query("SELECT to_regclass('edge_schema.jobs') IS NOT NULL AS made")).rows[0].made).toBe(true);
    await migrate(db.pool, { schema });
    const job = await enqueueJob(db.pool, { type: "edge-slow" }, { schema });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 10_000 }).toMatchObject({ outcome: "completed" });
    // A claim lost by another worker in this schema is swept back and run.
    await supervisor.stop();
    await enqueueJob(db.pool, { type: "edge-slow" }, { schema });
    const [lost] = await claimJobs(db.pool, "gone", [want("edge-slow", { leaseMs: 1 })], { schema });
    const second = await startWorker({ connectionString: db.url, tasks: [slow], schema });
    await expect.poll(() => second.outcomes.find((o) => o.id === lost!.id), { timeout: 10_000 }).toMatchObject({ outcome: "completed" });
  });

  it("runs retention in its own schema", async () => {
    const schema = "edge_retention";
    const task = defineTask({ name: "edge-ret", handler: async () => undefined });
    await migrate(db.pool, { schema });
    const old = await enqueueJob(db.pool, { type: "edge-ret" }, { schema });
    await db.pool.query(`UPDATE ${schema}.jobs SET status = 'completed', finished_at = now() - interval '2 days' WHERE id = $1`, [old.id]);
    const { logs } = await startWorker({ connectionString: db.url, tasks: [task], schema, retention: { olderThanMs: 86_400_000, intervalMs: 60_000 } });
    await expect.poll(() => logs.find((l) => l.msg === "retention deleted old finished jobs"), { timeout: 5_000 }).toMatchObject({ deleted: 1 });
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM ${schema}.jobs`)).rows[0].n).toBe(0);
  });

  it("listens over listenConnectionString beside a caller's pool (a pool behind PgBouncer cannot LISTEN)", async () => {
    const pool = new pg.Pool({ connectionString: `${db.url}?application_name=edge-pooled` });
    try {
      const task = defineTask({ name: "edge-listen-direct", handler: async () => "ok" });
      const { supervisor, logs } = await startWorker({ pool, listenConnectionString: `${db.url}?application_name=edge-direct`, tasks: [task] });
      await expect.poll(() => logs.some((l) => l.msg === "listening for new jobs"), { timeout: 5_000 }).toBe(true);
      const { rows } = await db.pool.query("SELECT application_name FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND application_name LIKE 'edge-%'");
      expect(rows).toEqual([{ application_name: "edge-direct" }]);
      await supervisor.stop();
    } finally {
      await pool.end();
    }
  });

  it("starts no health server unless asked, and logs no error on a quiet run", async () => {
    const task = defineTask({ name: "edge-nohealth", handler: async () => undefined });
    // Its own schema: no claim another test left to expire can be swept here.
    const { supervisor, logs } = await startWorker({ connectionString: db.url, tasks: [task], schema: "edge_quiet", migrate: true });
    await expect.poll(() => supervisor.stats().lastPollAt, { timeout: 5_000 }).not.toBeNull();
    await sleep(100);
    await supervisor.stop();
    // A health server says where it listens (component "health"); none may have started.
    // Nor does a sweep that found nothing say so.
    expect(logs.filter((l) => l.level >= 50 || l.component === "health" || l.msg === "sweep reclaimed jobs whose lease expired")).toEqual([]);
  });

  it("does not migrate unless asked", async () => {
    const task = defineTask({ name: "edge-nomigrate", handler: async () => undefined });
    // start() looks for the tables, finds none, and says so once (it never polls a missing table).
    await expect(startWorker({ connectionString: db.url, tasks: [task], schema: "edge_unmigrated" })).rejects.toThrow(/schema "edge_unmigrated" is not set up/);
    const { rows } = await db.pool.query("SELECT 1 FROM information_schema.schemata WHERE schema_name = 'edge_unmigrated'");
    expect(rows).toEqual([]);
  });

  it("with LISTEN off, waits for the poll interval", async () => {
    const task = defineTask({ name: "edge-nolisten", handler: async () => undefined });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], listen: false, pollIntervalMs: 60_000 });
    await expect.poll(() => supervisor.stats().lastPollAt, { timeout: 5_000 }).not.toBeNull();
    await sleep(300);
    const job = await enqueueJob(db.pool, { type: "edge-nolisten" });
    await sleep(500);
    expect(outcomes.find((o) => o.id === job.id)).toBeUndefined();
    expect(await row(db.pool, job.id)).toMatchObject({ status: "pending" });
  });

  it("refuses to start when its health port is taken, naming the port, and leaves nothing running", async () => {
    const taken: Server = await new Promise((resolve) => {
      const s = createServer().listen(0, "127.0.0.1", () => resolve(s));
    });
    try {
      const port = (taken.address() as { port: number }).port;
      const task = defineTask({ name: "edge-port", handler: async () => "ok" });
      const logs = captureLogs();
      const supervisor = createSupervisor({ connectionString: db.url, tasks: [task], health: { port, host: "127.0.0.1" }, logger: logs.logger });
      await expect(supervisor.start()).rejects.toThrow(
        `picket: the health server cannot listen on 127.0.0.1:${port} (EADDRINUSE): another process holds that port: choose another health port, or stop that process.`,
      );
      expect(logs.lines.map((l) => l.msg)).not.toContain("worker started");
      // Nothing was claimed, and stop() after the failed start has nothing to drain.
      const job = await enqueueJob(db.pool, { type: "edge-port" });
      await supervisor.stop();
      expect(await row(db.pool, job.id)).toMatchObject({ status: "pending", attempts: 0 });
    } finally {
      await new Promise((r) => taken.close(r));
    }
  });

  it("gives the handler its job, its idempotency key and a key per step", async () => {
    const task = defineTask({
      name: "edge-keys",
      handler: async (_payload, ctx) => ({ job: ctx.job, key: ctx.idempotencyKey, step: ctx.stepKey("charge") }),
    });
    const job = await enqueueJob(db.pool, { type: "edge-keys", maxAttempts: 3 });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
    expect((await row(db.pool, job.id)).result).toEqual({
      job: { id: job.id, task: "edge-keys", attempt: 1, maxAttempts: 3, enqueuedAt: job.createdAt.toISOString() },
      key: `picket:picket:${job.id}`,
      step: `picket:picket:${job.id}:charge`,
    });
  });

  it("hands the inspection hook to every job machine", async () => {
    const seen = new Set<string>();
    const task = defineTask({ name: "edge-inspect", handler: async () => "ok" });
    const job = await enqueueJob(db.pool, { type: "edge-inspect" });
    const { outcomes } = await startWorker({
      connectionString: db.url,
      tasks: [task],
      inspect: (event) => {
        const e = event as { type: string; snapshot?: { value?: unknown }; actorRef?: { logic?: { id?: string } } };
        if (e.type === "@xstate.snapshot" && e.actorRef?.logic?.id === "job") seen.add(String(e.snapshot?.value));
      },
    });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
    expect([...seen]).toEqual(expect.arrayContaining(["running", "completing", "done"]));
  });

  it("takes turns between tasks when one slot is all there is", async () => {
    const order: string[] = [];
    // Handlers that take a moment, so that a poll also finds no free slot now and then: such a
    // poll offers nothing and must not move the turn on.
    const a = defineTask({ name: "edge-a", handler: async () => void (order.push("a"), await sleep(30)) });
    const b = defineTask({ name: "edge-b", handler: async () => void (order.push("b"), await sleep(30)) });
    await enqueueJobs(db.pool, [...Array.from({ length: 3 }, () => ({ type: "edge-a" })), ...Array.from({ length: 3 }, () => ({ type: "edge-b" }))]);
    // Without the buffer: a job claimed ahead in one turn would run in the next (on a loaded
    // machine a claim's round trip can be long next to 30 ms handlers).
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [a, b], concurrency: 1, prefetch: 0 });
    await expect.poll(() => outcomes.length, { timeout: 5_000 }).toBe(6);
    expect(order).toEqual(["a", "b", "a", "b", "a", "b"]);
  });
});

describe("a job's logger", () => {
  it("is made only for a job whose handler logs: a held job carries no pino child of its own", async () => {
    const { lines, logger } = captureLogs();
    const jobChildren: unknown[] = [];
    const child = logger.child.bind(logger);
    logger.child = ((bindings, options) => {
      if ("job_id" in bindings) jobChildren.push(bindings.job_id);
      return child(bindings, options);
    }) as typeof logger.child;
    const quiet = defineTask({ name: "log-quiet", handler: async () => "done" });
    const chatty = defineTask({ name: "log-chatty", handler: async (_payload, { logger: log, job }) => log.info({ n: job.id }, "working") });
    const quietJobs = await enqueueJobs(db.pool, Array.from({ length: 3 }, () => ({ type: "log-quiet" })));
    const chattyJobs = await enqueueJobs(db.pool, Array.from({ length: 2 }, () => ({ type: "log-chatty" })));
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [quiet, chatty], logger });
    await expect.poll(() => outcomes.filter((o) => o.outcome === "completed").length, { timeout: 5_000 }).toBe(5);
    expect(jobChildren.sort()).toEqual(chattyJobs.map((job) => job.id).sort());
    expect(lines.filter((line) => line.msg === "working").map((line) => line.job_id)).toEqual(expect.arrayContaining(chattyJobs.map((job) => job.id)));
    expect(quietJobs.every((job) => !jobChildren.includes(job.id))).toBe(true);
  });
});
