// The history the dashboard's charts draw (migration 0015): written by the workers' heartbeats,
// a minute at a time, and read back by the hour (per minute) or by the day (per quarter hour).
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

/** One task's counts, as a worker tallied them since its previous heartbeat. */
export interface TaskTally {
  type: string;
  completed: number;
  /** Attempts that failed: retried, or dead. */
  failed: number;
  dead: number;
  /** Jobs whose handler started, and their pickup delays summed (ms). */
  started: number;
  pickupMs: number;
}

/** The rows kept: the day the charts show, and an hour's margin. */
export const HISTORY_KEPT = "25 hours";

// One statement a heartbeat: the worker's counts added to this minute's rows; the minutes past
// HISTORY_KEPT deleted (a range of the primary key, empty but once a minute); and this minute's
// depth sampled if no worker has yet (its NOT EXISTS is a one-time check: the count of live rows
// runs once a minute, not once a heartbeat).
const recordSql = perSchema(
  (schema) => `
  WITH tallied AS (
    INSERT INTO ${schema}.job_stats AS s (minute, type, completed, failed, dead, started, pickup_ms)
    SELECT date_trunc('minute', now()), t.type, t.completed, t.failed, t.dead, t.started, t."pickupMs"
    FROM jsonb_to_recordset($1::jsonb) AS t(type text, completed int, failed int, dead int, started int, "pickupMs" float8)
    ON CONFLICT (minute, type) DO UPDATE
    SET completed = s.completed + EXCLUDED.completed, failed = s.failed + EXCLUDED.failed, dead = s.dead + EXCLUDED.dead,
        started = s.started + EXCLUDED.started, pickup_ms = s.pickup_ms + EXCLUDED.pickup_ms
  ), pruned_stats AS (
    DELETE FROM ${schema}.job_stats WHERE minute < now() - interval '${HISTORY_KEPT}'
  ), pruned_depth AS (
    DELETE FROM ${schema}.job_depth WHERE minute < now() - interval '${HISTORY_KEPT}'
  )
  INSERT INTO ${schema}.job_depth (minute, type, ready, scheduled, retrying, processing)
  SELECT date_trunc('minute', now()), j.type,
         count(*) FILTER (WHERE j.status = 'pending' AND j.run_at <= now()),
         count(*) FILTER (WHERE j.status = 'pending' AND j.run_at > now() AND j.attempts = 0),
         count(*) FILTER (WHERE j.status = 'pending' AND j.run_at > now() AND j.attempts > 0),
         count(*) FILTER (WHERE j.status = 'processing')
  FROM ${schema}.jobs AS j
  WHERE j.status IN ('pending', 'processing')
    AND NOT EXISTS (SELECT FROM ${schema}.job_depth AS d WHERE d.minute = date_trunc('minute', now()))
  GROUP BY j.type
  ON CONFLICT (minute, type) DO NOTHING`,
);

/** Adds a worker's tallies to this minute's history, and samples this minute's depth if no worker has. */
export const recordHistory = async (db: Queryable, tallies: readonly TaskTally[], options: StatementOptions = {}): Promise<void> => {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  await runStatement(db, { name: `picket_record_history_${schema}`, text: recordSql(schema), values: [JSON.stringify(tallies)] }, options);
};

export type HistoryRange = "hour" | "day";

/** A task's series, one value per bucket (null where nothing was recorded). */
export interface TaskSeries {
  type: string;
  completed: number[];
  failed: number[];
  /** Mean pickup delay of the jobs started in the bucket, ms; null when none started. */
  pickupMs: Array<number | null>;
  /** Ready jobs at the bucket's last sample; null when no sample. */
  ready: Array<number | null>;
}

export interface JobHistory {
  range: HistoryRange;
  /** Each bucket's start. */
  buckets: Date[];
  bucketSeconds: number;
  tasks: TaskSeries[];
}

const RANGES: Record<HistoryRange, { buckets: number; seconds: number }> = {
  hour: { buckets: 60, seconds: 60 },
  day: { buckets: 96, seconds: 900 },
};

// Buckets aligned to the bucket size, the newest holding now; both tables read by their primary
// key's leading column (the minute), a range of 60 or 1,440 minutes.
const historySql = perSchema(
  (schema) => `
  WITH buckets AS (
    SELECT to_timestamp(floor(extract(epoch FROM now()) / $1) * $1 - g * $1) AS at
    FROM generate_series(0, $2::int - 1) AS g
  ), since AS (SELECT min(at) AS at FROM buckets),
  stats AS (
    SELECT to_timestamp(floor(extract(epoch FROM s.minute) / $1) * $1) AS at, s.type,
           sum(s.completed)::int AS completed, sum(s.failed)::int AS failed, sum(s.started)::int AS started, sum(s.pickup_ms)::float8 AS pickup_ms
    FROM ${schema}.job_stats AS s, since WHERE s.minute >= since.at GROUP BY 1, 2
  ), depth AS (
    SELECT DISTINCT ON (1, 2) to_timestamp(floor(extract(epoch FROM d.minute) / $1) * $1) AS at, d.type, d.ready
    FROM ${schema}.job_depth AS d, since WHERE d.minute >= since.at ORDER BY 1, 2, d.minute DESC
  )
  SELECT coalesce(s.at, d.at) AS at, coalesce(s.type, d.type) AS type, s.completed, s.failed, s.started, s.pickup_ms AS "pickupMs", d.ready
  FROM stats AS s FULL JOIN depth AS d ON d.at = s.at AND d.type = s.type
  UNION ALL
  SELECT at, NULL, NULL, NULL, NULL, NULL, NULL FROM buckets
  ORDER BY 1`,
);

/** The last hour (a bucket a minute) or day (a bucket a quarter hour) of every task's history. */
export const jobHistory = async (db: Queryable, range: HistoryRange, options: StatementOptions = {}): Promise<JobHistory> => {
  const { buckets: count, seconds } = RANGES[range];
  const { rows } = await runStatement<{ at: Date; type: string | null; completed: number | null; failed: number | null; started: number | null; pickupMs: number | null; ready: number | null }>(
    db,
    { text: historySql(options.schema ?? DEFAULT_SCHEMA), values: [seconds, count] },
    options,
  );
  const buckets = rows.filter((row) => row.type === null).map((row) => row.at);
  const index = new Map(buckets.map((at, i) => [at.getTime(), i]));
  const tasks = new Map<string, TaskSeries>();
  for (const row of rows) {
    if (row.type === null) continue;
    const i = index.get(row.at.getTime());
    if (i === undefined) continue;
    let series = tasks.get(row.type);
    if (series === undefined) {
      const empty = () => Array.from({ length: buckets.length }, () => null);
      tasks.set(row.type, (series = { type: row.type, completed: buckets.map(() => 0), failed: buckets.map(() => 0), pickupMs: empty(), ready: empty() }));
    }
    series.completed[i] = row.completed ?? 0;
    series.failed[i] = row.failed ?? 0;
    series.pickupMs[i] = row.started ? row.pickupMs! / row.started : null;
    series.ready[i] = row.ready;
  }
  return { range, buckets, bucketSeconds: seconds, tasks: [...tasks.values()].sort((a, b) => (a.type < b.type ? -1 : 1)) };
};
