// Recurring jobs (migration 0006): registering schedules, listing them, and firing their ticks.
//
// A tick makes exactly one job however many workers fire it: a worker reads the schedules with the
// database's clock, works out the due ticks with croner, and fires them in one statement that
// advances the row's last_tick only if the row is still at the revision it read, inserting the
// ticks' jobs from the rows that statement updated. Workers that read the same row race for that
// update; the loser's re-checked WHERE finds a newer revision and it inserts nothing.
import type { JobId } from "./job-row.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import {
  checkSchedule,
  missedPolicyOf,
  nextTick,
  planTicks,
  TICK_FIELD,
  type CheckedSchedule,
  type MissedPolicy,
  type ScheduleSpec,
} from "./schedule-spec.ts";
import { InvalidConfigError } from "./errors.ts";
import { runStatement } from "./statement.ts";

/** Where a schedule came from: a task's declaration, or upsertSchedule. */
export type ScheduleSource = "task" | "api";

/** A schedule as stored. */
export interface ScheduleRow {
  name: string;
  task: string;
  cron: string;
  timezone: string | null;
  payload: Record<string, unknown>;
  catchUp: number;
  /** Ticks at or before this instant are done (fired or skipped). */
  lastTick: Date;
  revision: string;
  source: ScheduleSource;
  createdAt: Date;
  updatedAt: Date;
  /** Since when it is paused (it fires no tick), or null (migration 0014). */
  pausedAt: Date | null;
  /** Who paused it, when said. */
  pausedBy: string | null;
}

/** A schedule as `picket schedules` and the dashboard show it. */
export interface ScheduleView extends ScheduleRow {
  missed: MissedPolicy;
  /** Its next tick after the database's now (and after its last tick); null if it never fires again. */
  nextRun: Date | null;
  /** Its next NEXT_RUNS ticks from there (fewer when it stops firing): what an operator checks a pattern by. */
  nextRuns: Date[];
  /**
   * The last tick it fired (or skipped under its missed policy), null if none yet under its
   * present definition. lastTick is where counting starts, which for a schedule that never fired
   * is the moment it was made (or its pattern changed): not a tick of its pattern, so not shown as one.
   */
  lastFired: Date | null;
}

const columns = `name, task, cron, timezone, payload, catch_up AS "catchUp", last_tick AS "lastTick", revision,
  source, created_at AS "createdAt", updated_at AS "updatedAt", paused_at AS "pausedAt", paused_by AS "pausedBy"`;

/** The key of the job a tick makes, so the tick is visible on the job row. */
export const tickKey = (schedule: string, tick: Date): string => `schedule:${schedule}:${tick.toISOString()}`;

// A changed pattern or zone starts from now: ticks of the old definition are not owed under the
// new one. An unchanged definition writes nothing (every worker upserts its tasks' schedules at
// start), so the revision a worker read stays valid.
const upsertSql = perSchema(
  (schema) => `
  INSERT INTO ${schema}.schedules AS s (name, task, cron, timezone, payload, catch_up, source)
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::int[], $7::text[])
  ON CONFLICT (name) DO UPDATE
  SET task = EXCLUDED.task, cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, payload = EXCLUDED.payload,
      catch_up = EXCLUDED.catch_up, source = EXCLUDED.source, revision = s.revision + 1, updated_at = now(),
      last_tick = CASE WHEN (s.cron, s.timezone) IS DISTINCT FROM (EXCLUDED.cron, EXCLUDED.timezone)
                       THEN greatest(s.last_tick, now()) ELSE s.last_tick END
  WHERE (s.task, s.cron, s.timezone, s.payload, s.catch_up, s.source)
        IS DISTINCT FROM (EXCLUDED.task, EXCLUDED.cron, EXCLUDED.timezone, EXCLUDED.payload, EXCLUDED.catch_up, EXCLUDED.source)`,
);

const upsertChecked = async (db: Queryable, schedules: CheckedSchedule[], source: ScheduleSource, options: StatementOptions): Promise<void> => {
  if (schedules.length === 0) return;
  const names = new Set<string>();
  for (const s of schedules) {
    if (names.has(s.name)) throw new InvalidConfigError(`picket: schedule "${s.name}" is given twice; schedule names are unique.`);
    names.add(s.name);
  }
  await runStatement(
    db,
    {
      text: upsertSql(options.schema ?? DEFAULT_SCHEMA),
      values: [
        schedules.map((s) => s.name),
        schedules.map((s) => s.task),
        schedules.map((s) => s.cron),
        schedules.map((s) => s.timezone),
        schedules.map((s) => s.payloadJson),
        schedules.map((s) => s.catchUp),
        schedules.map(() => source),
      ],
    },
    options,
  );
};

