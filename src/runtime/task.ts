// What a user defines: a task's name, its handler and its options, checked once at definition.
import { isAbsolute } from "node:path";
import * as Effect from "effect/Effect";
import type * as Schema from "effect/Schema";
import {
  checkSchedule,
  checkTaskLimits,
  checkTaskName,
  DEFAULT_MAX_ATTEMPTS,
  InvalidConfigError,
  MAX_ATTEMPTS,
  type CheckedSchedule,
  type ChildJobSpec,
  type Dependency,
  type DependencyFailurePolicy,
  type Job,
  type JobId,
  type ScheduleOptions,
} from "../db/index.ts";
import type { Logger } from "./logger.ts";

/** The job as a handler sees it. */
export interface JobInfo {
  id: JobId;
  task: string;
  /** 1 on the first run; counted at claim. */
  attempt: number;
  maxAttempts: number;
  enqueuedAt: Date;
}

export interface HandlerContext {
  job: JobInfo;
  /** Fires when the job times out, loses its lease, or is stopped at the drain deadline. */
  signal: AbortSignal;
  /** Records progress (any JSON value) on the job row. Never throws: progress is telemetry. */
  reportProgress(progress: unknown): Promise<void>;
  /** A child logger naming job_id, task, attempt and claim_token. */
  logger: Logger;
  /**
   * Stable across every attempt of this job: pass it to the systems you call so a retried or
   * duplicated execution (see "What a fence cannot do" in the README) is recognised there.
   */
  idempotencyKey: string;
  /** A stable key for one named step of the job: `${idempotencyKey}:${step}`. */
  stepKey(step: string): string;
  /**
   * A durable step: runs `fn` once per job and records its JSON result under the job's claim
   * before resolving; every later attempt of the job (after a crash, a timeout or a lost lease)
   * gets the recorded result back without running `fn`. Rejects with a StepFencedError, and the
   * run is stopped, when the claim was lost or the job cancelled. Not available to isolated
   * handlers. Names are 1–200 characters; a name asked for twice in one run runs once.
   */
  step<T>(name: string, fn: () => T | Promise<T>): Promise<T>;
  /**
   * The job's dependencies in its flow, by name, with how each ended and its result: all completed,
   * unless an edge's policy is "ignore" (then a failed one is here too, with its error). Children
   * this job added are among them. Empty for a job in no flow. Type it by the results you expect,
   * by name: `ctx.dependencies<{ resize: { url: string } }>()` (not checked at run time).
   */
  dependencies<R extends Record<string, unknown> = Record<string, unknown>>(): Promise<{ [K in keyof R]: Dependency<R[K]> }>;
  /**
   * Adds children under this run's claim, in one statement: they run, and this job, once this run
   * returns, waits for all of them and then runs again (ctx.dependencies() holds their results; a
   * step keeps this run's work from being done twice). `onFailure` is what a child's failure does
   * to this job (default "fail": it is cancelled). Rejects with a ClaimLostError, adding nothing,
   * when the claim was lost; the run is then stopped. Not available to isolated handlers.
   */
  enqueueChildren(children: readonly ChildJobSpec[], options?: { onFailure?: DependencyFailurePolicy }): Promise<Job[]>;
}

/** A handler is an async function, or a function returning an Effect. */
export type Handler<P = unknown, R = unknown> = (
  payload: P,
  ctx: HandlerContext,
) => Promise<R> | R | Effect.Effect<R, unknown, never>;

/**
 * Throw (or fail with) this to mark a failure that retrying cannot fix: the job goes dead now,
 * whatever attempts remain.
 */
export class PermanentError extends Error {
  override readonly name = "PermanentError";
  readonly permanent = true;
}

/** Any Standard Schema validator (zod, valibot, arktype, Effect Schema via toStandardSchemaV1). */
export interface StandardSchema<T = unknown> {
  readonly "~standard": {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (
      value: unknown,
    ) =>
      | { readonly value: T; readonly issues?: undefined }
      | { readonly issues: ReadonlyArray<{ readonly message: string; readonly path?: ReadonlyArray<unknown> }> }
      | Promise<unknown>;
  };
}

export type PayloadSchema<P> = StandardSchema<P> | Schema.Codec<P, unknown, never, never>;

// An Effect Schema is told by the brand Schema.isSchema reads, so that a worker whose tasks use
// none never loads effect/Schema (8 MB of heap at start); test/config.test.ts checks that
// both agree. The module is loaded with the first payload an Effect Schema validates.
const EFFECT_SCHEMA = "~effect/Schema/Schema";
export const isEffectSchema = (u: unknown): boolean =>
  (typeof u === "object" || typeof u === "function") && u !== null && (u as Record<string, unknown>)[EFFECT_SCHEMA] === EFFECT_SCHEMA;
