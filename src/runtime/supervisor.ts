// The supervisor: owns the pool and composes the worker's parts under the supervisor machine, which
// is its lifecycle: the poll loop (poll-loop.ts) and its claims (claimer.ts), the held jobs
// (held-jobs.ts, a job machine each), the background loops (background.ts: lease renewal, the sweep,
// retention, schedules, heartbeat, LISTEN), the health endpoint (health-endpoint.ts) and the drain.
import { setMaxListeners } from "node:events";
import { hostname } from "node:os";
import * as Effect from "effect/Effect";
import * as Fiber from "effect/Fiber";
import pg from "pg";
import { createActor, fromCallback, fromPromise, waitFor, type Actor, type AnyActorRef } from "xstate";
import {
  describeConnection,
  endPool,
  migrate,
  openPool,
  PicketError,
  requirePicketSchema,
  probeConnection,
  queueDepth,
  flowCounts,
  removeWorker,
  leaseOf,
  renewLeases,
  type ClaimedJob,
  type HeldJobView,
  type StatementOptions,
  type TaskTally,
  type WorkerBeat,
} from "../db/index.ts";
import type { JobOutcome } from "../machines/job-machine.ts";
import { supervisorMachine } from "../machines/supervisor-machine.ts";
import { resolveConfig, type ResolvedConfig, type SupervisorOptions } from "./config.ts";
import { HealthEndpoint, healthReport } from "./health-endpoint.ts";
import type { HealthReport } from "./health-server.ts";
import { HeldJobs } from "./held-jobs.ts";
import { backgroundLoops } from "./background.ts";
import { Claimer } from "./claimer.ts";
import { JobTally } from "./job-tally.ts";
import { createJobRuntime, type JobRuntime } from "./job-runtime.ts";
import { inspectorFor, parentFor } from "./inspection.ts";
import { applierTask, childCancelTask, workflowRegistry, type ApplierDeps, type WorkflowRegistry } from "../workflows/applier.ts";
import { registerWorkflowMachines } from "../db/workflows.ts";
import { workflowInspection } from "../workflows/inspect.ts";
import { LeaseWatch, leaseMarginMs, localDeadline } from "./lease-watch.ts";
import { createLogger, type Logger } from "./logger.ts";
import { WorkerMetrics } from "./metrics.ts";
import { PollLoop, type PollOutput } from "./poll-loop.ts";
import { watchEventLoop } from "./stall-watch.ts";
import { PICKET_VERSION } from "./version.ts";
import { isLimited, type Task } from "./task.ts";

/** How long after the drain deadline releases and outcomes in flight may still be written. */
const RELEASE_GRACE_MS = 1_000;

/**
 * The bound of stop()'s last steps together, once the drain is over (giving back the jobs of a
 * claim whose reply never came; letting the pool's connections close politely before closing
 * them): they take milliseconds on a database that answers, and must not add up on one that does not.
 */
const STOP_STEP_MS = 250;

/** The health check's own connection must answer within this. */
const HEALTH_PROBE_MS = 2_000;

// The jobs a heartbeat row lists at most (it counts them all): enough for a dashboard to draw,
// bounded for a worker holding thousands.
const HEARTBEAT_JOBS = 100;

/** A machine's state value as text: "running.polling" for { running: "polling" }. */
const stateText = (value: unknown): string =>
  typeof value === "string" ? value : typeof value === "object" && value !== null ? Object.entries(value).map(([k, v]) => `${k}.${stateText(v)}`).join(",") : "starting";

/** The event loop is sampled this often; a blocked loop is reported once it held up a tick by STALL_MIN_MS. */
const STALL_TICK_MS = 100;
const STALL_MIN_MS = 50;

export interface SupervisorStats {
  /** Job machines alive: handlers running, and jobs whose outcome is still being written. */
  running: number;
  /** Of those, jobs claimed ahead of a free slot and waiting for one (the local buffer). */
  waiting: number;
  runningByTask: Record<string, number>;
  outcomes: Record<JobOutcome, number>;
  lastPollAt: Date | null;
  draining: boolean;
}

/** Called when a job's machine ends, with its outcome; the demo and tests listen here. */
/**
 * A job's machine ended. `durationMs`: from its claim (sent) to its end (waiting and running). `waitMs`:
 * from its claim until it got a slot (the worker's buffer). `runMs`: from its slot to its handler's
 * end, or to the job's end when the handler did not end on its own (interrupted, timed out);
 * 0 for a job that never got a slot (released at a drain).
 */
