// An operator's hands on schedules (migration 0014): pause one (it fires no tick), resume it (from
// now: the ticks that fell while paused are skipped), trigger it now (one job, as a tick would make,
// outside its pattern), and the job its last tick made, with that job's status.
import { InvalidConfigError } from "./errors.ts";
import { checkOperatorName } from "./job-history.ts";
import type { JobId, JobStatus } from "./job-row.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { TICK_FIELD } from "./schedule-spec.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { listSchedules, tickKey, type ScheduleView } from "./schedules.ts";
import { runStatement } from "./statement.ts";

export type ScheduleActionResult = { outcome: "applied"; schedule: ScheduleView } | { outcome: "not_found" } | { outcome: "unchanged"; schedule: ScheduleView };

// A write bumps the revision: a worker's plan read before it no longer counts (schedules.ts).
const pauseSql = perSchema(
  (schema) => `
  UPDATE ${schema}.schedules SET paused_at = now(), paused_by = $2::text, revision = revision + 1, updated_at = now()
  WHERE name = $1::text AND paused_at IS NULL RETURNING name`,
);

const resumeSql = perSchema(
  (schema) => `
  UPDATE ${schema}.schedules SET paused_at = NULL, paused_by = NULL, last_tick = greatest(last_tick, now()), revision = revision + 1, updated_at = now()
  WHERE name = $1::text AND paused_at IS NOT NULL RETURNING name`,
);

// A job as a tick makes it (the schedule's payload plus the time as its tick), with a key of its
// own so that it neither takes nor is taken by a tick's.
const triggerSql = perSchema(
  (schema) => `
  INSERT INTO ${schema}.jobs AS j (type, payload, key)
  SELECT s.task, s.payload || jsonb_build_object('${TICK_FIELD}', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), 'triggeredBy', $2::text),
         'schedule:' || s.name || ':triggered:' || to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
  FROM ${schema}.schedules AS s WHERE s.name = $1::text
  RETURNING j.id`,
);

// The job of each tick key, found through the indexes that hold keyed rows: the live keys' unique
// index, the completed keys' index, and the dead and cancelled jobs finished since the oldest of
// the ticks (their browse indexes, 0013), each a short range.
const tickJobsSql = perSchema(
  (schema) => `
  SELECT key, id, status FROM ${schema}.jobs WHERE key = ANY ($1::text[]) AND status IN ('pending', 'processing')
  UNION ALL
  SELECT key, id, status FROM ${schema}.jobs WHERE key = ANY ($1::text[]) AND key IS NOT NULL AND status = 'completed'
  UNION ALL
  SELECT key, id, status FROM ${schema}.jobs WHERE status = 'dead' AND finished_at >= $2::timestamptz AND key = ANY ($1::text[])
  UNION ALL
  SELECT key, id, status FROM ${schema}.jobs WHERE status = 'cancelled' AND finished_at >= $2::timestamptz AND key = ANY ($1::text[])`,
);

const checkName = (name: unknown): string => {
  if (typeof name !== "string" || name.length === 0 || name.length > 200) {
    throw new InvalidConfigError(`picket: a schedule name is 1 to 200 characters (got ${JSON.stringify(name)}).`);
  }
  return name;
};

const acted = async (db: Queryable, name: string, changed: boolean, options: StatementOptions): Promise<ScheduleActionResult> => {
  const [schedule] = await listSchedules(db, { ...options, names: [name] });
  if (schedule === undefined) return { outcome: "not_found" };
  return { outcome: changed ? "applied" : "unchanged", schedule };
};

/** Stops a schedule firing; "unchanged" when it was paused already. */
export const pauseSchedule = async (db: Queryable, name: string, options: StatementOptions & { by?: string } = {}): Promise<ScheduleActionResult> => {
  const by = checkOperatorName(options.by);
  const { rows } = await runStatement(db, { text: pauseSql(options.schema ?? DEFAULT_SCHEMA), values: [checkName(name), by] }, options);
  return acted(db, name, rows.length > 0, options);
};

/** Lets a paused schedule fire again, from now; "unchanged" when it was not paused. */
export const resumeSchedule = async (db: Queryable, name: string, options: StatementOptions = {}): Promise<ScheduleActionResult> => {
  const { rows } = await runStatement(db, { text: resumeSql(options.schema ?? DEFAULT_SCHEMA), values: [checkName(name)] }, options);
  return acted(db, name, rows.length > 0, options);
};

/** Makes one job of the schedule now, as a tick would (paused or not); null when there is no such schedule. */
export const triggerSchedule = async (db: Queryable, name: string, options: StatementOptions & { by?: string } = {}): Promise<JobId | null> => {
  const by = checkOperatorName(options.by);
  const { rows } = await runStatement<{ id: JobId }>(db, { text: triggerSql(options.schema ?? DEFAULT_SCHEMA), values: [checkName(name), by] }, options);
  return rows[0]?.id ?? null;
};

/**
 * The job a schedule's last tick made, and its status; "none" when no row has its key: the tick was
 * skipped by the missed policy, or its job completed and was deleted (workers delete completed jobs
 * unless keepCompleted), or retention removed it.
 */
export interface LastScheduledJob {
  schedule: string;
  tick: Date;
  id: JobId | null;
  status: JobStatus | "none";
}

/** For each schedule that has fired, the job its last tick made. */
export const lastScheduledJobs = async (db: Queryable, schedules: readonly ScheduleView[], options: StatementOptions = {}): Promise<LastScheduledJob[]> => {
  const fired = schedules.filter((s): s is ScheduleView & { lastFired: Date } => s.lastFired !== null);
  if (fired.length === 0) return [];
  const keys = fired.map((s) => tickKey(s.name, s.lastFired));
  const since = new Date(Math.min(...fired.map((s) => s.lastFired.getTime())));
  const { rows } = await runStatement<{ key: string; id: JobId; status: JobStatus }>(db, { text: tickJobsSql(options.schema ?? DEFAULT_SCHEMA), values: [keys, since] }, options);
  const byKey = new Map(rows.map((row) => [row.key, row]));
  return fired.map((s, i) => {
    const job = byKey.get(keys[i]!);
    return { schedule: s.name, tick: s.lastFired, id: job?.id ?? null, status: job?.status ?? "none" };
  });
};