let effectSchema: Promise<typeof Schema> | undefined;

/** Run the handler in a worker thread that is terminated at the deadline. */
export interface Isolation {
  /** Module that exports the handler (an async function of (payload, { job, reportProgress })). */
  module: string | URL;
  /** Export name; default "default". */
  export?: string;
}

export interface TaskDefinition<P = unknown, R = unknown> {
  name: string;
  /** Required unless `isolate` names the module that exports the handler. */
  handler?: Handler<P, R>;
  /** The handler is interrupted after this long; default 60 s. */
  timeoutMs?: number;
  /**
   * Attempts for jobs of this task that do not set their own, however they were enqueued (the
   * worker that first claims such a job writes it on the row); default 5.
   */
  maxAttempts?: number;
  /** Retry spacing: min(maxMs, baseMs · 2^(attempt−1)), drawn from [½, 1] of that. Default 1 s, 1 h. */
  backoff?: { baseMs?: number; maxMs?: number };
  /** Most handlers of this task running at once in one worker; default: only the worker's limit. */
  concurrency?: number;
  /**
   * Most jobs of this task processing at once across ALL workers, enforced by the database at
   * claim (a job claimed counts until its outcome is written or its lease is swept). Default: none.
   */
  clusterConcurrency?: number;
  /**
   * Most starts (claims) of this task in any window of `windowMs` (a sliding window) across ALL
   * workers, enforced by the database at claim. Default: none.
   */
  rateLimit?: { max: number; windowMs: number };
  /** How long a claim lasts without renewal; renewed every third of it. Default 20 s, so a
   * crashed worker's jobs are back within lease + sweep interval = 25 s with the defaults. */
  leaseMs?: number;
  /** Checked at enqueue (through picket's client) and again at claim. */
  schema?: PayloadSchema<P>;
  isolate?: Isolation;
  /**
   * Runs the task on a schedule: a cron pattern ("*\/5 * * * *"; six fields for seconds) or
   * { cron, timezone?, payload?, missed? }. The schedule is named after the task; every worker
   * running the task writes it at start, and exactly one job is made per tick.
   */
  schedule?: string | ScheduleOptions;
}

export interface Task<P = unknown, R = unknown> {
  readonly name: string;
  readonly handler: Handler<P, R> | undefined;
  readonly timeoutMs: number;
  readonly maxAttempts: number;
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
  readonly concurrency: number;
  readonly clusterConcurrency: number | undefined;
  readonly rateLimit: { readonly max: number; readonly windowMs: number } | undefined;
  readonly leaseMs: number;
  readonly schema: PayloadSchema<P> | undefined;
  readonly isolate: Isolation | undefined;
  /** The task's own schedule, checked; named after the task. */
  readonly schedule: CheckedSchedule | undefined;
}

const MAX_INT = 2_147_483_647;

const integer = (task: string, name: string, value: unknown, fallback: number, min: number, max = MAX_INT): number => {
  const v = value ?? fallback;
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
    throw new InvalidConfigError(`picket: task "${task}": ${name} must be an integer from ${min} to ${max} (got ${String(value)}).`);
  }
  return v;
};

const limits = (name: string, definition: TaskDefinition<any, any>): Pick<Task, "clusterConcurrency" | "rateLimit"> => {
  checkTaskLimits(name, definition);
  const rate = definition.rateLimit;
  return {
    clusterConcurrency: definition.clusterConcurrency,
    rateLimit: rate === undefined ? undefined : { max: rate.max, windowMs: rate.windowMs },
  };
};

/** Whether the database limits the task across workers: its jobs are claimed by the slow claim. */
export const isLimited = (task: Task<any, any>): boolean => task.clusterConcurrency !== undefined || task.rateLimit !== undefined;

/**
 * The worker thread imports `isolate.module` from picket's own folder, so a relative path there
 * names a file beside picket, not beside the task: the job would go dead at its first run. A
 * relative path is refused when the task is defined rather than guessed at: the caller's file
 * cannot be known reliably (a stack trace names the module that called defineTask, which may be
 * a helper of the user's, or a bundle), while `import.meta.url` says it exactly.
 */
