// N supervisors, each a process of its own (a core each), under one parent that starts them,
// starts a new one when one dies, and drains them all on one stop: `picket worker --processes N`,
// and startWorkerProcesses for a service that embeds them. The parent runs no jobs and holds no
// claims: a parent that dies leaves nothing to recover, and its children drain when their channel
// to it closes.
import { fork, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import * as Effect from "effect/Effect";
import * as Fiber from "effect/Fiber";
import { InvalidConfigError } from "../db/index.ts";
import { DEFAULT_DRAIN_TIMEOUT_MS } from "./config.ts";
import type { HealthCheck, HealthReport } from "./health-server.ts";
import { createLogger, type Logger } from "./logger.ts";

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

/**
 * A process that dies is started again after `firstDelayMs`. One that keeps dying within
 * `steadyMs` of its start waits twice as long each time, up to `maxDelayMs`, and after `limit` such
 * deaths in a row the group stops (a crash at start-up would otherwise restart every second forever).
 */
export interface RestartPolicy {
  firstDelayMs: number;
  maxDelayMs: number;
  limit: number;
  steadyMs: number;
}
const RESTARTS: RestartPolicy = { firstDelayMs: 1_000, maxDelayMs: 30_000, limit: 5, steadyMs: 30_000 };

/**
 * After stop(), a process still running when its drain deadline has passed by this much is killed
 * (SIGKILL): a handler that never yields blocks its event loop, and with it the process's own
 * deadline and its answer to every signal. After force(), it gets FORCE_KILL_MS (it exits by
 * itself 1.8 s after its second signal when its loop runs).
 */
const KILL_GRACE_MS = 5_000;
const FORCE_KILL_MS = 5_000;

export interface WorkerProcessesOptions {
  count: number;
  /** The CLI's entry point, and the arguments of one process's `worker` command (without --processes). */
  script: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  logger: Logger;
  /** Serve one /health and /ready for all the processes. */
  health?: { port: number; host: string };
  /** The processes' drain deadline (their `--drain-timeout`); default a supervisor's, 30 s. */
  drainTimeoutMs?: number;
  /** How processes that die are started again; default RESTARTS. */
  restarts?: RestartPolicy;
}

/** A running group of worker processes. */
export interface WorkerProcesses {
  /** Resolves once every process has started (migrated, polling); rejects if the group stops first. */
  readonly started: Promise<void>;
  /**
   * Settles when every process has exited: resolves when each drained cleanly, rejects (saying
   * which) when one exited with an error or died before it started.
   */
  readonly stopped: Promise<void>;
  /**
   * Drains every process (a SIGTERM each); returns `stopped`. A process still running its drain
   * deadline plus 5 s later is killed (SIGKILL), and `stopped` rejects naming it.
   */
  stop(): Promise<void>;
  /**
   * A second stop (a stop first, if none came): every process interrupts its running jobs and
   * releases them; one still running 5 s later is killed, and `stopped` rejects naming it.
   */
  force(): void;
  /** One report for all the processes, as the group's /health serves it. */
  health(): Promise<HealthReport>;
}

/** What attachToParent uses of a child process's channel to its parent: node's `process`. */
export interface ParentChannel {
  send?: (message: unknown) => unknown;
  readonly connected?: boolean;
  on(event: "message", listener: (message: unknown) => void): unknown;
  once(event: "disconnect", listener: () => void): unknown;
}

/**
 * The child's side of the channel, when this worker is one of `--processes N` (else undefined):
 * it answers the parent's health requests, treats a parent that is gone (the channel closed) as a
 * stop signal, and tells the parent once it has started.
 */
export const attachToParent = (
  supervisor: { health(): Promise<HealthReport> },
  parentGone: () => void,
  channel: ParentChannel = process,
  env: NodeJS.ProcessEnv = process.env,
): { started(): void } | undefined => {
  if (env.PICKET_WORKER_PROCESS === undefined || channel.send === undefined) return undefined;
  // A parent gone since the request came: nothing to answer (send would throw).
  const send = (message: unknown) => channel.connected && channel.send!(message);
  channel.once("disconnect", parentGone);
  channel.on("message", (message) => {
    const request = message as HealthRequest | undefined;
    if (request?.type !== "picket:health") return;
    void supervisor.health().then((report) => send({ type: "picket:health-report", id: request.id, report } satisfies HealthAnswer));
  });
  return { started: () => send(STARTED_MESSAGE) };
};

/** Starts the processes and runs them, each replaced when it dies, until stop(). */
export const runWorkerProcesses = (options: WorkerProcessesOptions): WorkerProcesses => {
  const { count, logger } = options;
  const restarts = options.restarts ?? RESTARTS;
  const drainTimeoutMs = options.drainTimeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS;
  const children = new Map<number, ChildProcess>();
  // Per slot: deaths in a row that came within restarts.steadyMs of the process's start.
  const quickDeaths = new Map<number, number>();
  const killTimers = new Set<NodeJS.Timeout>();
  // Processes that have started and not exited: the ones asked for health.
  const running = new Set<ChildProcess>();
  let stopping = false;
  let failure: string | undefined;
  let nextRequest = 0;
  // Every slot's first start; `started` settles once all have, or the group stops first.
  const everStarted = new Set<number>();
  const allStarted = Promise.withResolvers<void>();
  const stopped = Promise.withResolvers<void>();
  // A caller that awaits only one of them must not see the other as an unhandled rejection.
  allStarted.promise.catch(() => undefined);
  stopped.promise.catch(() => undefined);

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
        if (child === undefined || !running.has(child)) return stopping ? "stopped" : "not running (starting or being replaced)";
        return reportOf(child);
      }),
    );
    return combineReports(answers, stopping);
  };
  // (The HTTP server's modules are loaded only when a health port is given.)
  const health = options.health;
  const healthFiber = health
    ? Effect.runFork(Effect.flatMap(Effect.promise(() => import("./health-server.ts")), ({ startHealthServer }) => startHealthServer(health, report, undefined, logger)))
    : undefined;

  const signalAll = () => {
    for (const child of children.values()) child.kill("SIGTERM");
  };
  /** Kills, after `ms`, every process still running then, and says so. */
  const killAfter = (ms: number, why: string) => {
    const timer = setTimeout(() => {
      killTimers.delete(timer);
      for (const [slot, child] of children) {
        logger.error(
          { process: slot, pid: child.pid },
          `worker process ${slot} (pid ${child.pid}) was still running ${ms} ms after ${why}; killed it (SIGKILL). ` +
            "A handler that never yields blocks its process; its jobs go back to the queue through the sweep once their lease runs out",
        );
        failure ??= `worker process ${slot} (pid ${child.pid}) did not exit after ${why} and was killed`;
        child.kill("SIGKILL");
      }
    }, ms);
    killTimers.add(timer);
  };
  const stopAll = () => {
    stopping = true;
    signalAll();
    if (children.size === 0) return finish();
    killAfter(drainTimeoutMs + KILL_GRACE_MS, "the stop");
  };
  const finish = () => {
    for (const timer of killTimers) clearTimeout(timer);
    killTimers.clear();
    allStarted.reject(new Error(`picket: the worker processes stopped before all had started${failure ? `: ${failure}` : ""}`));
    const done = () => (failure === undefined ? stopped.resolve() : stopped.reject(new Error(`picket: ${failure}`)));
    if (healthFiber === undefined) return done();
    void Effect.runPromise(Fiber.interrupt(healthFiber)).finally(done);
  };

  const start = (slot: number) => {
    // Its own process group: a Ctrl-C in a terminal reaches the parent only, which passes it on
    // once (a child that got it twice would skip its drain).
    const child = fork(options.script, options.args, { env: { ...options.env, PICKET_WORKER_PROCESS: String(slot) }, stdio: "inherit", detached: true });
    const startedAt = performance.now();
    child.on("message", (message) => {
      if (message !== STARTED_MESSAGE) return;
      running.add(child);
      everStarted.add(slot);
      if (everStarted.size === count) allStarted.resolve();
    });
    child.on("exit", (code, signal) => {
      children.delete(slot);
      const hadStarted = running.delete(child);
      if (stopping) {
        if (code !== 0) failure ??= `worker process ${slot} (pid ${child.pid}) exited with ${code === null ? signal : `code ${code}`} while draining`;
        if (children.size === 0) finish();
        return;
      }
      if (!hadStarted) {
        logger.error({ process: slot, pid: child.pid, code, signal }, `worker process ${slot} exited before it started (code ${code ?? signal}); stopping the others`);
        failure = `worker process ${slot} exited before it started (code ${code ?? signal}); see its output above`;
        return stopAll();
      }
      const quick = performance.now() - startedAt < restarts.steadyMs ? (quickDeaths.get(slot) ?? 0) + 1 : 0;
      quickDeaths.set(slot, quick);
      if (quick >= restarts.limit) {
        failure = `worker process ${slot} died ${quick} times in a row within ${restarts.steadyMs} ms of starting; stopping the others (see its output above)`;
        logger.error({ process: slot, pid: child.pid, code, signal }, failure);
        return stopAll();
      }
      const delayMs = quick === 0 ? restarts.firstDelayMs : Math.min(restarts.maxDelayMs, restarts.firstDelayMs * 2 ** (quick - 1));
      logger.warn(
        { process: slot, pid: child.pid, code, signal, restart_in_ms: delayMs },
        `worker process ${slot} (pid ${child.pid}) died (${signal ?? `code ${code}`}); starting a new one in ${delayMs} ms`,
      );
      setTimeout(() => {
        if (!stopping) start(slot);
      }, delayMs);
    });
    children.set(slot, child);
    logger.info({ process: slot, pid: child.pid }, `worker process ${slot} starting (pid ${child.pid})`);
  };

  for (let slot = 1; slot <= count; slot++) start(slot);
  return {
    started: allStarted.promise,
    stopped: stopped.promise,
    stop: () => {
      if (!stopping) stopAll();
      return stopped.promise;
    },
    // The second stop, passed on: each child's second signal interrupts and releases its jobs.
    force: () => {
      if (!stopping) stopAll();
      if (children.size === 0) return;
      signalAll();
      killAfter(FORCE_KILL_MS, "the second stop");
    },
    health: report,
  };
};

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

