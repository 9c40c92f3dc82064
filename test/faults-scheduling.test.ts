// The scheduling features (durable steps, cancel of a running job, serial queues and cluster-wide
// limits, dedupe "replace", cron schedules) under the faults an operator causes: a real PgBouncer in
// transaction mode in front of the server, the worker's connections killed (pg_terminate_backend)
// between steps and while a step write waits on the server, and the job's row locked by another
// session while a step is recorded or a cancel is asked for. Nothing here is faked: every
// statement runs on the file's own database, through PgBouncer where the test says so.
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cancelJob, enqueueJob, enqueueJobs, jobSteps, openPool, StatementTimeoutError } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { interceptedPool, useTestDatabase, withApplicationName } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { startPgBouncer, type PgBouncer } from "./support/pgbouncer.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();
let bouncer: PgBouncer;
/** picket's own pool through PgBouncer, as an application behind one would open it. */
let bounced: pg.Pool;
const noPrepare = { preparedStatements: false } as const;

beforeAll(async () => {
  bouncer = await startPgBouncer(db.url);
  bounced = await openPool({ connectionString: bouncer.url, transactionPooling: true, max: 4 });
});

afterAll(async () => {
  await bounced?.end();
  await bouncer?.stop();
});

/** A promise and the function that settles it: the handlers and the test hand each other turns. */
const signal = <T = void>() => {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
};

/** A count read on a direct connection (never through the path under test). */
const count = async (sql: string, values: unknown[] = []): Promise<number> => (await db.pool.query(sql, values)).rows[0].n;

/** The steps recorded for a job as [name, result, attempt]. */
const stepsOf = async (id: string) => (await jobSteps(db.pool, id)).map((s) => [s.name, s.result, s.attempt]);

