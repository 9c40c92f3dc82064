import type { Command } from "commander";
import { listPaused, listQueues, pauseClaims, resumeClaims, type PausedEntry, type PauseTarget, type QueueView } from "../db/index.ts";
import { byOption, operator, statementOptions, withDatabaseOptions, withPool, type DatabaseOptions } from "./shared.ts";

/** How long ago `at` was, to the second: "0s", "42s", "3m 5s", "2h 0m", "3d 4h". */
export const age = (at: Date, now: Date): string => {
  const s = Math.max(0, Math.floor((now.getTime() - at.getTime()) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3_600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86_400) return `${Math.floor(s / 3_600)}h ${Math.floor((s % 3_600) / 60)}m`;
  return `${Math.floor(s / 86_400)}d ${Math.floor((s % 86_400) / 3_600)}h`;
};

const since = (p: PausedEntry): string => `paused since ${p.pausedAt.toISOString()}${p.pausedBy === null ? "" : ` by ${p.pausedBy}`}`;

/** One line per queue (its jobs by state, its oldest ready job's wait, its pause), then the paused tasks. */
export const formatQueues = (queues: QueueView[], paused: PausedEntry[], now: Date): string => {
  const tasks = paused.filter((p) => p.kind === "task");
  if (queues.length === 0 && tasks.length === 0) return "(no queues have jobs and nothing is paused: a job names a queue with enqueueJob({ queue }))\n";
  let out = "";
  if (queues.length > 0) {
    const header = ["queue", "ready", "scheduled", "processing", "oldest ready", "state"];
    const rows = queues.map((q) => [q.name, String(q.ready), String(q.scheduled), String(q.processing), q.oldestReadyAt === null ? "—" : age(q.oldestReadyAt, now), q.paused === null ? "running" : since(q.paused)]);
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    out += `${[header, ...rows].map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n")}\n`;
  }
  if (tasks.length > 0) out += `${out === "" ? "" : "\n"}paused tasks:\n${tasks.map((t) => `  ${t.name}  ${since(t)}\n`).join("")}`;
  return out;
};

/** The queue argument or --task: exactly one. */
const targetOf = (queue: string | undefined, options: { task?: string }, verb: string): PauseTarget => {
  if (queue !== undefined && options.task !== undefined) throw new Error(`picket queues ${verb} takes a queue or --task <name>, not both`);
  if (queue !== undefined) return { queue };
  if (options.task !== undefined) return { task: options.task };
  throw new Error(`picket queues ${verb} needs a queue (picket queues ${verb} emails) or a task (picket queues ${verb} --task send-email)`);
};

const described = (target: PauseTarget): string => ("queue" in target ? `queue ${target.queue}` : `task ${target.task}`);
const resumeHint = (target: PauseTarget): string => ("queue" in target ? `picket queues resume ${target.queue}` : `picket queues resume --task ${target.task}`);

export const queuesCommand = (program: Command): void => {
  const queues = program.command("queues").description("queues and paused tasks: list them, or pause and resume the claims of one");
  withDatabaseOptions(
    queues.command("list").description("each queue with jobs or a pause: jobs ready, scheduled and processing, the oldest ready job's wait; then the paused tasks").option("--json", "print JSON"),
  ).action(async (options: DatabaseOptions & { json?: boolean }) => {
    const [found, paused, now] = await withPool(options, async (pool) => {
      const [found, paused, { rows }] = await Promise.all([listQueues(pool, statementOptions(options)), listPaused(pool, statementOptions(options)), pool.query<{ now: Date }>("SELECT now()")]);
      return [found, paused, rows[0]!.now] as const;
    });
    process.stdout.write(options.json ? `${JSON.stringify({ queues: found, pausedTasks: paused.filter((p) => p.kind === "task") }, null, 2)}\n` : formatQueues(found, paused, now));
  });
  withDatabaseOptions(
    queues
      .command("pause")
      .description("stop every worker claiming the jobs of a queue (or of a task, with --task): they stay pending, running ones finish")
      .argument("[queue]")
      .option("--task <name>", "pause a task's jobs, whatever their queue")
      .option(...byOption),
  ).action(async (queue: string | undefined, options: DatabaseOptions & { task?: string; by?: string }) => {
    const target = targetOf(queue, options, "pause");
    const result = await withPool(options, (pool) => pauseClaims(pool, target, { ...statementOptions(options), by: operator(options.by) }));
    process.stdout.write(
      result.outcome === "applied"
        ? `${described(target)} paused: no worker claims its jobs until ${resumeHint(target)}\n`
        : `${described(target)} was already ${since(result.paused)}\n`,
    );
  });
  withDatabaseOptions(
    queues
      .command("resume")
      .description("let workers claim a paused queue's (or task's, with --task) jobs again; they are woken to do it at once")
      .argument("[queue]")
      .option("--task <name>", "resume a paused task"),
  ).action(async (queue: string | undefined, options: DatabaseOptions & { task?: string }) => {
    const target = targetOf(queue, options, "resume");
    const result = await withPool(options, (pool) => resumeClaims(pool, target, statementOptions(options)));
    process.stdout.write(result.outcome === "applied" ? `${described(target)} resumed: workers claim its jobs again\n` : `${described(target)} was not paused (picket queues list shows what is)\n`);
  });
};
