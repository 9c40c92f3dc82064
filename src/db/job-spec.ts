import { InvalidJobError } from "./errors.ts";
import { MAX_VALUE_BYTES, unstorableText } from "./storable-json.ts";

/**
 * The task that applies a workflow's events (src/workflows/applier.ts). While the workflow lives its
 * jobs are its own: an operator's cancel leaves them (appliesLiveWorkflow in admin.ts).
 */
export const APPLIER_TASK = "picket.workflow";
/**
 * The task that cancels a child workflow its parent stopped (src/workflows/applier.ts). A task of
 * its own, not a flag on an applier job: a worker that predates child workflows would run such a
 * job as an applier and end it, and the child would never be cancelled.
 */
export const CHILD_CANCEL_TASK = "picket.workflow.cancel";

/** What a caller asks for when enqueueing one job. */
export interface JobSpec {
  /** The task name. 1–128 characters of letters, digits and `_ . : / -`. */
  type: string;
  /** Any JSON value (plain objects, arrays, strings, finite numbers, booleans, null); at most 1 MiB as JSON. */
  payload?: unknown;
  /** Earliest time to run. Exclusive with `delayMs`. */
  runAt?: Date | string;
  /** Run no earlier than this many milliseconds from now (the database's clock). */
  delayMs?: number;
  /** Higher runs first among ready jobs of one type; an integer from -1000 to 1000, default 0. */
  priority?: number;
  /**
   * Attempts before the job is dead; an integer from 1 to 1,000,000. Default: the task's
   * maxAttempts, written on the job by the worker that first claims it (5 unless the task says).
   */
  maxAttempts?: number;
  /**
   * A serial queue: at most one job of the queue (or the queue's configured concurrency) is
   * processing at a time across all workers, in run_at then id order. 1 to 128 characters.
   */
  queue?: string;
  /**
   * Dedupe key: while a job with this key is pending or processing, enqueueing another with the
   * same key creates nothing and returns the live one. Keys are global across task types.
   */
  key?: string;
  /** What a second job with the same `key` does; needs `key`. Default "live". See DedupeMode. */
  dedupe?: DedupeMode;
}

/**
 * - "live" (default): while a job with the key is pending or processing, return it.
 * - "replace": a pending job with the key takes this spec (type, payload, run time; priority and
 *   maxAttempts when given; its attempts start again) and is returned. If the key's job is
 *   processing, the key moves: that job keeps running without it (its outcome is still recorded)
 *   and this spec is enqueued as a new pending job holding the key, which may start meanwhile.
 * - `{ windowMs }`: as "live", and also while a job with the key completed less than windowMs ago
 *   (the database's clock); that job is returned. Dead and cancelled jobs do not hold the key.
 */
export type DedupeMode = "live" | "replace" | { windowMs: number };

/** Longest dedupe window: a year. */
export const MAX_DEDUPE_WINDOW_MS = 365 * 24 * 3_600_000;

/** A spec checked and normalised, ready to be bound to the enqueue statement. */
export interface CheckedJobSpec {
  type: string;
  payloadJson: string;
  runAt: Date | null;
  delayMs: number;
  priority: number;
  /** null: the task's, filled in at claim. */
  maxAttempts: number | null;
  key: string | null;
  queue: string | null;
  /** The dedupe mode; windowMs is set for "window" only. */
  dedupe: "live" | "replace" | "window";
  windowMs: number | null;
}

/** Largest payload, as UTF-8 JSON text. Larger data belongs in storage, referenced by the payload. */
export const MAX_PAYLOAD_BYTES = MAX_VALUE_BYTES;
/** Most levels of nested arrays and objects in a payload (as Ruby's JSON parser allows by default). */
export const MAX_PAYLOAD_DEPTH = 100;
export const MAX_TYPE_LENGTH = 128;
export const MAX_KEY_LENGTH = 512;
/** A task's attempts when it does not say; a job that does not say gets its task's. */
export const DEFAULT_MAX_ATTEMPTS = 5;
/** The most attempts a job may have (the table's check). */
export const MAX_ATTEMPTS = 1_000_000;
export const MAX_QUEUE_LENGTH = 128;
const TYPE_NAME = /^[A-Za-z0-9_.:/-]+$/;

const describe = (value: unknown): string => {
  if (typeof value === "string") return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  if (typeof value === "bigint") return `${value}n`;
  if (value instanceof Date) return `Date(${Number.isNaN(value.getTime()) ? "Invalid Date" : value.toISOString()})`;
  if (typeof value === "object" && value !== null) return value.constructor?.name ?? "object";
  return String(value);
};

