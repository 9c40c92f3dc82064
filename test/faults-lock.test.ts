// A row locked by another session (an operator's SELECT ... FOR UPDATE, an admin tool, a long
// migration's lock): the faults of scenarios 1, 2 and 6 of the lease review, against the real
// server. One locked row must not stall every lease, a renewal that waited must grant a full
// lease, batches must not deadlock, and stop() (and the CLI) must end whatever the lock does.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { claimJobs, completeJobs, enqueueJobs, renewLeases, reportProgress } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, row, want } from "./support/factory.ts";
import { createRunsTable, overlappingRuns, recordedRun } from "./support/runs.ts";
import { startWorker } from "./support/worker.ts";
import { freePort } from "./support/ports.ts";

const db = useTestDatabase();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));


/** Another session holds the row locked until release() (the operator's transaction). */
const lockRow = async (id: string) => {
  const holder = await db.connect();
  await holder.query("BEGIN");
  await holder.query("SELECT 1 FROM picket.jobs WHERE id = $1 FOR UPDATE", [id]);
  return { release: () => holder.query("COMMIT") };
};

const processingIds = async (type: string): Promise<string[]> =>
  (await db.pool.query("SELECT id FROM picket.jobs WHERE type = $1 AND status = 'processing' ORDER BY id", [type])).rows.map((r) => r.id);

