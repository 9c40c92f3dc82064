import type { Queryable, StatementOptions } from "./queryable.ts";
import { runStatement } from "./statement.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { completionRates, handlerCoverage, type CompletionRate, type HandlerCoverage } from "./workers.ts";

/**
 * A job's state as an operator asks about it: a pending job is `ready` (its run_at has come: it
 * runs as soon as a worker has a slot), `scheduled` (a run_at the enqueue asked for is still ahead)
 * or `retrying` (an attempt failed and its backoff is still running). Counting the three as one
 * "pending" made a queue of delayed jobs look stuck. `waiting`: a flow's job whose dependencies
 * have not all resolved.
 */
export type LiveState = "ready" | "scheduled" | "retrying" | "processing" | "waiting";
export type JobState = LiveState | "completed" | "dead" | "cancelled";

// The one place that splits `pending`. attempts > 0 marks a failed attempt behind the wait: every
// path that puts a job back without a failure (a drain's release, an operator's retry, a
// replacing enqueue) sets run_at = now() or resets attempts, so a later run_at with attempts is a backoff.
const STATE = `CASE WHEN status <> 'pending' THEN status WHEN run_at <= now() THEN 'ready' WHEN attempts > 0 THEN 'retrying' ELSE 'scheduled' END`;

export interface QueueStats {
  /** Jobs per task and state (pending ones split into ready, scheduled and retrying). */
  counts: Array<{ type: string; state: JobState; count: number }>;
  /** Age of the oldest pending job that is ready to run, in seconds; null when none. */
  oldestReadyAgeSeconds: number | null;
  /** The most recently dead jobs, for an operator's first look. */
  recentDead: Array<{ id: string; type: string; attempts: number; lastError: string | null; finishedAt: Date }>;
  /** The live workers (by heartbeat) and the pending jobs none of them has a handler for. */
  handlers: HandlerCoverage;
  /**
   * Jobs completed per second by the live workers, by task (their heartbeats say). Completed jobs
   * are in `counts` only where kept (keepCompleted): by default a completion deletes the row.
   */
  completedPerSecond: CompletionRate[];
}

const countsSql = perSchema(
  (schema) => `SELECT type, ${STATE} AS state, count(*)::int AS count FROM ${schema}.jobs GROUP BY 1, 2 ORDER BY 1, 2`,
);

// Served by the claim index (pending rows only); run_at <= now() is the "ready" part.
const oldestReadySql = perSchema(
  (schema) => `SELECT extract(epoch FROM now() - min(run_at))::float8 AS age FROM ${schema}.jobs WHERE status = 'pending' AND run_at <= now()`,
);

const recentDeadSql = perSchema(
  (schema) => `
  SELECT id, type, attempts, last_error AS "lastError", finished_at AS "finishedAt"
  FROM ${schema}.jobs WHERE status = 'dead' ORDER BY finished_at DESC NULLS LAST LIMIT $1`,
);

export const queueStats = async (db: Queryable, options: StatementOptions & { deadLimit?: number } = {}): Promise<QueueStats> => {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const [counts, oldest, dead, handlers, completedPerSecond] = await Promise.all([
    runStatement<QueueStats["counts"][number]>(db, { text: countsSql(schema) }, options),
    runStatement<{ age: number | null }>(db, { text: oldestReadySql(schema) }, options),
    runStatement<QueueStats["recentDead"][number]>(db, { text: recentDeadSql(schema), values: [options.deadLimit ?? 10] }, options),
    handlerCoverage(db, options),
    completionRates(db, options),
  ]);
  return { counts: counts.rows, oldestReadyAgeSeconds: oldest.rows[0]?.age ?? null, recentDead: dead.rows, handlers, completedPerSecond };
};

/** Live jobs per task and state (ready, scheduled, retrying, processing): the queue-depth gauge's one query. */
export interface QueueDepthRow {
  type: string;
  state: LiveState;
  count: number;
}

// Each status has a partial index (the claim's, the sweep's, the waiting browse's), so no finished row is read.
const depthSql = perSchema(
  (schema) =>
    `SELECT type, ${STATE} AS state, count(*)::int AS count FROM ${schema}.jobs WHERE status IN ('pending', 'processing', 'waiting') GROUP BY 1, 2 ORDER BY 1, 2`,
);

export const queueDepth = async (db: Queryable, options: StatementOptions = {}): Promise<QueueDepthRow[]> =>
  (await runStatement<QueueDepthRow>(db, { text: depthSql(options.schema ?? DEFAULT_SCHEMA) }, options)).rows;
