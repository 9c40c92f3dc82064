// picket through a real PgBouncer in transaction mode (DESIGN.md, invariant 12): migrations, many
// jobs over two workers, wake-ups over a direct LISTEN connection, polling when LISTEN can only go
// through PgBouncer, and a clear refusal when transactionPooling is forgotten. PgBouncer fronts
// this file's own database; it must be installed (test/support/pgbouncer.ts says how), never skipped.
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimJobs, DatabaseUnreachableError, enqueueJob, enqueueJobs, migrate, openPool, pauseClaims, readMigrations, resumeClaims, StatementTimeoutError } from "../src/db/index.ts";
import { sendToWorkflow, startWorkflow } from "../src/db/workflows.ts";
import { createSupervisor } from "../src/runtime/supervisor.ts";
import { defineWorkflow } from "../src/workflows/definition.ts";
import { assign, setup } from "xstate";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { startPgBouncer, type PgBouncer } from "./support/pgbouncer.ts";
import { captureLogs, startWorker, type LogLine } from "./support/worker.ts";

const db = useTestDatabase();
let bouncer: PgBouncer;
/** picket's own pool through PgBouncer, as an application enqueueing behind one would open it. */
let bounced: pg.Pool;

beforeAll(async () => {
  bouncer = await startPgBouncer(db.url);
  bounced = await openPool({ connectionString: bouncer.url, transactionPooling: true, max: 4 });
});

afterAll(async () => {
  await bounced?.end();
  await bouncer?.stop();
});

const DEAF = "received no notification";
const deafWarnings = (logs: LogLine[]) => logs.filter((l) => String(l.msg).includes(DEAF));
/** Errors, and any line that names a prepared statement (a named statement lost to PgBouncer). */
const trouble = (logs: LogLine[]) => logs.filter((l) => l.level >= 50 || /prepared statement/i.test(JSON.stringify(l)));

/** The server's own defaults, read on a direct connection that sets nothing. */
const serverDefaults = async () =>
  (await db.pool.query("SELECT current_setting('statement_timeout') AS statement, current_setting('lock_timeout') AS lock, current_setting('plan_cache_mode') AS plan")).rows[0] as {
    statement: string;
    lock: string;
    plan: string;
  };

const count = async (sql: string, values: unknown[] = []): Promise<number> => (await db.pool.query(sql, values)).rows[0].n;