/** Checks a task name; shared by enqueue and task registration. */
export const checkTaskName = (type: unknown, where = "job"): string => {
  if (typeof type !== "string" || type.length === 0) {
    throw new InvalidJobError(`picket: ${where} type must be a non-empty string (got ${describe(type)}).`);
  }
  if (type.length > MAX_TYPE_LENGTH) {
    throw new InvalidJobError(
      `picket: ${where} type is ${type.length} characters; the limit is ${MAX_TYPE_LENGTH}. Use a shorter task name.`,
    );
  }
  if (!TYPE_NAME.test(type)) {
    throw new InvalidJobError(
      `picket: ${where} type ${describe(type)} may contain only letters, digits and _ . : / - (no spaces).`,
    );
  }
  return type;
};

/**
 * Finds the first value JSON would silently change or drop (functions, symbols, bigint, NaN,
 * Infinity, Dates, Maps, class instances, cycles) or PostgreSQL's jsonb cannot store (a NUL
 * character or a lone UTF-16 surrogate, in a string or a key) and names its path. Plain
 * `undefined` object properties are allowed: they mean "absent".
 */
const findNonJson = (value: unknown, path: string, seen: Set<object>, depth = 0): string | null => {
  switch (typeof value) {
    case "string": {
      const why = unstorableText(value);
      return why === null ? null : `${path} ${why}`;
    }
    case "boolean":
      return null;
    case "number":
      return Number.isFinite(value) ? null : `${path} is ${value}, which JSON cannot represent`;
    case "undefined":
      return `${path} is undefined`;
    case "bigint":
      return `${path} is a bigint (${value}n); send it as a string`;
    case "function":
    case "symbol":
      return `${path} is a ${typeof value}`;
  }
  if (value === null) return null;
  const object = value as object;
  if (seen.has(object)) return `${path} refers back to itself (a cycle)`;
  // Deeper would overflow this walk's stack (and JSON.stringify's) with a RangeError that says
  // nothing of the payload; no job's arguments need it.
  if (depth === MAX_PAYLOAD_DEPTH) {
    const at = path.length > 80 ? `${path.slice(0, 80)}…` : path;
    return `${at} is nested more than ${MAX_PAYLOAD_DEPTH} levels deep, the most a payload may be; flatten it, or store the data elsewhere and send a reference`;
  }
  if (Array.isArray(object)) {
    seen.add(object);
    for (let i = 0; i < object.length; i++) {
      const bad = findNonJson(object[i], `${path}[${i}]`, seen, depth + 1);
      if (bad !== null) return bad;
    }
    seen.delete(object);
    return null;
  }
  const proto = Object.getPrototypeOf(object);
  if (proto !== Object.prototype && proto !== null) {
    const hint = object instanceof Date ? "; send value.toISOString()" : "; send a plain object";
    return `${path} is a ${describe(object)}${hint}`;
  }
  seen.add(object);
  for (const [key, child] of Object.entries(object)) {
    const why = unstorableText(key);
    if (why !== null) return `the key ${JSON.stringify(key)} of ${path} ${why}`;
    if (child === undefined) continue;
    const bad = findNonJson(child, `${path}.${key}`, seen, depth + 1);
    if (bad !== null) return bad;
  }
  seen.delete(object);
  return null;
};

const checkInteger = (type: string, name: string, value: unknown, min: number, max: number): number => {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidJobError(
      `picket: job "${type}": ${name} must be an integer from ${min} to ${max} (got ${describe(value)}).`,
    );
  }
  return value;
};

