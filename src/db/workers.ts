// The heartbeat rows of live workers (migration 0004): written by each worker, read by the
// dashboard. The queue never reads them.
import type { TaskLimits } from "./claim-limited.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

/** A job a worker holds, as its heartbeat shows it. */
export interface HeldJobView {
  id: string;
  type: string;
  /** Its machine's state: waitingForSlot, running, completing, ... */
  state: string;
}

/** What a worker says of itself at each beat. */
export interface WorkerBeat {
  id: string;
  host: string;
  pid: number;
  version: string;
  startedAt: Date;
  concurrency: number;
  /** The supervisor machine's state ("running", "draining"). */
  state: string;
  jobs: HeldJobView[];
  running: number;
  waiting: number;
  /** The task names it has handlers for (migration 0005). */
  tasks: string[];
  /** Jobs it completed per second since its previous beat, by task (migration 0009). */
  completedPerSecond: Record<string, number>;
  /** The cluster-wide limits it claims under, by task (migration 0016); default none. */
  limits?: Record<string, TaskLimits>;
  /** Per named queue, its completions and failed attempts per second since its previous beat (migration 0016); default none. */
  queueRates?: Record<string, QueueRate>;
}

/** A queue's jobs completed and attempts failed, per second. */
export interface QueueRate {
  completed: number;
  failed: number;
}


export interface WorkerRow extends WorkerBeat {
  lastBeat: Date;
  /** How long ago it last beat, by the server's clock. */
  silentMs: number;
}

/** Workers silent this long are forgotten (a worker killed outright never deletes its row). */
export const FORGET_SILENT_WORKERS_AFTER = "1 hour";

const beatSql = perSchema(
  (schema) => `
  WITH forgotten AS (
    DELETE FROM ${schema}.workers WHERE last_beat < now() - interval '${FORGET_SILENT_WORKERS_AFTER}' AND id <> $1
  )
  INSERT INTO ${schema}.workers AS w (id, host, pid, version, started_at, last_beat, concurrency, state, jobs, running, waiting, tasks, completed_per_s, limits, queue_rates)
  VALUES ($1, $2, $3, $4, $5, now(), $6, $7, $8, $9, $10, $11::text[], $12::jsonb, $13::jsonb, $14::jsonb)
  ON CONFLICT (id) DO UPDATE SET last_beat = now(), state = EXCLUDED.state, jobs = EXCLUDED.jobs,
    running = EXCLUDED.running, waiting = EXCLUDED.waiting, concurrency = EXCLUDED.concurrency, tasks = EXCLUDED.tasks,
    completed_per_s = EXCLUDED.completed_per_s, limits = EXCLUDED.limits, queue_rates = EXCLUDED.queue_rates`,
);

/** Writes the worker's row (and forgets workers silent for an hour). */
export const beat = async (db: Queryable, worker: WorkerBeat, options: StatementOptions = {}): Promise<void> => {
  await runStatement(
    db,
    {
      name: `picket_beat_${options.schema ?? DEFAULT_SCHEMA}`,
      text: beatSql(options.schema ?? DEFAULT_SCHEMA),
      values: [worker.id, worker.host, worker.pid, worker.version, worker.startedAt, worker.concurrency, worker.state, JSON.stringify(worker.jobs), worker.running, worker.waiting, worker.tasks, JSON.stringify(worker.completedPerSecond), JSON.stringify(worker.limits ?? {}), JSON.stringify(worker.queueRates ?? {})],
    },
    options,
  );
};

const removeSql = perSchema((schema) => `DELETE FROM ${schema}.workers WHERE id = $1`);

/** A worker that stops takes its row with it. */
export const removeWorker = async (db: Queryable, id: string, options: StatementOptions = {}): Promise<void> => {
  await runStatement(db, { text: removeSql(options.schema ?? DEFAULT_SCHEMA), values: [id] }, options);
};

const workerColumns = `id, host, pid, version, started_at AS "startedAt", last_beat AS "lastBeat", concurrency, state, running, waiting, tasks,
         completed_per_s AS "completedPerSecond", (extract(epoch FROM now() - last_beat) * 1000)::float8 AS "silentMs"`;

// Without the jobs each heartbeat samples (up to 100 a worker): the dashboard's list of a hundred
// workers, each second, without 10,000 job entries it does not show.
const summarySql = perSchema((schema) => `SELECT ${workerColumns} FROM ${schema}.workers ORDER BY host, started_at, id`);

const getSql = perSchema((schema) => `SELECT ${workerColumns}, jobs FROM ${schema}.workers WHERE id = $1`);

/** A live worker as the dashboard's table lists it: its heartbeat without the jobs it sampled. */
export type WorkerSummary = Omit<WorkerRow, "jobs">;