/** What startWorkerProcesses runs: N copies of `picket worker` over one tasks module. */
export interface StartWorkerProcessesOptions {
  /** How many processes (a core each); at least 1. */
  processes: number;
  /**
   * The module each process loads its tasks from, as `picket worker --tasks` takes it: it exports
   * `tasks` (an array of defineTask results, or as the default export) and may export `options`
   * (further supervisor options). A path (relative to the working directory) or a file URL.
   */
  tasksModule: string | URL;
  connectionString: string;
  /** Per process; default 10. */
  concurrency?: number;
  schema?: string;
  drainTimeoutMs?: number;
  statementTimeoutMs?: number;
  /** The connection string goes through a pooler in transaction mode (PgBouncer). */
  transactionPooling?: boolean;
  /** A direct connection for LISTEN, when connectionString goes through a pooler. */
  listenConnectionString?: string;
  /** Apply migrations in the first process to start; default false. */
  migrate?: boolean;
  /** Serve one /health and /ready for all the processes. */
  health?: { port: number; host?: string };
  /** The parent's own log lines (processes starting, dying, replaced); default JSON to stdout. */
  logger?: Logger;
  /** Environment of the processes; default this process's. */
  env?: NodeJS.ProcessEnv;
}

// The `picket` command's entry point beside this module: src/cli/main.ts when running from
// source, dist/cli/main.js when installed.
const CLI_ENTRY = fileURLToPath(new URL(import.meta.url.endsWith(".ts") ? "../cli/main.ts" : "../cli/main.js", import.meta.url));

