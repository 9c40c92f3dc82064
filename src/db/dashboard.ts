// What the dashboard reads, each second it is open: statements chosen so that none reads the
// finished rows in bulk (a busy table holds millions): the live counts come from the claim's and
// the sweep's partial indexes, the finishing rate and the dead jobs from the finished-at index.
import { limitsInUse, type LimitInUse } from "./limits-in-use.ts";
import { queueDepth, type QueueDepthRow } from "./stats.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";
import type { HistoryEntry, JobStatus } from "./job-row.ts";
import { withReadableHistory } from "./job-history.ts";
import { completionRates, handlerCoverage, listWorkerSummaries, queueRates, type HandlerCoverage, type QueueRate, type WorkerSummary } from "./workers.ts";
import { listSchedules, type ScheduleView } from "./schedules.ts";
import { lastScheduledJobs, type LastScheduledJob } from "./schedule-admin.ts";
import { listPaused, listQueues, type PausedEntry, type QueueView } from "./paused.ts";

/** A job that failed recently: retrying (pending with an error) or dead. */
export interface FailedJob {
  id: string;
  type: string;
  status: JobStatus;
  attempts: number;
  /** null: the task's (a job not claimed yet). */
  maxAttempts: number | null;
  lastError: string | null;
  errors: HistoryEntry[];
  at: Date;
}

export interface DashboardSnapshot {
  /** Live jobs by task and status. */
  depth: QueueDepthRow[];
  /**
   * Jobs finished in the last FINISHED_WINDOW_S seconds, by task and status: the rate per second is
   * count / window. Completed: from the live workers' reported rates (their rows may be deleted).
   */
  finished: Array<{ type: string; status: JobStatus; count: number }>;
  finishedWindowSeconds: number;
  retrying: FailedJob[];
  dead: FailedJob[];
  /** Every live worker, without the jobs its heartbeat sampled (a worker's page reads those: getWorker). */
  workers: WorkerSummary[];
  /** Every schedule, with its next run. */
  schedules: ScheduleView[];
  /** The job each schedule's last tick made, with its status. */
  scheduleJobs: LastScheduledJob[];
  /** Pending jobs no live worker has a handler for (by the workers' heartbeats). */
  handlers: HandlerCoverage;
  /** Each queue with jobs pending or held, paused, or finishing jobs now; with its rates per second, summed over the live workers. */
  queues: Array<QueueView & { completedPerSecond: number; failedPerSecond: number }>;
  /** Every paused queue and task. */
  paused: PausedEntry[];
  /** The cluster-wide task limits live workers claim under, with what is in use of each. */
  limits: LimitInUse[];
}

const FINISHED_WINDOW_S = 5;
const LISTED = 20;

// Dead and cancelled jobs are counted from their rows; completed ones from the live workers'
// reported rates (completionRates: a completed row may have been deleted).
const finishedSql = perSchema(
  (schema) => `
  SELECT type, status, count(*)::float8 AS count FROM ${schema}.jobs
  WHERE finished_at > now() - interval '${FINISHED_WINDOW_S} seconds' AND status IN ('dead', 'cancelled')
  GROUP BY type, status ORDER BY type, status`,
);

const failedColumns = `id, type, status, attempts, max_attempts AS "maxAttempts", last_error AS "lastError", errors`;

const retryingSql = perSchema(
  (schema) => `
  SELECT ${failedColumns}, updated_at AS at FROM ${schema}.jobs
  WHERE status = 'pending' AND last_error IS NOT NULL ORDER BY updated_at DESC LIMIT ${LISTED}`,
);

const deadSql = perSchema(
  (schema) => `
  SELECT ${failedColumns}, finished_at AS at FROM ${schema}.jobs
  WHERE status = 'dead' AND finished_at IS NOT NULL ORDER BY finished_at DESC LIMIT ${LISTED}`,
);

/** Each queue with its rates; a queue whose jobs all finished still shows while it finishes some. */
const withRates = (queues: QueueView[], rates: Array<QueueRate & { queue: string }>): DashboardSnapshot["queues"] => {
  const byName = new Map(rates.map((r) => [r.queue, r]));
  const idle = (name: string): QueueView => ({ name, ready: 0, scheduled: 0, processing: 0, oldestReadyAt: null, head: null, paused: null });
  const names = [...new Set([...queues.map((q) => q.name), ...byName.keys()])].sort();
  const views = new Map(queues.map((q) => [q.name, q]));
  return names.map((name) => ({ ...(views.get(name) ?? idle(name)), completedPerSecond: byName.get(name)?.completed ?? 0, failedPerSecond: byName.get(name)?.failed ?? 0 }));
};

export const dashboardSnapshot = async (db: Queryable, options: StatementOptions = {}): Promise<DashboardSnapshot> => {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const [depth, finished, rates, retrying, dead, workers, schedules, handlers, queues, paused, limits, perQueue] = await Promise.all([
    queueDepth(db, options),
    runStatement<DashboardSnapshot["finished"][number]>(db, { text: finishedSql(schema) }, options),
    completionRates(db, options),
    runStatement<FailedJob>(db, { text: retryingSql(schema) }, options),
    runStatement<FailedJob>(db, { text: deadSql(schema) }, options),
    listWorkerSummaries(db, options),
    listSchedules(db, options),
    handlerCoverage(db, options),
    listQueues(db, options),
    listPaused(db, options),
    limitsInUse(db, options),
    queueRates(db, options),
  ]);
  const scheduleJobs = await lastScheduledJobs(db, schedules, options);
  const completed = rates.map((r) => ({ type: r.type, status: "completed" as const, count: r.perSecond * FINISHED_WINDOW_S }));
  const byTask = (a: { type: string; status: string }, b: { type: string; status: string }) => (a.type < b.type ? -1 : a.type > b.type ? 1 : a.status < b.status ? -1 : 1);
  return { depth, finished: [...completed, ...finished.rows].sort(byTask), finishedWindowSeconds: FINISHED_WINDOW_S, retrying: retrying.rows.map(withReadableHistory), dead: dead.rows.map(withReadableHistory), workers, schedules, scheduleJobs, handlers, queues: withRates(queues, perQueue), paused, limits };
};