describe("through PgBouncer in transaction mode", () => {
  /** A worker's options through PgBouncer, LISTEN on a direct connection (as picket's README says to run it). */
  const through = <T extends object>(extra: T) => ({ connectionString: bouncer.url, transactionPooling: true, listenConnectionString: db.url, ...extra });

  it("a job's durable steps are recorded once, and its retry gets them back without running them again", async () => {
    const ran: string[] = [];
    const task = defineTask({
      name: "pgb-steps",
      maxAttempts: 2,
      backoff: { baseMs: 10, maxMs: 10 },
      handler: async (_p, { step, job }) => {
        const a = await step("a", () => (ran.push(`a@${job.attempt}`), { n: 1 }));
        const b = await step("b", () => (ran.push(`b@${job.attempt}`), a.n + 1));
        if (job.attempt === 1) throw new Error("first attempt fails after its steps");
        return b * 10;
      },
    });
    const { supervisor, outcomes } = await startWorker(through({ tasks: [task] }));
    const job = await enqueueJob(bounced, { type: "pgb-steps" }, noPrepare);
    await expect.poll(() => outcomes.map((o) => o.outcome), { timeout: 15_000 }).toEqual(["retried", "completed"]);
    await supervisor.stop();
    expect(ran).toEqual(["a@1", "b@1"]);
    expect(await stepsOf(job.id)).toEqual([
      ["a", { n: 1 }, 1],
      ["b", 2, 1],
    ]);
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 2, result: 20 });
  });

  it("two supervisors never run more than a serial queue's one job, nor more than a task's clusterConcurrency", { timeout: 60_000 }, async () => {
    const live = { queued: 0, limited: 0 };
    const peak = { queued: 0, limited: 0 };
    // Each handler stays long enough for the other supervisor's claims to come while it runs.
    const hold = (kind: keyof typeof live) => async () => {
      live[kind]++;
      peak[kind] = Math.max(peak[kind], live[kind]);
      await new Promise((r) => setTimeout(r, 30));
      live[kind]--;
    };
    const queued = defineTask({ name: "pgb-queued", handler: hold("queued") });
    // Two a worker at most, three in the cluster: three at once can only be both workers' jobs, and
    // without the cluster's limit they would reach four. (A worker may keep a limited task's slots
    // to itself while it has free ones: a limit of two with no per-worker cap could leave the other
    // worker none, and prove nothing across the two.)
    const limited = defineTask({ name: "pgb-limited", concurrency: 2, clusterConcurrency: 3, handler: hold("limited") });
    const options = through({ tasks: [queued, limited], concurrency: 8, pollIntervalMs: 20 });
    const a = await startWorker(options);
    const b = await startWorker(options);
    await enqueueJobs(
      bounced,
      [
        ...Array.from({ length: 40 }, (_, i) => ({ type: "pgb-queued", queue: "pgb-serial", payload: { i } })),
        ...Array.from({ length: 60 }, (_, i) => ({ type: "pgb-limited", payload: { i } })),
      ],
      noPrepare,
    );
    await expect.poll(() => a.outcomes.length + b.outcomes.length, { timeout: 40_000, interval: 100 }).toBe(100);
    await Promise.all([a.supervisor.stop(), b.supervisor.stop()]);
    expect(peak).toEqual({ queued: 1, limited: 3 });
    // Both supervisors claimed limited work: the limit held across them, not within one.
    for (const worker of [a, b]) expect(worker.outcomes.some((o) => o.type === "pgb-limited")).toBe(true);
    expect([...a.outcomes, ...b.outcomes].filter((o) => o.outcome !== "completed")).toEqual([]);
  });

  for (const how of ["the NOTIFY on the direct LISTEN connection", "lease renewal alone (no LISTEN)"] as const) {
    it(`a cancel of a running job reaches its worker through ${how}, and the outcome is cancelled`, async () => {
      const started = signal<string>();
      let abortedAt = 0;
      const byRenewal = how.startsWith("lease");
      const name = byRenewal ? "pgb-cancel-renew" : "pgb-cancel-listen";
      const task = defineTask({
        name,
        // With LISTEN the lease is long (renewed every 15 s): only the NOTIFY can stop it in time.
        leaseMs: byRenewal ? 2_000 : 60_000,
        timeoutMs: 60_000,
        handler: (_p, { job, signal: aborted }) =>
          new Promise((_resolve, reject) => {
            aborted.addEventListener("abort", () => ((abortedAt = performance.now()), reject(new Error("interrupted"))));
            started.resolve(job.id);
          }),
      });
      const options = byRenewal
        ? { connectionString: bouncer.url, transactionPooling: true, pollIntervalMs: 200, tasks: [task] }
        : through({ tasks: [task] });
      const { supervisor, outcomes, logs } = await startWorker(options);
      // LISTEN is set up after start() returns: a cancel told before it would be heard at the next
      // renewal only (15 s away). Logged once the probe sent through PgBouncer came back on it.
      if (!byRenewal) await expect.poll(() => logs.some((l) => l.msg === "listening for new jobs"), { timeout: 10_000 }).toBe(true);
      const job = await enqueueJob(bounced, { type: name }, noPrepare);
      expect(await started.promise).toBe(job.id);
      const cancelledAt = performance.now();
      expect(await cancelJob(bounced, job.id, noPrepare)).toMatchObject({ outcome: "applied", job: { status: "cancelled" } });
      await expect.poll(() => outcomes.map((o) => [o.id, o.outcome]), { timeout: 10_000 }).toEqual([[job.id, "cancelled"]]);
      // By renewal: within a renewal interval (a quarter lease) of the cancel, generously. By NOTIFY: long before the first renewal (15 s).
      expect(abortedAt - cancelledAt).toBeLessThan(byRenewal ? 1_900 : 3_000);
      await supervisor.stop();
      expect(await row(db.pool, job.id)).toMatchObject({ status: "cancelled", attempts: 1 });
    });
  }

  it("concurrent dedupe 'replace' enqueues of one key leave one live job, holding the last replacement", async () => {
    // Eight callers through PgBouncer at once: each replace is serialised on add_job's advisory
    // transaction lock, which a transaction-mode pooler must keep for the statement's transaction.
    const callers = await Promise.all(
      Array.from({ length: 8 }, (_, v) => enqueueJob(bounced, { type: "pgb-replace", key: "doc", payload: { v }, dedupe: "replace", delayMs: 60_000 }, noPrepare)),
    );
    const ids = new Set(callers.map((j) => j.id));
    expect(ids.size).toBe(1);
    const { rows } = await db.pool.query("SELECT id::text, payload FROM picket.jobs WHERE key = 'doc' AND status IN ('pending', 'processing')");
    expect(rows).toHaveLength(1);
    expect(rows[0].id).toBe([...ids][0]);
    // Each caller got the job as its own replacement left it; the row holds one of them (the last to commit).
    expect(callers.map((j) => (j.payload as { v: number }).v)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect([0, 1, 2, 3, 4, 5, 6, 7]).toContain((rows[0].payload as { v: number }).v);
    expect(await count("SELECT count(*)::int AS n FROM picket.jobs WHERE key = 'doc'")).toBe(1);
  });

  it("a per-second schedule fires each tick once with two supervisors", { timeout: 60_000 }, async () => {
    const task = defineTask({ name: "pgb-tick", schedule: "* * * * * *", handler: async () => undefined });
    // Rounds every 20 ms: the two supervisors race for each tick within milliseconds.
    const options = through({ tasks: [task], schedules: { intervalMs: 20, graceMs: 30_000 } });
    const a = await startWorker({ ...options, workerId: "pgb-tick-a" });
    const b = await startWorker({ ...options, workerId: "pgb-tick-b" });
    await expect.poll(() => count("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'pgb-tick'"), { timeout: 20_000, interval: 200 }).toBeGreaterThanOrEqual(5);
    await Promise.all([a.supervisor.stop(), b.supervisor.stop()]);
    const { rows } = await db.pool.query("SELECT payload->>'scheduledAt' AS tick, count(*)::int AS jobs FROM picket.jobs WHERE type = 'pgb-tick' GROUP BY 1");
    expect(rows.length).toBeGreaterThanOrEqual(5);
    expect(rows.filter((r) => r.jobs !== 1)).toEqual([]);
    // Each tick advanced the schedule once, by one worker (its compare-and-set): a tick advanced
    // twice would make a second job as soon as the first had finished (the live key no longer holds it).
    const firedBy = new Map<string, string[]>();
    for (const [id, logs] of [["a", a.logs], ["b", b.logs]] as const) {
      for (const line of logs) if (line.msg === "schedule fired") for (const tick of line.ticks as string[]) firedBy.set(tick, [...(firedBy.get(tick) ?? []), id]);
    }
    expect(firedBy.size).toBeGreaterThanOrEqual(5);
    expect([...firedBy].filter(([, by]) => by.length !== 1)).toEqual([]);
  });
});