export type JobFinishedListener = (event: {
  job: ClaimedJob;
  outcome: JobOutcome;
  error: string | null;
  durationMs: number;
  waitMs: number;
  runMs: number;
}) => void;

export class Supervisor {
  readonly config: ResolvedConfig;
  readonly logger: Logger;
  private readonly tasks: Map<string, Task>;
  private readonly options: SupervisorOptions;
  private pool: pg.Pool | undefined;
  /** How every statement runs: schema, time bound, prepared or not. */
  private readonly statements: StatementOptions & { schema: string };
  private jobs: JobRuntime | undefined;
  private actor: Actor<typeof supervisorMachine> | undefined;
  /** The claims this worker holds: slots, the local buffer, leases, outcomes counted. */
  private readonly held: HeldJobs;
  /** Claims and waits while the machine is `running`. */
  private readonly pollLoop: PollLoop;
  /** Its completions per second since the last heartbeat, which reports them. */
  private readonly tally = new JobTally(performance.now());
  private readonly startedAt = new Date();
  /** What the worker measures; the health server serves its Prometheus registry at /metrics. */
  readonly metrics: WorkerMetrics;
  private readonly listeners = new Set<JobFinishedListener>();
  private lastPollAt: number | null = null;
  private pollStartedAt: number | null = null;
  private starting: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private forced = false;
  private readonly healthEndpoint = new HealthEndpoint();
  private readonly leaseWatch = new LeaseWatch((lateMs) => this.held.interruptExpired(performance.now(), lateMs));
  private stopStallWatch: (() => void) | undefined;
  /** Aborted when the worker has stopped: every statement of its own still in flight is cancelled. */
  private readonly lifetime = new AbortController();
  /**
   * Aborted by force() or at the drain deadline: the poll in flight, so the drain does not wait
   * for it. Its signal serves every poll until then (a controller and AbortSignal.any per poll were
   * garbage at every job's end, when each job's end is a poll).
   */
  private pollAbort: { controller: AbortController; signal: AbortSignal } | undefined;
  /** The health check's database probe in flight, shared by the checks that arrive meanwhile. */
  private databaseProbe: Promise<string | null> | undefined;
  /** The claim: fast and slow, what is due of the slow one, and claims whose reply never came. */
  private readonly claimer: Claimer;
  /** The workflows this worker applies events of, when given any. */
  private readonly workflows: WorkflowRegistry | undefined;
  /** With an inspector: tells it of each workflow event applied here. */
  private workflowsInspected: ApplierDeps["applied"];

