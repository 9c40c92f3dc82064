// The supervisor's options, their defaults, and the checks that make a bad value fail at start.
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import type pg from "pg";
import { checkQueueName, checkSchemaName, DEFAULT_SCHEDULE_GRACE_MS, DEFAULT_SCHEMA, DEFAULT_STATEMENT_TIMEOUT_MS, InvalidConfigError } from "../db/index.ts";
import type { Inspector } from "./inspection.ts";
import type { Logger } from "./logger.ts";
import type { Task } from "./task.ts";
import type { WorkflowDefinition } from "../workflows/definition.ts";
import type { MetricsOptions } from "./metrics.ts";

/** How long running jobs may finish after a stop, unless drainTimeoutMs says otherwise. */
export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000;

export interface SupervisorOptions {
  /** Tasks this worker runs; it claims only their types. */
  tasks: readonly Task<any, any>[];
  /**
   * Workflows (defineWorkflow) whose events this worker applies. Their tasks run wherever those
   * tasks are given; give every worker that applies workflow events all of the workflows.
   */
  workflows?: readonly WorkflowDefinition[];
  /** A connection string, or `pool`. */
  connectionString?: string;
  /** Your own pool; picket will not end it. */
  pool?: pg.Pool;
  /**
   * The connection string (or pool) goes through a pooler in transaction mode (PgBouncer, ...):
   * picket names no prepared statements and sets no session state on those connections. Give
   * `listenConnectionString` too, or new jobs are found by polling only. Default false.
   */
  transactionPooling?: boolean;
  /**
   * A direct connection to PostgreSQL for LISTEN (a connection through a pooler in transaction
   * mode receives no notifications). Default: the connection string, else the pool's settings.
   */
  listenConnectionString?: string;
  /**
   * Longest any statement may take, waiting for a connection and for locks included, before it is
   * cancelled and fails (then retried where that is safe); default 10 s.
   */
  statementTimeoutMs?: number;
  /** Schema of picket's tables; default "picket". */
  schema?: string;
  /** Run migrations before starting; default false. */
  migrate?: boolean;
  /** Names this worker on the claims it makes; default host-pid-random. */
  workerId?: string;
  /** Most handlers running at once in this worker, over all tasks; default 10. A job whose handler
   * has returned frees its slot while its outcome is written. */
  concurrency?: number;
  /**
   * Most jobs claimed ahead of a free slot (the worker's local buffer); default: 100, or the
   * concurrency if larger; 0 turns it off. A task gets only as many as its slots free in a few
   * claim round trips (judged by how long its jobs have held a slot), so a task whose handlers run
   * long never has jobs waiting in this worker, and quick ones are claimed in batches this large.
   */
  prefetch?: number;
  /**
   * Serial queues' concurrency, by name: at most this many jobs of the queue processing at once
   * across all workers. A queue not named here is serial (1). Every worker should give the same
   * values: each claim applies its own worker's.
   */
  queues?: Readonly<Record<string, { concurrency: number }>>;
  /** Longest wait between polls when no NOTIFY arrives; default 1000 ms. */
  pollIntervalMs?: number;
  /** How often expired claims are reclaimed; default 5000 ms. */
  sweepIntervalMs?: number;
  /** How often the worker writes its heartbeat row (what the dashboard shows of it); default 2 s. */
  heartbeatIntervalMs?: number;
  /** Most rows one sweep moves; default 1000. */
  sweepBatchSize?: number;
  /** How long stop() lets running jobs finish before interrupting and releasing them; default 30 s. */
  drainTimeoutMs?: number;
  /**
   * Keep completed jobs' rows (status, result, timings) until retention removes them. Default
   * false: a completed job's row is deleted in its completion's statement, the cheapest write a
   * completion can make, and `jobs show` no longer finds it. A job holding a dedupe key is kept
   * either way (a "window" enqueue dedupes against it). Dead and cancelled jobs are always kept.
   */
  keepCompleted?: boolean;
  /** Deletes old finished jobs; false turns it off. Default: completed and cancelled after 7 days, hourly. */
  retention?: false | { olderThanMs?: number; intervalMs?: number; batchSize?: number };
  /** LISTEN for enqueues to pick work up at once (polling stays as the fallback); default true. */
  listen?: boolean;
  /**
   * The scheduler (recurring jobs of the worker's tasks): how often it looks for due ticks
   * (default 1000 ms), and how late a tick may be seen before it counts as missed and the
   * schedule's `missed` policy applies (default 10 s, at least twice the interval). false: this
   * worker fires no schedules (others still do). `now` replaces the database's clock: for tests.
   */
  schedules?: false | { intervalMs?: number; graceMs?: number; now?: () => Date };
  /** The health server (/health, /ready, and Prometheus text at /metrics); off unless a port is given. */
  health?: { port: number; host?: string; stalePollMs?: number };
  /**
   * Where the worker's metrics go: OpenTelemetry through `meterProvider` (default: the global one,
   * which your SDK registers), Prometheus into `registry` (default: picket's own, served at /metrics).
   */
  metrics?: MetricsOptions;
  /** pino logger; default JSON to stdout. */
  logger?: Logger;
  /** Include payloads in job log lines; default false. */
  logPayloads?: boolean;
  /**
   * An XState inspector (a callback, or @statelyai/inspect's `inspector.inspect`): it sees the
   * supervisor's actor and, under it, an actor for every job. Payloads and results are redacted
   * unless logPayloads is on. Jobs then run on XState's interpreter rather than the derived path.
   */
  inspect?: Inspector;
}

