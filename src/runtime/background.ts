// A running worker's background loops: lease renewal, the reclaim sweep, retention, the
// scheduler, the heartbeat and LISTEN. Each runs in its own error boundary (loop.ts): one failing
// never stops another, nor the poll. The supervisor's machine runs them while it is alive.
import type pg from "pg";
import * as Effect from "effect/Effect";
import {
  beat,
  deleteFinishedFlows,
  deleteFinishedWorkflows,
  deleteFinishedJobs,
  leaseOf,
  recordHistory,
  renewLeases,
  runSchedules,
  sendWakeProbe,
  sweepExpiredClaims,
  syncTaskSchedules,
  type StatementOptions,
  type TaskTally,
  type WorkerBeat,
} from "../db/index.ts";
import type { ResolvedConfig } from "./config.ts";
import type { HeldJobs } from "./held-jobs.ts";
import { listenForJobs } from "./listener.ts";
import type { Logger } from "./logger.ts";
import { loop } from "./loop.ts";
import type { WorkerMetrics } from "./metrics.ts";
import type { Task } from "./task.ts";

export interface BackgroundDeps {
  pool: pg.Pool;
  config: ResolvedConfig;
  statements: StatementOptions & { schema: string };
  logger: Logger;
  metrics: WorkerMetrics;
  held: HeldJobs;
  tasks: ReadonlyMap<string, Task>;
  /** The drain has begun: the scheduler fires nothing more. */
  stopping: () => boolean;
  /** What the heartbeat row says of the worker now, and what it did since the previous one (the history's counts). */
  heartbeat: () => { beat: WorkerBeat; tallies: TaskTally[] };
  /** LISTEN's connection, and how to name its server in logs; absent when config.listen is off. */
  listen?: {
    connection: pg.ClientConfig;
    where: string;
    /** A NOTIFY named work of `types` (queued work among it when `queued`) that this worker runs. */
    wake: (types: "all" | readonly string[], queued: boolean) => void;
  };
}

// Failures keep their real cause (pg's message and code), for the loop's log line.
const attempt = <A>(run: () => Promise<A>) => Effect.tryPromise({ try: run, catch: (error) => error });

// The worker's row, then what it did since the previous beat into the dashboard's history (src/db/history.ts).
const heartbeat = (deps: BackgroundDeps) =>
  attempt(async () => {
    const now = deps.heartbeat();
    await beat(deps.pool, now.beat, deps.statements);
    await recordHistory(deps.pool, now.tallies, deps.statements);
  });

/** Every loop the config asks for, run together until interrupted. */
export const backgroundLoops = (deps: BackgroundDeps): Effect.Effect<void> => {
  const { config, logger } = deps;
  const loops: Effect.Effect<never>[] = [
    loop("lease renewal", config.renewIntervalMs, renewal(deps), logger),
    loop("sweep", config.sweepIntervalMs, sweep(deps), logger),
  ];
  if (config.retention) loops.push(loop("retention", config.retention.intervalMs, retention(deps, config.retention), logger));
  if (config.schedules) loops.push(loop("scheduler", config.schedules.intervalMs, scheduler(deps, config.schedules), logger));
  loops.push(loop("heartbeat", config.heartbeatIntervalMs, heartbeat(deps), logger));
  if (config.listen && deps.listen) loops.push(listening(deps, deps.listen));
  return Effect.all(loops, { concurrency: "unbounded", discard: true });
};

/**
 * One renewal round: every claim this worker holds, in one statement (none when it holds none).
 * What the round found, or that it failed, is HeldJobs' to judge.
 */
const renewal = ({ pool, held, metrics, statements }: BackgroundDeps): Effect.Effect<void, unknown> =>
  attempt(() =>
    held.renewRound((jobs) =>
      metrics.timed("renew", () => renewLeases(pool, jobs.map(leaseOf), statements)),
    ),
  ).pipe(Effect.tapError((error) => Effect.sync(() => held.renewalFailed(error))));

