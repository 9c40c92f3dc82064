// The process group a service embeds (startWorkerProcesses) and the one health report it gives,
// run from this process: the group's parent is picket code here, where the mutation run reaches
// it, though its workers are child processes. \`picket worker --processes N\` itself, as a user
// runs it, is test/cli-processes.test.ts.
import { EventEmitter } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { Command } from "commander";
import { workerCommand } from "../src/cli/worker.ts";
import { attachToParent, combineReports, runWorkerProcesses, startWorkerProcesses, workerArguments, type WorkerProcesses } from "../src/runtime/worker-processes.ts";
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
    expect(lines.filter((line) => line.level === 50)).toEqual([
      expect.objectContaining({ process: 1, pid: expect.any(Number), code: 3, signal: null, msg: "worker process 1 died 5 times in a row within 60000 ms of starting; stopping the others (see its output above)" }),
    ]);
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

describe("the group's parent, with stand-in processes", () => {
  const STAND_IN = fileURLToPath(new URL("./fixtures/stand-in-worker.mjs", import.meta.url));
  const groups: WorkerProcesses[] = [];
  const group = (env: Record<string, string>, options: Partial<Parameters<typeof runWorkerProcesses>[0]> = {}) => {
    const { lines, logger } = captureLogs();
    const made = runWorkerProcesses({ count: 2, script: STAND_IN, args: [], env: { ...process.env, ...env }, logger, ...options });
    groups.push(made);
    return { lines, group: made };
  };
  // A test that failed half-way leaves no process behind (their channels would keep vitest's worker alive).
  afterEach(async () => {
    for (const left of groups.splice(0)) {
      left.force();
      await left.stopped.catch(() => undefined);
    }
  });

  it("asks each process for its health and combines the answers, naming one that does not answer in 3 s; once stopped, none is asked", async () => {
    const { group: g } = group({ STAND_IN_SILENT: "2" });
    await g.started;
    expect(await g.health()).toEqual({
      healthy: false,
      ready: false,
      draining: false,
      lastPollAt: "2026-12-01T10:00:01.000Z",
      inFlight: { "task-1": 1, "request-0": 1 },
      checks: { database: { ok: true }, poll: { ok: true }, leases: { ok: true }, processes: { ok: false, reason: "process 2: no health report within 3000 ms" } },
    });
    await g.stop();
    expect(await g.health()).toMatchObject({ ready: false, draining: true, checks: { processes: { ok: false, reason: "process 1: stopped; process 2: stopped" } } });
  }, 30_000);

  it("matches each answer to its request when several are in flight, and names a process that exits while asked", async () => {
    const { group: g } = group({ STAND_IN_EXIT_ON_HEALTH: "2" }, { restarts: { firstDelayMs: 60_000, maxDelayMs: 60_000, limit: 5, steadyMs: 0 } });
    await g.started;
    const [first, second] = await Promise.all([g.health(), g.health()]);
    // Process 1 answered requests 0 and 2; process 2 was asked 1 and 3, and exited.
    expect([first.inFlight, second.inFlight]).toEqual([
      { "task-1": 1, "request-0": 1 },
      { "task-1": 1, "request-2": 1 },
    ]);
    expect(first.checks.processes).toEqual({ ok: false, reason: "process 2: exited" });
    // Gone, and waiting out its restart delay: not asked, and said so.
    expect((await g.health()).checks.processes).toEqual({ ok: false, reason: "process 2: not running (starting or being replaced)" });
    await g.stop();
  }, 30_000);

  it("has started only once every process has said so", async () => {
    const createdAt = performance.now();
    const { group: g } = group({ STAND_IN_LATE: "2" });
    // Not asked before it said so: it may not be listening yet.
    await expect.poll(async () => (await g.health()).checks.processes, { timeout: 10_000 }).toEqual({ ok: false, reason: "process 2: not running (starting or being replaced)" });
    await g.started;
    expect(performance.now() - createdAt).toBeGreaterThanOrEqual(1_400);
    await g.stop();
  }, 30_000);

  it("names a process that cannot be asked (its channel closed), and a caller awaiting only stopped sees no unhandled rejection", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on("unhandledRejection", onUnhandled);
    try {
      const { group: g } = group({ STAND_IN_DISCONNECT: "1" }, { count: 1 });
      await g.started;
      await expect.poll(async () => (await g.health()).checks.processes?.reason ?? "", { timeout: 10_000 }).toMatch(/^process 1: cannot be asked: /);
      await g.stop();
      // A group whose start failed, awaited only through stopped: started's rejection is handled.
      const failed = group({ STAND_IN_NEVER_STARTS: "1" }, { count: 1 }).group;
      await expect(failed.stopped).rejects.toThrow(/exited before it started/);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(unhandled).toEqual([]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  }, 30_000);

  it("takes no other message for the start: a process that exits without having said it started stops the group, saying so", async () => {
    const { lines, group: g } = group({ STAND_IN_NEVER_STARTS: "1" }, { count: 1 });
    await expect(g.started).rejects.toThrow(/^picket: the worker processes stopped before all had started: worker process 1 exited before it started \(code 1\); see its output above$/);
    await expect(g.stopped).rejects.toThrow(/^picket: worker process 1 exited before it started \(code 1\); see its output above$/);
    expect(lines.find((line) => line.level === 50)).toMatchObject({ process: 1, pid: expect.any(Number), code: 1, signal: null, msg: "worker process 1 exited before it started (code 1); stopping the others" });
  }, 30_000);

  it("signals each process once for any number of stop() calls: a second signal would be the force", async () => {
    const { group: g } = group({ STAND_IN_ON_TERM: "twice" });
    await g.started;
    const stops = [g.stop(), g.stop()];
    await Promise.all(stops);
    await g.stop();
  }, 30_000);

  it("starts no process after the stop when a restart was waiting for its delay", async () => {
    const { lines, group: g } = group({}, { count: 1, script: DIES, restarts: { firstDelayMs: 300, maxDelayMs: 300, limit: 5, steadyMs: 0 } });
    await expect.poll(() => lines.some((line) => line.restart_in_ms !== undefined), { timeout: 20_000 }).toBe(true);
    expect(lines.find((line) => line.restart_in_ms !== undefined)).toMatchObject({
      level: 40,
      process: 1,
      pid: expect.any(Number),
      code: 3,
      signal: null,
      msg: expect.stringMatching(/^worker process 1 \(pid \d+\) died \(code 3\); starting a new one in 300 ms$/),
    });
    await g.stop();
    const starts = lines.filter((line) => String(line.msg).startsWith("worker process 1 starting")).length;
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(lines.filter((line) => String(line.msg).startsWith("worker process 1 starting"))).toHaveLength(starts);
  }, 30_000);

  it("serves the combined report on /health and /ready when given a port, and stops serving with the group", async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, "127.0.0.1", () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    const { group: g } = group({}, { health: { port, host: "127.0.0.1" } });
    await g.started;
    await expect.poll(async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => undefined))?.status, { timeout: 10_000 }).toBe(200);
    const body = (await (await fetch(`http://127.0.0.1:${port}/health`)).json()) as HealthReport;
    expect(body).toMatchObject({ healthy: true, inFlight: { "task-1": 1, "task-2": 2 }, lastPollAt: "2026-12-01T10:00:02.000Z" });
    expect((await fetch(`http://127.0.0.1:${port}/ready`)).status).toBe(200);
    await g.stop();
    await expect(fetch(`http://127.0.0.1:${port}/health`)).rejects.toThrow();
  }, 30_000);

  it("rejects stopped, naming the process, when one exits with an error while draining", async () => {
    const { group: g } = group({ STAND_IN_ON_TERM: "fail" }, { count: 1 });
    await g.started;
    await expect(g.stop()).rejects.toThrow(/^picket: worker process 1 \(pid \d+\) exited with code 1 while draining$/);
  }, 30_000);

  it("on force(), kills a process that ignores both signals 5 s after the second, and stopped rejects naming it", async () => {
    const { lines, group: g } = group({ STAND_IN_ON_TERM: "ignore" }, { count: 1 });
    await g.started;
    const forcedAt = performance.now();
    // A force with no stop before it stops first; the stop's own kill (30 s of drain and 5 s) is not the one that acts.
    g.force();
    await expect(g.stopped).rejects.toThrow(/^picket: worker process 1 \(pid \d+\) did not exit after the second stop and was killed$/);
    expect(performance.now() - forcedAt).toBeGreaterThanOrEqual(5_000);
    expect(performance.now() - forcedAt).toBeLessThan(30_000);
    expect(lines.filter((line) => /was still running 5000 ms after the second stop; killed it \(SIGKILL\)/.test(String(line.msg)))).toEqual([
      expect.objectContaining({ level: 50, process: 1, pid: expect.any(Number), msg: expect.stringContaining("A handler that never yields blocks its process") }),
    ]);
  }, 40_000);

  it("restarts a process that died after running steadily after the first delay, every time, until stopped", async () => {
    const { lines, group: g } = group({}, { count: 1, script: DIES, restarts: { firstDelayMs: 20, maxDelayMs: 1_000, limit: 2, steadyMs: 0 } });
    await expect.poll(() => lines.filter((line) => line.restart_in_ms !== undefined).length, { timeout: 20_000 }).toBeGreaterThanOrEqual(4);
    // The stop finds the process between two lives (a clean stop), or alive: the fixture has no
    // SIGTERM handler and dies of it, or dies on its own first (code 3), which the group reports.
    const stop = await g.stop().then(
      () => "clean",
      (error: Error) => error.message,
    );
    expect(stop).toMatch(/^(clean|picket: worker process 1 \(pid \d+\) exited with (SIGTERM|code 3) while draining)$/);
    const delays = lines.filter((line) => line.restart_in_ms !== undefined).map((line) => line.restart_in_ms);
    expect(new Set(delays)).toEqual(new Set([20]));
  }, 30_000);
});

