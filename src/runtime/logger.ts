import pino, { type Logger } from "pino";
import type { Job } from "../db/index.ts";

export type { Logger };

export interface LoggerOptions {
  /** pino level; default "info" (or PICKET_LOG_LEVEL). */
  level?: string;
  /** Human-readable lines instead of JSON (pino-pretty); default false. */
  pretty?: boolean;
  /** With pretty: colour the lines; default only when stdout is a terminal and NO_COLOR is not set. */
  colorize?: boolean;
  /** Where JSON lines go; default stdout. Tests pass a stream. */
  destination?: pino.DestinationStream;
}

/** JSON logs by default, with stable snake_case field names across every message. */
export const createLogger = (options: LoggerOptions = {}): Logger => {
  const level = options.level ?? process.env.PICKET_LOG_LEVEL ?? "info";
  const base = { name: "picket" };
  // Errors are logged by their message, code and stack only: pg errors carry the whole client
  // (connection settings, parsed statements) as enumerable properties.
  const serializers = {
    err: (error: unknown) =>
      error instanceof Error
        ? { type: error.name, message: error.message, code: (error as { code?: unknown }).code, stack: error.stack }
        : error,
  };
  if (options.pretty) {
    // Colour only for a terminal: piped into a file or `grep`, escape codes are noise (NO_COLOR,
    // https://no-color.org, turns it off on a terminal too).
    const colorize = options.colorize ?? (process.stdout.isTTY === true && !process.env.NO_COLOR);
    return pino({ level, base, serializers }, pino.transport({ target: "pino-pretty", options: { colorize, ignore: "pid,hostname" } }));
  }
  // Through process.stdout itself, the stream console.log writes to: a line logged before the
  // process's next console.log is printed before it, whatever the reader's pace. (pino's own
  // stream writes on its own: asynchronously, and even written synchronously to fd 1 it passed
  // console.log's lines that waited in process.stdout while a slow reader's pipe was full.) A line
  // is as safe at a process.exit as console.log's. picket logs no line per job at info level.
  return pino({ level, base, serializers }, options.destination ?? process.stdout);
};

/**
 * The logger for one job: every line names job_id, task, attempt and claim_token. The payload is
 * left out unless asked for, since payloads often hold personal data or secrets.
 */
export const jobLogger = (
  logger: Logger,
  job: Pick<Job, "id" | "type" | "attempts" | "claimToken" | "payload">,
  options: { logPayload?: boolean } = {},
): Logger => logger.child(jobFields(job, options));

/** A job's stable fields, for a line written without a child logger of its own. */
export const jobFields = (job: Pick<Job, "id" | "type" | "attempts" | "claimToken" | "payload">, options: { logPayload?: boolean } = {}) => ({
  job_id: job.id,
  task: job.type,
  attempt: job.attempts,
  claim_token: job.claimToken,
  ...(options.logPayload ? { payload: job.payload } : {}),
});