/** One process's `picket worker` arguments for these options (its connection string goes in its environment). */
export const workerArguments = (options: StartWorkerProcessesOptions): string[] => {
  const tasksModule = options.tasksModule instanceof URL ? fileURLToPath(options.tasksModule) : options.tasksModule;
  const flag = (name: string, value: string | number | undefined) => (value === undefined ? [] : [name, String(value)]);
  return [
    "worker",
    "--tasks",
    tasksModule,
    ...flag("--concurrency", options.concurrency),
    ...flag("--schema", options.schema),
    ...flag("--drain-timeout", options.drainTimeoutMs),
    ...flag("--statement-timeout", options.statementTimeoutMs),
    ...flag("--listen-url", options.listenConnectionString),
    ...(options.transactionPooling ? ["--transaction-pooling"] : []),
    ...(options.migrate ? ["--migrate"] : []),
  ];
};

/**
 * Runs `processes` supervisors, each a process of its own, from a service that embeds picket: the
 * group `picket worker --processes N` runs, without its signal handling (the service owns its
 * signals: call stop() from them). A process that dies is replaced after a second; stop() drains
 * them all.
 */
export const startWorkerProcesses = (options: StartWorkerProcessesOptions): WorkerProcesses => {
  if (!Number.isInteger(options.processes) || options.processes < 1) {
    throw new InvalidConfigError(`picket: processes must be an integer ≥ 1 (got ${String(options.processes)}).`);
  }
  if (typeof options.connectionString !== "string" || options.connectionString === "") {
    throw new InvalidConfigError("picket: startWorkerProcesses needs a connectionString (each process opens its own pool).");
  }
  return runWorkerProcesses({
    count: options.processes,
    script: CLI_ENTRY,
    args: workerArguments(options),
    env: { ...(options.env ?? process.env), DATABASE_URL: options.connectionString },
    logger: options.logger ?? createLogger(),
    ...(options.drainTimeoutMs !== undefined ? { drainTimeoutMs: options.drainTimeoutMs } : {}),
    ...(options.health ? { health: { port: options.health.port, host: options.health.host ?? "0.0.0.0" } } : {}),
  });
};
