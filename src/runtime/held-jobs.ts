// The claims a worker holds, in one place: which jobs hold a slot and which wait in the local
// buffer, what the next claim may ask for, how each lease stands on the worker's own clock, and
// whose handler was running when the event loop stalled. It runs no statement and no machine of
// its own: the supervisor claims, renews and drains, and asks this for the counts and deadlines;
// this tells it, once per turn of the event loop, how many jobs finished and whether a slot was
// freed. Every decision that depends on time takes `now` (performance.now()) from its caller, so
// each boundary can be tested with a clock the test sets.
import type { ClaimedJob, ClaimWant, FencedResult } from "../db/index.ts";
import type { JobOutcome } from "../machines/job-machine.ts";
import type { HealthCheck } from "./health-server.ts";
import type { JobHandle, JobObserver, JobOutput } from "./job-runtime.ts";
import { leaseMarginMs, localDeadline } from "./lease-watch.ts";
import type { Logger } from "./logger.ts";
import type { HeldCounts, WorkerMetrics } from "./metrics.ts";
import { isLimited, type Task } from "./task.ts";

/**
 * The states before a job's outcome is written: waiting for its slot (or for the START it has been
 * sent), checking its payload, running its handler. A job holds its slot until it leaves them, and
 * only a job still in them can lose its claim to another worker.
 */
export const beforeOutcome = (state: string): boolean => state === "waitingForSlot" || state === "checkingPayload" || state === "running";

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

const countBy = <T>(items: Iterable<T>, key: (item: T) => string): Map<string, number> => {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(key(item), (counts.get(key(item)) ?? 0) + 1);
  return counts;
};

/**
 * One claim being run, and the observer of its machine. A class, not closures: a worker holds
 * thousands of these, and three closures per job were a tenth of a held job's heap.
 */
export class HeldJob implements JobObserver {
  readonly job: ClaimedJob;
  actor!: JobHandle;
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
  private readonly held: HeldJobs;

  /** When (performance.now()) the claim that took it was sent: its pickup delay is counted from the claim's view of run_at. */
  readonly claimSentAt: number;
  /** It got a slot at some point: its payload check or handler ran (or was to). */
  started: boolean;

  constructor(held: HeldJobs, job: ClaimedJob, slotFree: boolean, claimSentAt: number) {
    this.held = held;
    this.job = job;
    this.holdsSlot = slotFree;
    this.started = slotFree;
    this.confirmedAt = claimSentAt;
    this.claimSentAt = claimSentAt;
  }

  /** From its run_at to the moment it took its slot: the server's wait to the claim, then this worker's. */
  pickupMs(): number {
    return this.job.readyMs + this.slotTakenAt - this.claimSentAt;
  }

  changed(state: string): void {
    if (this.holdsSlot && !beforeOutcome(state)) this.held.freeSlot(this);
  }

  // An outcome given up says why it could not be written; any other, why the attempt failed.
  done(output: JobOutput): void {
    this.held.finish(this, output.outcome, output.outcome === "abandoned" ? output.writeError : output.error ? `${output.error.kind}: ${output.error.message}` : null, output.error?.kind);
  }

  failed(error: unknown): void {
    this.held.logger.error({ err: error, job_id: this.job.id }, "job machine failed; the sweep will retry the job after its lease");
    this.held.finish(this, "abandoned", String(error));
  }
}

export interface HeldJobsOptions {
  concurrency: number;
  /** The local buffer's room: jobs claimed ahead of a free slot. */
  prefetch: number;
  tasks: ReadonlyMap<string, Task>;
  logger: Logger;
  /** Creates (does not start) a claimed job's machine. */
  create(job: ClaimedJob, slotFree: boolean, observer: JobObserver): JobHandle;
  /** A job's machine ended and its entry is gone. */
  finished(entry: HeldJob, outcome: JobOutcome, error: string | null): void;
  /** A job's handler starts (it took its slot), `pickupMs` after its run_at: the heartbeat's tally. */
  jobStarted?(type: string, pickupMs: number): void;
  /** Where claims, starts and outcomes are counted; none in tests that do not look. */
  metrics?: WorkerMetrics;
  /**
   * Once at the end of a turn of the event loop in which jobs finished or slots were freed (after
   * waiting jobs took the freed slots): how many finished, and whether a slot was freed.
   */
  turnEnded(finished: number, slotFreed: boolean): void;
  /**
   * Renews these claims now, as a renewal round does (fenced by their tokens, so it succeeds only
   * for rows no one else has claimed, whatever their lease says). Asked for when the lease watch
   * ran late (interruptExpired). Absent: expired leases are interrupted at once.
   */
  reconfirm?(jobs: readonly ClaimedJob[]): Promise<readonly FencedResult[]>;
  /** Makes the lease watch look again no later than `at` (performance.now()). */
  watch?(at: number): void;
}

