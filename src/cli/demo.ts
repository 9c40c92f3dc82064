// `picket demo`: an embedded PostgreSQL, a mixed workload, a worker with a live display, and a
// summary of what happened to every job.
import type { Command } from "commander";
import type pg from "pg";
import { enqueueJobs, migrate } from "../db/index.ts";
import { createLogger } from "../runtime/logger.ts";
import { createSupervisor } from "../runtime/supervisor.ts";
import { demoTasks, demoWorkload } from "./demo-tasks.ts";
import { givenDatabaseUrl } from "./database.ts";
import { integerOption, withPool } from "./shared.ts";

const SCHEMA = "picket_demo";

interface Row {
  id: string;
  type: string;
  status: string;
  attempts: number;
  progress: { percent?: number } | null;
}

const snapshot = async (pool: pg.Pool): Promise<Row[]> =>
  (await pool.query<Row>(`SELECT id, type, status, attempts, progress FROM ${SCHEMA}.jobs ORDER BY id`)).rows;

const table = (headers: string[], rows: Array<Array<string | number>>): string => {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells: Array<string | number>) =>
    cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]!) : String(c).padStart(widths[i]!))).join("  ");
  return [line(headers), widths.map((w) => "─".repeat(w)).join("  "), ...rows.map(line)].join("\n");
};

const liveView = (rows: Row[], elapsedMs: number): string => {
  const tasks = demoTasks.map((t) => t.name);
  const count = (type: string, status: string) => rows.filter((r) => r.type === type && r.status === status).length;
  const running = rows.filter((r) => r.status === "processing");
  const bar = (percent: number) => `${"█".repeat(Math.round(percent / 10))}${"░".repeat(10 - Math.round(percent / 10))}`;
  return [
    `picket demo — ${(elapsedMs / 1000).toFixed(1)} s`,
    "",
    table(["task", "pending", "running", "completed", "dead"], tasks.map((t) => [t, count(t, "pending"), count(t, "processing"), count(t, "completed"), count(t, "dead")])),
    "",
    "running now:",
    ...running.map((r) => `  job ${r.id.padStart(3)}  ${r.type.padEnd(8)} attempt ${r.attempts}${r.progress?.percent !== undefined ? `  ${bar(r.progress.percent)} ${r.progress.percent}%` : ""}`),
  ].join("\n");
};

export const runDemo = async (options: { databaseUrl?: string; concurrency: number }): Promise<void> => {
  const tty = process.stdout.isTTY === true;
  const say = (line: string) => process.stdout.write(`${line}\n`);
  say(givenDatabaseUrl(options.databaseUrl) ? "picket demo: using the database you gave" : "picket demo: starting an embedded PostgreSQL (a temporary folder, removed afterwards)…");
  // Ctrl-C (or SIGTERM) ends the demo the orderly way: the worker is forced, then the embedded
  // server is stopped and its temporary folder removed. Without these handlers Node would exit
  // at once, leaving the server (in its own process group) running and its folder behind.
  let interrupted: NodeJS.Signals | undefined;
  let onInterrupt = () => undefined as void;
  const interrupt = (signal: NodeJS.Signals) => {
    if (interrupted !== undefined) return;
    interrupted = signal;
    process.stderr.write(`picket demo: ${signal} received: stopping, and removing the embedded server if one was started\n`);
    onInterrupt();
  };
  process.on("SIGINT", interrupt);
  process.on("SIGTERM", interrupt);
  try {
    await demoOn(options, say, tty, () => interrupted !== undefined, (run) => (onInterrupt = run));
  } catch (error) {
    // A start-up the signal cut short (an initdb that got the terminal's Ctrl-C too) is not an error.
    if (interrupted === undefined) throw error;
  } finally {
    process.off("SIGINT", interrupt);
    process.off("SIGTERM", interrupt);
  }
  if (interrupted !== undefined) process.exitCode = 130;
};

