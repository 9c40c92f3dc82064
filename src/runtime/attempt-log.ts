// One log line per attempt that ended without completing, at the level an operator acts on: a
// retry is a warning, a dead job an error, a job given back unrun is news. Each line carries the
// job logger's stable fields (job_id, task, attempt, claim_token), the outcome, the attempts the
// job has, and the error with its kind, message and stack. Completions are logged at debug only:
// at thousands of jobs a second they are the metrics' business, not the log's.
import type { JobError, JobErrorKind, JobOutcome } from "../machines/job-machine.ts";
import type { ClaimedJob } from "../db/index.ts";
import { jobFields, type Logger } from "./logger.ts";

/** What happened to the attempt, by the error's kind, as the line's message says it. */
const WHAT: Record<JobErrorKind, string> = {
  error: "failed",
  timeout: "timed out",
  permanent: "failed permanently",
  no_handler: "has no handler in this worker",
  invalid_payload: "has a payload its task's schema refuses",
  lease_expired: "lost its lease",
};

/** The error as logged: pino's `err` key, so pretty-printers show the stack as a stack. */
const errField = (error: JobError | null) =>
  error === null ? {} : { err: { kind: error.kind, message: error.message, ...(error.stack === undefined ? {} : { stack: error.stack }) } };

/**
 * Logs how a job's machine ended on the way to `done` (completed, retried, dead, released); a claim
 * lost, an outcome that could not be written and a job refused are logged where the machine names
 * them.
 */
export const logAttempt = (logger: Logger, job: ClaimedJob, outcome: JobOutcome | null, error: JobError | null, logPayload: boolean): void => {
  // One line each, so no child logger: a pino child per finished job costs more than the line.
  if (outcome === "completed") {
    if (logger.isLevelEnabled("debug")) logger.debug({ ...jobFields(job, { logPayload }), outcome }, `job ${job.id} completed`);
    return;
  }
  const attempt = `attempt ${job.attempts} of ${job.maxAttempts}`;
  const fields = { ...jobFields(job, { logPayload }), outcome, max_attempts: job.maxAttempts, ...errField(error) };
  const what = `job ${job.id} ${error === null ? "failed" : WHAT[error.kind]}`;
  const message = error?.message ?? "unknown error";
  if (outcome === "retried") logger.warn(fields, `${what} (${attempt}); it runs again after its backoff: ${message}`);
  else if (outcome === "dead") logger.error(fields, `${what} (${attempt}) and is dead: ${message}. Once fixed, run it again with: picket jobs retry ${job.id}`);
  else if (outcome === "released") logger.info(fields, `job ${job.id} given back (${attempt} not charged): the drain, or a lease it could no longer prove`);
};
