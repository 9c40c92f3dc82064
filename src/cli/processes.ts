// `picket worker --processes N`: N supervisors, each a process of its own (a core each), under one
// parent that starts them, starts a new one when one dies, and drains them all on one signal.
// The parent runs no jobs and holds no claims: a parent that dies leaves nothing to recover, and
// its children drain when their channel to it closes.
import { fork, type ChildProcess } from "node:child_process";
import { Effect, Fiber } from "effect";
import { startHealthServer, type HealthCheck, type HealthReport } from "../runtime/health-server.ts";
import type { Logger } from "../runtime/logger.ts";
import { onShutdownSignals } from "./signals.ts";

/** The message a child sends once its supervisor has started (it has migrated and is polling). */
const STARTED_MESSAGE = "picket:worker-started";

/** The parent asks a child for its health report, and the child answers, over the IPC channel. */
interface HealthRequest {
  type: "picket:health";
  id: number;
}
interface HealthAnswer {
  type: "picket:health-report";
  id: number;
  report: HealthReport;
}

/** How long the parent waits for a child's health report before calling that child unhealthy. */
const HEALTH_ANSWER_MS = 3_000;

/** How long the parent waits before starting a new process in place of one that died. */
const RESTART_DELAY_MS = 1_000;

export interface WorkerProcessesOptions {
  count: number;
  /** The CLI's entry point, and the arguments of this same `worker` command without --processes. */
  script: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  logger: Logger;
  /** Serve one /health and /ready for all the processes. */
  health?: { port: number; host: string };
}

/**
 * The child's side of the channel, when this worker is one of `--processes N` (else undefined):
 * it answers the parent's health requests, treats a parent that is gone (the channel closed) as a
 * stop signal, and tells the parent once it has started.
 */
export const attachToParent = (supervisor: { health(): Promise<HealthReport> }, parentGone: () => void): { started(): void } | undefined => {
  if (process.env.PICKET_WORKER_PROCESS === undefined || process.send === undefined) return undefined;
  const send = (message: unknown) => process.connected && process.send!(message);
  process.once("disconnect", parentGone);
  process.on("message", (message: HealthRequest) => {
    if (message?.type !== "picket:health") return;
    void supervisor.health().then((report) => send({ type: "picket:health-report", id: message.id, report } satisfies HealthAnswer));
  });
  return { started: () => send(STARTED_MESSAGE) };
};

/**
 * Runs the children until a signal has drained them all; resolves with the exit code: 0 when every
 * child drained and exited 0, 1 otherwise (or when a child exited before it had started, which a
 * restart would only repeat: a task module that fails to load, a database that refuses).
 */