/** One sweep: claims whose lease expired, requeued or dead, and logged by whom they were lost. */
const sweep = ({ pool, config, statements, held, metrics, logger }: BackgroundDeps): Effect.Effect<void, unknown> =>
  Effect.gen(function* () {
    // Never the claims this worker holds: their outcome is on its way, and the fence decides.
    // (A claim refused for having no token has none to name.)
    const ours = [...held.values()].map(({ job }) => job.claimToken).filter((token) => typeof token === "string");
    const swept = yield* attempt(() => metrics.timed("sweep", () => sweepExpiredClaims(pool, config.sweepBatchSize, { ...statements, held: ours })));
    if (swept.length === 0) return;
    logger.info(
      {
        requeued: swept.filter((s) => s.status === "pending").length,
        dead: swept.filter((s) => s.status === "dead").length,
        lost: swept.map((s) => ({ job_id: s.id, claim_token: s.lostToken, locked_by: s.lostBy })),
      },
      "sweep reclaimed jobs whose lease expired",
    );
  });

/** One retention round: finished jobs older than the setting, deleted in batches until none is left. */
const retention = (
  { pool, statements, logger }: BackgroundDeps,
  { olderThanMs, batchSize }: { olderThanMs: number; batchSize: number },
): Effect.Effect<void, unknown> =>
  Effect.gen(function* () {
    let deleted = 0;
    for (let n = batchSize; n === batchSize; deleted += n) {
      n = yield* attempt(() => deleteFinishedJobs(pool, { olderThanMs, batchSize }, statements));
    }
    // Flows go whole, once every job of theirs has finished, as old as the same setting.
    let flows = 0;
    for (let n = batchSize; n === batchSize; flows += n) {
      n = yield* attempt(() => deleteFinishedFlows(pool, { olderThanMs, batchSize }, statements));
    }
    // Workflow instances that ended done or cancelled, with their histories.
    let workflows = 0;
    for (let n = batchSize; n === batchSize; workflows += n) {
      n = yield* attempt(() => deleteFinishedWorkflows(pool, { olderThanMs, batchSize }, statements));
    }
    if (deleted > 0 || flows > 0 || workflows > 0) logger.info({ deleted, flows, workflows }, "retention deleted old finished jobs");
  });

/**
 * One round of the scheduler: at the first round that reaches the database, the schedules the
 * worker's tasks declare are written (and a task's dropped declaration removed); then every due
 * tick of their schedules is fired, by the database's clock. Nothing once the drain has begun.
 */
const scheduler = (
  { pool, statements, logger, tasks, stopping }: BackgroundDeps,
  { graceMs, now }: { graceMs: number; now?: (() => Date) | undefined },
): Effect.Effect<void, unknown> => {
  const declared = [...tasks.values()];
  const fireFor = declared.map((t) => ({ name: t.name, maxAttempts: t.maxAttempts }));
  let synced = false;
  return attempt(async () => {
    if (stopping()) return;
    if (!synced) {
      const { removed } = await syncTaskSchedules(pool, declared.map((t) => ({ name: t.name, schedule: t.schedule })), statements);
      synced = true;
      if (removed.length > 0) logger.info({ schedules: removed }, "removed schedules their tasks no longer declare");
    }
    if (stopping()) return;
    const { fired, failed } = await runSchedules(pool, { ...statements, tasks: fireFor, graceMs, ...(now ? { at: now() } : {}) });
    for (const f of fired) {
      if (!f.advanced) continue;
      if (f.ticks.length > 0) logger.debug({ schedule: f.schedule, task: f.task, ticks: f.ticks, jobs: f.jobs }, "schedule fired");
      if (f.skipped) logger.info({ schedule: f.schedule, task: f.task, ran: f.ticks }, "schedule missed ticks while no worker ran it; its missed policy dropped some");
    }
    for (const { schedule, error } of failed) logger.error({ err: error, schedule }, "schedule could not be fired; trying again next round");
  });
};

/** LISTEN: a NOTIFY naming this worker's tasks wakes the poll; a cancel reaches the held job. */
const listening = ({ pool, config, statements, logger, held, tasks }: BackgroundDeps, listen: NonNullable<BackgroundDeps["listen"]>): Effect.Effect<never> =>
  listenForJobs({
    connection: listen.connection,
    schema: config.schema,
    onWake: (types, queued) => {
      if (types === "all" || types.some((t) => tasks.has(t))) listen.wake(types, queued);
    },
    onCancel: (claim) => held.cancelledClaim(claim),
    sendProbe: (id) => sendWakeProbe(pool, id, statements),
    where: listen.where,
    logger,
  });