  constructor(options: SupervisorOptions) {
    // Workflows run as two more tasks: the applier of their events, and the cancel of a child workflow its parent stopped.
    this.workflows = workflowRegistry(options);
    const tasks = this.workflows ? [...(options.tasks ?? []), applierTask(this.workflows, () => this.applierDeps()), childCancelTask(() => this.applierDeps())] : options.tasks;
    this.config = resolveConfig({ ...options, tasks });
    this.workflows?.checkTimerGrace(this.config.pollIntervalMs);
    this.options = options;
    this.logger = (options.logger ?? createLogger()).child({ worker_id: this.config.workerId });
    this.tasks = new Map(tasks.map((task) => [task.name, task as Task]));
    // Every statement of this worker listens to its lifetime: no limit on listeners.
    setMaxListeners(Number.POSITIVE_INFINITY, this.lifetime.signal);
    this.statements = {
      schema: this.config.schema,
      timeoutMs: this.config.statementTimeoutMs,
      preparedStatements: !this.config.transactionPooling,
      signal: this.lifetime.signal,
    };
    this.metrics = new WorkerMetrics(options.metrics);
    this.pollLoop = new PollLoop({
      intervalMs: this.config.pollIntervalMs,
      poll: () => this.pollOnce(),
      pollFailed: (error) => this.logger.error({ err: error }, "poll failed; polling again after the interval"),
    });
    this.claimer = new Claimer({
      pool: () => this.pool!,
      config: this.config,
      statements: this.statements,
      tasks: this.tasks,
      logger: this.logger,
      metrics: this.metrics,
      claimTook: (ms) => this.held.claimTook(ms),
    });
    this.held = new HeldJobs({
      metrics: this.metrics,
      concurrency: this.config.concurrency,
      prefetch: this.config.prefetch,
      tasks: this.tasks,
      logger: this.logger,
      create: (job, slotFree, observer) => this.jobs!.create(job, slotFree, observer),
      jobStarted: (type, pickupMs) => this.tally.started(type, pickupMs),
      finished: (entry, outcome, error) => {
        this.tally.ended(entry.job.type, outcome, this.claimer.queueOf(entry.job));
        // Its queue or its task's cluster limit has room now that the row has left processing:
        // claim again soon, here (another worker's probe may be a poll interval away).
        if (this.claimer.ended(entry.job)) this.pollLoop.wake();
        const now = performance.now();
        const waitMs = Math.round((entry.started ? entry.slotTakenAt : now) - entry.claimSentAt);
        const runMs = entry.started ? Math.round((entry.handlerSettledAt ?? now) - entry.slotTakenAt) : 0;
        for (const listener of this.listeners) {
          try {
            listener({ job: entry.job, outcome, error, durationMs: Math.round(now - entry.claimSentAt), waitMs, runMs });
          } catch (listenerError) {
            this.logger.error({ err: listenerError, job_id: entry.job.id }, "an onJobFinished listener threw; ignored");
          }
        }
      },
      // A turn in which slots freed or jobs finished: until the drain, room for the poll loop; from
      // then, the count the drain waits on.
      // After a blocked event loop: the claims renewed at once, in one statement bounded by the
      // shortest of their leases' margins (it must answer before another worker may act on them).
      reconfirm: (jobs) =>
        renewLeases(this.pool!, jobs.map(leaseOf), {
          ...this.statements,
          timeoutMs: Math.max(1, Math.min(this.config.statementTimeoutMs, ...jobs.map((job) => leaseMarginMs(job.leaseMs)))),
        }),
      watch: (at) => this.leaseWatch.schedule(at),
      turnEnded: (finished) => {
        const snapshot = this.actor?.getSnapshot();
        if (snapshot?.status !== "active") return;
        if (snapshot.value === "running") this.pollLoop.roomMade();
        else if (finished > 0) this.actor!.send({ type: "JOBS_HELD", count: this.held.size });
      },
    });
  }

  /** Connects (and migrates, when asked), then starts polling. Resolves once running. */
  start(): Promise<void> {
    // A supervisor runs once: stop() ends its pool, its timers and its machine for good. Starting
    // after it (even a stop() that came before any start()) would log "worker started" and then
    // claim nothing, since claiming stopped with the drain.
    if (this.stopping) throw new PicketError("picket: a stopped supervisor cannot be started again; create a new one");
    if (this.starting) throw new Error("picket: this supervisor was already started; create a new one to start again.");
    this.starting = this.startOnce();
    return this.starting;
  }

