// Pausing and resuming a queue or a task (migration 0012), and the queues as an operator sees them.
// A pause is a row the claims read: the fast claim leaves a paused task out of its wants, the slow
// claim gives a paused task no budget and a paused queue no room (claim.ts, claim-limited.ts).
import { checkQueueName } from "./claim-limited.ts";
import { InvalidConfigError } from "./errors.ts";
import { checkOperatorName } from "./job-history.ts";
import { checkTaskName } from "./job-spec.ts";
import { notifyChannel } from "./notify.ts";
import type { JobId } from "./job-row.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

/** What a pause names: the jobs of a queue, or of a task. */
export type PauseTarget = { queue: string } | { task: string };

/** A paused queue or task. */
export interface PausedEntry {
  kind: "queue" | "task";
  name: string;
  pausedAt: Date;
  /** Who paused it; null when not said. */
  pausedBy: string | null;
}

export type PauseResult = { outcome: "applied" | "already_paused"; paused: PausedEntry };
export type ResumeResult = { outcome: "applied" | "not_paused" };

/** A queue: its jobs by state, its oldest ready job, and whether it is paused. */
export interface QueueView {
  name: string;
  /** Pending and due now. */
  ready: number;
  /** Pending, due later (delayed, or waiting out a retry's backoff). */
  scheduled: number;
  processing: number;
  /** The run_at of the oldest ready job: how long the queue has kept someone waiting. */
  oldestReadyAt: Date | null;
  /** The queue's head: the pending job it runs next (a serial queue runs in run_at, id order), or null. */
  head: { id: JobId; type: string; runAt: Date } | null;
  paused: PausedEntry | null;
}

const pausedColumns = `kind, name, paused_at AS "pausedAt", paused_by AS "pausedBy"`;

// A second pause keeps the first one's time and author: the queue has been paused since then.
const pauseSql = perSchema(
  (schema) => `
  WITH added AS (
    INSERT INTO ${schema}.paused AS p (kind, name, paused_by) VALUES ($1, $2, $3)
    ON CONFLICT (kind, name) DO NOTHING
    RETURNING ${pausedColumns}
  )
  SELECT true AS applied, * FROM added
  UNION ALL
  SELECT false, ${pausedColumns} FROM ${schema}.paused WHERE kind = $1 AND name = $2 AND NOT EXISTS (SELECT FROM added)`,
);

// Workers that found nothing to claim wait for a wake-up or their next poll: '*' wakes every one
// to claim at once (the payload the enqueue trigger sends when anything may be ready).
const resumeSql = perSchema(
  (schema) => `
  WITH removed AS (DELETE FROM ${schema}.paused WHERE kind = $1 AND name = $2 RETURNING name)
  SELECT count(*)::int AS removed, CASE WHEN count(*) > 0 THEN pg_notify($3, '*') END AS woken FROM removed`,
);

const listPausedSql = perSchema((schema) => `SELECT ${pausedColumns} FROM ${schema}.paused ORDER BY kind, name`);

// Every queue with jobs pending or held, and every paused one: the names found by skip scans of
// the queue's two partial indexes (one probe per queue, as the slow claim finds them), then each
// queue's counts from the same indexes. Work in proportion to the queues' live jobs, never to the
// finished rows.
const queuesSql = perSchema(
  (schema) => `
  WITH RECURSIVE pending_queues AS (
    (SELECT j.queue FROM ${schema}.jobs AS j WHERE j.status = 'pending' AND j.queue IS NOT NULL ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM ${schema}.jobs AS j
            WHERE j.status = 'pending' AND j.queue IS NOT NULL AND j.queue > q.queue ORDER BY j.queue LIMIT 1)
    FROM pending_queues AS q WHERE q.queue IS NOT NULL
  ), held_queues AS (
    (SELECT j.queue FROM ${schema}.jobs AS j WHERE j.lock_until IS NOT NULL AND j.queue IS NOT NULL ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM ${schema}.jobs AS j
            WHERE j.lock_until IS NOT NULL AND j.queue IS NOT NULL AND j.queue > q.queue ORDER BY j.queue LIMIT 1)
    FROM held_queues AS q WHERE q.queue IS NOT NULL
  ), names AS (
    SELECT queue FROM pending_queues WHERE queue IS NOT NULL
    UNION SELECT queue FROM held_queues WHERE queue IS NOT NULL
    UNION SELECT name FROM ${schema}.paused WHERE kind = 'queue'
  )
  SELECT n.queue AS name,
         (SELECT count(*) FROM ${schema}.jobs AS j WHERE j.status = 'pending' AND j.queue = n.queue AND j.run_at <= now())::int AS ready,
         (SELECT count(*) FROM ${schema}.jobs AS j WHERE j.status = 'pending' AND j.queue = n.queue AND j.run_at > now())::int AS scheduled,
         (SELECT count(*) FROM ${schema}.jobs AS j WHERE j.lock_until IS NOT NULL AND j.queue = n.queue AND j.status = 'processing')::int AS processing,
         head.id AS head_id, head.type AS head_type, head.run_at AS head_at,
         p.kind, p.paused_at AS "pausedAt", p.paused_by AS "pausedBy"
  FROM names AS n
  LEFT JOIN LATERAL (
    SELECT j.id, j.type, j.run_at FROM ${schema}.jobs AS j WHERE j.status = 'pending' AND j.queue = n.queue ORDER BY j.run_at, j.id LIMIT 1
  ) AS head ON true
  LEFT JOIN ${schema}.paused AS p ON p.kind = 'queue' AND p.name = n.queue
  ORDER BY n.queue`,
);