describe("the worker's connections killed (pg_terminate_backend)", () => {
  const killAll = async (app: string) =>
    (await db.pool.query("SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE application_name = $1", [app])).rowCount ?? 0;
  it("again and again while two workers claim a serial queue and a limited task: every job completes once, no limit exceeded", { timeout: 150_000 }, async () => {
    const app = "limited-killed";
    const live = { queued: 0, limited: 0 };
    const peak = { queued: 0, limited: 0 };
    const runs = new Map<string, number>();
    const hold = (kind: keyof typeof live) => async (_p: unknown, { job }: { job: { id: string } }) => {
      runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
      live[kind]++;
      peak[kind] = Math.max(peak[kind], live[kind]);
      await new Promise((r) => setTimeout(r, 10));
      live[kind]--;
    };
    // Leases twice as long as the kills last (15 s at most, below): the kills (every 50 ms,
    // renewals and outcome writes among their victims) must not let the sweep take a job whose
    // outcome is still being retried. That is the documented limit of a worker cut off for a whole
    // lease, not what this test is about; on a loaded machine a reconnect can take longer than the
    // gap between kills, so no statement of a worker may get through for the whole window.
    const queued = defineTask({ name: "killed-queued", leaseMs: 30_000, handler: hold("queued") });
    const limited = defineTask({ name: "killed-limited", leaseMs: 30_000, clusterConcurrency: 2, handler: hold("limited") });
    const options = { connectionString: withApplicationName(db.url, app), tasks: [queued, limited], concurrency: 8, pollIntervalMs: 20 };
    const a = await startWorker(options);
    const b = await startWorker(options);
    const jobs = await enqueueJobs(db.pool, [
      ...Array.from({ length: 60 }, (_, i) => ({ type: "killed-queued", queue: "killed-q", payload: { i }, maxAttempts: 1 })),
      ...Array.from({ length: 60 }, (_, i) => ({ type: "killed-limited", payload: { i }, maxAttempts: 1 })),
    ]);
    const done = () => count("SELECT count(*)::int AS n FROM picket.jobs WHERE type LIKE 'killed-%' AND status = 'completed'");
    let kills = 0;
    // Kill the workers' connections every 50 ms until a third of the jobs are done, or for 15 s:
    // on a loaded machine a reconnect can take longer than the gap between kills, and the workers
    // would then never get that far.
    const killUntil = Date.now() + 15_000;
    while ((await done()) < 40 && Date.now() < killUntil) {
      kills += await killAll(app);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(kills).toBeGreaterThan(0);
    await expect.poll(done, { timeout: 60_000, interval: 200 }).toBe(120).catch(async (error: Error) => {
      // Say which jobs did not complete, in what state, and what the workers logged about them.
      const { rows } = await db.pool.query(
        "SELECT id::text, type, status, attempts, run_at, lock_until, locked_by, last_error FROM picket.jobs WHERE type LIKE 'killed-%' AND status <> 'completed'",
      );
      const about = (id: string) => [...a.logs, ...b.logs].filter((l) => JSON.stringify(l).match(new RegExp(`\\b${id}\\b`)));
      throw new Error(`${error.message}\nnot completed: ${JSON.stringify(rows.map((r) => ({ ...r, runs: runs.get(r.id), logs: about(r.id) })), null, 1)}`);
    });
    await Promise.all([a.supervisor.stop(), b.supervisor.stop()]);
    expect(peak).toEqual({ queued: 1, limited: 2 });
    // Every job's handler ran once: a write cut off with its connection was tried again, and a
    // claim whose reply was lost was not run twice (one attempt each, none charged twice).
    expect([...runs.values()].filter((n) => n !== 1)).toEqual([]);
    expect(runs.size).toBe(120);
    const { rows } = await db.pool.query("SELECT status, attempts, count(*)::int AS n FROM picket.jobs WHERE id = ANY($1::bigint[]) GROUP BY 1, 2", [jobs.map((j) => j.id)]);
    expect(rows).toEqual([{ status: "completed", attempts: 1, n: 120 }]);
  });

  it("between steps: the next step is recorded on a new connection, no step twice, the job completes", async () => {
    const app = "steps-killed-between";
    const ran: string[] = [];
    const afterA = signal();
    const goOn = signal();
    const task = defineTask({
      name: "killed-between",
      leaseMs: 5_000,
      handler: async (_p, { step }) => {
        const a = await step("a", () => (ran.push("a"), "A"));
        afterA.resolve();
        await goOn.promise;
        const b = await step("b", () => (ran.push("b"), `${a}B`));
        return b;
      },
    });
    const { supervisor, outcomes } = await startWorker({ connectionString: withApplicationName(db.url, app), tasks: [task] });
    const job = await enqueueJob(db.pool, { type: "killed-between" });
    await afterA.promise;
    expect(await killAll(app)).toBeGreaterThan(0);
    goOn.resolve();
    await expect.poll(() => outcomes.map((o) => o.outcome), { timeout: 15_000 }).toEqual(["completed"]);
    await supervisor.stop();
    expect(ran).toEqual(["a", "b"]);
    expect(await stepsOf(job.id)).toEqual([
      ["a", "A", 1],
      ["b", "AB", 1],
    ]);
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 1, result: "AB" });
  });

  it("while a step write waits on the server: the write is tried again, the step is recorded once, the job completes", async () => {
    const app = "steps-killed-in-flight";
    const ran: string[] = [];
    const afterOne = signal();
    const goOn = signal();
    const task = defineTask({
      name: "killed-in-flight",
      leaseMs: 5_000,
      handler: async (_p, { step }) => {
        const one = await step("one", () => (ran.push("one"), 1));
        afterOne.resolve();
        await goOn.promise;
        const two = await step("two", () => (ran.push("two"), one + 1));
        return two;
      },
    });
    const job = await enqueueJob(db.pool, { type: "killed-in-flight", payload: {} });
    const { supervisor, outcomes } = await startWorker({ connectionString: withApplicationName(db.url, app), tasks: [task] });
    await afterOne.promise;
    // Another session inserting the same step, uncommitted: the worker's INSERT ... ON CONFLICT
    // waits for it on the server (the write is in flight), where it is killed.
    const blocker = await db.connect();
    await blocker.query("BEGIN");
    const waiting = () =>
      count("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE '%job_steps%'", [app]);
    try {
      const token = (await row(db.pool, job.id)).claim_token;
      await blocker.query("INSERT INTO picket.job_steps (job_id, name, result, attempt, claim_token) VALUES ($1, 'two', '99', 1, $2)", [job.id, token]);
      goOn.resolve();
      await expect.poll(waiting, { timeout: 10_000 }).toBe(1);
      expect(await killAll(app)).toBeGreaterThan(0);
      // Tried again on a new connection: it waits again.
      await expect.poll(waiting, { timeout: 10_000 }).toBe(1);
    } finally {
      await blocker.query("ROLLBACK");
    }
    await expect.poll(() => outcomes.map((o) => o.outcome), { timeout: 15_000 }).toEqual(["completed"]);
    await supervisor.stop();
    expect(ran).toEqual(["one", "two"]);
    expect(await stepsOf(job.id)).toEqual([
      ["one", 1, 1],
      ["two", 2, 1],
    ]);
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 1, result: 2 });
  });
});