  private async startOnce(): Promise<void> {
    this.pool = this.options.pool ?? (await openPool({
      connectionString: this.options.connectionString!,
      max: this.config.poolSize,
      onIdleError: (error) => this.logger.warn({ err: error }, "idle database connection failed; the pool replaces it"),
      transactionPooling: this.config.transactionPooling,
      statementTimeoutMs: this.config.statementTimeoutMs,
    }));
    if (this.options.migrate) await migrate(this.pool, { schema: this.config.schema });
    else await this.requireSchema();
    if (this.workflows) {
      await registerWorkflowMachines(this.pool, this.workflows.machines(), this.statements);
      if (this.options.inspect) this.workflowsInspected = workflowInspection(this.options.inspect, this.config.logPayloads);
    }
    const inspect = this.options.inspect && inspectorFor(this.options.inspect, this.config.logPayloads);
    let jobParent: AnyActorRef | undefined;
    const pool = this.pool;
    this.metrics.observeHeld(() => this.held.heldCounts());
    this.metrics.observeDepth(() => queueDepth(pool, this.statements));
    this.metrics.observeFlows(() => flowCounts(pool, this.statements));
    this.jobs = createJobRuntime({
      db: this.pool,
      metrics: this.metrics,
      statements: this.statements,
      logger: this.logger,
      logPayloads: this.config.logPayloads,
      keepCompleted: this.config.keepCompleted,
      taskFor: (type) => this.tasks.get(type),
      leaseLost: (job) => this.held.get(job)?.actor.send({ type: "LEASE_LOST" }),
      stepRecorded: (job, name) => this.held.get(job)?.actor.send({ type: "STEP_RECORDED", name }),
      cancelled: (job) => {
        const entry = this.held.get(job);
        if (entry) this.held.cancelled(entry);
      },
      handlerSettled: (job) => this.held.handlerSettled(job, performance.now()),
      leaseConfirmed: (job, sentAt) => this.held.leaseConfirmed(job, sentAt),
      leaseProvable: (job) => this.held.leaseProvable(job, performance.now()),
      // With an inspector, every job runs as an actor under the supervisor's, so that the
      // inspector sees one tree.
      ...(inspect ? { parent: () => (jobParent ??= this.actor && parentFor(this.actor)) } : {}),
    });
    const machine = supervisorMachine.provide({
      actors: {
        pollLoop: fromCallback(() => {
          this.pollLoop.start();
          return () => void this.pollLoop.stop();
        }),
        // Never fails: the loop's stop() does not, and the count is read once it has resolved.
        pollEnded: fromPromise(async () => {
          await this.pollLoop.stop();
          return { held: this.held.size };
        }),
        background: fromCallback(() => {
          const fiber = Effect.runFork(this.background());
          return () => void Effect.runFork(Fiber.interrupt(fiber));
        }),
      },
      actions: {
        interruptJobs: () => {
          this.logger.warn({ running: this.held.size }, "drain deadline reached: interrupting and releasing running jobs");
          for (const { actor } of this.held.values()) actor.send({ type: "DRAIN_DEADLINE" });
        },
        abandonJobs: () => {
          this.logger.warn(
            { writing: this.held.size },
            "drain: writes still in flight are given up; the sweep takes their jobs back after their lease",
          );
          for (const { actor } of this.held.values()) actor.send({ type: "ABANDON" });
        },
        reportDraining: () => this.logger.info({ running: this.held.size }, "draining: claiming stopped, waiting for running jobs"),
        releaseQueued: () => this.held.releaseWaiting(),
        abortPoll: () => this.abortPoll(),
      },
    });
    this.actor = createActor(machine, {
      input: { drainTimeoutMs: this.config.drainTimeoutMs, releaseGraceMs: RELEASE_GRACE_MS },
      ...(inspect ? { inspect } : {}),
    });
    this.actor.subscribe({ error: (error) => this.logger.fatal({ err: error }, "supervisor machine failed") });
    const health = this.config.health;
    if (health) await this.startHealth(health);
    this.stopStallWatch = watchEventLoop(STALL_TICK_MS, STALL_MIN_MS, (stalledMs) => this.held.reportStall(stalledMs, performance.now()));
    this.actor.start();
    this.logger.info({ tasks: [...this.tasks.keys()], concurrency: this.config.concurrency }, "worker started");
  }

  /** What the workflow applier uses of this worker, once started. */
  private applierDeps(): ApplierDeps {
    return { db: this.pool!, statements: this.statements, logger: this.logger, applied: this.workflowsInspected };
  }

  /** Starts the health endpoint; when it cannot listen, start() fails with nothing left open. */
  private async startHealth(health: { port: number; host: string }): Promise<void> {
    try {
      await this.healthEndpoint.start(health, () => this.health(), this.metrics.registry, this.logger);
    } catch (error) {
      this.actor = undefined; // never started: stop() has no machine to drain
      if (this.pool && !this.options.pool) {
        const pool = this.pool;
        this.pool = undefined;
        await pool.end().catch(() => undefined);
      }
      throw error;
    }
  }

  /**
   * Without migrate: true, one look that picket's tables exist before anything polls: else start()
   * would resolve and every poll fail with `relation "picket.jobs" does not exist`. picket's own
   * pool is closed first, so a failed start() leaves nothing open.
   */
  private async requireSchema(): Promise<void> {
    const pool = this.pool!;
    try {
      await requirePicketSchema(pool, this.statements);
    } catch (error) {
      if (!this.options.pool) {
        this.pool = undefined; // a stop() after the failed start() must not end it twice
        await pool.end().catch(() => undefined);
      }
      throw error;
    }
  }