describe("a row locked by another session", () => {
  it("stalls no other lease: the others run to completion once; the locked job's handler stops before its lease runs out; /health says why", async () => {
    await createRunsTable(db.pool);
    const task = defineTask({ name: "lock-s1", leaseMs: 1_000, backoff: { baseMs: 100, maxMs: 100 }, handler: recordedRun(db.pool, 3_500) });
    const jobs = await enqueueJobs(db.pool, Array.from({ length: 5 }, () => ({ type: "lock-s1" })));
    const port = await freePort();
    const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 5, health: { port, host: "127.0.0.1" } });
    await expect.poll(async () => (await db.pool.query("SELECT count(*)::int AS n FROM runs")).rows[0].n, { timeout: 5_000 }).toBe(5);
    const [locked] = await processingIds("lock-s1");
    const lock = await lockRow(locked!);
    try {
      // The locked job's lease cannot be renewed: its handler is interrupted, on the worker's own
      // clock, before the lease it was last given runs out on the server's.
      await expect.poll(async () => (await db.pool.query("SELECT how FROM runs WHERE job_id = $1", [locked])).rows[0].how, { timeout: 5_000 }).toBe("interrupted");
      const { rows } = await db.pool.query("SELECT r.ended_at < j.lock_until AS before_deadline FROM runs r JOIN picket.jobs j ON j.id = r.job_id WHERE r.job_id = $1", [locked]);
      expect(rows).toEqual([{ before_deadline: true }]);
      expect(logs.find((l) => /^lease not confirmed in time for 1 job/.test(l.msg))).toMatchObject({ level: 40, jobs: [locked], rows_busy: 1 });
      // While the row stays locked, its claim is unconfirmed for longer than a lease: 503, with the reason.
      await expect
        .poll(async () => {
          const response = await fetch(`http://127.0.0.1:${port}/health`);
          return { status: response.status, body: await response.json() };
        }, { timeout: 5_000 })
        .toMatchObject({
          status: 503,
          body: { checks: { leases: { ok: false, reason: expect.stringMatching(new RegExp(`job ${locked}: .*their rows are locked by another session`)) }, database: { ok: true } } },
        });
      // The four others were renewed throughout: each completes in its one run.
      await expect.poll(() => outcomes.filter((o) => o.outcome === "completed").length, { timeout: 10_000 }).toBe(4);
    } finally {
      await lock.release();
    }
    // Once the lock is gone, the interrupted attempt is recorded (charged, with the backoff) and the job runs again.
    await expect.poll(async () => (await row(db.pool, locked!)).status, { timeout: 10_000 }).toBe("completed");
    const locks = await row(db.pool, locked!);
    expect(locks.attempts).toBe(2);
    expect(locks.errors[0].message).toMatch(/^lease_expired: the lease was not confirmed by the database for \d+ ms \(lease 1000 ms\)/);
    for (const job of jobs.filter((j) => j.id !== locked)) expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 1 });
    const runs = (await db.pool.query("SELECT job_id, how FROM runs ORDER BY id")).rows;
    expect(runs.filter((r) => r.job_id !== locked).map((r) => r.how)).toEqual(Array(4).fill("finished"));
    expect(runs.filter((r) => r.job_id === locked).map((r) => r.how)).toEqual(["interrupted", "finished"]);
    expect(await overlappingRuns(db.pool)).toEqual([]);
  });

  it("holds claiming back while more outcomes wait on locked rows than the bound allows, and claims again as soon as they are written", async () => {
    // Concurrency 2 bounds the outcomes in flight at 8 before the worker claims again. Jobs claimed
    // under the bound can overshoot it: one handler (the anchor) is held while eight others'
    // outcomes wait on rows this test has locked; then the anchor returns too, and nine wait.
    const arrived: string[] = [];
    const gates = new Map<string, () => void>();
    let ungated = false;
    const task = defineTask({
      name: "lock-overshoot",
      leaseMs: 60_000,
      handler: (_payload, { job }) => {
        arrived.push(job.id);
        return ungated ? undefined : new Promise<void>((resolve) => gates.set(job.id, resolve));
      },
    });
    await enqueueJobs(db.pool, Array.from({ length: 12 }, () => ({ type: "lock-overshoot" })));
    // No NOTIFY and a poll a minute apart: only a finished write can wake the next claim in time.
    await startWorker({ connectionString: db.url, tasks: [task], concurrency: 2, prefetch: 0, pollIntervalMs: 60_000, listen: false });
    const locks: Array<{ release: () => Promise<unknown> }> = [];
    const lockAndReturn = async (id: string) => {
      locks.push(await lockRow(id));
      gates.get(id)!();
    };
    await expect.poll(() => gates.size, { timeout: 5_000 }).toBe(2);
    const [anchor] = arrived;
    try {
      for (let held = 1; held <= 8; held++) {
        await lockAndReturn(arrived[held]!);
        // Under the bound, the freed slot is claimed into at once.
        if (held < 8) await expect.poll(() => gates.size, { timeout: 5_000 }).toBe(held + 2);
      }
      await lockAndReturn(anchor!);
      // Nine outcomes wait on locked rows, one more than the bound: nothing more is claimed.
      await sleep(300);
      expect(arrived).toHaveLength(9);
      expect(await processingIds("lock-overshoot")).toHaveLength(9);
    } finally {
      ungated = true;
      await Promise.all(locks.map((lock) => lock.release()));
    }
    // The outcomes are written once the locks go (a busy write is retried within a second), and
    // each written one wakes a claim: the three left run now, not at the next poll a minute on.
    await expect
      .poll(async () => (await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'lock-overshoot' AND status = 'completed'")).rows[0].n, {
        timeout: 10_000,
      })
      .toBe(12);
    expect(arrived).toHaveLength(12);
  });

  it("lets stop() end within the drain deadline plus the release grace while a claimed row stays locked", async () => {
    const task = defineTask({ name: "lock-stop", leaseMs: 1_000, timeoutMs: 60_000, handler: (_p, { signal }) => new Promise((_r, reject) => signal.addEventListener("abort", () => reject(new Error("stopped")))) });
    await enqueueJobs(db.pool, [{ type: "lock-stop" }, { type: "lock-stop" }]);
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 2, drainTimeoutMs: 500 });
    await expect.poll(() => processingIds("lock-stop"), { timeout: 5_000 }).toHaveLength(2);
    const [locked, free] = await processingIds("lock-stop");
    const lock = await lockRow(locked!);
    try {
      const stopAt = Date.now();
      await supervisor.stop();
      expect(Date.now() - stopAt).toBeLessThan(500 + 2_000);
      // The free job was released unrun-charged; the locked one could not be written and is left to the sweep.
      expect(outcomes.find((o) => o.id === free)).toMatchObject({ outcome: "released" });
      expect(outcomes.find((o) => o.id === locked)).toMatchObject({ outcome: "abandoned", error: "the drain's time ran out before the write finished" });
    } finally {
      await lock.release();
    }
    expect(await row(db.pool, free!)).toMatchObject({ status: "pending", attempts: 0 });
    expect(await row(db.pool, locked!)).toMatchObject({ status: "processing" });
  });

  it("lets the CLI worker exit on SIGTERM within the drain deadline plus 2 s, and on a second signal within 2 s", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const cli = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
    const tasks = fileURLToPath(new URL("./fixtures/fault-tasks.ts", import.meta.url));
    const exitTime = async (signals: NodeJS.Signals[], drainMs: number) => {
      await enqueueJobs(db.pool, [{ type: "fault-long" }]);
      const child = spawn(process.execPath, [cli, "worker", "--tasks", tasks, "--drain-timeout", String(drainMs)], {
        env: { ...process.env, DATABASE_URL: db.url, PICKET_LOG_LEVEL: "error" },
        stdio: ["ignore", "ignore", "pipe"],
      });
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
      try {
        await expect.poll(() => processingIds("fault-long"), { timeout: 20_000 }).toHaveLength(1);
        const lock = await lockRow((await processingIds("fault-long"))[0]!);
        try {
          child.kill(signals[0]);
          let last = Date.now();
          for (const signal of signals.slice(1)) {
            await sleep(200);
            child.kill(signal);
            last = Date.now();
          }
          await exited;
          return Date.now() - last;
        } finally {
          await lock.release();
        }
      } finally {
        child.kill("SIGKILL");
        await db.pool.query("UPDATE picket.jobs SET status = 'cancelled', lock_until = NULL, finished_at = now() WHERE type = 'fault-long'");
      }
    };
    expect(await exitTime(["SIGTERM"], 1_000)).toBeLessThan(1_000 + 2_000);
    // A forced drain ends in about a second; without force the 60 s deadline would hold it. The
    // bound leaves room for a loaded machine's slow timers and process exit.
    expect(await exitTime(["SIGTERM", "SIGINT"], 60_000)).toBeLessThan(5_000);
  });

  it("lets the CLI worker exit on a second signal within seconds while its start-up still waits for another migrator", { tags: ["spawns"], timeout: 30_000 }, async () => {
    const cli = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
    const tasks = fileURLToPath(new URL("./fixtures/fault-tasks.ts", import.meta.url));
    // Another process is migrating this schema: the worker's own migration waits for its lock.
    const migrator = await db.connect();
    await migrator.query("SELECT pg_advisory_lock(hashtextextended('picket:migrate:picket', 0))");
    try {
      const child = spawn(process.execPath, [cli, "worker", "--tasks", tasks, "--migrate"], {
        env: { ...process.env, DATABASE_URL: db.url, PICKET_LOG_LEVEL: "error" },
        stdio: ["ignore", "ignore", "pipe"],
      });
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
      await expect
        .poll(async () => (await db.pool.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")).rows[0].n, { timeout: 20_000 })
        .toBe(1);
      child.kill("SIGTERM");
      await sleep(200);
      const secondAt = Date.now();
      child.kill("SIGTERM");
      expect(await exited).toBe(1);
      // The worker's fallback exits 1.8 s after the second signal; without it the process would
      // wait for the migrator's lock (never released here). A loaded 2-core machine measured
      // 2,060 ms against a 2 s bound: the bound says "does not hang", with room for the load.
      expect(Date.now() - secondAt).toBeLessThan(5_000);
    } finally {
      await migrator.query("SELECT pg_advisory_unlock_all()");
    }
  });
});