const demoOn = async (
  options: { databaseUrl?: string; concurrency: number },
  say: (line: string) => void,
  tty: boolean,
  isInterrupted: () => boolean,
  whenInterrupted: (run: () => void) => void,
): Promise<void> => {
  await withPool(
    { schema: SCHEMA, ...(options.databaseUrl !== undefined ? { databaseUrl: options.databaseUrl } : {}) },
    async (pool, database) => {
      if (isInterrupted()) return;
      if (database.dataDir !== undefined) say(`embedded PostgreSQL started (data in ${database.dataDir})`);
      // The demo's own schema, recreated each run, so it never touches a real queue's jobs.
      await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
      await migrate(pool, { schema: SCHEMA });
      const jobs = await enqueueJobs(pool, demoWorkload(), { schema: SCHEMA });
      say(`enqueued ${jobs.length} jobs: fast, slow (with progress), flaky (fail twice, then succeed), one that times out, one poison job`);

      const supervisor = createSupervisor({
        tasks: demoTasks,
        connectionString: database.url,
        schema: SCHEMA,
        concurrency: options.concurrency,
        pollIntervalMs: 200,
        sweepIntervalMs: 1_000,
        retention: false,
        // The demo's summary reads every job's row, completed ones included (a worker deletes
        // them at completion by default).
        keepCompleted: true,
        // The demo prints every job's outcome itself, dead ones with their error: the worker's
        // own per-attempt lines (JSON) would say each one twice. Only what stops the demo is logged.
        logger: createLogger({ level: "fatal" }),
      });
      const { default: logUpdate } = await import("log-update");
      // Per task, each run's time in its handler and its wait for a slot before, apart.
      const runs = new Map<string, { runMs: number; waitMs: number }[]>();
      supervisor.onJobFinished(({ job, outcome, error, runMs, waitMs }) => {
        runs.set(job.type, [...(runs.get(job.type) ?? []), { runMs, waitMs }]);
        if (!tty) say(`job ${job.id} ${job.type} attempt ${job.attempts}: ${outcome} after running ${runMs} ms (waited ${waitMs} ms for a slot)${error ? ` (${error})` : ""}`);
      });
      const started = Date.now();
      whenInterrupted(() => supervisor.force());
      await supervisor.start();
      let rows = await snapshot(pool);
      while (!isInterrupted() && rows.some((r) => r.status === "pending" || r.status === "processing")) {
        if (tty) logUpdate(liveView(rows, Date.now() - started));
        await new Promise((resolve) => setTimeout(resolve, 150));
        rows = await snapshot(pool);
      }
      if (tty) logUpdate(liveView(rows, Date.now() - started));
      logUpdate.done();
      await supervisor.stop();
      if (isInterrupted()) return;

      const { rows: summary } = await pool.query<{
        type: string; jobs: number; completed: number; dead: number; attempts: number; avg_ms: number; max_ms: number;
      }>(`
        SELECT type, count(*)::int AS jobs, count(*) FILTER (WHERE status = 'completed')::int AS completed,
               count(*) FILTER (WHERE status = 'dead')::int AS dead, sum(attempts)::int AS attempts,
               round(avg(extract(epoch FROM finished_at - created_at) * 1000))::int AS avg_ms,
               round(max(extract(epoch FROM finished_at - created_at) * 1000))::int AS max_ms
        FROM ${SCHEMA}.jobs GROUP BY type ORDER BY min(id)`);
      say("");
      say(`all ${jobs.length} jobs finished in ${((Date.now() - started) / 1000).toFixed(1)} s`);
      say("");
      say(
        table(
          ["task", "jobs", "completed", "dead", "attempts", "runs", "avg run ms", "avg slot wait ms", "enqueue→done avg ms", "max ms"],
          summary.map((s) => {
            const ran = runs.get(s.type) ?? [];
            const mean = (pick: (r: { runMs: number; waitMs: number }) => number) => (ran.length ? Math.round(ran.reduce((a, r) => a + pick(r), 0) / ran.length) : 0);
            return [s.type, s.jobs, s.completed, s.dead, s.attempts, ran.length, mean((r) => r.runMs), mean((r) => r.waitMs), s.avg_ms, s.max_ms];
          }),
        ),
      );
      const { rows: dead } = await pool.query<{ id: string; type: string; last_error: string }>(
        `SELECT id, type, last_error FROM ${SCHEMA}.jobs WHERE status = 'dead' ORDER BY id`,
      );
      say("");
      for (const d of dead) say(`dead: job ${d.id} (${d.type}): ${d.last_error}`);
    },
    { temporary: true },
  );
};

export const demoCommand = (program: Command): void => {
  program
    .command("demo")
    .description("run a mixed workload on an embedded PostgreSQL (or --database-url) and show what happens")
    .option("--database-url <url>", "use this server instead of the embedded one (the demo works in schema picket_demo)")
    // Checked as it is parsed, before the database is touched (it was once checked by the
    // supervisor, after 50 jobs had been enqueued).
    .option("--concurrency <n>", "worker concurrency", integerOption("--concurrency", 1), 8)
    .action(runDemo);
};
