// The process group a service embeds (startWorkerProcesses) and the one health report it gives,
// run from this process: the group's parent is picket code here, where the mutation run reaches
// it, though its workers are child processes. \`picket worker --processes N\` itself, as a user
// runs it, is test/cli-processes.test.ts.
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { combineReports, runWorkerProcesses, startWorkerProcesses } from "../src/runtime/worker-processes.ts";
import { enqueueJobs } from "../src/db/index.ts";
import type { HealthReport } from "../src/runtime/health-server.ts";
import { useTestDatabase } from "./support/db.ts";
import { captureLogs } from "./support/worker.ts";

const db = useTestDatabase();
const SPIN = fileURLToPath(new URL("./fixtures/blocking-tasks.ts", import.meta.url));
const DIES = fileURLToPath(new URL("./fixtures/dies-after-start.mjs", import.meta.url));

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
describe("startWorkerProcesses, for a service that embeds the group", () => {
  const TASKS = new URL("./fixtures/hello-tasks.ts", import.meta.url);
  // The processes' own log lines are kept out of the test's output.
  const env = { ...process.env, PICKET_LOG_LEVEL: "error" };
  const napping = async () =>
    (await db.pool.query("SELECT count(*)::int AS n, count(DISTINCT locked_by)::int AS workers FROM picket.jobs WHERE type = 'nap' AND status = 'processing'")).rows[0];

  it("runs N supervisors without touching the service's signals, replaces one SIGKILLed, and drains them all on stop()", async () => {
    const signalHandlers = () => ["SIGTERM", "SIGINT"].map((signal) => process.listenerCount(signal));
    const before = signalHandlers();
    const { lines, logger } = captureLogs();
    const group = startWorkerProcesses({ processes: 2, tasksModule: TASKS, connectionString: db.url, concurrency: 2, logger, env });
    try {
      expect(signalHandlers()).toEqual(before);
      await group.started;
      const pids = () => lines.filter((line) => /^worker process \d starting/.test(line.msg)).map((line) => line.pid as number);
      expect(new Set(pids()).size).toBe(2);
      // Four long jobs at two slots a process: running all at once takes both processes.
      await enqueueJobs(db.pool, Array.from({ length: 4 }, () => ({ type: "nap", payload: { ms: 1_000 } })));
      await expect.poll(napping, { timeout: 10_000 }).toEqual({ n: 4, workers: 2 });
      expect((await group.health()).checks.processes).toEqual({ ok: true });

      const [first] = pids();
      process.kill(first!, "SIGKILL");
      await expect.poll(() => lines.some((line) => line.msg === `worker process 1 (pid ${first}) died (SIGKILL); starting a new one in 1000 ms`), { timeout: 10_000 }).toBe(true);
      await expect.poll(() => pids().length, { timeout: 10_000 }).toBe(3);
      await expect.poll(async () => (await group.health()).checks.processes, { timeout: 30_000, interval: 200 }).toEqual({ ok: true });

      // stop() while jobs run: each process drains, its jobs finish.
      await db.pool.query("DELETE FROM picket.jobs WHERE type = 'nap'");
      const naps = await enqueueJobs(db.pool, Array.from({ length: 4 }, () => ({ type: "nap", payload: { ms: 1_500 } })));
      await expect.poll(napping, { timeout: 30_000 }).toEqual({ n: 4, workers: 2 });
      await group.stop();
      const napped = await db.pool.query("SELECT status, result, attempts FROM picket.jobs WHERE id = ANY ($1)", [naps.map((job) => job.id)]);
      // Every job that ran finished. Four processing rows can also be three in one process (two
      // running, one claimed ahead into its buffer) and one in the other: stop() gives a buffered
      // job back at once, unrun and its attempt not charged, as it should.
      const finished = napped.rows.filter((row) => row.status === "completed");
      expect(finished).toEqual(Array(finished.length).fill({ status: "completed", result: "rested", attempts: 1 }));
      expect(napped.rows.filter((row) => row.status !== "completed")).toEqual(Array(4 - finished.length).fill({ status: "pending", result: null, attempts: 0 }));
      expect(finished.length).toBeGreaterThanOrEqual(3);
      expect(pids().filter(alive)).toEqual([]);
    } finally {
      group.force();
      await group.stopped.catch(() => undefined);
    }
  }, 90_000);

  it("rejects started and stopped, saying why, when a process fails before it started", async () => {
    const { logger } = captureLogs();
    const group = startWorkerProcesses({ processes: 2, tasksModule: path.join(tmpdir(), "picket-no-such-tasks.ts"), connectionString: db.url, logger, env });
    await expect(group.started).rejects.toThrow(/stopped before all had started: worker process [12] exited before it started \(code 1\)/);
    await expect(group.stopped).rejects.toThrow(/worker process [12] exited before it started/);
  }, 60_000);

  it("starts a process that keeps dying after its start again with a growing delay, then stops the group, saying why", async () => {
    const { lines, logger } = captureLogs();
    const group = runWorkerProcesses({
      count: 1,
      script: DIES,
      args: [],
      env: process.env,
      logger,
      restarts: { firstDelayMs: 50, maxDelayMs: 150, limit: 5, steadyMs: 60_000 },
    });
    await expect(group.stopped).rejects.toThrow("picket: worker process 1 died 5 times in a row within 60000 ms of starting; stopping the others (see its output above)");
    expect(lines.filter((line) => line.restart_in_ms !== undefined).map((line) => line.restart_in_ms)).toEqual([50, 100, 150, 150]);
  }, 30_000);

  it("kills a process on stop() once its drain deadline and a grace have passed, and stopped rejects naming it", async () => {
    const { lines, logger } = captureLogs();
    await db.pool.query("DELETE FROM picket.jobs WHERE type = 'spin'");
    const group = startWorkerProcesses({ processes: 1, tasksModule: SPIN, connectionString: db.url, concurrency: 1, drainTimeoutMs: 200, logger, env });
    await group.started;
    await enqueueJobs(db.pool, [{ type: "spin" }]);
    await expect.poll(async () => Number((await db.pool.query("SELECT count(*) FROM picket.jobs WHERE type = 'spin' AND status = 'processing'")).rows[0].count), { timeout: 10_000 }).toBe(1);
    const stoppedAt = performance.now();
    await expect(group.stop()).rejects.toThrow(/picket: worker process 1 \(pid \d+\) did not exit after the stop and was killed/);
    // 200 ms of drain and 5 s of grace, then the kill.
    expect(performance.now() - stoppedAt).toBeGreaterThanOrEqual(5_000);
    expect(lines.some((line) => /was still running 5200 ms after the stop; killed it \(SIGKILL\)/.test(String(line.msg)))).toBe(true);
  }, 60_000);

  it("refuses options it cannot run, saying what to give", () => {
    expect(() => startWorkerProcesses({ processes: 0, tasksModule: TASKS, connectionString: db.url })).toThrow(/processes must be an integer ≥ 1 \(got 0\)/);
    expect(() => startWorkerProcesses({ processes: 2, tasksModule: TASKS, connectionString: "" })).toThrow(/needs a connectionString/);
  });
});

