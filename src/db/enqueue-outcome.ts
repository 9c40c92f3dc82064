// Enqueues and says, for each spec, whether a job was created or an existing one returned (a
// dedupe key held by a live job, a replace, a window). enqueueJobs' result is left as it is (a
// Job per spec), so callers that do not care pay nothing and nothing breaks.
//
// How a hit is told: the database clock is read first (now(): the transaction's start), then the
// enqueue runs. A job it creates has created_at = its own transaction's now(), never earlier; a job
// that was already there was created before. Inside the caller's transaction both reads give the
// same instant, and a job created earlier in that transaction counts as created (it is new to the
// database). The limit: a job with the key created by another session in the moment between the
// two statements (or in the same millisecond before the first: Dates keep milliseconds) is reported
// as created.
import { enqueueJobs } from "./enqueue.ts";
import type { Job } from "./job-row.ts";
import type { JobSpec } from "./job-spec.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { runStatement } from "./statement.ts";

export interface EnqueueOutcome {
  job: Job;
  /** false: the spec's dedupe key returned a job that was already there (and nothing new was enqueued). */
  created: boolean;
}

/** enqueueJobs, with whether each spec created its job. One statement more (a clock read). */
export const enqueueJobsWithOutcome = async (db: Queryable, specs: readonly JobSpec[], options: StatementOptions = {}): Promise<EnqueueOutcome[]> => {
  const { rows } = await runStatement<{ now: Date }>(db, { text: "SELECT now() AS now" }, options);
  const before = rows[0]!.now.getTime();
  const jobs = await enqueueJobs(db, specs, options);
  return jobs.map((job) => ({ job, created: new Date(job.createdAt).getTime() >= before }));
};

/** enqueueJob, with whether it created the job; see enqueueJobsWithOutcome. */
export const enqueueJobWithOutcome = async (db: Queryable, spec: JobSpec, options: StatementOptions = {}): Promise<EnqueueOutcome> =>
  (await enqueueJobsWithOutcome(db, [spec], options))[0]!;
