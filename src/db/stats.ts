import type { Queryable, StatementOptions } from "./queryable.ts";
import { runStatement } from "./statement.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import type { JobStatus } from "./job-row.ts";
import { completionRates, handlerCoverage, type CompletionRate, type HandlerCoverage } from "./workers.ts";

export interface QueueStats {
  /** Jobs per task and status. */
  counts: Array<{ type: string; status: JobStatus; count: number }>;
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
  (schema) => `SELECT type, status, count(*)::int AS count FROM ${schema}.jobs GROUP BY type, status ORDER BY type, status`,
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

/** Live jobs (pending and processing) per task and status: the queue-depth gauge's one query. */
export interface QueueDepthRow {
  type: string;
  status: "pending" | "processing";
  count: number;
}

// Both statuses have a partial index (the claim's and the sweep's), so no finished row is read.
const depthSql = perSchema(
  (schema) =>
    `SELECT type, status, count(*)::int AS count FROM ${schema}.jobs WHERE status IN ('pending', 'processing') GROUP BY type, status ORDER BY type, status`,
);

export const queueDepth = async (db: Queryable, options: StatementOptions = {}): Promise<QueueDepthRow[]> =>
  (await runStatement<QueueDepthRow>(db, { text: depthSql(options.schema ?? DEFAULT_SCHEMA) }, options)).rows;