/**
 * Creates or replaces a schedule by name. A new schedule's first tick is its first after now; a
 * changed pattern or time zone starts again from now; a changed payload or policy applies from
 * the next tick. Works on any Queryable, inside the caller's transaction too.
 */
export const upsertSchedule = async (db: Queryable, spec: ScheduleSpec, options: StatementOptions = {}): Promise<ScheduleView> => {
  const checked = checkSchedule(spec);
  await upsertChecked(db, [checked], "api", options);
  const found = await listSchedules(db, { ...options, names: [checked.name] });
  return found[0]!;
};

const removeSql = perSchema((schema) => `DELETE FROM ${schema}.schedules WHERE name = $1::text RETURNING name`);

/** Removes a schedule; true if it existed. Jobs it already made are left alone. */
export const removeSchedule = async (db: Queryable, name: string, options: StatementOptions = {}): Promise<boolean> =>
  (await runStatement(db, { text: removeSql(options.schema ?? DEFAULT_SCHEMA), values: [name] }, options)).rowCount === 1;

const removeUndeclaredSql = perSchema(
  (schema) => `DELETE FROM ${schema}.schedules WHERE source = 'task' AND name = ANY($1::text[]) RETURNING name`,
);

/**
 * What a worker does at start for the tasks it runs: writes the schedules they declare, and
 * removes the declared schedule of a task that no longer declares one (named after the task).
 * Schedules registered with upsertSchedule are never removed here.
 */
export const syncTaskSchedules = async (
  db: Queryable,
  tasks: ReadonlyArray<{ name: string; schedule: CheckedSchedule | undefined }>,
  options: StatementOptions = {},
): Promise<{ removed: string[] }> => {
  await upsertChecked(db, tasks.flatMap((t) => (t.schedule ? [t.schedule] : [])), "task", options);
  const undeclared = tasks.filter((t) => t.schedule === undefined).map((t) => t.name);
  if (undeclared.length === 0) return { removed: [] };
  const { rows } = await runStatement<{ name: string }>(db, { text: removeUndeclaredSql(options.schema ?? DEFAULT_SCHEMA), values: [undeclared] }, options);
  return { removed: rows.map((r) => r.name) };
};

const listSql = perSchema(
  (schema) => `
  SELECT ${columns}, now() AS now FROM ${schema}.schedules
  WHERE $1::text[] IS NULL OR name = ANY($1::text[]) ORDER BY name`,
);

/** How many of a schedule's next ticks a listing shows. */
export const NEXT_RUNS = 3;

/** Every schedule (or those named), with its next runs by the database's clock. */
export const listSchedules = async (db: Queryable, options: StatementOptions & { names?: string[] } = {}): Promise<ScheduleView[]> => {
  const { rows } = await runStatement<ScheduleRow & { now: Date }>(
    db,
    { text: listSql(options.schema ?? DEFAULT_SCHEMA), values: [options.names ?? null] },
    options,
  );
  return rows.map(({ now, ...row }) => {
    const nextRuns: Date[] = [];
    let lastFired: Date | null = null;
    try {
      let after = new Date(Math.max(now.getTime(), row.lastTick.getTime()));
      for (let tick = nextTick(row.cron, row.timezone, after); tick !== null && nextRuns.length < NEXT_RUNS; tick = nextTick(row.cron, row.timezone, after)) {
        nextRuns.push(tick);
        after = tick;
      }
      // Fired (or skipped) ticks are written as the tick itself: an instant of the pattern.
      lastFired = nextTick(row.cron, row.timezone, new Date(row.lastTick.getTime() - 1))?.getTime() === row.lastTick.getTime() ? row.lastTick : null;
    } catch {
      // A pattern written past picket's checks (a raw INSERT): listed, with no next run.
    }
    return { ...row, missed: missedPolicyOf(row.catchUp), nextRun: nextRuns[0] ?? null, nextRuns, lastFired };
  });
};

const dueSql = perSchema(
  (schema) => `
  SELECT name, task, cron, timezone, catch_up AS "catchUp", last_tick AS "lastTick", revision,
         coalesce($2::timestamptz, now()) AS now
  FROM ${schema}.schedules WHERE task = ANY($1::text[]) AND paused_at IS NULL ORDER BY name`,
);

// The compare-and-set: the row advances only from the revision the plan was made from, and the
// jobs are made from the rows it advanced (none when another worker got there first). The job's
// payload is the row's own, read under the same row lock, plus the tick.
const fireSql = perSchema(
  (schema) => `
  WITH advanced AS (
    UPDATE ${schema}.schedules
    SET last_tick = $3::timestamptz, revision = revision + 1, updated_at = now()
    WHERE name = $1::text AND revision = $2::bigint
    RETURNING name, task, payload
  ), made AS (
    INSERT INTO ${schema}.jobs AS j (type, payload, run_at, max_attempts, key)
    SELECT a.task, a.payload || jsonb_build_object('${TICK_FIELD}', t.at), t.at::timestamptz, $5::int, 'schedule:' || a.name || ':' || t.at
    FROM advanced AS a CROSS JOIN unnest($4::text[]) WITH ORDINALITY AS t(at, n)
    ORDER BY t.n
    ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('pending', 'processing') DO NOTHING
    RETURNING j.id
  )
  SELECT (SELECT count(*) FROM advanced)::int AS advanced, coalesce((SELECT array_agg(id ORDER BY id) FROM made), '{}') AS jobs`,
);

