// Assertions on the jobs a piece of code enqueued, with a failure message that lists what was.
import { AssertionError } from "node:assert";
import { isDeepStrictEqual } from "node:util";
import { InvalidConfigError } from "../db/errors.ts";
import type { Job, JobStatus } from "../db/job-row.ts";
import type { Queryable } from "../db/queryable.ts";
import { listJobsOfType } from "../db/testing.ts";

export interface ExpectEnqueuedOptions {
  /** The task name. */
  type: string;
  /**
   * A partial match: every field given must match (objects recursively; arrays element by element,
   * with the same length; other values by deep equality). Omitted: any payload.
   */
  payload?: unknown;
  /** Exactly this many matching jobs; default at least one. */
  count?: number;
  /** Statuses that count; default ["pending"] (enqueued and not yet run). "any" for every status. */
  status?: JobStatus | JobStatus[] | "any";
  /** picket's schema; default "picket". */
  schema?: string;
}

/** Jobs listed in a failure message at most. */
const LISTED = 20;

/** Whether `actual` has every field of `expected` (recursively). */
export const matchesPartially = (actual: unknown, expected: unknown): boolean => {
  if (Array.isArray(expected)) {
    return Array.isArray(actual) && actual.length === expected.length && expected.every((e, i) => matchesPartially(actual[i], e));
  }
  if (typeof expected === "object" && expected !== null) {
    if (typeof actual !== "object" || actual === null || Array.isArray(actual)) return false;
    return Object.entries(expected).every(([key, value]) => Object.hasOwn(actual, key) && matchesPartially((actual as Record<string, unknown>)[key], value));
  }
  return isDeepStrictEqual(actual, expected);
};

const describeJob = (job: Job): string => `  #${job.id} ${job.type} ${job.status} payload ${JSON.stringify(job.payload)}`;

/**
 * Asserts that jobs of `type` (with a payload matching `payload`) were enqueued: at least one, or
 * exactly `count`. Returns the matching jobs. Throws an AssertionError (vitest and node:test both
 * report it) that lists the jobs of the type that were enqueued, and the other types' when none was.
 */
export const expectEnqueued = async (db: Queryable, options: ExpectEnqueuedOptions): Promise<Job[]> => {
  if (typeof options.type !== "string" || options.type === "") {
    throw new InvalidConfigError("picket/testing: expectEnqueued needs the task name: expectEnqueued(db, { type: \"send-email\", payload: { to: \"a@b.c\" } }).");
  }
  if (options.count !== undefined && (!Number.isInteger(options.count) || options.count < 0)) {
    throw new InvalidConfigError(`picket/testing: expectEnqueued's count must be an integer ≥ 0 (got ${String(options.count)}).`);
  }
  const statuses = options.status === "any" ? null : Array.isArray(options.status) ? options.status : [options.status ?? "pending"];
  const statementOptions = options.schema === undefined ? {} : { schema: options.schema };
  // Enough rows to count the matches of any test's making, bounded so a huge table cannot hang it.
  const jobs = await listJobsOfType(db, options.type, statuses, 10_000, statementOptions);
  const matching = "payload" in options ? jobs.filter((job) => matchesPartially(job.payload, options.payload)) : jobs;
  const ok = options.count === undefined ? matching.length > 0 : matching.length === options.count;
  if (ok) return matching;
  const wanted =
    `${options.count === undefined ? "at least one job" : `${options.count} job${options.count === 1 ? "" : "s"}`} of type "${options.type}"` +
    ("payload" in options ? ` with a payload matching ${JSON.stringify(options.payload)}` : "") +
    ` in status ${statuses === null ? "any" : statuses.join(" or ")}`;
  const lines = [`expected ${wanted}; found ${matching.length}.`];
  if (jobs.length > 0) {
    lines.push(`Jobs of type "${options.type}" in status ${statuses === null ? "any" : statuses.join(" or ")} (${jobs.length}):`, ...jobs.slice(0, LISTED).map(describeJob));
    if (jobs.length > LISTED) lines.push(`  … and ${jobs.length - LISTED} more`);
  } else {
    const others = await listJobsOfType(db, null, null, LISTED + 1, statementOptions);
    lines.push(others.length === 0 ? "No job of any type was enqueued." : `No job of that type; the jobs there are (any type, any status):`, ...others.slice(0, LISTED).map(describeJob));
    if (others.length > LISTED) lines.push("  … and more");
  }
  throw new AssertionError({ message: lines.join("\n"), actual: matching.length, expected: options.count ?? ">= 1", operator: "expectEnqueued" });
};
