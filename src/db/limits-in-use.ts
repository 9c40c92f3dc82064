// Each cluster-wide task limit the live workers claim under (their heartbeats say which, migration
// 0016), beside how much of it is in use now: the task's jobs processing on every worker, and the
// starts its rate limit's log holds for the window ending now (counted as the slow claim counts
// them, 0007). For the dashboard; no claim reads it.
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";
import { LIVE_WORKER_MS } from "./workers.ts";

export interface LimitInUse {
  type: string;
  /** Most jobs of the task processing at once across every worker, or null for none. */
  clusterConcurrency: number | null;
  /** Its jobs processing now, across every worker. */
  running: number;
  /** Most starts in any window of windowMs, or null for none. */
  rateLimit: { max: number; windowMs: number } | null;
  /** Starts in the window ending now (null without a rate limit). */
  startsInWindow: number | null;
}

// The limits of the worker that beat last, when workers of a rolling deploy say different ones.
const limitsSql = perSchema(
  (schema) => `
  WITH declared AS (
    SELECT DISTINCT ON (l.key) l.key AS type, l.value AS limits
    FROM ${schema}.workers AS w CROSS JOIN LATERAL jsonb_each(w.limits) AS l
    WHERE w.last_beat > now() - $1 * interval '1 millisecond'
    ORDER BY l.key, w.last_beat DESC
  )
  SELECT d.type,
    (d.limits->>'clusterConcurrency')::int AS "clusterConcurrency",
    (SELECT count(*) FROM ${schema}.jobs AS j WHERE j.lock_until IS NOT NULL AND j.status = 'processing' AND j.type = d.type)::int AS running,
    d.limits->'rateLimit' AS "rateLimit",
    CASE WHEN d.limits ? 'rateLimit' THEN
      (SELECT count(*) FROM ${schema}.job_starts AS s
       WHERE s.type = d.type AND s.started_at > clock_timestamp() - (d.limits->'rateLimit'->>'windowMs')::float8 * interval '1 millisecond')::int
    END AS "startsInWindow"
  FROM declared AS d ORDER BY d.type`,
);

/** The limits live workers claim under, with what is in use of each. */
export const limitsInUse = async (db: Queryable, options: StatementOptions & { liveWithinMs?: number } = {}): Promise<LimitInUse[]> =>
  (await runStatement<LimitInUse>(db, { text: limitsSql(options.schema ?? DEFAULT_SCHEMA), values: [options.liveWithinMs ?? LIVE_WORKER_MS] }, options)).rows;