/** Validates one spec with messages that say what is wrong; throws InvalidJobError. */
export const checkJobSpec = (spec: JobSpec): CheckedJobSpec => {
  if (typeof spec !== "object" || spec === null) {
    throw new InvalidJobError(`picket: a job must be an object like { type: "send-email", payload: {...} } (got ${describe(spec)}).`);
  }
  const type = checkTaskName(spec.type);
  const payload = spec.payload === undefined ? {} : spec.payload;
  const bad = findNonJson(payload, "payload", new Set());
  if (bad !== null) {
    throw new InvalidJobError(`picket: job "${type}": payload is not JSON-serialisable: ${bad}.`);
  }
  const payloadJson = JSON.stringify(payload);
  const bytes = Buffer.byteLength(payloadJson);
  if (bytes > MAX_PAYLOAD_BYTES) {
    throw new InvalidJobError(
      `picket: job "${type}": payload is ${bytes} bytes as JSON; the limit is ${MAX_PAYLOAD_BYTES} bytes (1 MiB). ` +
        `Store large data elsewhere and put a reference in the payload.`,
    );
  }
  if (spec.runAt !== undefined && spec.delayMs !== undefined) {
    throw new InvalidJobError(`picket: job "${type}": give runAt or delayMs, not both.`);
  }
  let runAt: Date | null = null;
  if (spec.runAt !== undefined) {
    runAt = spec.runAt instanceof Date ? spec.runAt : typeof spec.runAt === "string" ? new Date(spec.runAt) : new Date(Number.NaN);
    if (Number.isNaN(runAt.getTime())) {
      throw new InvalidJobError(
        `picket: job "${type}": runAt must be a valid Date or an ISO 8601 string such as "2030-01-01T09:00:00Z" (got ${describe(spec.runAt)}).`,
      );
    }
  }
  const delayMs = spec.delayMs === undefined ? 0 : spec.delayMs;
  if (typeof delayMs !== "number" || !Number.isFinite(delayMs) || delayMs < 0) {
    throw new InvalidJobError(`picket: job "${type}": delayMs must be a finite number of milliseconds ≥ 0 (got ${describe(spec.delayMs)}).`);
  }
  const priority = checkInteger(type, "priority", spec.priority ?? 0, -1000, 1000);
  const maxAttempts = spec.maxAttempts === undefined ? null : checkInteger(type, "maxAttempts", spec.maxAttempts, 1, MAX_ATTEMPTS);
  let queue: string | null = null;
  if (spec.queue !== undefined && spec.queue !== null) {
    if (typeof spec.queue !== "string" || spec.queue.length === 0 || spec.queue.length > MAX_QUEUE_LENGTH) {
      throw new InvalidJobError(
        `picket: job "${type}": queue must be a string of 1 to ${MAX_QUEUE_LENGTH} characters naming a serial queue (got ${describe(spec.queue)}).`,
      );
    }
    queue = storableName(type, "queue", spec.queue);
  }
  let key: string | null = null;
  if (spec.key !== undefined && spec.key !== null) {
    if (typeof spec.key !== "string" || spec.key.length === 0 || spec.key.length > MAX_KEY_LENGTH) {
      throw new InvalidJobError(
        `picket: job "${type}": key must be a string of 1 to ${MAX_KEY_LENGTH} characters (got ${describe(spec.key)}).`,
      );
    }
    key = storableName(type, "key", spec.key);
  }
  return { type, payloadJson, runAt, delayMs, priority, maxAttempts, key, queue, ...checkDedupe(type, spec.dedupe, key) };
};

/**
 * A key or queue name as PostgreSQL will store it: unchanged. A lone surrogate would be stored as
 * U+FFFD (pg encodes the string as UTF-8), so a key would no longer match itself when read back
 * (and a job reported "not created" existed) and a queue's configured concurrency would never
 * apply to it; NUL is refused by PostgreSQL (22021) after the batch was sent. Refused here,
 * before anything is written.
 */
const storableName = (type: string, field: "key" | "queue", value: string): string => {
  const why = unstorableText(value);
  if (why !== null) throw new InvalidJobError(`picket: job "${type}": ${field} ${JSON.stringify(value)} ${why}; nothing was enqueued.`);
  return value;
};

const checkDedupe = (type: string, dedupe: unknown, key: string | null): Pick<CheckedJobSpec, "dedupe" | "windowMs"> => {
  if (dedupe === undefined) return { dedupe: "live", windowMs: null };
  const mode =
    dedupe === "live" || dedupe === "replace"
      ? dedupe
      : typeof dedupe === "object" && dedupe !== null && !Array.isArray(dedupe) && "windowMs" in dedupe
        ? "window"
        : null;
  if (mode === null) {
    throw new InvalidJobError(`picket: job "${type}": dedupe must be "live", "replace" or { windowMs: <milliseconds> } (got ${describe(dedupe)}).`);
  }
  if (key === null) {
    throw new InvalidJobError(
      `picket: job "${type}": dedupe ${mode === "window" ? "{ windowMs }" : JSON.stringify(mode)} needs a key: it says what happens to another job with the same key. Add key: "...".`,
    );
  }
  if (mode !== "window") return { dedupe: mode, windowMs: null };
  const windowMs = (dedupe as { windowMs: unknown }).windowMs;
  if (typeof windowMs !== "number" || !Number.isInteger(windowMs) || windowMs < 1 || windowMs > MAX_DEDUPE_WINDOW_MS) {
    throw new InvalidJobError(
      `picket: job "${type}": dedupe windowMs must be a whole number of milliseconds from 1 to ${MAX_DEDUPE_WINDOW_MS} (a year) (got ${describe(windowMs)}).`,
    );
  }
  return { dedupe: "window", windowMs };
};
