import type { Command } from "commander";
import { createLogger } from "../runtime/logger.ts";
import { createSupervisor } from "../runtime/supervisor.ts";
import { describeEmbedded, resolveDatabase } from "./database.ts";
import { integerOption, portOption, withDatabaseOptions, type DatabaseOptions } from "./shared.ts";
import { attachToParent, runWorkerProcesses } from "../runtime/worker-processes.ts";
import { onShutdownSignals } from "./signals.ts";
import { loadTasksModule } from "./tasks-module.ts";

interface WorkerOptions extends DatabaseOptions {
  tasks: string;
  listenUrl?: string;
  concurrency?: number;
  processes?: number;
  drainTimeout?: number;
  healthPort?: number;
  migrate?: boolean;
  pretty?: boolean;
}

export const workerCommand = (program: Command): void => {
  withDatabaseOptions(
    program
      .command("worker")
      .description("run jobs until SIGTERM/SIGINT, then drain (a second signal interrupts and releases running jobs)")
      .requiredOption("--tasks <module>", "module exporting `tasks` (an array of defineTask(...)) and optionally `options`")
      .option("--concurrency <n>", "most jobs running at once (per process)", integerOption("--concurrency", 1))
      .option("--processes <n>", "run n worker processes (a core each) under this one, which restarts one that dies and drains them all on one signal", integerOption("--processes", 1))
      .option("--drain-timeout <ms>", "how long running jobs may finish after a stop signal", integerOption("--drain-timeout"))
      .option("--health-port <port>", "serve /health, /ready and /metrics (Prometheus) on this port", portOption("--health-port"))
      .option("--listen-url <url>", "a direct connection to PostgreSQL for LISTEN, when --database-url goes through PgBouncer")
      .option("--migrate", "apply migrations before starting (always done for the embedded server)")
      .option("--pretty", "human-readable logs instead of JSON"),
  ).action(async (options: WorkerOptions) => {
    if ((options.processes ?? 1) > 1) return workerProcesses(options);
    const { tasks, options: moduleOptions } = await loadTasksModule(options.tasks);
    const { database, logger } = await openDatabase(options);
    const supervisor = createSupervisor({
      ...moduleOptions,
      tasks,
      connectionString: database.url,
      schema: options.schema,
      migrate: options.migrate || database.source === "embedded" || moduleOptions.migrate,
      logger,
      ...(options.transactionPooling ? { transactionPooling: true } : {}),
      ...(options.statementTimeout !== undefined ? { statementTimeoutMs: options.statementTimeout } : {}),
      ...(options.listenUrl !== undefined ? { listenConnectionString: options.listenUrl } : {}),
      ...(options.concurrency !== undefined ? { concurrency: options.concurrency } : {}),
      ...(options.drainTimeout !== undefined ? { drainTimeoutMs: options.drainTimeout } : {}),
      ...(options.healthPort !== undefined ? { health: { ...moduleOptions.health, port: options.healthPort } } : {}),
    });
    let stopRequested: () => void = () => undefined;
    const stopSignal = new Promise<void>((resolve) => (stopRequested = resolve));
    const removeSignals = onShutdownSignals({
      drain: stopRequested,
      force: () => {
        supervisor.force();
        // force() ends the drain within about a second whatever the database does; should anything
        // still hold the process (a start-up still connecting or migrating), it exits anyway.
        setTimeout(() => {
          process.stderr.write("picket: still stopping 1.8 s after the second signal; exiting now (jobs still held return through the sweep)\n");
          process.exit(1);
        }, 1_800).unref();
      },
    });
    // One of the processes of `--processes N`: a parent that is gone is a signal to drain.
    const parent = attachToParent(supervisor, stopRequested);
    try {
      await supervisor.start();
      parent?.started();
      await stopSignal;
      await supervisor.stop();
    } finally {
      removeSignals();
      await database.stop();
    }
    // Drained: exit now rather than when the task module's own handles (pools, timers) let go.
    process.exit(0);
  });
};

/** The parent of `--processes N`: owns the embedded server when there is one, runs no jobs itself. */
const workerProcesses = async (options: WorkerOptions): Promise<void> => {
  const { database, logger } = await openDatabase(options);
  let code = 1;
  try {
    const group = runWorkerProcesses({
      count: options.processes!,
      script: process.argv[1]!,
      // The embedded server's tables are made by the first child to start (migrations take a lock).
      args: [...childArguments(process.argv.slice(2)), ...(database.source === "embedded" ? ["--migrate"] : [])],
      env: { ...process.env, DATABASE_URL: database.url },
      logger,
      ...(options.drainTimeout !== undefined ? { drainTimeoutMs: options.drainTimeout } : {}),
      ...(options.healthPort !== undefined ? { health: { port: options.healthPort, host: "0.0.0.0" } } : {}),
    });
    const removeSignals = onShutdownSignals({
      drain: () => void group.stop(),
      // The second signal, passed on: each child's second signal interrupts and releases its jobs.
      force: group.force,
    });
    code = await group.stopped.then(
      () => 0,
      () => 1,
    );
    removeSignals();
  } finally {
    await database.stop();
  }
  process.exit(code);
};

/** The database (the embedded server when none is given) and the logger, as every worker process starts. */
const openDatabase = async (options: WorkerOptions) => {
  const database = await resolveDatabase(options.databaseUrl, { temporary: false });
  const logger = createLogger({ pretty: options.pretty ?? false });
  const described = describeEmbedded(database, "worker");
  if (described !== undefined) logger.info({ data_dir: database.dataDir, database_url: database.url }, described);
  return { database, logger };
};

/** Options of the `worker` command that are the parent's: the database comes by environment, the health port is served once. */
const PARENT_OPTIONS = ["--processes", "--database-url", "--health-port"];

/** The arguments of the current `worker` command for a child: the same, without the parent's options. */
const childArguments = (argv: string[]): string[] => {
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (PARENT_OPTIONS.includes(arg)) i++;
    else if (!PARENT_OPTIONS.some((option) => arg.startsWith(`${option}=`))) args.push(arg);
  }
  return args;
};
