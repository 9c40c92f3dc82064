// A job's history (the row's `errors` column, bounded by append_error from 0001): each attempt that
// did not finish, numbered across operator retries, and each operator action that changed the
// job's course. Every entry is built here, so every entry has the same shape and time format.
import { InvalidConfigError } from "./errors.ts";
import { ERROR_HISTORY_LIMIT, ERROR_MESSAGE_LIMIT, ERROR_STACK_LIMIT, type HistoryEntry, type OperatorAction } from "./job-row.ts";
import { unstorableText } from "./storable-json.ts";

// The entry's time as JSON.stringify prints a Date (ISO 8601, UTC, milliseconds, "Z"), which is how
// `picket jobs show` and the dashboard's API print every other time of the job. (A timestamptz put
// into jsonb as is prints microseconds and the session's offset instead.)
const AT = `to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** The SET item appending `entry` (SQL for a jsonb object) to the history of row j. */
const append = (schema: string, entry: string): string => `errors = ${schema}.append_error(j.errors, ${entry}, ${ERROR_HISTORY_LIMIT})`;

/**
 * The SET items recording an attempt of row j that did not finish: last_error, and its history
 * entry numbered across operator retries, with the worker that held it (the row's locked_by before
 * this write clears it). `error` and `stack` are SQL expressions (an entry without a stack has no
 * "stack" key).
 */
export const attemptErrorSet = (schema: string, error: string, stack = "NULL"): string => `
  last_error = left(${error}, ${ERROR_MESSAGE_LIMIT}),
  ${append(
    schema,
    `jsonb_strip_nulls(jsonb_build_object('at', ${AT}, 'attempt', j.prior_attempts + j.attempts, ` +
      `'message', left(${error}, ${ERROR_MESSAGE_LIMIT}), 'stack', left(${stack}, ${ERROR_STACK_LIMIT}), 'worker', j.locked_by))`,
  )}`;

/** The SET item recording an operator's `action` on row j; `by` is SQL for who (NULL: not said, no "by" key). */
export const operatorSet = (schema: string, action: OperatorAction, by: string): string =>
  append(schema, `jsonb_strip_nulls(jsonb_build_object('at', ${AT}, 'operator', '${action}', 'by', ${by}))`);

export const OPERATOR_NAME_LIMIT = 200;

/** Who an operator action names, checked before any row is touched: 1–200 characters PostgreSQL stores as given. */
export const checkOperatorName = (by: unknown): string | null => {
  if (by === undefined) return null;
  if (typeof by !== "string" || by.length === 0 || by.length > OPERATOR_NAME_LIMIT || unstorableText(by) !== null) {
    throw new InvalidConfigError(
      `picket: "by" names who asked for an operator action, as 1 to ${OPERATOR_NAME_LIMIT} characters without NUL or lone surrogates ` +
        `(got ${typeof by === "string" ? JSON.stringify(by.slice(0, 40)) : String(by)}); leave it out when nobody is known.`,
    );
  }
  return by;
};

/**
 * A row as a reader that shows its history gets it (getJob, listJobs, the dashboard): each time in
 * the format above. Entries written before migration 0011, and by older workers during a rolling
 * deploy, hold the jsonb text of a timestamptz.
 */
export const withReadableHistory = <T extends { errors: HistoryEntry[] }>(row: T): T => ({
  ...row,
  errors: row.errors.map((entry) => {
    const at = new Date(entry.at);
    return Number.isNaN(at.getTime()) || at.toISOString() === entry.at ? entry : { ...entry, at: at.toISOString() };
  }),
});
