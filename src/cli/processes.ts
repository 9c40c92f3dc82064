// `picket worker --processes N`: N supervisors, each a process of its own (a core each), under one
// parent that starts them, starts a new one when one dies, and drains them all on one signal.
// The parent runs no jobs and holds no claims: a parent that dies leaves nothing to recover, and
// its children drain when their channel to it closes.
import { fork, type ChildProcess } from "node:child_process";
import type { Logger } from "../runtime/logger.ts";
import { onShutdownSignals } from "./signals.ts";

/** The message a child sends once its supervisor has started (it has migrated and is polling). */
export const STARTED_MESSAGE = "picket:worker-started";

/** How long the parent waits before starting a new process in place of one that died. */
const RESTART_DELAY_MS = 1_000;

export interface WorkerProcessesOptions {
  count: number;
  /** The CLI's entry point, and the arguments of this same `worker` command without --processes. */
  script: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  logger: Logger;
}

/**
 * Runs the children until a signal has drained them all; resolves with the exit code: 0 when every
 * child drained and exited 0, 1 otherwise (or when a child exited before it had started, which a
 * restart would only repeat: a task module that fails to load, a database that refuses).
 */
export const runWorkerProcesses = (options: WorkerProcessesOptions): Promise<number> =>
  new Promise((resolve) => {
    const { count, logger } = options;
    const children = new Map<number, ChildProcess>();
    let stopping = false;
    let failed = false;

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
      resolve(failed ? 1 : 0);
    };

    const start = (slot: number) => {
      // Its own process group: a Ctrl-C in a terminal reaches the parent only, which passes it on
      // once (a child that got it twice would skip its drain).
      const child = fork(options.script, options.args, { env: { ...options.env, PICKET_WORKER_PROCESS: String(slot) }, stdio: "inherit", detached: true });
      let started = false;
      child.on("message", (message) => {
        if (message === STARTED_MESSAGE) started = true;
      });
      child.on("exit", (code, signal) => {
        children.delete(slot);
        if (stopping) {
          if (code !== 0) failed = true;
          if (children.size === 0) finish();
          return;
        }
        if (!started) {
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

/** The arguments of the current `worker` command for a child: without --processes and --database-url (given by environment). */
export const childArguments = (argv: string[]): string[] => {
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--processes" || arg === "--database-url") i++;
    else if (!arg.startsWith("--processes=") && !arg.startsWith("--database-url=")) args.push(arg);
  }
  return args;
};