export const listWorkerSummaries = async (db: Queryable, options: StatementOptions = {}): Promise<WorkerSummary[]> =>
  (await runStatement<WorkerSummary>(db, { text: summarySql(options.schema ?? DEFAULT_SCHEMA) }, options)).rows;

/** One worker's heartbeat row, with the jobs it sampled and their machines' states; null when it has none. */
export const getWorker = async (db: Queryable, id: string, options: StatementOptions = {}): Promise<WorkerRow | null> =>
  (await runStatement<WorkerRow>(db, { text: getSql(options.schema ?? DEFAULT_SCHEMA), values: [id] }, options)).rows[0] ?? null;

/** A worker heard from within this long counts as live when pending jobs are matched to handlers. */
export const LIVE_WORKER_MS = 30_000;

/** Pending jobs of one task that no live worker has a handler for. */
export interface UnhandledPending {
  type: string;
  count: number;
}

/** What the live workers can run: how many there are, and the pending jobs none of them has a handler for. */
export interface HandlerCoverage {
  liveWorkers: number;
  /** Every task name some live worker handles. */
  handled: string[];
  unhandled: UnhandledPending[];
}

// Live workers by their heartbeats (by the server's clock); a pending job is unhandled when no
// live worker lists its type. With no live worker at all, every pending job is.
const coverageSql = perSchema(
  (schema) => `
  WITH live AS (
    SELECT tasks FROM ${schema}.workers WHERE last_beat > now() - $1::int * interval '1 millisecond'
  ), handled AS (
    SELECT DISTINCT unnest(tasks) AS type FROM live
  )
  SELECT (SELECT count(*) FROM live)::int AS "liveWorkers",
         (SELECT coalesce(array_agg(type ORDER BY type), '{}') FROM handled) AS handled,
         (SELECT coalesce(jsonb_agg(jsonb_build_object('type', u.type, 'count', u.count) ORDER BY u.type), '[]')
          FROM (SELECT j.type, count(*)::int AS count FROM ${schema}.jobs AS j
                WHERE j.status = 'pending' AND j.type NOT IN (SELECT type FROM handled)
                GROUP BY j.type) AS u) AS unhandled`,
);

/** The live workers' task names, and the pending jobs none of them can run. */
export const handlerCoverage = async (db: Queryable, options: StatementOptions & { liveWithinMs?: number } = {}): Promise<HandlerCoverage> =>
  (await runStatement<HandlerCoverage>(db, { text: coverageSql(options.schema ?? DEFAULT_SCHEMA), values: [options.liveWithinMs ?? LIVE_WORKER_MS] }, options)).rows[0]!;

/** Jobs a task's live workers complete per second, as their last heartbeats reported it. */
export interface CompletionRate {
  type: string;
  perSecond: number;
}

// A worker reports its rate at each beat (every 2 s by default): one silent for longer than this has
// stopped or died, and its last rate no longer holds.
const RATE_WORKER_SILENT_S = 10;

// Completions are counted by the workers, not from rows: a worker deletes a completed job's row
// unless it keeps completed jobs (migration 0009). Each worker counts only its own completions, so
// a kept row is not counted twice.
const ratesSql = perSchema(
  (schema) => `
  SELECT r.key AS type, sum(r.value::float8)::float8 AS "perSecond"
  FROM ${schema}.workers AS w, jsonb_each_text(w.completed_per_s) AS r
  WHERE w.last_beat > now() - interval '${RATE_WORKER_SILENT_S} seconds'
  GROUP BY r.key ORDER BY r.key`,
);

export const completionRates = async (db: Queryable, options: StatementOptions = {}): Promise<CompletionRate[]> =>
  (await runStatement<CompletionRate>(db, { text: ratesSql(options.schema ?? DEFAULT_SCHEMA) }, options)).rows;

// The same, per named queue, with the failed attempts (migration 0016).
const queueRatesSql = perSchema(
  (schema) => `
  SELECT r.key AS queue, sum((r.value->>'completed')::float8)::float8 AS completed, sum((r.value->>'failed')::float8)::float8 AS failed
  FROM ${schema}.workers AS w, jsonb_each(w.queue_rates) AS r
  WHERE w.last_beat > now() - interval '${RATE_WORKER_SILENT_S} seconds'
  GROUP BY r.key ORDER BY r.key`,
);

/** Each named queue's completions and failed attempts per second, summed over the live workers. */
export const queueRates = async (db: Queryable, options: StatementOptions = {}): Promise<Array<QueueRate & { queue: string }>> =>
  (await runStatement<QueueRate & { queue: string }>(db, { text: queueRatesSql(options.schema ?? DEFAULT_SCHEMA) }, options)).rows;