export interface ResolvedConfig {
  schema: string;
  statementTimeoutMs: number;
  transactionPooling: boolean;
  workerId: string;
  concurrency: number;
  prefetch: number;
  /** Connections in the pool picket opens (not used with a caller's pool). */
  poolSize: number;
  queues: Record<string, { concurrency: number }>;
  pollIntervalMs: number;
  sweepIntervalMs: number;
  heartbeatIntervalMs: number;
  sweepBatchSize: number;
  drainTimeoutMs: number;
  renewIntervalMs: number;
  keepCompleted: boolean;
  retention: false | { olderThanMs: number; intervalMs: number; batchSize: number };
  listen: boolean;
  schedules: false | { intervalMs: number; graceMs: number; now: (() => Date) | undefined };
  health: false | { port: number; host: string; stalePollMs: number };
  logPayloads: boolean;
}

// The buffer's default room. At concurrency 10, 30,000 no-op jobs, alternating runs: room 10
// (the concurrency) 3,227 jobs/s, 50: 4,928, 100: 6,549. The buffer is sized by the handlers'
// measured turnover, so the room only matters for quick ones.
const DEFAULT_PREFETCH = 100;

const int = (name: string, value: unknown, fallback: number, min: number): number => {
  const v = value ?? fallback;
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > 2_147_483_647) {
    throw new InvalidConfigError(`picket: ${name} must be an integer ≥ ${min} (got ${String(value)}).`);
  }
  return v;
};

const bool = (name: string, value: unknown, fallback: boolean): boolean => {
  if (value !== undefined && typeof value !== "boolean") throw new InvalidConfigError(`picket: ${name} must be true or false (got ${String(value)}).`);
  return value ?? fallback;
};

/** A TCP port: 0 (any free one) to 65535; a larger number would fail only inside the health server. */
const port = (name: string, value: unknown): number => {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > 65_535) {
    throw new InvalidConfigError(`picket: ${name} must be a port number from 0 to 65535 (got ${String(value)}).`);
  }
  return value;
};

const resolveQueues = (queues: SupervisorOptions["queues"]): Record<string, { concurrency: number }> => {
  if (queues === undefined) return {};
  if (typeof queues !== "object" || queues === null || Array.isArray(queues)) {
    throw new InvalidConfigError(`picket: queues must be an object such as { "emails": { concurrency: 2 } } (got ${String(queues)}).`);
  }
  return Object.fromEntries(
    Object.entries(queues).map(([name, queue]) => [checkQueueName(name, "queues"), { concurrency: int(`queues["${name}"].concurrency`, queue?.concurrency, 1, 1) }]),
  );
};