/** One schedule's due ticks as a worker read them. */
export interface DueSchedule {
  name: string;
  task: string;
  revision: string;
  /** The ticks to fire, oldest first (the policy has already dropped missed ones). */
  fire: Date[];
  /** The newest due tick: the schedule's last_tick once fired. */
  through: Date;
  /** Whether the policy dropped missed ticks. */
  skipped: boolean;
}

/** What firing one schedule did. */
export interface FiredSchedule {
  schedule: string;
  task: string;
  /** False when another worker fired these ticks first (the row had moved on): nothing was made. */
  advanced: boolean;
  ticks: Date[];
  jobs: JobId[];
  /** Due ticks the policy dropped (missed while no worker ran the schedule). */
  skipped: boolean;
}

export interface RunSchedulesOptions extends StatementOptions {
  /** The tasks whose schedules this worker fires, with the attempts their jobs get. */
  tasks: ReadonlyArray<{ name: string; maxAttempts: number }>;
  /** A tick this much older than now counts as missed (the policy applies); default 10 s. */
  graceMs?: number;
  /** The time to fire at instead of the database's now(): for tests. */
  at?: Date;
}

export const DEFAULT_SCHEDULE_GRACE_MS = 10_000;

/** Reads the schedules of `tasks` and plans their due ticks, at the database's now (or `at`). */
export const dueSchedules = async (
  db: Queryable,
  options: RunSchedulesOptions,
): Promise<{ due: DueSchedule[]; failed: Array<{ schedule: string; error: unknown }> }> => {
  const { rows } = await runStatement<{ name: string; task: string; cron: string; timezone: string | null; catchUp: number; lastTick: Date; revision: string; now: Date }>(
    db,
    { name: `picket_due_schedules_${options.schema ?? DEFAULT_SCHEMA}`, text: dueSql(options.schema ?? DEFAULT_SCHEMA), values: [options.tasks.map((t) => t.name), options.at ?? null] },
    options,
  );
  const due: DueSchedule[] = [];
  const failed: Array<{ schedule: string; error: unknown }> = [];
  for (const row of rows) {
    try {
      const plan = planTicks(row, row.now, options.graceMs ?? DEFAULT_SCHEDULE_GRACE_MS);
      if (plan !== null) due.push({ name: row.name, task: row.task, revision: row.revision, ...plan });
    } catch (error) {
      // One unreadable row (written past picket's checks) does not hold up the others.
      failed.push({ schedule: row.name, error });
    }
  }
  return { due, failed };
};

/** Fires one schedule's planned ticks: advances it and makes their jobs, or nothing if it moved on. */
export const fireSchedule = async (db: Queryable, due: DueSchedule, maxAttempts: number, options: StatementOptions = {}): Promise<FiredSchedule> => {
  const { rows } = await runStatement<{ advanced: number; jobs: JobId[] }>(
    db,
    {
      name: `picket_fire_schedule_${options.schema ?? DEFAULT_SCHEMA}`,
      text: fireSql(options.schema ?? DEFAULT_SCHEMA),
      values: [due.name, due.revision, due.through, due.fire.map((tick) => tick.toISOString()), maxAttempts],
    },
    options,
  );
  const advanced = rows[0]!.advanced === 1;
  return {
    schedule: due.name,
    task: due.task,
    advanced,
    ticks: advanced ? due.fire : [],
    jobs: rows[0]!.jobs,
    skipped: advanced && due.skipped,
  };
};

/**
 * One round of the scheduler: every due schedule of `tasks` fired, each in its own statement (one
 * that fails is reported and the others go on). A worker runs this every second or so.
 */
export const runSchedules = async (
  db: Queryable,
  options: RunSchedulesOptions,
): Promise<{ fired: FiredSchedule[]; failed: Array<{ schedule: string; error: unknown }> }> => {
  const { due, failed } = await dueSchedules(db, options);
  const attempts = new Map(options.tasks.map((t) => [t.name, t.maxAttempts]));
  const fired: FiredSchedule[] = [];
  for (const schedule of due) {
    try {
      fired.push(await fireSchedule(db, schedule, attempts.get(schedule.task) ?? 5, options));
    } catch (error) {
      failed.push({ schedule: schedule.name, error });
    }
  }
  return { fired, failed };
};