/**
 * The lease watch ran this much later than the deadline it was set for: this worker's own event
 * loop was blocked (a handler that did not yield), as the stall watch counts one.
 */
export const LATE_WATCH_MS = 50;

/** What the next claim asks for: each task's share, and the most it may take in all. */
export interface ClaimPlan {
  wants: ClaimWant[];
  asked: number;
}

export class HeldJobs {
  readonly logger: Logger;
  private readonly options: HeldJobsOptions;
  // One entry per claim being run, keyed by the claimed row object (one per claim). Not keyed by
  // job id: after a lost lease this worker may claim the same job again while the stale machine
  // is still winding down.
  private readonly running = new Map<ClaimedJob, HeldJob>();
  /**
   * Jobs claimed ahead of a free slot, oldest claim first (a Set keeps insertion order): the
   * worker's local buffer. Their machines wait in `waitingForSlot`.
   */
  private readonly queued = new Set<HeldJob>();
  /** What this turn of the event loop changed, told to the supervisor once at its end. */
  private finishedThisTurn = 0;
  private slotFreedThisTurn = false;
  private turnEndQueued = false;
  /** Once the drain began, waiting jobs are not started any more: they are released. */
  private draining = false;
  /** How long each task's jobs hold a slot and how long a claim takes (running means): they size the buffer. */
  private readonly slotHoldMs = new Map<string, number>();
  private claimRoundTripMs: number | undefined;
  /** Which task the next claim offers its slots to first. */
  private rotation = 0;
  readonly outcomes: Record<JobOutcome, number> = { completed: 0, retried: 0, dead: 0, released: 0, fenced: 0, abandoned: 0, cancelled: 0, refused: 0 };
  /** The last renewal round: what went wrong (null: it wrote every lease it could) and how many rows were busy. */
  private lastRenewal: { error: string | null; busy: number } = { error: null, busy: 0 };
  /** Claims being re-confirmed after the lease watch ran late: the watch leaves them alone meanwhile. */
  private readonly reconfirming = new Set<HeldJob>();
  /** This worker's renewal round in flight, settled either way; undefined between rounds. */
  private roundInFlight: Promise<void> | undefined;

  constructor(options: HeldJobsOptions) {
    this.options = options;
    this.logger = options.logger;
  }

  /** Job machines alive: handlers running, and jobs whose outcome is still being written. */
  get size(): number {
    return this.running.size;
  }

  /** Of those, jobs claimed ahead of a free slot and waiting for one. */
  get waiting(): number {
    return this.queued.size;
  }

  get(job: ClaimedJob): HeldJob | undefined {
    return this.running.get(job);
  }

  values(): IterableIterator<HeldJob> {
    return this.running.values();
  }

  runningByTask(): Record<string, number> {
    const byTask: Record<string, number> = {};
    for (const job of this.running.keys()) byTask[job.type] = (byTask[job.type] ?? 0) + 1;
    return byTask;
  }

  /**
   * What the next claim may ask for: the free slots, and as much of the buffer's room as each
   * task's turnover makes worth claiming ahead, dealt across tasks starting with the next one in
   * turn.
   */
  planClaim(): ClaimPlan {
    const { concurrency, prefetch } = this.options;
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
    return { wants, asked: Math.min(free, wants.reduce((total, want) => total + want.limit, 0)) };
  }

  /** A claim's round trip, which sizes the buffer. */
  claimTook(ms: number): void {
    this.claimRoundTripMs = runningMean(this.claimRoundTripMs, ms);
  }

  /**
   * A claim came back: slots freed while it was in flight go to the jobs already waiting first,
   * then to these, in claim order. Registers a machine per job (not started: the caller starts
   * them) and returns their entries.
   */
  claimed(jobs: readonly ClaimedJob[], claimSentAt: number): HeldJob[] {
    this.startQueued();
    const takeSlot = this.slotTaker();
    const metrics = this.options.metrics;
    const entries = jobs.map((job) => {
      const slotFree = takeSlot(job.type);
      const entry = new HeldJob(this, job, slotFree, claimSentAt);
      entry.actor = this.options.create(job, slotFree, entry);
      this.running.set(job, entry);
      if (!slotFree) this.queued.add(entry);
      else this.startedJob(entry);
      return entry;
    });
    if (metrics) for (const [type, count] of countBy(jobs, (job) => job.type)) metrics.claimed(type, count);
    return entries;
  }

