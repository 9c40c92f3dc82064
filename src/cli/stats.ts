import type { Command } from "commander";
import { LIVE_WORKER_MS, queueStats, type QueueStats } from "../db/index.ts";
import { statementOptions, withDatabaseOptions, withPool, type DatabaseOptions } from "./shared.ts";

// Pending jobs in three columns: ready ones wait for a worker, scheduled and retrying ones for their time.
const STATES = ["ready", "scheduled", "retrying", "waiting", "processing", "completed", "dead", "cancelled"] as const;

export const formatStats = (stats: QueueStats): string => {
  const types = [...new Set(stats.counts.map((c) => c.type))];
  const count = (type: string, state: string) => stats.counts.find((c) => c.type === type && c.state === state)?.count ?? 0;
  const width = Math.max(4, ...types.map((t) => t.length));
  const lines = [["task".padEnd(width), ...STATES.map((s) => s.padStart(10))].join(" ")];
  for (const type of types) lines.push([type.padEnd(width), ...STATES.map((s) => String(count(type, s)).padStart(10))].join(" "));
  if (types.length === 0) lines.push("(no jobs)");
  const { liveWorkers, unhandled } = stats.handlers;
  if (unhandled.length > 0) {
    const list = unhandled.map((u) => `${u.type} (${u.count})`).join(", ");
    lines.push(
      "",
      liveWorkers === 0
        ? `no live worker (none has sent a heartbeat in the last ${LIVE_WORKER_MS / 1000} s): pending jobs wait for one: ${list}`
        : `pending jobs no live worker has a handler for: ${list}; start a worker with these tasks, or cancel the jobs (picket jobs cancel <id>)`,
    );
  }
  // Completed rows are deleted unless kept: the live workers say how fast jobs complete.
  if (stats.completedPerSecond.length > 0) {
    lines.push("", `completed per second by live workers: ${stats.completedPerSecond.map((r) => `${r.type} ${r.perSecond.toFixed(1)}`).join(", ")}`);
  }
  const age = stats.oldestReadyAgeSeconds;
  lines.push("", `oldest ready job: ${age === null ? "none" : `${age.toFixed(1)} s`}`);
  if (stats.recentDead.length > 0) {
    lines.push("", "recent dead jobs (picket jobs retry <id> to run one again):");
    for (const d of stats.recentDead) lines.push(`  ${d.id}  ${d.type}  after ${d.attempts} attempt(s): ${d.lastError ?? ""}`);
  }
  return `${lines.join("\n")}\n`;
};

export const statsCommand = (program: Command): void => {
  withDatabaseOptions(
    program.command("stats").description("jobs per task and state (ready, scheduled, retrying, processing, and finished ones where kept), completions per second, oldest waiting job, recent dead jobs").option("--json", "print JSON"),
  ).action(async (options: DatabaseOptions & { json?: boolean }) => {
    const stats = await withPool(options, (pool) => queueStats(pool, statementOptions(options)));
    process.stdout.write(options.json ? `${JSON.stringify(stats, null, 2)}\n` : formatStats(stats));
  });
};
