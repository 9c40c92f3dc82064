// The supervisor: owns the pool, the LISTEN connection, the poll, lease renewal, the sweep,
// retention and the drain. Its lifecycle is the supervisor machine; each job is a job machine.
import { setMaxListeners } from "node:events";
import type { Server } from "node:http";
import { Effect, Fiber } from "effect";
import pg from "pg";
import { createActor, fromCallback, fromPromise, waitFor, type Actor, type AnyActorRef } from "xstate";
import {
  claimJobs,
  deleteFinishedJobs,
  describeConnection,
  drawClaimTokens,
  endPool,
  giveBackUnreturnedClaims,
  migrate,
  openPool,
  probeConnection,
  renewLeases,
  sendWakeProbe,
  sweepExpiredClaims,
  type ClaimedJob,
  type ClaimWant,
  type StatementOptions,
} from "../db/index.ts";
import type { JobOutcome } from "../machines/job-machine.ts";
import { supervisorMachine, type PollOutput } from "../machines/supervisor-machine.ts";
import { resolveConfig, type ResolvedConfig, type SupervisorOptions } from "./config.ts";
import { startHealthServer, type HealthCheck, type HealthReport } from "./health-server.ts";
import { createJobRuntime, type JobHandle, type JobObserver, type JobOutput, type JobRuntime } from "./job-runtime.ts";
import { inspectorFor, parentFor } from "./inspection.ts";
import { leaseMarginMs, LeaseWatch, localDeadline } from "./lease-watch.ts";
import { listenForJobs } from "./listener.ts";
import { createLogger, type Logger } from "./logger.ts";
import { loop } from "./loop.ts";
import { watchEventLoop } from "./stall-watch.ts";
import type { Task } from "./task.ts";

/** What a running job tells its supervisor: one object per supervisor, shared by its jobs. */
interface JobBookkeeping {
  freeSlot(entry: RunningJob): void;
  finish(entry: RunningJob, outcome: JobOutcome, error: string | null): void;
  machineFailed(entry: RunningJob, error: unknown): void;
}

/**
 * One claim being run, and the observer of its machine. A class, not closures: a worker holds
 * thousands of these, and three closures per job were a tenth of a held job's heap.
 */
class RunningJob implements JobObserver {
  readonly job: ClaimedJob;
  actor!: JobHandle;
  readonly startedAt = Date.now();
  /** It holds one of the worker's slots: its payload check or handler runs, or will once START is processed. */
  holdsSlot: boolean;
  /** When it took its slot (performance.now()): how long tasks hold slots sizes the buffer. */
  slotTakenAt = performance.now();
  /** When (performance.now()) the statement that last confirmed its lease, the claim or a renewal, was sent. */
  confirmedAt: number;
  /**
   * When (performance.now()) its handler returned or threw: the outcome is on its way, and the
   * lease deadline no longer interrupts it. Undefined while the handler has not ended.
   */
  handlerSettledAt: number | undefined = undefined;
  private readonly bookkeeping: JobBookkeeping;

  constructor(bookkeeping: JobBookkeeping, job: ClaimedJob, slotFree: boolean, claimSentAt: number) {
    this.bookkeeping = bookkeeping;
    this.job = job;
    this.holdsSlot = slotFree;
    this.confirmedAt = claimSentAt;
  }

  changed(state: string): void {
    if (this.holdsSlot && !beforeOutcome(state)) this.bookkeeping.freeSlot(this);
  }

  // An outcome given up says why it could not be written; any other, why the attempt failed.
  done(output: JobOutput): void {
    this.bookkeeping.finish(this, output.outcome, output.outcome === "abandoned" ? output.writeError : output.error ? `${output.error.kind}: ${output.error.message}` : null);
  }

  failed(error: unknown): void {
    this.bookkeeping.machineFailed(this, error);
  }
}

/** How long after the drain deadline releases and outcomes in flight may still be written. */
const RELEASE_GRACE_MS = 1_000;

/**
 * The bound of stop()'s last steps together, once the drain is over (giving back the jobs of a
 * claim whose reply never came; letting the pool's connections close politely before closing
 * them): they take milliseconds on a database that answers, and must not add up on one that does not.
 */
const STOP_STEP_MS = 250;

/** Most tokens of unanswered claims kept to give back (a claim gives out at most a few dozen). */
const MAX_UNRETURNED_TOKENS = 10_000;

/** The health check's own connection must answer within this. */
const HEALTH_PROBE_MS = 2_000;

