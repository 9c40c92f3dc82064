import type { Command } from "commander";
import { listSchedules, pauseSchedule, resumeSchedule, triggerSchedule, type MissedPolicy, type ScheduleActionResult, type ScheduleView } from "../db/index.ts";
import { byOption, operator, statementOptions, withDatabaseOptions, withPool, type DatabaseOptions } from "./shared.ts";

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

/** A pause's or resume's outcome in words; a schedule that does not exist is an error. */
const said = (name: string, result: ScheduleActionResult, done: string, unchanged: string): string => {
  if (result.outcome === "not_found") throw new Error(`there is no schedule ${JSON.stringify(name)} (picket schedules lists them)`);
  return `schedule ${name} ${result.outcome === "applied" ? done : unchanged}\n`;
};

export const schedulesCommand = (program: Command): void => {
  const schedules = withDatabaseOptions(
    program.command("schedules").description("recurring jobs: each schedule with its pattern, missed policy, last tick fired and next run (UTC); or pause, resume or trigger one").option("--json", "print JSON"),
  ).action(async (options: DatabaseOptions & { json?: boolean }) => {
    const found = await withPool(options, (pool) => listSchedules(pool, statementOptions(options)));
    process.stdout.write(options.json ? `${JSON.stringify(found, null, 2)}\n` : formatSchedules(found));
  });
  withDatabaseOptions(schedules.command("pause").description("stop a schedule firing (a worker registering it again keeps it paused)").argument("<name>").option(...byOption)).action(
    async (name: string, options: DatabaseOptions & { by?: string }) => {
      const result = await withPool(options, (pool) => pauseSchedule(pool, name, { ...statementOptions(options), by: operator(options.by) }));
      process.stdout.write(said(name, result, "paused: it fires no tick until resumed", "was already paused"));
    },
  );
  withDatabaseOptions(schedules.command("resume").description("let a paused schedule fire again, from now (the ticks while it was paused are skipped)").argument("<name>")).action(
    async (name: string, options: DatabaseOptions) => {
      const result = await withPool(options, (pool) => resumeSchedule(pool, name, statementOptions(options)));
      process.stdout.write(said(name, result, "resumed: it fires from its next tick", "was not paused"));
    },
  );
  withDatabaseOptions(schedules.command("trigger").description("make one job of a schedule now, as a tick would (paused or not)").argument("<name>").option(...byOption)).action(
    async (name: string, options: DatabaseOptions & { by?: string }) => {
      const id = await withPool(options, (pool) => triggerSchedule(pool, name, { ...statementOptions(options), by: operator(options.by) }));
      if (id === null) throw new Error(`there is no schedule ${JSON.stringify(name)} (picket schedules lists them)`);
      process.stdout.write(`schedule ${name} triggered: job ${id}\n`);
    },
  );
};
