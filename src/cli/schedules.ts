import type { Command } from "commander";
import { listSchedules, type MissedPolicy, type ScheduleView } from "../db/index.ts";
import { statementOptions, withDatabaseOptions, withPool, type DatabaseOptions } from "./shared.ts";

const policy = (missed: MissedPolicy): string => (typeof missed === "string" ? missed : `catch up ${missed.catchUp}`);

/** One line per schedule: its name, task, pattern (and zone), missed policy, last tick fired and next run. */
export const formatSchedules = (schedules: ScheduleView[]): string => {
  if (schedules.length === 0) return "(no schedules: declare one with defineTask({ schedule }) or upsertSchedule())\n";
  const header = ["schedule", "task", "cron", "missed", "last fired", "next run"];
  const rows = schedules.map((s) => [
    s.name,
    s.task,
    s.timezone === null ? s.cron : `${s.cron} (${s.timezone})`,
    policy(s.missed),
    s.lastFired === null ? "never" : s.lastFired.toISOString(),
    s.nextRun === null ? "never" : s.nextRun.toISOString(),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  return `${[header, ...rows].map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n")}\n`;
};

export const schedulesCommand = (program: Command): void => {
  withDatabaseOptions(
    program.command("schedules").description("recurring jobs: each schedule with its pattern, missed policy, last tick fired and next run (UTC)").option("--json", "print JSON"),
  ).action(async (options: DatabaseOptions & { json?: boolean }) => {
    const schedules = await withPool(options, (pool) => listSchedules(pool, statementOptions(options)));
    process.stdout.write(options.json ? `${JSON.stringify(schedules, null, 2)}\n` : formatSchedules(schedules));
  });
};