/** The kind and name a target names, each checked as enqueue checks it. */
const targetOf = (target: PauseTarget): { kind: PausedEntry["kind"]; name: string } => {
  if (typeof target === "object" && target !== null) {
    if ("queue" in target && !("task" in target)) return { kind: "queue", name: checkQueueName(target.queue, "pause") };
    if ("task" in target && !("queue" in target)) return { kind: "task", name: checkTaskName(target.task, "paused task") };
  }
  throw new InvalidConfigError(`picket: a pause names a queue or a task: { queue: "emails" } or { task: "send-email" } (got ${JSON.stringify(target)}).`);
};

/**
 * Stops every worker from claiming the jobs of a queue or a task, from the next claim that begins
 * after this returns (a claim already under way may still take some). The jobs stay pending;
 * running ones finish. Pausing what is paused changes nothing ("already_paused", with the first
 * pause's time and author).
 */
export const pauseClaims = async (db: Queryable, target: PauseTarget, options: StatementOptions & { by?: string } = {}): Promise<PauseResult> => {
  const { kind, name } = targetOf(target);
  const by = checkOperatorName(options.by);
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const { rows } = await runStatement<PausedEntry & { applied: boolean }>(db, { text: pauseSql(schema), values: [kind, name, by] }, options);
  // The conflicting row was deleted between the insert and the read (a resume at that moment):
  // the pause did not apply, and nothing is paused.
  const [row] = rows;
  if (row === undefined) return pauseClaims(db, target, options);
  const { applied, ...paused } = row;
  return { outcome: applied ? "applied" : "already_paused", paused };
};

/** Lets every worker claim the queue's or the task's jobs again, and wakes them to do it now. */
export const resumeClaims = async (db: Queryable, target: PauseTarget, options: StatementOptions = {}): Promise<ResumeResult> => {
  const { kind, name } = targetOf(target);
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const { rows } = await runStatement<{ removed: number }>(db, { text: resumeSql(schema), values: [kind, name, notifyChannel(schema)] }, options);
  return { outcome: rows[0]!.removed > 0 ? "applied" : "not_paused" };
};

/** Every paused queue and task, queues first, by name. */
export const listPaused = async (db: Queryable, options: StatementOptions = {}): Promise<PausedEntry[]> =>
  (await runStatement<PausedEntry>(db, { text: listPausedSql(options.schema ?? DEFAULT_SCHEMA) }, options)).rows;

/** A queue's row as queuesSql returns it: its counts, its head's run_at, and its pause's columns. */
interface QueueRow {
  name: string;
  ready: number;
  scheduled: number;
  processing: number;
  head_id: JobId | null;
  head_type: string | null;
  head_at: Date | null;
  kind: "queue" | null;
  pausedAt: Date | null;
  pausedBy: string | null;
}

/** Every queue with jobs pending or processing, and every paused queue, by name. */
export const listQueues = async (db: Queryable, options: StatementOptions = {}): Promise<QueueView[]> => {
  const { rows } = await runStatement<QueueRow>(db, { text: queuesSql(options.schema ?? DEFAULT_SCHEMA) }, options);
  return rows.map(({ name, ready, scheduled, processing, head_id, head_type, head_at, kind, pausedAt, pausedBy }) => ({
    name,
    ready,
    scheduled,
    processing,
    // The head is the oldest pending job; it is ready when any is.
    oldestReadyAt: ready > 0 ? head_at : null,
    head: head_id === null ? null : { id: head_id, type: head_type!, runAt: head_at! },
    paused: kind === null ? null : { kind, name, pausedAt: pausedAt!, pausedBy },
  }));
};