  /** The drain was asked for: waiting jobs are not started any more. */
  stopStarting(): void {
    this.draining = true;
  }

  /** The drain began: jobs that never got a slot go back at once, unrun and uncharged. */
  releaseWaiting(): void {
    for (const entry of this.queued) entry.actor.send({ type: "RELEASE" });
  }

  /**
   * The lease deadline, on the worker's own clock: a job whose lease went unconfirmed past it, and
   * whose handler is still running (or has not started), is interrupted now, before any other
   * worker may reclaim it. Returns the next deadline to look at.
   *
   * Unless the watch ran `lateMs` late: then this worker's own event loop was blocked, and that,
   * not the database, is why nothing renewed the leases. The claims are renewed first
   * (`reconfirm`), and only those the renewal cannot confirm are stopped: a claim another worker
   * took meanwhile is lost as any fenced renewal's is, one whose row no one took runs on. A lone
   * worker whose handler blocked past its lease would otherwise fail every run that succeeded.
   */
  interruptExpired(now: number, lateMs = 0): number {
    let next = Infinity;
    const expired: HeldJob[] = [];
    for (const entry of this.running.values()) {
      if (entry.handlerSettledAt !== undefined || !beforeOutcome(entry.actor.state) || this.reconfirming.has(entry)) continue;
      const deadline = localDeadline(entry.confirmedAt, entry.job.leaseMs);
      if (deadline <= now) expired.push(entry);
      else next = Math.min(next, deadline);
    }
    if (expired.length > 0 && lateMs >= LATE_WATCH_MS && this.options.reconfirm) {
      this.reconfirm(expired);
      return next;
    }
    this.interrupt(expired, now);
    return next;
  }

  /**
   * Renews `entries` now; stops those it cannot confirm (a fenced one as lost, by renewed()). A row
   * found busy is renewed once more, after this worker's own renewal round in flight (if any) has
   * settled: when the loop comes back, that round's timer is as overdue as the watch's, and its
   * statement holds the row's lock while this one asks (the reconfirmation is then skipped as
   * busy, though the row is this worker's). Still busy then: another session holds the row.
   */
  private reconfirm(entries: HeldJob[], again = false): void {
    for (const entry of entries) this.reconfirming.add(entry);
    const sentAt = performance.now();
    const settled = (results: readonly FencedResult[] | undefined, error?: unknown) => {
      for (const entry of entries) this.reconfirming.delete(entry);
      if (results !== undefined) this.renewed(entries, results, sentAt);
      else this.renewalFailed(error);
      this.logger.info(
        { jobs: entries.slice(0, 20).map(({ job }) => job.id), count: entries.length, confirmed: results?.filter((r) => r.outcome === "applied").length ?? 0 },
        `the lease watch ran late (this worker's event loop was blocked): renewed ${entries.length} claim(s) before judging their leases`,
      );
      // A claim found taken or cancelled was stopped by renewed(). What the renewal could not
      // confirm (a busy row, a failed statement) is stopped now; what it confirmed gets a new deadline.
      const now = performance.now();
      const unconfirmed: HeldJob[] = [];
      const busy: HeldJob[] = [];
      entries.forEach((entry, i) => {
        const outcome = results?.[i]?.outcome;
        if (outcome === "fenced" || outcome === "cancelled") return;
        if (entry.handlerSettledAt !== undefined || !beforeOutcome(entry.actor.state)) return;
        const deadline = localDeadline(entry.confirmedAt, entry.job.leaseMs);
        if (deadline > now) this.options.watch?.(deadline);
        else if (outcome === "busy" && !again) busy.push(entry);
        else unconfirmed.push(entry);
      });
      this.interrupt(unconfirmed, now);
      // Left alone by the watch until they are asked again.
      for (const entry of busy) this.reconfirming.add(entry);
      if (busy.length > 0) void (this.roundInFlight ?? Promise.resolve()).then(() => this.reconfirm(busy, true));
    };
    this.options.reconfirm!(entries.map(({ job }) => job)).then(
      (results) => settled(results),
      (error: unknown) => settled(undefined, error),
    );
  }