/** The event loop is sampled this often; a blocked loop is reported once it held up a tick by STALL_MIN_MS. */
const STALL_TICK_MS = 100;
const STALL_MIN_MS = 50;

/**
 * The states before a job's outcome is written: waiting for its slot (or for the START it has been
 * sent), checking its payload, running its handler. A job holds its slot until it leaves them, and
 * only a job still in them can lose its claim to another worker.
 */
const beforeOutcome = (state: string): boolean => state === "waitingForSlot" || state === "checkingPayload" || state === "running";

/**
 * The buffer's horizon, in claim round trips. Measured (defaults, 30,000 no-op jobs, alternating
 * runs on one server): 2 drained 4,395-5,053 jobs/s, 4 drained 4,914-5,409.
 */
const AHEAD_ROUND_TRIPS = 4;

/** Weight of the newest sample in the running means that size the buffer (slot holds, round trips). */
const NEWEST_WEIGHT = 0.2;

const runningMean = (mean: number | undefined, sample: number): number => (mean === undefined ? sample : mean + NEWEST_WEIGHT * (sample - mean));

const sum = (counts: Map<string, number>): number => {
  let total = 0;
  for (const n of counts.values()) total += n;
  return total;
};

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
export type JobFinishedListener = (event: { job: ClaimedJob; outcome: JobOutcome; error: string | null; durationMs: number }) => void;

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
  // One entry per claim being run, keyed by the claimed row object (one per claim). Not keyed by
  // job id: after a lost lease this worker may claim the same job again while the stale machine
  // is still winding down.
  private readonly running = new Map<ClaimedJob, RunningJob>();
  /**
   * Jobs claimed ahead of a free slot, oldest claim first (a Set keeps insertion order): the
   * worker's local buffer. Their machines wait in `waitingForSlot`.
   */
  private readonly queued = new Set<RunningJob>();
  private slotFreedQueued = false;
  private readonly bookkeeping: JobBookkeeping = {
    freeSlot: (entry) => this.freeSlot(entry),
    finish: (entry, outcome, error) => this.finishJob(entry, outcome, error),
    machineFailed: (entry, error) => {
      this.logger.error({ err: error, job_id: entry.job.id }, "job machine failed; the sweep will retry the job after its lease");
      this.finishJob(entry, "abandoned", String(error));
    },
  };
  /** How long each task's jobs hold a slot and how long a claim takes (running means): they size the buffer. */
  private readonly slotHoldMs = new Map<string, number>();
  private claimRoundTripMs: number | undefined;
  private readonly outcomes: Record<JobOutcome, number> = {
    completed: 0,
    retried: 0,
    dead: 0,
    released: 0,
    fenced: 0,
    abandoned: 0,
    refused: 0,
  };
  private readonly listeners = new Set<JobFinishedListener>();
  private rotation = 0;
  private lastPollAt: number | null = null;
  private pollStartedAt: number | null = null;
  private starting: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private forced = false;
  private healthFiber: Fiber.Fiber<never, unknown> | undefined;
  private healthServer: Server | undefined;
  private readonly leaseWatch = new LeaseWatch(() => this.checkLeases());
  private stopStallWatch: (() => void) | undefined;
  /** Aborted when the worker has stopped: every statement of its own still in flight is cancelled. */
  private readonly lifetime = new AbortController();
  /** Aborted by force() or at the drain deadline: the poll in flight, so the drain does not wait for it. */
  private pollAbort: AbortController | undefined;
  /** The health check's database probe in flight, shared by the checks that arrive meanwhile. */
  private databaseProbe: Promise<string | null> | undefined;
  /**
   * Tokens of claims whose reply never arrived (the statement failed or was cancelled, perhaps
   * after it committed): their jobs, if any, are given back before the next claim.
   */
  private unreturned: string[] = [];
  /** The last renewal round: when it ended and what went wrong (null: it wrote every lease it could). */
  private lastRenewal: { error: string | null; busy: number } = { error: null, busy: 0 };

  constructor(options: SupervisorOptions) {
    this.config = resolveConfig(options);
    this.options = options;
    this.logger = (options.logger ?? createLogger()).child({ worker_id: this.config.workerId });
    this.tasks = new Map(options.tasks.map((task) => [task.name, task as Task]));
    // Every statement of this worker listens to its lifetime: no limit on listeners.
    setMaxListeners(Number.POSITIVE_INFINITY, this.lifetime.signal);
    this.statements = {
      schema: this.config.schema,
      timeoutMs: this.config.statementTimeoutMs,
      preparedStatements: !this.config.transactionPooling,
      signal: this.lifetime.signal,
    };
  }

  /** Connects (and migrates, when asked), then starts polling. Resolves once running. */
  start(): Promise<void> {
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
    const inspect = this.options.inspect && inspectorFor(this.options.inspect, this.config.logPayloads);
    let jobParent: AnyActorRef | undefined;
    this.jobs = createJobRuntime({
      db: this.pool,
      statements: this.statements,
      logger: this.logger,
      logPayloads: this.config.logPayloads,
      taskFor: (type) => this.tasks.get(type),
      leaseLost: (job) => this.running.get(job)?.actor.send({ type: "LEASE_LOST" }),
      handlerSettled: (job) => {
        const entry = this.running.get(job);
        if (entry) entry.handlerSettledAt = performance.now();
      },
      leaseConfirmed: (job, sentAt) => {
        const entry = this.running.get(job);
        if (entry) entry.confirmedAt = Math.max(entry.confirmedAt, sentAt);
      },
      leaseProvable: (job) => {
        const entry = this.running.get(job);
        return entry !== undefined && localDeadline(entry.confirmedAt, job.leaseMs) > performance.now();
      },
      // With an inspector, every job runs as an actor under the supervisor's, so that the
      // inspector sees one tree.
      ...(inspect ? { parent: () => (jobParent ??= this.actor && parentFor(this.actor)) } : {}),
    });
    const machine = supervisorMachine.provide({
      actors: {
        poll: fromPromise(() => this.pollOnce()),
        background: fromCallback(({ sendBack }) => {
          const fiber = Effect.runFork(this.background((event) => sendBack(event)));
          return () => void Effect.runFork(Fiber.interrupt(fiber));
        }),
      },
      actions: {
        interruptJobs: () => {
          this.logger.warn({ running: this.running.size }, "drain deadline reached: interrupting and releasing running jobs");
          for (const { actor } of this.running.values()) actor.send({ type: "DRAIN_DEADLINE" });
        },
        abandonJobs: () => {
          this.logger.warn(
            { writing: this.running.size },
            "drain: writes still in flight are given up; the sweep takes their jobs back after their lease",
          );
          for (const { actor } of this.running.values()) actor.send({ type: "ABANDON" });
        },
        reportPollError: ({ event }) =>
          this.logger.error({ err: (event as { error?: unknown }).error }, "poll failed; polling again after the interval"),
        reportDraining: () => this.logger.info({ running: this.running.size }, "draining: claiming stopped, waiting for running jobs"),
        releaseQueued: () => this.releaseQueued(),
        abortPoll: () => this.pollAbort?.abort(),
      },
    });
    this.actor = createActor(machine, {
      input: { pollIntervalMs: this.config.pollIntervalMs, drainTimeoutMs: this.config.drainTimeoutMs, releaseGraceMs: RELEASE_GRACE_MS },
      ...(inspect ? { inspect } : {}),
    });
    this.actor.subscribe({ error: (error) => this.logger.fatal({ err: error }, "supervisor machine failed") });
    const health = this.config.health;
    if (health) {
      this.healthFiber = Effect.runFork(
        startHealthServer(health, () => this.health(), this.logger, (server) => (this.healthServer = server)).pipe(
          Effect.tapCause((cause) =>
            Effect.sync(() => this.logger.error({ cause: String(cause), port: health.port }, "health server failed; the worker runs on without it")),
          ),
        ),
      );
    }
    this.stopStallWatch = watchEventLoop(STALL_TICK_MS, STALL_MIN_MS, (stalledMs) => this.reportStall(stalledMs));
    this.actor.start();
    this.logger.info({ tasks: [...this.tasks.keys()], concurrency: this.config.concurrency }, "worker started");
  }

  /**
   * Drains once: claiming stops at once, an in-flight poll finishes first, running jobs get the
   * drain deadline, then are interrupted and released. Every caller awaits the same drain.
   */
  stop(): Promise<void> {
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
      // Open connections first: a probe that keeps its request half-sent would hold the close.
      this.healthServer?.closeAllConnections();
      if (this.healthFiber) await Effect.runPromise(Fiber.interrupt(this.healthFiber));
      // The last steps share one budget: a database that did not answer within it is not waited
      // on again, so they add STOP_STEP_MS to the drain at most, not once per step.
      const lastStepsEnd = performance.now() + STOP_STEP_MS;
      // A claim whose reply never came may have given out jobs: one short try to give them back
      // (unless forced), else the sweep charges them after their lease.
      if (!this.forced) await this.giveBackUnreturned(Math.min(this.config.statementTimeoutMs, STOP_STEP_MS));
      // Statements of this worker still in flight (a renewal, the sweep, a write given up) are
      // cancelled and their connections closed, so ending the pool never waits on the database.
      // Those of other users of a caller's pool are not touched.
      this.lifetime.abort();
      if (this.pool && !this.options.pool) await endPool(this.pool, Math.max(0, lastStepsEnd - performance.now()));
      this.logger.info({ outcomes: this.outcomes }, "worker stopped");
    })();
    return this.stopping;
  }

  /**
   * Ends the drain's grace period now: running jobs are interrupted and released. Called again
   * while they are being released, it gives the releases (and any outcome still being written) up.
   */
  force(): void {
    this.forced = true;
    this.pollAbort?.abort();
    if (this.actor?.getSnapshot().status === "active") this.actor.send({ type: "FORCE" });
  }

  /** Listens to every job outcome of this worker. Returns the unsubscribe function. */
  onJobFinished(listener: JobFinishedListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  stats(): SupervisorStats {
    const runningByTask: Record<string, number> = {};
    for (const job of this.running.keys()) runningByTask[job.type] = (runningByTask[job.type] ?? 0) + 1;
    return {
      running: this.running.size,
      waiting: this.queued.size,
      runningByTask,
      outcomes: { ...this.outcomes },
      lastPollAt: this.lastPollAt === null ? null : new Date(this.lastPollAt),
      draining: this.stopping !== undefined,
    };
  }

  /**
   * The health report: unhealthy when the database does not answer a connection of the report's
   * own, when the poll loop is stuck, or when a claim's lease has gone unconfirmed for longer than
   * a lease. Each check says why.
   */
  async health(): Promise<HealthReport> {
    const health = this.config.health;
    const stalePollMs = health ? health.stalePollMs : 30_000;
    const now = Date.now();
    const stats = this.stats();
    const poll: HealthCheck =
      this.pollStartedAt !== null && now - this.pollStartedAt > stalePollMs
        ? { ok: false, reason: `a poll has been running for ${now - this.pollStartedAt} ms (threshold ${stalePollMs} ms)` }
        : this.stopping === undefined && this.lastPollAt !== null && now - this.lastPollAt > stalePollMs + this.config.pollIntervalMs
          ? { ok: false, reason: `no poll for ${now - this.lastPollAt} ms (threshold ${stalePollMs + this.config.pollIntervalMs} ms)` }
          : { ok: true };
    const unreachable = this.pool === undefined ? "not started" : await this.probeDatabase();
    const database: HealthCheck = unreachable === null ? { ok: true } : { ok: false, reason: `the database does not answer: ${unreachable}` };
    const leases = this.leaseHealth();
    return {
      healthy: database.ok && poll.ok && leases.ok,
      ready: !stats.draining,
      draining: stats.draining,
      lastPollAt: stats.lastPollAt?.toISOString() ?? null,
      inFlight: stats.runningByTask,
      checks: { database, poll, leases },
    };
  }

  /** Failing when some claim's lease has gone unconfirmed for longer than a lease. */
  private leaseHealth(): HealthCheck {
    const now = performance.now();
    const stale = [...this.running.values()].filter((entry) => now - entry.confirmedAt > entry.job.leaseMs);
    if (stale.length === 0) return { ok: true };
    const oldest = stale.reduce((a, b) => (a.confirmedAt <= b.confirmedAt ? a : b));
    const cause = this.lastRenewal.error ?? (this.lastRenewal.busy > 0 ? "their rows are locked by another session" : "renewals are not getting through");
    return {
      ok: false,
      reason:
        `the leases of ${stale.length} claim(s) have not been renewed for longer than a lease (job ${oldest.job.id}: ` +
        `${Math.round(now - oldest.confirmedAt)} ms, lease ${oldest.job.leaseMs} ms): ${cause}`,
    };
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
    this.pollAbort = new AbortController();
    const signal = AbortSignal.any([this.lifetime.signal, this.pollAbort.signal]);
    try {
      // One turn of the event loop first: the jobs the last poll started, and handlers ending now,
      // free their slots before we count them. Without it, slots freed while a claim is in flight
      // settle into two cohorts claimed by turns (9, 1, 9, 1, ... at concurrency 10): twice the
      // statements for the same jobs.
      await new Promise((resolve) => setImmediate(resolve));
      // A stop() during that turn stops claiming at once: nothing more is claimed for the drain.
      if (this.stopping !== undefined) return { asked: 0, claimed: 0 };
      const { concurrency, prefetch } = this.config;
      const heldInAll = sum(this.countByTask((entry) => entry.holdsSlot));
      const slotRoom = concurrency - heldInAll;
      const ahead = this.claimAhead();
      const bufferRoom = Math.max(0, Math.min(prefetch, sum(ahead)) - this.queued.size);
      // The claim takes nothing while as many outcomes are being written as four times the
      // concurrency plus the buffer's room: a database slow to record them slows the claims down
      // too, rather than letting finished jobs pile up unrecorded (each is run again if the worker
      // dies before it is written). Not tighter: a commit waits milliseconds for fsync, and the
      // more outcomes share one, the cheaper each job (defaults, 20,000 no-op jobs: a bound of 2c
      // drained ~2,400 jobs/s, 3c ~3,000, 4c ~3,900, 8c or none ~4,200); and a bound below the
      // buffer's room would keep a claim from ever filling it. Never below zero: writes can
      // overshoot the bound (jobs claimed under it finish later), and a poll that asked for a
      // negative count was neither full nor "nothing to ask", so a finished write did not wake the
      // next one: the worker slept a whole poll interval.
      const writing = this.running.size - heldInAll - this.queued.size;
      const free = Math.max(0, Math.min(slotRoom + bufferRoom, 4 * concurrency + prefetch - writing));
      const inWorker = this.countByTask((entry) => entry.holdsSlot || this.queued.has(entry));
      const wants = this.offerSlots(free, slotRoom, bufferRoom, inWorker, ahead);
      // What the claim can take at most: the free slots, or less when tasks' own limits cap it.
      // Nothing to ask for (no free slot, every task at its limit) costs no round trip.
      const asked = Math.min(free, wants.reduce((total, want) => total + want.limit, 0));
      await this.giveBackUnreturned(this.config.statementTimeoutMs, signal);
      // When the claim was sent: the lease it grants is confirmed from then (on this clock).
      const sentAt = performance.now();
      const jobs = asked > 0 ? await this.claim(wants, asked, sentAt, signal) : [];
      // Slots freed while the claim was in flight go to the jobs already waiting first, then to
      // these, in claim order.
      this.startQueued();
      const takeSlot = this.slotTaker();
      // Started after the supervisor machine has counted them (a job can finish synchronously).
      const entries = jobs.map((job) => this.dispatch(job, takeSlot(job.type), sentAt));
      for (const entry of entries) this.leaseWatch.schedule(localDeadline(entry.confirmedAt, entry.job.leaseMs));
      setImmediate(() => entries.forEach((entry) => entry.actor.start()));
      return { asked, claimed: jobs.length };
    } finally {
      this.pollAbort = undefined;
      this.pollStartedAt = null;
      this.lastPollAt = Date.now();
    }
  }

  /** One claim, timed from `sentAt`: its round trip feeds the mean that sizes the buffer. */
  private async claim(wants: ClaimWant[], total: number, sentAt: number, signal: AbortSignal): Promise<ClaimedJob[]> {
    const tokens = drawClaimTokens(total);
    try {
      const jobs = await claimJobs(this.pool!, this.config.workerId, wants, { ...this.statements, signal, total, tokens });
      this.claimRoundTripMs = runningMean(this.claimRoundTripMs, performance.now() - sentAt);
      return jobs;
    } catch (error) {
      // The claim may have committed before it failed (its reply lost, or a cancel too late). Kept
      // bounded through a long outage, when every poll fails: the oldest are left to the sweep.
      this.unreturned = [...this.unreturned, ...tokens].slice(-MAX_UNRETURNED_TOKENS);
      throw error;
    }
  }

  /**
   * Gives back, unrun and uncharged, jobs of claims whose reply never came. Claims are made one at
   * a time, so none is in flight here. When it fails (the database is still away), the tokens are
   * kept for the next try; the claim goes ahead meanwhile.
   */
  private async giveBackUnreturned(timeoutMs: number, signal: AbortSignal = this.lifetime.signal): Promise<void> {
    if (this.unreturned.length === 0) return;
    try {
      const ids = await giveBackUnreturnedClaims(this.pool!, this.unreturned, { ...this.statements, timeoutMs, signal });
      this.unreturned = [];
      if (ids.length > 0) this.logger.warn({ jobs: ids }, `a claim's reply never arrived: gave back ${ids.length} job(s) it had taken, unrun and uncharged`);
    } catch (error) {
      this.logger.debug({ err: error }, "could not yet give back the jobs of a claim whose reply never arrived; trying again before the next claim");
    }
  }

  /**
   * Counts the running set's entries per task. Slots are counted for user code, not for
   * bookkeeping: a job whose handler has returned frees its slot at once, while its outcome is
   * written (the write overlaps the next claim).
   */
  private countByTask(counts: (entry: RunningJob) => boolean): Map<string, number> {
    const byTask = new Map<string, number>();
    for (const entry of this.running.values()) if (counts(entry)) byTask.set(entry.job.type, (byTask.get(entry.job.type) ?? 0) + 1);
    return byTask;
  }

  /**
   * How many jobs of each task are worth claiming ahead of a free slot: as many as its slots free
   * in AHEAD_ROUND_TRIPS claim round trips, from how long its jobs have held a slot. Such a job
   * waits a few round trips for its slot (milliseconds), about what bringing it in a fresh claim
   * would take; a task whose handlers run long gets none, so its jobs stay in the table for idle
   * workers.
   */
  private claimAhead(): Map<string, number> {
    const ahead = new Map<string, number>();
    const roundTripMs = this.claimRoundTripMs;
    if (roundTripMs === undefined) return ahead;
    for (const [type, holdMs] of this.slotHoldMs) {
      const slots = Math.min(this.config.concurrency, this.tasks.get(type)?.concurrency ?? 0);
      ahead.set(type, Math.floor((slots * AHEAD_ROUND_TRIPS * roundTripMs) / Math.max(holdMs, 0.001)));
    }
    return ahead;
  }

  private offerSlots(free: number, slotRoom: number, bufferRoom: number, inWorker: Map<string, number>, ahead: Map<string, number>): ClaimWant[] {
    // No slot, no offer; and the rotation moves only when something is offered, or a poll with
    // nothing to offer would skip a task's turn.
    if (free <= 0) return [];
    const tasks = [...this.tasks.values()];
    const start = this.rotation++ % tasks.length;
    // A task with no slot left and nothing worth claiming ahead is offered LIMIT 0: the claim takes
    // none of its jobs. The buffer's room is the worker's (prefetch), shared out by the claim.
    // A task's own slots are taken by its jobs running and by those waiting in the worker (without
    // the waiting ones, a capped task's job waiting for a worker slot left its task's slot looking
    // free, and a second was claimed to wait behind it).
    return [...tasks.slice(start), ...tasks.slice(0, start)].map((task) => {
      const slotsLeft = Math.max(0, Math.min(slotRoom, task.concurrency - (inWorker.get(task.name) ?? 0)));
      return {
        type: task.name,
        limit: Math.min(free, slotsLeft + Math.min(bufferRoom, ahead.get(task.name) ?? 0)),
        leaseMs: task.leaseMs,
        backoffBaseMs: task.backoffBaseMs,
        backoffMaxMs: task.backoffMaxMs,
      };
    });
  }

  /** Creates the machine for a claimed job and registers it; the caller starts it. */
  private dispatch(job: ClaimedJob, slotFree: boolean, claimSentAt: number): RunningJob {
    const entry = new RunningJob(this.bookkeeping, job, slotFree, claimSentAt);
    entry.actor = this.jobs!.create(job, slotFree, entry);
    this.running.set(job, entry);
    if (!slotFree) this.queued.add(entry);
    return entry;
  }

  /**
   * The lease deadline, on the worker's own clock: a job whose lease went unconfirmed past it, and
   * whose handler is still running (or has not started), is interrupted now, before any other
   * worker may reclaim it. Returns the next deadline to look at.
   */
  private checkLeases(): number {
    const now = performance.now();
    let next = Infinity;
    const expired: RunningJob[] = [];
    for (const entry of this.running.values()) {
      if (entry.handlerSettledAt !== undefined || !beforeOutcome(entry.actor.state)) continue;
      const deadline = localDeadline(entry.confirmedAt, entry.job.leaseMs);
      if (deadline <= now) expired.push(entry);
      else next = Math.min(next, deadline);
    }
    if (expired.length > 0) {
      this.logger.warn(
        {
          jobs: expired.slice(0, 20).map(({ job }) => job.id),
          count: expired.length,
          last_renewal_error: this.lastRenewal.error,
          rows_busy: this.lastRenewal.busy,
        },
        `lease not confirmed in time for ${expired.length} job(s): interrupting their handlers before another worker may take the jobs`,
      );
      for (const entry of expired) entry.actor.send({ type: "LEASE_EXPIRED", unconfirmedMs: now - entry.confirmedAt });
    }
    return next;
  }

  /** An event loop that was blocked: a warning naming the tasks whose handlers ran in this thread, if it ate into their lease. */
  private reportStall(stalledMs: number): void {
    const stallStart = performance.now() - stalledMs;
    const inThread = new Map<string, number>();
    for (const { job, actor, handlerSettledAt } of this.running.values()) {
      const task = this.tasks.get(job.type);
      if (task === undefined || task.isolate !== undefined) continue;
      // A handler still running, or one that ended once the loop ran again (nothing else ran
      // while it was blocked, so that handler was running then).
      if (handlerSettledAt === undefined ? actor.state === "running" : handlerSettledAt >= stallStart) inThread.set(task.name, task.leaseMs);
    }
    const shortest = Math.min(...inThread.values());
    if (inThread.size === 0 || stalledMs < leaseMarginMs(shortest)) return;
    const names = [...inThread.keys()];
    this.logger.warn(
      { stalled_ms: Math.round(stalledMs), tasks: names, lease_ms: shortest },
      `the event loop was blocked for ${Math.round(stalledMs)} ms while handlers of ${names.map((n) => `"${n}"`).join(", ")} ran ` +
        `(lease ${shortest} ms): nothing else ran meanwhile, not lease renewal, not timeouts. Run CPU-bound handlers with ` +
        `isolate (a worker thread), or yield (await) between chunks of work.`,
    );
  }

  /**
   * Hands out the slots free now, one per call, within the worker's concurrency and the task's
   * own: true when the job of that type gets one.
   */
  private slotTaker(): (type: string) => boolean {
    const held = this.countByTask((entry) => entry.holdsSlot);
    let heldInAll = sum(held);
    return (type) => {
      const taskHeld = held.get(type) ?? 0;
      if (heldInAll >= this.config.concurrency || taskHeld >= (this.tasks.get(type)?.concurrency ?? 0)) return false;
      heldInAll++;
      held.set(type, taskHeld + 1);
      return true;
    };
  }

  /** Starts waiting jobs, oldest claim first, in the slots free now; none once the drain began. */
  private startQueued(): void {
    if (this.queued.size === 0 || this.stopping !== undefined) return;
    const takeSlot = this.slotTaker();
    for (const entry of this.queued) {
      if (!takeSlot(entry.job.type)) continue;
      this.queued.delete(entry);
      entry.holdsSlot = true;
      entry.slotTakenAt = performance.now();
      entry.actor.send({ type: "START" });
    }
  }

  /** The drain began: jobs that never got a slot go back at once, unrun and uncharged. */
  private releaseQueued(): void {
    for (const entry of this.queued) entry.actor.send({ type: "RELEASE" });
  }

  /** A job's machine ended: its slot and entry go, the supervisor machine and the listeners hear of it. */
  private finishJob(entry: RunningJob, outcome: JobOutcome, error: string | null): void {
    const { job } = entry;
    this.queued.delete(entry);
    this.freeSlot(entry);
    if (!this.running.delete(job)) return;
    this.outcomes[outcome]++;
    this.actor?.send({ type: "JOB_FINISHED" });
    for (const listener of this.listeners) {
      try {
        listener({ job, outcome, error, durationMs: Date.now() - entry.startedAt });
      } catch (listenerError) {
        this.logger.error({ err: listenerError, job_id: job.id }, "an onJobFinished listener threw; ignored");
      }
    }
  }

  /** Gives a job's slot back; the machine hears of freed slots once per turn of the event loop. */
  private freeSlot(entry: RunningJob): void {
    if (!entry.holdsSlot) return;
    entry.holdsSlot = false;
    this.slotHoldMs.set(entry.job.type, runningMean(this.slotHoldMs.get(entry.job.type), performance.now() - entry.slotTakenAt));
    if (this.slotFreedQueued) return;
    this.slotFreedQueued = true;
    setImmediate(() => {
      this.slotFreedQueued = false;
      this.startQueued();
      if (this.actor?.getSnapshot().status === "active") this.actor.send({ type: "SLOT_FREED" });
    });
  }

  /** Lease renewal, the sweep, retention and LISTEN, each in its own error boundary. */
  private background(send: (event: { type: "WAKE" }) => void): Effect.Effect<void> {
    const { config, logger } = this;
    const statements = this.statements;
    const pool = this.pool!;
    // Failures keep their real cause (pg's message and code), for the loop's log line.
    const attempt = <A>(run: () => Promise<A>) => Effect.tryPromise({ try: run, catch: (error) => error });
    const renew = attempt(() => this.renewOnce()).pipe(
      Effect.tapError((error) => Effect.sync(() => (this.lastRenewal = { error: error instanceof Error ? error.message : String(error), busy: 0 }))),
    );
    const running = this.running;
    const sweep = Effect.gen(function* () {
      // Never the claims this worker holds: their outcome is on its way, and the fence decides.
      // (A claim refused for having no token has none to name.)
      const held = [...running.keys()].map((job) => job.claimToken).filter((token) => typeof token === "string");
      const swept = yield* attempt(() => sweepExpiredClaims(pool, config.sweepBatchSize, { ...statements, held }));
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
    const loops: Effect.Effect<never>[] = [
      loop("lease renewal", config.renewIntervalMs, renew, logger),
      loop("sweep", config.sweepIntervalMs, sweep, logger),
    ];
    if (config.retention) {
      const { olderThanMs, batchSize, intervalMs } = config.retention;
      const retention = Effect.gen(function* () {
        let deleted = 0;
        for (let n = batchSize; n === batchSize; deleted += n) {
          n = yield* attempt(() => deleteFinishedJobs(pool, { olderThanMs, batchSize }, statements));
        }
        if (deleted > 0) logger.info({ deleted }, "retention deleted old finished jobs");
      });
      loops.push(loop("retention", intervalMs, retention, logger));
    }
    if (config.listen) {
      const ours = new Set(this.tasks.keys());
      const direct = this.options.listenConnectionString;
      loops.push(
        listenForJobs({
          connection: this.connectionConfig(direct),
          schema: config.schema,
          onWake: (types) => (types === "all" || types.some((t) => ours.has(t))) && send({ type: "WAKE" }),
          sendProbe: (id) => sendWakeProbe(pool, id, statements),
          where: direct ? describeConnection(direct) : this.options.connectionString ? describeConnection(this.options.connectionString) : "the pool's server",
          logger,
        }),
      );
    }
    return Effect.all(loops, { concurrency: "unbounded", discard: true });
  }

  /**
   * One renewal round: every claim this worker holds, in one statement. A lease written is
   * confirmed from the moment the statement was sent (the database's lease starts later than
   * that). A row another session holds locked is skipped (busy) and stays unconfirmed this round
   * (a job's own progress writes renew its lease too). A fenced renewal of a job still before its
   * outcome means the claim was lost.
   */
  private async renewOnce(): Promise<void> {
    const live = [...this.running.values()];
    if (live.length === 0) return;
    const sentAt = performance.now();
    const results = await renewLeases(this.pool!, live.map(({ job }) => ({ id: job.id, token: job.claimToken, leaseMs: job.leaseMs })), this.statements);
    let busy = 0;
    results.forEach((result, i) => {
      const entry = live[i]!;
      if (result.outcome === "applied") entry.confirmedAt = Math.max(entry.confirmedAt, sentAt);
      else if (result.outcome === "busy") busy++;
      else this.renewalFenced(entry);
    });
    this.lastRenewal = { error: null, busy };
  }

  /** A renewal found the claim gone: only a job before its outcome lost it to another worker. */
  private renewalFenced({ job, actor }: RunningJob): void {
    // A job that left `running` meanwhile has written (or is writing) its own outcome: its renewal
    // found the row finished, not stolen.
    if (!beforeOutcome(actor.state)) return;
    this.logger.warn(
      { job_id: job.id, task: job.type, claim_token: job.claimToken },
      `lease renewal fenced: job ${job.id} (claim ${job.claimToken}) was reclaimed; interrupting its handler`,
    );
    actor.send({ type: "LEASE_LOST" });
  }
}

/** Creates a supervisor; call start() to run it and stop() to drain it. */
export const createSupervisor = (options: SupervisorOptions): Supervisor => new Supervisor(options);
