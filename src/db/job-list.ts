// A page of jobs, newest first, for `picket jobs list`: by status and task, bounded by a limit.
import { InvalidJobError } from "./errors.ts";
import { type Job, type JobStatus, jobColumns } from "./job-row.ts";
import { withReadableHistory } from "./job-history.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

export const JOB_STATUSES: readonly JobStatus[] = ["pending", "processing", "waiting", "completed", "dead", "cancelled"];

/** The most jobs one list returns: a list is for looking, not for exporting a table. */
export const MAX_JOB_LIST = 1_000;

export interface JobListFilter {
  status?: JobStatus;
  /** The task name (the job's type). */
  type?: string;
  /** Default 20, at most MAX_JOB_LIST. */
  limit?: number;
}

// Newest first by id, so the primary key's index serves the order and the limit stops the scan;
// a filter that matches little still walks back through the table, which a CLI list can afford.
const listSql = perSchema(
  (schema) => `
  SELECT ${jobColumns("j")} FROM ${schema}.jobs AS j
  WHERE ($1::text IS NULL OR j.status = $1::text) AND ($2::text IS NULL OR j.type = $2::text)
  ORDER BY j.id DESC
  LIMIT $3::int`,
);

export const listJobs = async (db: Queryable, filter: JobListFilter = {}, options: StatementOptions = {}): Promise<Job[]> => {
  if (filter.status !== undefined && !JOB_STATUSES.includes(filter.status)) {
    throw new InvalidJobError(`picket: status must be one of ${JOB_STATUSES.join(", ")} (got ${JSON.stringify(filter.status)}).`);
  }
  const limit = filter.limit ?? 20;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_JOB_LIST) {
    throw new InvalidJobError(`picket: limit must be an integer from 1 to ${MAX_JOB_LIST} (got ${String(filter.limit)}).`);
  }
  const { rows } = await runStatement<Job>(
    db,
    { text: listSql(options.schema ?? DEFAULT_SCHEMA), values: [filter.status ?? null, filter.type ?? null, limit] },
    options,
  );
  return rows.map(withReadableHistory);
};