  private interrupt(expired: HeldJob[], now: number): void {
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
  }

  /** Whether the worker can still prove the job's lease on its own clock (user code may start). */
  leaseProvable(job: ClaimedJob, now: number): boolean {
    const entry = this.running.get(job);
    return entry !== undefined && localDeadline(entry.confirmedAt, job.leaseMs) > now;
  }

  /** A statement under the job's claim, sent at `sentAt`, granted its lease again. */
  leaseConfirmed(job: ClaimedJob, sentAt: number): void {
    const entry = this.running.get(job);
    if (entry) entry.confirmedAt = Math.max(entry.confirmedAt, sentAt);
  }

  /** The job's handler returned or threw at `at`: the lease deadline no longer interrupts it. */
  handlerSettled(job: ClaimedJob, at: number): void {
    const entry = this.running.get(job);
    if (entry) entry.handlerSettledAt = at;
  }

  /**
   * A renewal round sent at `sentAt` over `live` came back with `results` (one per entry, in
   * order): written leases are confirmed from `sentAt` (the database's lease starts later than
   * that); a row another session holds locked is skipped (busy) and stays unconfirmed this round;
   * a fenced renewal of a job still before its outcome means the claim was lost.
   */
  renewed(live: readonly HeldJob[], results: readonly FencedResult[], sentAt: number): void {
    let busy = 0;
    results.forEach((result, i) => {
      const entry = live[i]!;
      if (result.outcome === "applied") entry.confirmedAt = Math.max(entry.confirmedAt, sentAt);
      else if (result.outcome === "busy") busy++;
      else if (result.outcome === "cancelled") this.cancelled(entry);
      else this.renewalFenced(entry);
    });
    this.lastRenewal = { error: null, busy };
  }

  /**
   * One renewal round over every claim held, sent by `renew` (no statement when none is held); what
   * it found is judged by renewed(). A failure is the caller's to report (renewalFailed).
   */
  async renewRound(renew: (jobs: readonly ClaimedJob[]) => Promise<readonly FencedResult[]>): Promise<void> {
    const live = [...this.running.values()];
    const sentAt = performance.now();
    if (live.length === 0) return this.renewed(live, [], sentAt);
    const round = renew(live.map(({ job }) => job));
    this.roundInFlight = round.then(
      () => undefined,
      () => undefined,
    );
    try {
      this.renewed(live, await round, sentAt);
    } finally {
      this.roundInFlight = undefined;
    }
  }

  /** A renewal round failed as a whole. */
  renewalFailed(error: unknown): void {
    this.lastRenewal = { error: error instanceof Error ? error.message : String(error), busy: 0 };
  }