  /**
   * Drains once: claiming stops at once, an in-flight poll finishes first, running jobs get the
   * drain deadline, then are interrupted and released. Every caller awaits the same drain.
   */
  stop(): Promise<void> {
    // Claiming and starting waiting jobs stop at once; the machine's drain releases those.
    this.held.stopStarting();
    this.stopping ??= (async () => {
      await this.starting?.catch(() => undefined);
      const actor = this.actor;
      if (actor) {
        actor.send({ type: "STOP" });
        // force() may have been called before this drain reached the machine (an idle worker's
        // machine has already stopped: nothing to force).
        if (this.forced && actor.getSnapshot().status === "active") actor.send({ type: "FORCE" });
        await waitFor(actor, (snapshot) => snapshot.status === "done");
      }
      this.leaseWatch.stop();
      this.stopStallWatch?.();
      await this.healthEndpoint.stop();
      // The last steps share one budget: a database that did not answer within it is not waited
      // on again, so they add STOP_STEP_MS to the drain at most, not once per step.
      const lastStepsEnd = performance.now() + STOP_STEP_MS;
      // A claim whose reply never came may have given out jobs: one short try to give them back
      // (unless forced), else the sweep charges them after their lease.
      if (!this.forced) await this.claimer.giveBackUnreturned(Math.min(this.config.statementTimeoutMs, STOP_STEP_MS), this.lifetime.signal);
      // The heartbeat row goes with the worker: one short try (a row left behind shows as silent).
      if (this.pool && this.actor) {
        const timeoutMs = Math.max(1, Math.round(lastStepsEnd - performance.now()));
        await removeWorker(this.pool, this.config.workerId, { ...this.statements, timeoutMs }).catch(() => undefined);
      }
      // Statements of this worker still in flight (a renewal, the sweep, a write given up) are
      // cancelled and their connections closed, so ending the pool never waits on the database.
      // Those of other users of a caller's pool are not touched.
      this.lifetime.abort();
      if (this.pool && !this.options.pool) await endPool(this.pool, Math.max(0, lastStepsEnd - performance.now()));
      this.logger.info({ outcomes: this.held.outcomes }, "worker stopped");
    })();
    return this.stopping;
  }

  /**
   * Ends the drain's grace period now: running jobs are interrupted and released. Called again
   * while they are being released, it gives the releases (and any outcome still being written) up.
   */
  force(): void {
    this.forced = true;
    this.abortPoll();
    if (this.actor?.getSnapshot().status === "active") this.actor.send({ type: "FORCE" });
  }