const checkIsolateModule = (name: string, isolate: Isolation): void => {
  const module = (isolate as Partial<Isolation> | null)?.module;
  if (module instanceof URL) return;
  if (typeof module !== "string" || module === "") {
    throw new InvalidConfigError(
      `picket: task "${name}": isolate.module must name the module that exports the handler: new URL("./handler.ts", import.meta.url) or an absolute path (got ${String(module)}).`,
    );
  }
  const url = /^[a-z][a-z0-9+.-]*:/i.test(module); // file:, data:, node: ...
  if (!url && !isAbsolute(module) && (/^\.\.?([/\\]|$)/.test(module) || /\.[cm]?[jt]s$/.test(module))) {
    throw new InvalidConfigError(
      `picket: task "${name}": isolate.module ${JSON.stringify(module)} is a relative path, which the worker thread would resolve against picket's own folder. ` +
        `Pass new URL(${JSON.stringify(module.startsWith(".") ? module : `./${module}`)}, import.meta.url) or an absolute path.`,
    );
  }
};

/** Checks a task definition once, so a typo fails at start-up, not at the first job. */
export const defineTask = <P = unknown, R = unknown>(definition: TaskDefinition<P, R>): Task<P, R> => {
  let name: string;
  try {
    name = checkTaskName(definition?.name, "task");
  } catch (error) {
    throw new InvalidConfigError((error as Error).message);
  }
  if (definition.handler === undefined && definition.isolate === undefined) {
    throw new InvalidConfigError(`picket: task "${name}" needs a handler (or isolate: { module } naming the module that exports it).`);
  }
  if (definition.handler !== undefined && typeof definition.handler !== "function") {
    throw new InvalidConfigError(`picket: task "${name}": handler must be a function (got ${typeof definition.handler}).`);
  }
  if (definition.isolate !== undefined) checkIsolateModule(name, definition.isolate);
  const schema = definition.schema;
  if (schema !== undefined && !isEffectSchema(schema) && typeof (schema as StandardSchema)["~standard"]?.validate !== "function") {
    throw new InvalidConfigError(`picket: task "${name}": schema must be an Effect Schema or a Standard Schema validator (zod, valibot, ...).`);
  }
  const backoffBaseMs = integer(name, "backoff.baseMs", definition.backoff?.baseMs, 1_000, 0);
  const backoffMaxMs = integer(name, "backoff.maxMs", definition.backoff?.maxMs, 3_600_000, 0);
  if (backoffMaxMs < backoffBaseMs) {
    throw new InvalidConfigError(`picket: task "${name}": backoff.maxMs (${backoffMaxMs}) is below backoff.baseMs (${backoffBaseMs}).`);
  }
  const schedule =
    definition.schedule === undefined
      ? undefined
      : typeof definition.schedule === "string"
        ? checkSchedule({ name, task: name, cron: definition.schedule })
        : typeof definition.schedule === "object" && definition.schedule !== null
          ? checkSchedule({ ...definition.schedule, name, task: name })
          : (() => {
              throw new InvalidConfigError(`picket: task "${name}": schedule must be a cron pattern such as "*/5 * * * *" or { cron, timezone?, payload?, missed? } (got ${String(definition.schedule)}).`);
            })();
  return {
    name,
    handler: definition.handler,
    timeoutMs: integer(name, "timeoutMs", definition.timeoutMs, 60_000, 1),
    maxAttempts: integer(name, "maxAttempts", definition.maxAttempts, DEFAULT_MAX_ATTEMPTS, 1, MAX_ATTEMPTS),
    backoffBaseMs,
    backoffMaxMs,
    concurrency: integer(name, "concurrency", definition.concurrency, MAX_INT, 1),
    ...limits(name, definition),
    leaseMs: integer(name, "leaseMs", definition.leaseMs, 20_000, 100),
    schema,
    isolate: definition.isolate,
    schedule,
  };
};

/**
 * Validates a payload against the task's schema; resolves with nothing, or rejects with a
 * message that names the offending path.
 */
export const checkPayload = async (task: Task, payload: unknown): Promise<void> => {
  const schema = task.schema;
  if (schema === undefined) return;
  if (isEffectSchema(schema)) {
    const Schema = await (effectSchema ??= import("effect/Schema"));
    const result = await Effect.runPromise(Effect.result(Schema.decodeUnknownEffect(schema as Schema.Codec<unknown>)(payload)));
    if (result._tag === "Failure") throw new Error(String(result.failure.message ?? result.failure));
    return;
  }
  const result = (await (schema as StandardSchema)["~standard"].validate(payload)) as {
    issues?: ReadonlyArray<{ message: string; path?: ReadonlyArray<unknown> }>;
  };
  if (result.issues !== undefined && result.issues.length > 0) {
    throw new Error(
      result.issues
        .map((issue) => {
          const path = (issue.path ?? []).map((p) => (typeof p === "object" && p !== null && "key" in p ? String((p as { key: unknown }).key) : String(p)));
          return path.length > 0 ? `${issue.message} at ${path.join(".")}` : issue.message;
        })
        .join("; "),
    );
  }
};
