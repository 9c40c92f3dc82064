import type { Command } from "commander";
import { createLogger } from "../runtime/logger.ts";
import { createSupervisor } from "../runtime/supervisor.ts";
import { resolveDatabase } from "./database.ts";
import { integerOption, withDatabaseOptions, type DatabaseOptions } from "./shared.ts";
import { onShutdownSignals } from "./signals.ts";
import { loadTasksModule } from "./tasks-module.ts";

interface WorkerOptions extends DatabaseOptions {
  tasks: string;
  listenUrl?: string;
  concurrency?: number;
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
      .option("--concurrency <n>", "most jobs running at once", integerOption("--concurrency", 1))
      .option("--drain-timeout <ms>", "how long running jobs may finish after a stop signal", integerOption("--drain-timeout"))
      .option("--health-port <port>", "serve /health and /ready on this port", integerOption("--health-port"))
      .option("--listen-url <url>", "a direct connection to PostgreSQL for LISTEN, when --database-url goes through PgBouncer")
      .option("--migrate", "apply migrations before starting (always done for the embedded server)")
      .option("--pretty", "human-readable logs instead of JSON"),
  ).action(async (options: WorkerOptions) => {
    const { tasks, options: moduleOptions } = await loadTasksModule(options.tasks);
    const database = await resolveDatabase(options.databaseUrl, { temporary: false });
    const logger = createLogger({ pretty: options.pretty ?? false });
    if (database.source === "embedded") logger.info({ data_dir: ".picket/pgdata" }, "no DATABASE_URL: using the embedded PostgreSQL");
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
    try {
      await supervisor.start();
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