  /** Listens to every job outcome of this worker. Returns the unsubscribe function. */
  onJobFinished(listener: JobFinishedListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  stats(): SupervisorStats {
    return {
      running: this.held.size,
      waiting: this.held.waiting,
      runningByTask: this.held.runningByTask(),
      outcomes: { ...this.held.outcomes },
      lastPollAt: this.lastPollAt === null ? null : new Date(this.lastPollAt),
      draining: this.stopping !== undefined,
    };
  }

  /** The health report (health-endpoint.ts): the database, the poll loop and the leases, each saying why. */
  async health(): Promise<HealthReport> {
    const stats = this.stats();
    return healthReport({
      now: Date.now(),
      stalePollMs: this.config.health ? this.config.health.stalePollMs : 30_000,
      pollIntervalMs: this.config.pollIntervalMs,
      pollStartedAt: this.pollStartedAt,
      lastPollAt: this.lastPollAt,
      draining: stats.draining,
      inFlight: stats.runningByTask,
      unreachable: this.pool === undefined ? "not started" : await this.probeDatabase(),
      leases: this.held.leaseHealth(performance.now()),
    });
  }

  /**
   * One probe at a time: health checks that arrive while one is in flight share its answer, so a
   * burst of requests (several probes, a dashboard) opens one connection, not one each, and cannot
   * use up the server's max_connections. Not cached beyond that: each answer is fresh.
   */
  private probeDatabase(): Promise<string | null> {
    this.databaseProbe ??= probeConnection(this.connectionConfig(), HEALTH_PROBE_MS).finally(() => (this.databaseProbe = undefined));
    return this.databaseProbe;
  }

  /** Settings for a connection of picket's own beside the pool (the health probe, LISTEN). */
  private connectionConfig(direct?: string): pg.ClientConfig {
    const connectionString = direct ?? this.options.connectionString;
    if (connectionString) return { connectionString };
    // pg-pool keeps the password as a non-enumerable property (out of logs): copied by name.
    const options = this.pool!.options as pg.ClientConfig;
    return { ...options, password: options.password };
  }

  /**
   * One poll: offer every task the free slots it may use, claim in one statement that deals the
   * worker's free slots fairly across tasks (rotating which task goes first), and start a machine
   * per job without awaiting any of them.
   */
  private async pollOnce(): Promise<PollOutput> {
    this.pollStartedAt = Date.now();
    // Cancels the poll's statements at the drain deadline or a force().
    if (!this.pollAbort) {
      const controller = new AbortController();
      this.pollAbort = { controller, signal: AbortSignal.any([this.lifetime.signal, controller.signal]) };
    }
    const signal = this.pollAbort.signal;
    try {
      // One turn of the event loop first: the jobs the last poll started, and handlers ending now,
      // free their slots before we count them. Without it, slots freed while a claim is in flight
      // settle into two cohorts claimed by turns (9, 1, 9, 1, ... at concurrency 10): twice the
      // statements for the same jobs.
      // (A worker holding no job has no slot to free: it claims at once, as a NOTIFY to an idle
      // worker asks.)
      if (this.held.size > 0) await new Promise((resolve) => setImmediate(resolve));
      // A stop() during that turn stops claiming at once: nothing more is claimed for the drain.
      if (this.stopping !== undefined) return { asked: 0, claimed: 0 };
      // Nothing to ask for (no free slot, every task at its limit) costs no round trip.
      const { wants, asked } = this.held.planClaim();
      await this.claimer.giveBackUnreturned(this.config.statementTimeoutMs, signal);
      // When the claim was sent: the lease it grants is confirmed from then (on this clock).
      const sentAt = performance.now();
      const jobs = asked > 0 ? await this.claimer.claim(wants, asked, sentAt, signal) : [];
      const entries = this.held.claimed(jobs, sentAt);
      for (const entry of entries) this.leaseWatch.schedule(localDeadline(entry.confirmedAt, entry.job.leaseMs));
      for (const entry of entries) entry.actor.start();
      return { asked, claimed: jobs.length };
    } finally {
      this.pollStartedAt = null;
      this.lastPollAt = Date.now();
    }
  }

  /** Cancels the poll in flight, if any; the next poll gets a signal of its own. */
  private abortPoll(): void {
    this.pollAbort?.controller.abort();
    this.pollAbort = undefined;
  }

  /** The background loops (background.ts), wired to this worker. */
  private background(): Effect.Effect<void> {
    const direct = this.options.listenConnectionString;
    const listenTo = direct ?? this.options.connectionString;
    return backgroundLoops({
      pool: this.pool!,
      config: this.config,
      statements: this.statements,
      logger: this.logger,
      metrics: this.metrics,
      held: this.held,
      tasks: this.tasks,
      stopping: () => this.stopping !== undefined,
      heartbeat: () => this.heartbeat(),
      listen: {
        connection: this.connectionConfig(direct),
        where: listenTo ? describeConnection(listenTo) : "the pool's server",
        wake: (types, queued) => {
          this.claimer.announced(types, queued);
          this.pollLoop.wake();
        },
      },
    });
  }

  /** What the heartbeat row says of this worker now: its machine's state and the jobs it holds (a sample of HEARTBEAT_JOBS). */
  private heartbeat(): { beat: WorkerBeat; tallies: TaskTally[] } {
    const { running, waiting } = this.held.heldCounts();
    const total = (counts: ReadonlyMap<string, number>) => [...counts.values()].reduce((a, b) => a + b, 0);
    const jobs: HeldJobView[] = [];
    for (const { job, actor } of this.held.values()) {
      if (jobs.length === HEARTBEAT_JOBS) break;
      jobs.push({ id: job.id, type: job.type, state: actor.state });
    }
    const { tallies, completedPerSecond, queueRates } = this.tally.take(performance.now());
    const beat: WorkerBeat = {
      id: this.config.workerId,
      host: hostname(),
      pid: process.pid,
      version: PICKET_VERSION,
      startedAt: this.startedAt,
      concurrency: this.config.concurrency,
      state: stateText(this.actor?.getSnapshot().value),
      jobs,
      running: total(running),
      waiting: total(waiting),
      tasks: [...this.tasks.keys()],
      completedPerSecond,
      queueRates,
      limits: Object.fromEntries(
        [...this.tasks.values()].filter(isLimited).map((task) => [task.name, { clusterConcurrency: task.clusterConcurrency, rateLimit: task.rateLimit }]),
      ),
    };
    return { beat, tallies };
  }
}

/** Creates a supervisor; call start() to run it and stop() to drain it. */
export const createSupervisor = (options: SupervisorOptions): Supervisor => new Supervisor(options);