describe("the command each process of startWorkerProcesses runs", () => {
  // Parsed by the CLI's own worker command, its action replaced: each option reaches the process
  // as the flag that sets it, and a flag the CLI did not know would fail the parse.
  const parsed = async (args: string[]) => {
    const program = new Command().exitOverride();
    workerCommand(program);
    let options: Record<string, unknown> | undefined;
    program.commands.find((command) => command.name() === "worker")!.action((given: Record<string, unknown>) => void (options = given));
    await program.parseAsync(["node", "picket", ...args]);
    return options;
  };

  it("passes every option as the flag that sets it", async () => {
    const args = workerArguments({
      processes: 2,
      tasksModule: new URL("./fixtures/hello-tasks.ts", import.meta.url),
      connectionString: "postgres://not-passed-here",
      concurrency: 3,
      schema: "elsewhere",
      drainTimeoutMs: 200,
      statementTimeoutMs: 5_000,
      transactionPooling: true,
      listenConnectionString: "postgres://direct/db",
      migrate: true,
    });
    expect(await parsed(args)).toEqual({
      tasks: fileURLToPath(new URL("./fixtures/hello-tasks.ts", import.meta.url)),
      concurrency: 3,
      schema: "elsewhere",
      drainTimeout: 200,
      statementTimeout: 5_000,
      transactionPooling: true,
      listenUrl: "postgres://direct/db",
      migrate: true,
    });
    expect(args.join(" ")).not.toContain("not-passed-here");
  });

  it("leaves out what was not given: the worker's defaults apply", async () => {
    expect(await parsed(workerArguments({ processes: 1, tasksModule: "tasks.ts", connectionString: "postgres://x" }))).toEqual({ tasks: "tasks.ts", schema: "picket" });
  });
});