  /** Failing when some claim's lease has gone unconfirmed for longer than a lease. */
  leaseHealth(now: number): HealthCheck {
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
   * The event loop was blocked for `stalledMs` until `now`: a warning naming the tasks whose
   * handlers ran in this thread meanwhile, if the stall ate into their lease.
   */
  reportStall(stalledMs: number, now: number): void {
    const stallStart = now - stalledMs;
    const inThread = new Map<string, number>();
    for (const { job, actor, handlerSettledAt } of this.running.values()) {
      const task = this.options.tasks.get(job.type);
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

  /** A job's machine ended: its slot and entry go, and the supervisor hears of it. */
  finish(entry: HeldJob, outcome: JobOutcome, error: string | null, errorKind?: string): void {
    this.queued.delete(entry);
    this.freeSlot(entry);
    if (!this.running.delete(entry.job)) return;
    this.outcomes[outcome]++;
    // A handler interrupted (a timeout, a lost lease) never settled: it ran until now.
    this.options.metrics?.finished(entry.job.type, outcome, entry.started ? (entry.handlerSettledAt ?? performance.now()) - entry.slotTakenAt : undefined, errorKind);
    this.finishedThisTurn++;
    this.endTurnSoon();
    this.options.finished(entry, outcome, error);
  }

  /** Gives a job's slot back; waiting jobs and the supervisor hear of freed slots at the end of the turn. */
  freeSlot(entry: HeldJob): void {
    if (!entry.holdsSlot) return;
    entry.holdsSlot = false;
    this.slotHoldMs.set(entry.job.type, runningMean(this.slotHoldMs.get(entry.job.type), performance.now() - entry.slotTakenAt));
    this.slotFreedThisTurn = true;
    this.endTurnSoon();
  }

  private endTurnSoon(): void {
    if (this.turnEndQueued) return;
    this.turnEndQueued = true;
    setImmediate(() => {
      const finished = this.finishedThisTurn;
      const slotFreed = this.slotFreedThisTurn;
      this.turnEndQueued = false;
      this.finishedThisTurn = 0;
      this.slotFreedThisTurn = false;
      if (slotFreed) this.startQueued();
      this.options.turnEnded(finished, slotFreed);
    });
  }

  /**
   * The job was cancelled under its claim (told by the cancel's notification, or found by a
   * renewal): a job before its outcome stops; one writing its outcome learns it from that write.
   */
  cancelled({ actor }: HeldJob): void {
    // The machine's cancelled state logs it, whichever way the worker learnt of it.
    if (beforeOutcome(actor.state)) actor.send({ type: "CANCEL" });
  }

  /** The cancel's notification named a claim: the job this worker holds under it, if any, stops. */
  cancelledClaim(claim: { id: string; token: string }): void {
    for (const entry of this.running.values()) {
      if (entry.job.id === claim.id && entry.job.claimToken === claim.token) return this.cancelled(entry);
    }
  }

  /** A renewal found the claim gone: only a job before its outcome lost it to another worker. */
  private renewalFenced({ job, actor }: HeldJob): void {
    // A job that left `running` meanwhile has written (or is writing) its own outcome: its renewal
    // found the row finished, not stolen.
    if (!beforeOutcome(actor.state)) return;
    this.logger.warn(
      { job_id: job.id, task: job.type, claim_token: job.claimToken },
      `lease renewal fenced: job ${job.id} (claim ${job.claimToken}) was reclaimed; interrupting its handler`,
    );
    actor.send({ type: "LEASE_LOST" });
  }

  /**
   * Counts the running set's entries per task. Slots are counted for user code, not for
   * bookkeeping: a job whose handler has returned frees its slot at once, while its outcome is
   * written (the write overlaps the next claim).
   */
  private countByTask(counts: (entry: HeldJob) => boolean): Map<string, number> {
    const byTask = new Map<string, number>();
    for (const entry of this.running.values()) if (counts(entry)) byTask.set(entry.job.type, (byTask.get(entry.job.type) ?? 0) + 1);
    return byTask;
  }

  /** Jobs holding a slot and jobs waiting for one, per task: the held-jobs gauge. */
  heldCounts(): HeldCounts {
    return { running: this.countByTask((entry) => entry.holdsSlot), waiting: countBy(this.queued, (entry) => entry.job.type) };
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
      const task = this.options.tasks.get(type);
      // A task limited across the cluster claims nothing ahead: a job waiting in this worker's
      // buffer would hold a share of the cluster's limit that an idle worker could run now.
      const slots = task === undefined || isLimited(task) ? 0 : Math.min(this.options.concurrency, task.concurrency);
      ahead.set(type, Math.floor((slots * AHEAD_ROUND_TRIPS * roundTripMs) / Math.max(holdMs, 0.001)));
    }
    return ahead;
  }

  private offerSlots(free: number, slotRoom: number, bufferRoom: number, inWorker: Map<string, number>, ahead: Map<string, number>): ClaimWant[] {
    // No slot, no offer; and the rotation moves only when something is offered, or a poll with
    // nothing to offer would skip a task's turn.
    if (free <= 0) return [];
    const tasks = [...this.options.tasks.values()];
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
        maxAttempts: task.maxAttempts,
      };
    });
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
      if (heldInAll >= this.options.concurrency || taskHeld >= (this.options.tasks.get(type)?.concurrency ?? 0)) return false;
      heldInAll++;
      held.set(type, taskHeld + 1);
      return true;
    };
  }

  /** Starts waiting jobs, oldest claim first, in the slots free now; none once the drain began. */
  private startedJob(entry: HeldJob): void {
    const pickupMs = entry.pickupMs();
    this.options.metrics?.started(entry.job.type, pickupMs);
    this.options.jobStarted?.(entry.job.type, pickupMs);
  }

  private startQueued(): void {
    if (this.queued.size === 0 || this.draining) return;
    const takeSlot = this.slotTaker();
    for (const entry of this.queued) {
      if (!takeSlot(entry.job.type)) continue;
      this.queued.delete(entry);
      entry.holdsSlot = true;
      entry.started = true;
      entry.slotTakenAt = performance.now();
      this.startedJob(entry);
      entry.actor.send({ type: "START" });
    }
  }
}