export const runWorkerProcesses = (options: WorkerProcessesOptions): Promise<number> =>
  new Promise((resolve) => {
    const { count, logger } = options;
    const children = new Map<number, ChildProcess>();
    const started = new Set<ChildProcess>();
    let stopping = false;
    let failed = false;
    let nextRequest = 0;

    const reportOf = (child: ChildProcess): Promise<HealthReport | string> =>
      new Promise((resolve) => {
        const id = nextRequest++;
        const onMessage = (message: unknown) => {
          if ((message as HealthAnswer)?.type !== "picket:health-report" || (message as HealthAnswer).id !== id) return;
          done((message as HealthAnswer).report);
        };
        const onExit = () => done("exited");
        const timer = setTimeout(() => done(`no health report within ${HEALTH_ANSWER_MS} ms`), HEALTH_ANSWER_MS);
        const done = (answer: HealthReport | string) => {
          clearTimeout(timer);
          child.off("message", onMessage);
          child.off("exit", onExit);
          resolve(answer);
        };
        child.on("message", onMessage);
        child.once("exit", onExit);
        child.send({ type: "picket:health", id } satisfies HealthRequest, (error) => error && done(`cannot be asked: ${error.message}`));
      });

    const report = async (): Promise<HealthReport> => {
      const answers = await Promise.all(
        Array.from({ length: count }, async (_, i) => {
          const child = children.get(i + 1);
          if (child === undefined || !started.has(child)) return stopping ? "stopped" : "not running (starting or being replaced)";
          return reportOf(child);
        }),
      );
      return combineReports(answers, stopping);
    };
    const healthFiber = options.health ? Effect.runFork(startHealthServer(options.health, report, logger)) : undefined;

    const signalAll = () => {
      for (const child of children.values()) child.kill("SIGTERM");
    };
    const stopAll = () => {
      stopping = true;
      signalAll();
      if (children.size === 0) finish();
    };
    const finish = () => {
      removeSignals();
      if (healthFiber === undefined) return resolve(failed ? 1 : 0);
      void Effect.runPromise(Fiber.interrupt(healthFiber)).finally(() => resolve(failed ? 1 : 0));
    };

    const start = (slot: number) => {
      // Its own process group: a Ctrl-C in a terminal reaches the parent only, which passes it on
      // once (a child that got it twice would skip its drain).
      const child = fork(options.script, options.args, { env: { ...options.env, PICKET_WORKER_PROCESS: String(slot) }, stdio: "inherit", detached: true });
      child.on("message", (message) => {
        if (message === STARTED_MESSAGE) started.add(child);
      });
      child.on("exit", (code, signal) => {
        children.delete(slot);
        const hadStarted = started.delete(child);
        if (stopping) {
          if (code !== 0) failed = true;
          if (children.size === 0) finish();
          return;
        }
        if (!hadStarted) {
          logger.error({ process: slot, pid: child.pid, code, signal }, `worker process ${slot} exited before it started (code ${code ?? signal}); stopping the others`);
          failed = true;
          return stopAll();
        }
        logger.warn({ process: slot, pid: child.pid, code, signal }, `worker process ${slot} (pid ${child.pid}) died (${signal ?? `code ${code}`}); starting a new one`);
        setTimeout(() => {
          if (!stopping) start(slot);
        }, RESTART_DELAY_MS);
      });
      children.set(slot, child);
      logger.info({ process: slot, pid: child.pid }, `worker process ${slot} starting (pid ${child.pid})`);
    };

    const removeSignals = onShutdownSignals({
      drain: stopAll,
      // The second signal, passed on: each child's second signal interrupts and releases its jobs.
      force: signalAll,
    });
    for (let slot = 1; slot <= count; slot++) start(slot);
  });

/**
 * One report for all the processes (`answers[i]` is process i + 1's report, or why there is none):
 * each check holds when it holds in every process, its reasons named by process, and `processes`
 * holds when every process answered.
 */
export const combineReports = (answers: Array<HealthReport | string>, stopping: boolean): HealthReport => {
  const reports = answers.flatMap((answer, i) => (typeof answer === "string" ? [] : [{ slot: i + 1, report: answer }]));
  const combine = (name: "database" | "poll" | "leases"): HealthCheck => {
    const failing = reports.filter(({ report }) => !report.checks[name].ok);
    return failing.length === 0 ? { ok: true } : { ok: false, reason: failing.map(({ slot, report }) => `process ${slot}: ${report.checks[name].reason}`).join("; ") };
  };
  const missing = answers.flatMap((answer, i) => (typeof answer === "string" ? [`process ${i + 1}: ${answer}`] : []));
  const checks = {
    database: combine("database"),
    poll: combine("poll"),
    leases: combine("leases"),
    processes: missing.length === 0 ? { ok: true } : { ok: false, reason: missing.join("; ") },
  };
  const inFlight: Record<string, number> = {};
  for (const { report } of reports) for (const [task, n] of Object.entries(report.inFlight)) inFlight[task] = (inFlight[task] ?? 0) + n;
  const polls = reports.flatMap(({ report }) => (report.lastPollAt === null ? [] : [report.lastPollAt])).sort();
  return {
    healthy: Object.values(checks).every((check) => check.ok),
    ready: !stopping && missing.length === 0 && reports.every(({ report }) => report.ready),
    draining: stopping,
    lastPollAt: polls.at(-1) ?? null,
    inFlight,
    checks,
  };
};

/** Options of the `worker` command that are the parent's: the database comes by environment, the health port is served once. */
const PARENT_OPTIONS = ["--processes", "--database-url", "--health-port"];

/** The arguments of the current `worker` command for a child: the same, without the parent's options. */
export const childArguments = (argv: string[]): string[] => {
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (PARENT_OPTIONS.includes(arg)) i++;
    else if (!PARENT_OPTIONS.some((option) => arg.startsWith(`${option}=`))) args.push(arg);
  }
  return args;
};