describe("a process's side of the channel (attachToParent)", () => {
  const report = { healthy: true, ready: true, draining: false, lastPollAt: null, inFlight: {}, checks: { database: { ok: true }, poll: { ok: true }, leases: { ok: true } } } as HealthReport;
  const channel = () => {
    const emitter = new EventEmitter();
    const sent: unknown[] = [];
    return Object.assign(emitter, { sent, connected: true, send: (message: unknown) => sent.push(message) });
  };

  it("answers each health request with its id, says once when it started, and takes a closed channel as the stop", async () => {
    const parent = channel();
    let gone = 0;
    const attached = attachToParent({ health: async () => report }, () => gone++, parent, { PICKET_WORKER_PROCESS: "2" });
    expect(attached).toBeDefined();
    expect(parent.sent).toEqual([]);
    attached!.started();
    expect(parent.sent).toEqual(["picket:worker-started"]);
    parent.emit("message", { type: "picket:health", id: 7 });
    parent.emit("message", { type: "not for picket", id: 8 });
    parent.emit("message", undefined);
    await new Promise((resolve) => setImmediate(resolve));
    expect(parent.sent).toEqual(["picket:worker-started", { type: "picket:health-report", id: 7, report }]);
    parent.emit("disconnect");
    parent.emit("disconnect");
    expect(gone).toBe(1);
  });

  it("sends nothing once the parent is gone", async () => {
    const parent = channel();
    const attached = attachToParent({ health: async () => report }, () => undefined, parent, { PICKET_WORKER_PROCESS: "1" });
    parent.connected = false;
    attached!.started();
    parent.emit("message", { type: "picket:health", id: 1 });
    await new Promise((resolve) => setImmediate(resolve));
    expect(parent.sent).toEqual([]);
  });

  it("is nothing outside a group: no slot in the environment, or no channel to a parent", () => {
    const parent = channel();
    expect(attachToParent({ health: async () => report }, () => undefined, parent, {})).toBeUndefined();
    const { send: _send, ...noSend } = parent;
    expect(attachToParent({ health: async () => report }, () => undefined, Object.assign(new EventEmitter(), noSend, { send: undefined }), { PICKET_WORKER_PROCESS: "1" })).toBeUndefined();
    expect(parent.listenerCount("message") + parent.listenerCount("disconnect")).toBe(0);
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

  it("names every process where a check fails or that did not answer, one after another; the latest poll wins; one process not ready is enough", () => {
    const failing = (slot: number): HealthReport => ({ ...healthy({}, null), healthy: false, checks: { database: { ok: false, reason: `down ${slot}` }, poll: { ok: true }, leases: { ok: true } } });
    const report = combineReports(
      [failing(1), healthy({}, "2026-12-01T10:00:03.000Z"), failing(3), "exited", healthy({}, "2026-12-01T10:00:01.000Z"), "no health report within 3000 ms", { ...healthy({}, "2026-12-01T10:00:02.000Z"), ready: false }],
      false,
    );
    expect(report.checks.database).toEqual({ ok: false, reason: "process 1: down 1; process 3: down 3" });
    expect(report.checks.processes).toEqual({ ok: false, reason: "process 4: exited; process 6: no health report within 3000 ms" });
    expect(report.lastPollAt).toBe("2026-12-01T10:00:03.000Z");
    expect(combineReports([healthy({}, null), { ...healthy({}, null), ready: false }], false).ready).toBe(false);
  });

  it("is unhealthy and not ready while a process is missing, saying which", () => {
    const report = combineReports([healthy({}, null), "not running (starting or being replaced)"], false);
    expect(report).toMatchObject({ healthy: false, ready: false, checks: { processes: { ok: false, reason: "process 2: not running (starting or being replaced)" } } });
    expect(combineReports([healthy({}, null)], true)).toMatchObject({ healthy: true, ready: false, draining: true });
  });
});