describe("lease renewal", () => {
  it("grants a full lease from the moment it is written, when it had to wait for a table lock", async () => {
    const [job] = await claimed(db.pool, "renew-after-wait");
    const holder = await db.connect();
    await holder.query("BEGIN");
    // SHARE mode blocks every UPDATE of the table, as a long CREATE INDEX does.
    await holder.query("LOCK TABLE picket.jobs IN SHARE MODE");
    const renewal = renewLeases(db.pool, [{ id: job!.id, token: job!.claimToken, leaseMs: 1_500 }]);
    await sleep(1_000);
    const released = (await holder.query("SELECT clock_timestamp() AS at")).rows[0].at as Date;
    await holder.query("COMMIT");
    const [result] = await renewal;
    expect(result!.outcome).toBe("applied");
    // A lease from the statement's start would already be half gone: this one is whole.
    const lockUntil = (await row(db.pool, job!.id)).lock_until as Date;
    expect(lockUntil.getTime() - released.getTime()).toBeGreaterThanOrEqual(1_490);
  });

  it("is granted by the claim too from the moment the row is written, when the claim had to wait for a table lock", async () => {
    await enqueueJobs(db.pool, [{ type: "claim-after-wait" }]);
    const holder = await db.connect();
    await holder.query("BEGIN");
    await holder.query("LOCK TABLE picket.jobs IN SHARE MODE");
    const claim = claimJobs(db.pool, "waiting-worker", [want("claim-after-wait", { limit: 1, leaseMs: 1_500 })]);
    await sleep(1_000);
    const released = (await holder.query("SELECT clock_timestamp() AS at")).rows[0].at as Date;
    await holder.query("COMMIT");
    const [job] = await claim;
    expect(job!.leaseMs).toBe(1_500);
    const { rows } = await db.pool.query("SELECT lock_until FROM picket.jobs WHERE id = $1", [job!.id]);
    expect(rows[0].lock_until.getTime() - released.getTime()).toBeGreaterThanOrEqual(1_490);
  });

  it("is granted again by a progress write under the claim, from the moment it is written", async () => {
    const [job] = await claimed(db.pool, "progress-renews", 1, { want: { leaseMs: 1_000 } });
    const [result] = await reportProgress(db.pool, [{ id: job!.id, token: job!.claimToken, progress: { step: 1 }, leaseMs: 60_000 }]);
    expect(result!.outcome).toBe("applied");
    const { rows } = await db.pool.query("SELECT lock_until - clock_timestamp() AS left FROM picket.jobs WHERE id = $1", [job!.id]);
    expect(rows[0].left.seconds ?? 0).toBeGreaterThanOrEqual(58);
  });

  it("is kept by a job that writes large progress values without pause: its own writes renew it", async () => {
    // Three progress writes of ~400 KB in flight at once, for two and a half leases: the row is
    // almost always held by one of them when a renewal comes (finding R1 of the review).
    const big = "x".repeat(400_000);
    const task = defineTask({
      name: "progress-storm",
      leaseMs: 1_000,
      handler: async (_p, { reportProgress }) => {
        const until = Date.now() + 2_500;
        let n = 0;
        const writer = async () => {
          while (Date.now() < until) await reportProgress({ n: n++, big });
        };
        await Promise.all([writer(), writer(), writer()]);
        return n;
      },
    });
    const job = await enqueueJobs(db.pool, [{ type: "progress-storm", maxAttempts: 1 }]);
    const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.find((o) => o.id === job[0]!.id), { timeout: 15_000 }).toMatchObject({ outcome: "completed" });
    expect(await row(db.pool, job[0]!.id)).toMatchObject({ status: "completed", attempts: 1, errors: [] });
    expect(logs.filter((l) => /^lease not confirmed in time/.test(l.msg))).toEqual([]);
  });

  it("skips a row another session holds: the others in the batch are renewed, the held one reported busy, at once", async () => {
    const jobs = await claimed(db.pool, "renew-busy", 3);
    const lock = await lockRow(jobs[1]!.id);
    try {
      const started = Date.now();
      const results = await renewLeases(db.pool, jobs.map((job) => ({ id: job.id, token: job.claimToken, leaseMs: 60_000 })));
      expect(Date.now() - started).toBeLessThan(1_000);
      expect(results.map((r) => r.outcome)).toEqual(["applied", "busy", "applied"]);
      // A lost claim on a held row is still told apart: the snapshot shows the token gone.
      const stale = await renewLeases(db.pool, [{ id: jobs[1]!.id, token: "00000000-0000-4000-8000-000000000000", leaseMs: 60_000 }]);
      expect(stale.map((r) => r.outcome)).toEqual(["fenced"]);
    } finally {
      await lock.release();
    }
  });
});