describe("through PgBouncer in transaction mode", () => {
  it("migrates a fresh schema, leaves no setting on PgBouncer's server connections, and the schema works", async () => {
    const schema = "pgb_migrated";
    const files = await readMigrations();
    expect((await migrate(bounced, { schema })).applied).toEqual(files.map((f) => f.name));
    expect((await migrate(bounced, { schema })).applied).toEqual([]);
    expect(await count(`SELECT count(*)::int AS n FROM ${schema}.migrations`)).toBe(files.length);

    // Every server connection PgBouncer holds, each checked out at once by a transaction of its
    // own: the migration's SET LOCAL timeouts ended with its transaction on all of them.
    const holders = await openPool({ connectionString: bouncer.url, transactionPooling: true, max: bouncer.poolSize });
    try {
      const clients = await Promise.all(Array.from({ length: bouncer.poolSize }, () => holders.connect()));
      const seen = await Promise.all(
        clients.map(async (client) => {
          await client.query("BEGIN");
          const { rows } = await client.query(
            "SELECT pg_backend_pid() AS pid, current_setting('lock_timeout') AS lock, current_setting('statement_timeout') AS statement",
          );
          return rows[0] as { pid: number; lock: string; statement: string };
        }),
      );
      await Promise.all(clients.map((client) => client.query("COMMIT").finally(() => client.release())));
      expect(new Set(seen.map((s) => s.pid)).size).toBe(bouncer.poolSize);
      const { lock, statement } = await serverDefaults();
      expect(lock).not.toBe("5min"); // the migration's own timeout (DEFAULT_MIGRATION_TIMEOUT_MS)
      expect(seen.map((s) => ({ lock: s.lock, statement: s.statement }))).toEqual(seen.map(() => ({ lock, statement })));
    } finally {
      await holders.end();
    }

    const task = defineTask({ name: "pgb-migrated", handler: async (payload: { n: number }) => payload.n * 2 });
    const { supervisor, outcomes } = await startWorker({
      connectionString: bouncer.url,
      transactionPooling: true,
      listenConnectionString: db.url,
      schema,
      tasks: [task],
    });
    const job = await enqueueJob(bounced, { type: "pgb-migrated", payload: { n: 21 } }, { schema, preparedStatements: false });
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(1);
    await supervisor.stop();
    expect(outcomes).toEqual([{ id: job.id, type: "pgb-migrated", outcome: "completed", error: null }]);
    const { rows } = await db.pool.query(`SELECT status, attempts, result FROM ${schema}.jobs WHERE id = $1`, [job.id]);
    expect(rows).toEqual([{ status: "completed", attempts: 1, result: 42 }]);
  });

  it("runs 1,000 jobs across two workers exactly once each", async () => {
    await db.pool.query("CREATE TABLE pgb_runs (job_id bigint NOT NULL, attempt int NOT NULL)");
    const task = defineTask({
      name: "pgb-many",
      handler: async (_payload, { job }) => {
        // The witness writes directly, not through PgBouncer: it must not share the path under test.
        await db.pool.query("INSERT INTO pgb_runs (job_id, attempt) VALUES ($1, $2)", [job.id, job.attempt]);
      },
    });
    const options = { connectionString: bouncer.url, transactionPooling: true, listenConnectionString: db.url, tasks: [task] } as const;
    const a = await startWorker(options);
    const b = await startWorker(options);
    const jobs = await enqueueJobs(
      bounced,
      Array.from({ length: 1_000 }, (_, i) => ({ type: "pgb-many", payload: { i } })),
      { preparedStatements: false },
    );
    const finished = () => a.outcomes.length + b.outcomes.length;
    await expect.poll(finished, { timeout: 25_000, interval: 100 }).toBe(1_000);
    await Promise.all([a.supervisor.stop(), b.supervisor.stop()]);

    const outcomes = [...a.outcomes, ...b.outcomes];
    expect(outcomes.filter((o) => o.outcome !== "completed")).toEqual([]);
    expect(new Set(outcomes.map((o) => o.id))).toEqual(new Set(jobs.map((j) => j.id)));
    // Both workers took part.
    expect(a.outcomes.length).toBeGreaterThan(0);
    expect(b.outcomes.length).toBeGreaterThan(0);
    const { rows } = await db.pool.query(
      "SELECT status, attempts, count(*)::int AS n FROM picket.jobs WHERE type = 'pgb-many' GROUP BY status, attempts",
    );
    expect(rows).toEqual([{ status: "completed", attempts: 1, n: 1_000 }]);
    // Each job's handler ran once: 1,000 runs, 1,000 distinct jobs, every one a first attempt.
    const runs = (await db.pool.query("SELECT count(*)::int AS n, count(DISTINCT job_id)::int AS jobs, max(attempt) AS attempt FROM pgb_runs")).rows[0];
    expect(runs).toEqual({ n: 1_000, jobs: 1_000, attempt: 1 });
    expect(trouble([...a.logs, ...b.logs])).toEqual([]);
    expect(deafWarnings([...a.logs, ...b.logs])).toEqual([]);
  });

  it("applies workflow events through it: each event once, in order, with two workers holding and letting go", async () => {
    const counter = defineWorkflow({
      name: "pgb-counter",
      machine: setup({ types: {} as { context: { n: number } } }).createMachine({
        context: { n: 0 },
        initial: "counting",
        states: { counting: { on: { INC: { actions: assign({ n: ({ context }) => context.n + 1 }) }, FINISH: "done" } }, done: { type: "final" } },
        output: ({ context }) => ({ n: context.n }),
      }),
    });
    const options = { connectionString: bouncer.url, transactionPooling: true, listenConnectionString: db.url, tasks: [], workflows: [counter] } as const;
    const a = await startWorker(options);
    const b = await startWorker(options);
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push((await startWorkflow(bounced, counter, null, { preparedStatements: false })).id);
    for (let k = 0; k < 10; k++) for (const id of ids) await sendToWorkflow(bounced, id, { type: "INC" }, { preparedStatements: false });
    for (const id of ids) await sendToWorkflow(bounced, id, { type: "FINISH" }, { preparedStatements: false });
    const done = () => count("SELECT count(*)::int AS n FROM picket.workflows WHERE name = 'pgb-counter' AND status = 'done'");
    await expect.poll(done, { timeout: 30_000, interval: 100 }).toBe(20);
    await Promise.all([a.supervisor.stop(), b.supervisor.stop()]);
    const { rows } = await db.pool.query(
      "SELECT w.output, array_agg(e.seq ORDER BY e.seq) AS seqs, count(*) FILTER (WHERE e.outcome = 'applied')::int AS applied, bool_and(w.applier_job IS NULL) AS free FROM picket.workflows AS w JOIN picket.workflow_events AS e ON e.workflow_id = w.id WHERE w.id = ANY($1::bigint[]) GROUP BY w.id, w.output",
      [ids],
    );
    expect(rows).toEqual(ids.map(() => ({ output: { n: 10 }, seqs: Array.from({ length: 12 }, (_, i) => i + 1), applied: 12, free: true })));
    expect(trouble([...a.logs, ...b.logs])).toEqual([]);
  });

  it("wakes on NOTIFY over the direct LISTEN connection, with no poll due for a minute", async () => {
    const task = defineTask({ name: "pgb-wake", handler: async () => "awake" });
    const { supervisor, outcomes, logs } = await startWorker({
      connectionString: bouncer.url,
      transactionPooling: true,
      listenConnectionString: db.url,
      pollIntervalMs: 60_000,
      tasks: [task],
    });
    // "listening" is logged once the probe, sent through PgBouncer, arrived on the LISTEN connection.
    await expect.poll(() => logs.some((l) => l.msg === "listening for new jobs"), { timeout: 8_000 }).toBe(true);
    await expect.poll(() => supervisor.stats().lastPollAt, { timeout: 5_000 }).not.toBeNull();
    const enqueuedAt = Date.now();
    const job = await enqueueJob(bounced, { type: "pgb-wake" }, { preparedStatements: false });
    await expect.poll(() => outcomes.length, { timeout: 5_000, interval: 20 }).toBe(1);
    expect(Date.now() - enqueuedAt).toBeLessThan(5_000);
    expect(outcomes).toEqual([{ id: job.id, type: "pgb-wake", outcome: "completed", error: null }]);
    await supervisor.stop();
    expect(deafWarnings(logs)).toEqual([]);
    expect(trouble(logs)).toEqual([]);
  });

  it("keeps to a pause made through PgBouncer: the worker's claims through it take none of the paused task's jobs until the resume wakes it", async () => {
    const ran: string[] = [];
    const paused = defineTask({ name: "pgb-paused", handler: async (_p, { job }) => void ran.push(job.id) });
    const other = defineTask({ name: "pgb-unpaused", handler: async (_p, { job }) => void ran.push(job.id) });
    const { supervisor, logs } = await startWorker({ connectionString: bouncer.url, transactionPooling: true, listenConnectionString: db.url, pollIntervalMs: 60_000, tasks: [paused, other] });
    try {
      await expect.poll(() => logs.some((l) => l.msg === "listening for new jobs"), { timeout: 8_000 }).toBe(true);
      const through = { preparedStatements: false };
      expect((await pauseClaims(bounced, { task: "pgb-paused" }, through)).outcome).toBe("applied");
      const held = await enqueueJob(bounced, { type: "pgb-paused" }, through);
      // Enqueued after it, run: the worker claimed since the paused job's wake-up, and left it.
      const marker = await enqueueJob(bounced, { type: "pgb-unpaused" }, through);
      await expect.poll(() => ran, { timeout: 5_000 }).toEqual([marker.id]);
      expect(await count("SELECT count(*)::int AS n FROM picket.jobs WHERE id = $1 AND status = 'pending'", [held.id])).toBe(1);
      expect((await resumeClaims(bounced, { task: "pgb-paused" }, through)).outcome).toBe("applied");
      await expect.poll(() => ran, { timeout: 5_000 }).toEqual([marker.id, held.id]);
      expect(trouble(logs)).toEqual([]);
    } finally {
      await supervisor.stop();
    }
  });

  it("with PgBouncer only (LISTEN through it too), warns that LISTEN hears nothing and completes every job by polling", async () => {
    const task = defineTask({ name: "pgb-polled", handler: async () => undefined });
    const { supervisor, outcomes, logs } = await startWorker({
      connectionString: bouncer.url,
      transactionPooling: true,
      pollIntervalMs: 200,
      tasks: [task],
    });
    const jobs = await enqueueJobs(
      bounced,
      Array.from({ length: 50 }, (_, i) => ({ type: "pgb-polled", payload: { i } })),
      { preparedStatements: false },
    );
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(50);
    // The probe's 5 s run out after the jobs are done (they need a few polls).
    await expect.poll(() => deafWarnings(logs).length, { timeout: 10_000 }).toBe(1);
    await supervisor.stop();
    const [warning] = deafWarnings(logs);
    expect(warning).toMatchObject({ level: 40, listen: `127.0.0.1:${bouncer.port}/${db.name}` });
    expect(warning!.msg).toMatch(/listenConnectionString/);
    expect(logs.some((l) => l.msg === "listening for new jobs")).toBe(false);
    expect(new Set(outcomes.map((o) => o.id))).toEqual(new Set(jobs.map((j) => j.id)));
    expect(outcomes.every((o) => o.outcome === "completed")).toBe(true);
    expect(await count("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'pgb-polled' AND status = 'completed' AND attempts = 1")).toBe(50);
    expect(trouble(logs)).toEqual([]);
  });

  it("cancels a statement past its bound on the server, through PgBouncer: a claim that timed out takes nothing later", async () => {
    const [job] = await enqueueJobs(db.pool, [{ type: "pgb-cancelled" }]);
    const holder = await db.connect();
    await holder.query("BEGIN");
    // Every UPDATE of the table waits: the claim cannot write its rows while this is held.
    await holder.query("LOCK TABLE picket.jobs IN SHARE MODE");
    try {
      const claim = claimJobs(bounced, "pgb-worker", [{ type: "pgb-cancelled", limit: 1, leaseMs: 60_000, backoffBaseMs: 1_000, backoffMaxMs: 1_000 }], {
        preparedStatements: false,
        timeoutMs: 500,
      });
      await expect(claim).rejects.toThrow(StatementTimeoutError);
      // Nothing of it waits on the server any more: PgBouncer passed the cancel on.
      const waiting = "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND wait_event_type = 'Lock' AND query LIKE '%candidates%'";
      await expect.poll(async () => (await db.pool.query(waiting)).rows[0].n, { timeout: 1_500 }).toBe(0);
    } finally {
      await holder.query("COMMIT");
    }
    await new Promise((r) => setTimeout(r, 200));
    expect((await db.pool.query("SELECT status, attempts FROM picket.jobs WHERE id = $1", [job!.id])).rows[0]).toEqual({ status: "pending", attempts: 0 });
  });

  it("without transactionPooling, refuses to start with a message that says to set it, and sets nothing on the server", async () => {
    const task = defineTask({ name: "pgb-refused", handler: async () => undefined });
    const logs = captureLogs();
    const worker = createSupervisor({ connectionString: bouncer.url, tasks: [task], logger: logs.logger });
    const started = worker.start();
    await expect(started).rejects.toThrow(DatabaseUnreachableError);
    await expect(started).rejects.toThrow(/unsupported startup parameter: options.*set transactionPooling: true/);
    await worker.stop();
    await expect(openPool({ connectionString: bouncer.url })).rejects.toThrow(
      new RegExp(`cannot connect to PostgreSQL at 127\\.0\\.0\\.1:${bouncer.port}/${db.name} \\(unsupported startup parameter: options\\)\\. .*set transactionPooling: true`),
    );
    // With it, picket's connections through PgBouncer carry the server's defaults, nothing of picket's.
    const { rows } = await bounced.query("SELECT current_setting('statement_timeout') AS statement, current_setting('lock_timeout') AS lock, current_setting('plan_cache_mode') AS plan");
    expect(rows).toEqual([await serverDefaults()]);
    expect(rows[0].plan).not.toBe("force_generic_plan");
  });
});