export const resolveConfig = (options: SupervisorOptions): ResolvedConfig => {
  if (!options || !Array.isArray(options.tasks) || options.tasks.length === 0) {
    throw new InvalidConfigError("picket: give the supervisor at least one task: createSupervisor({ tasks: [defineTask({ name, handler })], ... }).");
  }
  const names = new Set<string>();
  for (const task of options.tasks) {
    if (names.has(task.name)) throw new InvalidConfigError(`picket: task "${task.name}" is defined twice.`);
    names.add(task.name);
  }
  if (!options.connectionString && !options.pool) {
    throw new InvalidConfigError("picket: give the supervisor a connectionString (e.g. process.env.DATABASE_URL) or a pg pool.");
  }
  if (options.connectionString && options.pool) {
    throw new InvalidConfigError(
      "picket: give the supervisor a connectionString or a pool, not both (for LISTEN on a direct connection beside a pooled one, use listenConnectionString).",
    );
  }
  const concurrency = int("concurrency", options.concurrency, 10, 1);
  const pollIntervalMs = int("pollIntervalMs", options.pollIntervalMs, 1_000, 10);
  // Renew four times per lease: a claim's lease counts as lost on the worker's own clock a fifth of
  // a lease before the server's deadline (leaseMarginMs), so a renewal may fail, or be jittered
  // late, once per lease without interrupting anything.
  const renewIntervalMs = Math.max(25, Math.floor(Math.min(...options.tasks.map((t) => t.leaseMs)) / 4));
  const retention =
    options.retention === false
      ? false
      : {
          olderThanMs: int("retention.olderThanMs", options.retention?.olderThanMs, 7 * 86_400_000, 0),
          intervalMs: int("retention.intervalMs", options.retention?.intervalMs, 3_600_000, 1_000),
          batchSize: int("retention.batchSize", options.retention?.batchSize, 1_000, 1),
        };
  let schedules: ResolvedConfig["schedules"] = false;
  if (options.schedules !== false) {
    const intervalMs = int("schedules.intervalMs", options.schedules?.intervalMs, 1_000, 10);
    const graceMs = int("schedules.graceMs", options.schedules?.graceMs, Math.max(DEFAULT_SCHEDULE_GRACE_MS, 2 * intervalMs), 2 * intervalMs);
    schedules = { intervalMs, graceMs, now: options.schedules?.now };
  }
  return {
    schema: checkSchemaName(options.schema ?? DEFAULT_SCHEMA),
    statementTimeoutMs: int("statementTimeoutMs", options.statementTimeoutMs, DEFAULT_STATEMENT_TIMEOUT_MS, 1),
    transactionPooling: options.transactionPooling ?? false,
    workerId: options.workerId ?? `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`,
    concurrency,
    prefetch: int("prefetch", options.prefetch, Math.max(concurrency, DEFAULT_PREFETCH), 0),
    // Claims, batched writes and renewals share the pool: a few connections beyond one per job
    // at low concurrency, and no more than 20 (batched writes need few connections).
    poolSize: Math.min(concurrency + 4, 20),
    queues: resolveQueues(options.queues),
    pollIntervalMs,
    sweepIntervalMs: int("sweepIntervalMs", options.sweepIntervalMs, 5_000, 10),
    heartbeatIntervalMs: int("heartbeatIntervalMs", options.heartbeatIntervalMs, 2_000, 10),
    sweepBatchSize: int("sweepBatchSize", options.sweepBatchSize, 1_000, 1),
    drainTimeoutMs: int("drainTimeoutMs", options.drainTimeoutMs, DEFAULT_DRAIN_TIMEOUT_MS, 0),
    renewIntervalMs,
    keepCompleted: bool("keepCompleted", options.keepCompleted, false),
    retention,
    listen: options.listen ?? true,
    schedules,
    health: options.health
      ? {
          port: port("health.port", options.health.port ?? 0),
          host: options.health.host ?? "0.0.0.0",
          stalePollMs: int("health.stalePollMs", options.health.stalePollMs, Math.max(30_000, pollIntervalMs * 10), 1),
        }
      : false,
    logPayloads: options.logPayloads ?? false,
  };
};