describe("batched writes", () => {
  it("never deadlock: renewals and completions over the same rows in opposite orders, on many connections", async () => {
    const jobs = await claimed(db.pool, "no-deadlock", 400, { want: { leaseMs: 60_000 } });
    const claims = jobs.map((job) => ({ id: job.id, token: job.claimToken }));
    const shuffled = (items: typeof claims) => [...items].sort(() => Math.random() - 0.5);
    const errors: unknown[] = [];
    const busyOrApplied = new Set<string>();
    const deadline = Date.now() + 2_000;
    // Renewals of every claim in random orders race completions of overlapping subsets in reverse
    // order: rows locked in different orders by plain UPDATEs deadlock (40P01) within seconds.
    const renewer = async () => {
      while (Date.now() < deadline) {
        await renewLeases(db.pool, shuffled(claims).map((c) => ({ ...c, leaseMs: 60_000 }))).then(
          (results) => results.forEach((r) => busyOrApplied.add(r.outcome)),
          (error: unknown) => errors.push(error),
        );
      }
    };
    // Completions alternate between keeping the row and deleting it (the default): a delete locks
    // and writes the row as the update does.
    let deleted = 0;
    const completer = async (from: number) => {
      const mine = claims.slice(from, from + 200).reverse();
      // The first completion, which always runs (the deadline may leave room for no other), deletes.
      // (Every row it reaches may be held by a renewal at that moment and reported busy: how many it
      // deletes is the race's, so the check below counts them rather than expecting some.)
      const keepCompleted = (from / 50) % 2 === 1;
      await completeJobs(db.pool, mine.map((c) => ({ ...c, result: from })), { keepCompleted }).then(
        (results) => {
          results.forEach((r) => busyOrApplied.add(r.outcome));
          if (!keepCompleted) deleted += results.filter((r) => r.outcome === "applied").length;
        },
        (error: unknown) => errors.push(error),
      );
    };
    await Promise.all([renewer(), renewer(), renewer(), (async () => {
      for (let from = 0; from < 400 && Date.now() < deadline; from += 50) await completer(from);
    })()]);
    expect(errors).toEqual([]);
    expect(busyOrApplied.has("applied")).toBe(true);
    // Every claim ends written by exactly one completion (kept, or deleted) or still processing, never lost.
    const { rows } = await db.pool.query("SELECT status, count(*)::int AS n FROM picket.jobs WHERE type = 'no-deadlock' GROUP BY status");
    expect(rows.reduce((sum: number, r: { n: number }) => sum + r.n, 0) + deleted).toBe(400);
  });
});