describe("a row locked by another session (SELECT ... FOR UPDATE in an open transaction)", () => {
  it("a step write finds the row busy and is tried again; the handler goes on once the lock is released", async () => {
    const writes = { step: 0 };
    const { pool, end } = interceptedPool(db.url, (statement, forward) => {
      if (statement.text.includes("INSERT INTO") && statement.text.includes("job_steps")) writes.step++;
      return forward();
    });
    const locked = signal();
    const started = signal<string>();
    let after = false;
    const task = defineTask({
      name: "step-vs-lock",
      leaseMs: 60_000,
      handler: async (_p, { step, job }) => {
        started.resolve(job.id);
        await locked.promise;
        const v = await step("locked-out", () => "v");
        after = true;
        return v;
      },
    });
    try {
      const { supervisor, outcomes } = await startWorker({ pool, tasks: [task] });
      const job = await enqueueJob(db.pool, { type: "step-vs-lock" });
      expect(await started.promise).toBe(job.id);
      const holder = await db.connect();
      await holder.query("BEGIN");
      await holder.query("SELECT id FROM picket.jobs WHERE id = $1 FOR UPDATE", [job.id]);
      try {
        locked.resolve();
        // Tried again and again while the lock is held: busy each time, nothing recorded.
        await expect.poll(() => writes.step, { timeout: 10_000 }).toBeGreaterThanOrEqual(3);
        expect(after).toBe(false);
        expect(await stepsOf(job.id)).toEqual([]);
      } finally {
        await holder.query("COMMIT");
      }
      await expect.poll(() => outcomes.map((o) => o.outcome), { timeout: 10_000 }).toEqual(["completed"]);
      await supervisor.stop();
      expect(after).toBe(true);
      expect(await stepsOf(job.id)).toEqual([["locked-out", "v", 1]]);
      expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", result: "v", attempts: 1 });
    } finally {
      await end();
    }
  });

  it("a schedule's row locked: its firing waits (bounded), other jobs run meanwhile, and after the lock each tick has one job", { timeout: 60_000 }, async () => {
    const ticks = defineTask({ name: "locked-tick", schedule: "* * * * * *", handler: async () => undefined });
    const plain = defineTask({ name: "beside-locked-tick", handler: async () => "ran" });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [ticks, plain], schedules: { intervalMs: 50, graceMs: 30_000 }, statementTimeoutMs: 2_000 });
    const jobsOfTicks = () => count("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'locked-tick'");
    await expect.poll(jobsOfTicks, { timeout: 10_000 }).toBeGreaterThanOrEqual(1);
    const holder = await db.connect();
    await holder.query("BEGIN");
    await holder.query("SELECT name FROM picket.schedules WHERE name = 'locked-tick' FOR UPDATE");
    try {
      // The worker's firing waits on the row on the server.
      const firing = "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%advanced AS%'";
      await expect.poll(() => count(firing), { timeout: 10_000 }).toBe(1);
      const made = await jobsOfTicks();
      // Other work goes on.
      const job = await enqueueJob(db.pool, { type: "beside-locked-tick" });
      await expect.poll(() => outcomes.filter((o) => o.id === job.id).map((o) => o.outcome), { timeout: 10_000 }).toEqual(["completed"]);
      // The wait ends at the statement bound and is tried again: never a second waiter, never a pile-up.
      await expect.poll(() => count(firing), { timeout: 10_000 }).toBe(0);
      await expect.poll(() => count(firing), { timeout: 10_000 }).toBe(1);
      expect(await jobsOfTicks()).toBe(made);
    } finally {
      await holder.query("COMMIT");
    }
    const after = await jobsOfTicks();
    await expect.poll(jobsOfTicks, { timeout: 10_000 }).toBeGreaterThanOrEqual(after + 2);
    await supervisor.stop();
    const { rows } = await db.pool.query("SELECT payload->>'scheduledAt' AS tick, count(*)::int AS jobs FROM picket.jobs WHERE type = 'locked-tick' GROUP BY 1");
    expect(rows.filter((r) => r.jobs !== 1)).toEqual([]);
  });

  it("a cancel waiting on the lock ends at the statement bound with an error that says so, takes effect once retried after the lock", async () => {
    const started = signal<string>();
    const task = defineTask({
      name: "cancel-vs-lock",
      leaseMs: 60_000,
      handler: (_p, { job, signal: aborted }) =>
        new Promise((_resolve, reject) => {
          aborted.addEventListener("abort", () => reject(new Error("interrupted")));
          started.resolve(job.id);
        }),
    });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    const job = await enqueueJob(db.pool, { type: "cancel-vs-lock" });
    expect(await started.promise).toBe(job.id);
    const holder = await db.connect();
    await holder.query("BEGIN");
    await holder.query("SELECT id FROM picket.jobs WHERE id = $1 FOR UPDATE", [job.id]);
    try {
      const at = performance.now();
      const cancel = cancelJob(db.pool, job.id, { timeoutMs: 1_000 });
      await expect(cancel).rejects.toThrow(StatementTimeoutError);
      await expect(cancel).rejects.toThrow(/did not finish within 1000 ms \(a lock held by another session/);
      expect(performance.now() - at).toBeLessThan(1_000 + 3_000);
      // Nothing of it is left waiting on the server: it cannot cancel the job behind the test's back.
      await expect
        .poll(() => count("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%WITH target AS%'"), { timeout: 3_000 })
        .toBe(0);
    } finally {
      await holder.query("COMMIT");
    }
    expect(await row(db.pool, job.id)).toMatchObject({ status: "processing" });
    expect(outcomes).toEqual([]);
    expect(await cancelJob(db.pool, job.id)).toMatchObject({ outcome: "applied" });
    await expect.poll(() => outcomes.map((o) => o.outcome), { timeout: 10_000 }).toEqual(["cancelled"]);
    await supervisor.stop();
    expect(await row(db.pool, job.id)).toMatchObject({ status: "cancelled", attempts: 1 });
  });
});
