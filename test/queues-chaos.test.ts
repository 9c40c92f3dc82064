// @module-tag spawns: every test here runs picket (or node, npm, git) in a child process.
// Serial queues and cluster-wide limits under crashes (issue 15's acceptance): three worker
// processes (test/fixtures/limits-worker.ts) run queued, capped and rate-limited jobs while the
// driver SIGKILLs a worker every couple of seconds (and starts a fresh one in its place) and
// restarts PostgreSQL once. The handlers record every execution in a side table; afterwards:
// - no two runs of one serial queue overlapped (a queue configured for 2: never more than 2);
// - never more than clusterConcurrency runs of the capped task at once (and that many did run);
// - never more than rateLimit.max claims of the rated task in any window (sliding);
// - every job completed, once.
// It starts its own embedded PostgreSQL (it restarts the server under the workers).
import { spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { enqueueJobs, migrate, startEmbeddedPostgres, type EmbeddedPostgres, type JobSpec } from "../src/db/index.ts";

const WORKER = fileURLToPath(new URL("./fixtures/limits-worker.ts", import.meta.url));
const RATE_MAX = 3;
const RATE_WINDOW_MS = 1_000;
const CLUSTER = 2;

interface Worker {
  id: string;
  child: ChildProcess;
  ready: Promise<void>;
  killedAt: number | null;
}

interface Execution {
  run: string;
  job_id: string;
  kind: string;
  queue: string | null;
  worker: string;
  started_ms: string;
  ended_ms: string | null;
  finished: boolean | null;
  claimed_ms: string;
}

const between = (min: number, max: number) => Math.round(min + Math.random() * (max - min));

/** The most intervals open at once; at equal times an end comes before a start. */
const peakOverlap = (intervals: Array<[number, number]>): number => {
  const events = intervals.flatMap(([start, end]): Array<[number, number]> => [
    [start, 1],
    [end, -1],
  ]);
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let open = 0;
  let peak = 0;
  for (const [, delta] of events) peak = Math.max(peak, (open += delta));
  return peak;
};

describe("serial queues and cluster-wide limits under SIGKILLs and a PostgreSQL restart", () => {
  it("never overlaps a queue's runs, never exceeds a task's limits, completes every job once", async () => {
    const tempDir = await mkdtemp(path.join(tmpdir(), "picket-limits-"));
    await chmod(tempDir, 0o755);
    const settings = { fsync: "off", synchronous_commit: "off", full_page_writes: "off" };
    let server: EmbeddedPostgres = await startEmbeddedPostgres({ dataDir: path.join(tempDir, "pgdata"), settings });
    const pool = new pg.Pool({ connectionString: server.url, max: 4 });
    pool.on("error", () => undefined);
    const workers: Worker[] = [];
    let generation = 0;
    const spawnWorker = (): Worker => {
      const id = `w${++generation}`;
      const child = spawn(process.execPath, [WORKER], {
        env: { ...process.env, DATABASE_URL: server.url, LIMITS_WORKER_ID: id, LIMITS_RATE_MAX: String(RATE_MAX), LIMITS_RATE_WINDOW_MS: String(RATE_WINDOW_MS) },
        stdio: ["ignore", "pipe", "inherit"],
      });
      const ready = new Promise<void>((resolve, reject) => {
        child.stdout!.on("data", (chunk: Buffer) => chunk.toString().includes("ready") && resolve());
        child.on("exit", (code) => reject(new Error(`worker ${id} exited with ${code} before it was ready`)));
      });
      ready.catch(() => undefined);
      const worker = { id, child, ready, killedAt: null };
      workers.push(worker);
      return worker;
    };
    try {
      await migrate(pool);
      await pool.query(`CREATE TABLE executions (
        run text PRIMARY KEY, job_id bigint NOT NULL, kind text NOT NULL, queue text, worker text NOT NULL,
        started_ms bigint NOT NULL, ended_ms bigint, finished boolean, claimed_at timestamptz NOT NULL)`);
      const specs: JobSpec[] = [
        ...["s0", "s1", "s2", "s3"].flatMap((queue) => Array.from({ length: 20 }, () => ({ type: "serial", queue, payload: { ms: between(150, 350) } }))),
        ...Array.from({ length: 24 }, () => ({ type: "serial", queue: "wide", payload: { ms: between(150, 350) } })),
        ...Array.from({ length: 60 }, () => ({ type: "capped", payload: { ms: between(150, 300) } })),
        ...Array.from({ length: 33 }, () => ({ type: "rated", payload: { ms: 20 } })),
      ];
      await enqueueJobs(pool, specs);
      for (let i = 0; i < 3; i++) spawnWorker();
      await Promise.all(workers.map((w) => w.ready));

      // --- chaos: a SIGKILL every ~2 s (a fresh worker takes the slot), one PostgreSQL restart ---
      const t0 = Date.now();
      const kills: number[] = [];
      let restarted = false;
      const remaining = async () => {
        try {
          return (await pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE status <> 'completed'")).rows[0].n as number;
        } catch {
          return Number.POSITIVE_INFINITY;
        }
      };
      let nextKill = t0 + 1_500;
      while (kills.length < 3 || !restarted) {
        if (Date.now() - t0 > 60_000) throw new Error(`chaos did not finish: ${kills.length} kills, restarted ${restarted}`);
        if ((await remaining()) === 0) break;
        if (!restarted && Date.now() - t0 > 3_500) {
          // No worker may be starting: a start against a stopped server fails, by design.
          await Promise.all(workers.filter((w) => w.killedAt === null).map((w) => w.ready));
          await server.stop();
          await sleep(1_000);
          server = await startEmbeddedPostgres({ dataDir: server.dataDir, port: server.port, settings });
          restarted = true;
          nextKill = Math.max(nextKill, Date.now() + 1_000);
        }
        if (Date.now() >= nextKill) {
          const live = workers.filter((w) => w.killedAt === null);
          await Promise.all(live.map((w) => w.ready));
          const victim = live[Math.floor(Math.random() * live.length)]!;
          victim.killedAt = Date.now();
          victim.child.kill("SIGKILL");
          kills.push(victim.killedAt);
          spawnWorker();
          nextKill = Date.now() + 2_000;
        }
        await sleep(100);
      }
      await expect.poll(remaining, { timeout: 90_000, interval: 250 }).toBe(0);
      // Every run's end is written (or its worker was killed).
      const killedAt = new Map(workers.filter((w) => w.killedAt !== null).map((w) => [w.id, w.killedAt!]));
      const readRuns = async () =>
        (
          await pool.query<Execution>(
            "SELECT run, job_id::text, kind, queue, worker, started_ms::text, ended_ms::text, finished, (extract(epoch FROM claimed_at) * 1000000)::bigint::text AS claimed_ms FROM executions",
          )
        ).rows;
      await expect.poll(async () => (await readRuns()).filter((r) => r.ended_ms === null && !killedAt.has(r.worker)).length, { timeout: 20_000 }).toBe(0);
      const runs = await readRuns();
      const interval = (r: Execution): [number, number] => [Number(r.started_ms), r.ended_ms !== null ? Number(r.ended_ms) : killedAt.get(r.worker)!];

      // Every job completed: the workers run at their defaults, so a completion deletes its row and
      // none is left (a dead, retrying or stuck job would be); and each had a run that finished its work.
      const { rows: jobs } = await pool.query<{ id: string; status: string }>("SELECT id::text, status FROM picket.jobs");
      expect(jobs).toEqual([]);
      const finishedJobs = new Set(runs.filter((r) => r.finished).map((r) => r.job_id));
      expect(finishedJobs.size).toBe(specs.length);

      // Serial queues: no two runs of one queue overlapped; "wide" (concurrency 2) never more than 2.
      const byQueue = new Map<string, Array<[number, number]>>();
      for (const r of runs.filter((r) => r.queue !== null)) byQueue.set(r.queue!, [...(byQueue.get(r.queue!) ?? []), interval(r)]);
      const peaks = Object.fromEntries([...byQueue].map(([queue, list]) => [queue, peakOverlap(list)]));
      expect(peaks).toEqual({ s0: 1, s1: 1, s2: 1, s3: 1, wide: 2 });

      // The capped task: never more than clusterConcurrency at once, and that many did run.
      expect(peakOverlap(runs.filter((r) => r.kind === "capped").map(interval))).toBe(CLUSTER);

      // The rated task: at most RATE_MAX claims in any window of RATE_WINDOW_MS (claim stamps),
      // and the limit was reached (the test measured something).
      const stamps = runs.filter((r) => r.kind === "rated").map((r) => Number(r.claimed_ms) / 1000).sort((a, b) => a - b);
      const fullest = Math.max(...stamps.map((s) => stamps.filter((t) => t > s - RATE_WINDOW_MS && t <= s).length));
      expect(fullest).toBe(RATE_MAX);

      // The run did what it claims.
      expect(kills.length).toBeGreaterThanOrEqual(2);
      expect(restarted).toBe(true);
      console.log(
        `queues-chaos: ${runs.length} runs of ${specs.length} jobs, ${kills.length} kills, PostgreSQL restarted; peaks ${JSON.stringify(peaks)}; ` +
          `capped peak ${CLUSTER}; fullest rate window ${fullest}/${RATE_MAX}`,
      );
    } finally {
      for (const w of workers) if (w.killedAt === null && w.child.exitCode === null) w.child.kill("SIGKILL");
      await pool.end().catch(() => undefined);
      await server.stop().catch(() => undefined);
      await rm(tempDir, { recursive: true, force: true });
    }
  }, 180_000);
});