describe("one health report for several processes", () => {
  const healthy = (inFlight: Record<string, number>, lastPollAt: string | null): HealthReport => ({
    healthy: true,
    ready: true,
    draining: false,
    lastPollAt,
    inFlight,
    checks: { database: { ok: true }, poll: { ok: true }, leases: { ok: true } },
  });

  it("holds a check when it holds in every process, names the process where it fails, and adds up what runs", () => {
    const stuck = { ...healthy({ a: 1 }, null), healthy: false, checks: { database: { ok: true }, poll: { ok: true }, leases: { ok: false, reason: "renewals failing" } } };
    expect(combineReports([healthy({ a: 2, b: 1 }, "2026-12-01T10:00:01.000Z"), stuck, healthy({}, "2026-12-01T10:00:02.000Z")], false)).toEqual({
      healthy: false,
      ready: true,
      draining: false,
      lastPollAt: "2026-12-01T10:00:02.000Z",
      inFlight: { a: 3, b: 1 },
      checks: { database: { ok: true }, poll: { ok: true }, leases: { ok: false, reason: "process 2: renewals failing" }, processes: { ok: true } },
    });
  });

  it("is unhealthy and not ready while a process is missing, saying which", () => {
    const report = combineReports([healthy({}, null), "not running (starting or being replaced)"], false);
    expect(report).toMatchObject({ healthy: false, ready: false, checks: { processes: { ok: false, reason: "process 2: not running (starting or being replaced)" } } });
    expect(combineReports([healthy({}, null)], true)).toMatchObject({ healthy: true, ready: false, draining: true });
  });
});
