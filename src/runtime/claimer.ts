// The worker's claim: one poll's fast claim of plain jobs and, when its work may be ready, the slow
// claim of queued jobs and of limited tasks' jobs (src/db/claim-limited.ts) before it; what is due
// of the slow claim, from the NOTIFYs and the jobs that ended; and the claims whose reply never
// came, given back before the next claim. The supervisor's poll asks it for jobs; nothing here
// holds a job once it is handed over.
import type pg from "pg";
import {
  claimJobs,
  claimLimited,
  drawClaimSeed,
  drawClaimTokens,
  giveBackUnreturnedClaims,
  type ClaimedJob,
  type ClaimWant,
  type StatementOptions,
} from "../db/index.ts";
import type { ResolvedConfig } from "./config.ts";
import type { Logger } from "./logger.ts";
import type { WorkerMetrics } from "./metrics.ts";
import { isLimited, type Task } from "./task.ts";

/** Most seeds, and most tokens, of unanswered claims kept to give back. */
const MAX_UNRETURNED_TOKENS = 10_000;

/** What one poll's claim drew: the fast claim's seed, and the slow claim's tokens when it ran. */
interface ClaimDraw {
  seed: string;
  tokens: string[];
}

export interface ClaimerDeps {
  /** The worker's pool, once it is open. */
  pool: () => pg.Pool;
  config: Pick<ResolvedConfig, "workerId" | "pollIntervalMs" | "queues">;
  statements: StatementOptions & { schema: string };
  tasks: ReadonlyMap<string, Task>;
  logger: Logger;
  metrics: WorkerMetrics;
  /** A claim's round trip, in ms: the buffer's sizing reads it. */
  claimTook: (ms: number) => void;
}

export class Claimer {
  private readonly deps: ClaimerDeps;
  /** Tasks with cluster-wide limits: their jobs are claimed by the slow claim only. */
  private readonly limitedTypes: ReadonlySet<string>;
  /**
   * Claims whose reply never arrived (the statement failed or was cancelled, perhaps after it
   * committed): the fast claims' seeds and the slow claims' tokens. Their jobs, if any, are given
   * back before the next claim.
   */
  private unreturned: { seeds: string[]; tokens: string[] } = { seeds: [], tokens: [] };
  /** Queued work may be ready (a NOTIFY said so, a queued or limited job ended, the last slow claim took some): run the slow claim at the next poll. */
  private queuedWorkDue = true;
  /**
   * A limited task's jobs may be ready (a NOTIFY named its type, the last slow claim took some):
   * with a free slot for one, run the slow claim at the next poll. Without this, every worker with
   * a limited task ran the slow claim, serialised on one advisory lock, at every poll.
   */
  private limitedWorkDue = true;
  /** When the slow claim last ran (performance.now()); it runs at least once per poll interval to find queued jobs. */
  private lastSlowClaimAt = Number.NEGATIVE_INFINITY;
  /** Jobs taken by the slow claim, with the queue each names: when one ends, its queue or limit has room again. */
  private readonly slowClaimed = new WeakMap<ClaimedJob, string | null>();

  constructor(deps: ClaimerDeps) {
    this.deps = deps;
    this.limitedTypes = new Set([...deps.tasks.values()].filter(isLimited).map((task) => task.name));
  }

  /** A NOTIFY announced jobs of `types` (queued ones among them when `queued`). */
  announced(types: "all" | readonly string[], queued: boolean): void {
    if (queued) this.queuedWorkDue = true;
    if (types === "all" || types.some((t) => this.limitedTypes.has(t))) this.limitedWorkDue = true;
  }

  /**
   * A job this worker held has ended. True when the slow claim took it: its queue or its task's
   * cluster limit has room now that the row has left processing, and the slow claim is due.
   */
  ended(job: ClaimedJob): boolean {
    if (!this.slowClaimed.has(job)) return false;
    this.queuedWorkDue = true;
    return true;
  }

  /** The queue a job this worker holds names (only the slow claim takes queued jobs), or null. */
  queueOf(job: ClaimedJob): string | null {
    return this.slowClaimed.get(job) ?? null;
  }

  /** One claim, timed from `sentAt`: its round trip feeds the mean that sizes the buffer. */
  async claim(wants: ClaimWant[], total: number, sentAt: number, signal: AbortSignal): Promise<ClaimedJob[]> {
    const drawn: ClaimDraw = { seed: drawClaimSeed(), tokens: [] };
    try {
      const jobs = await this.deps.metrics.timed("claim", () => this.claimFastAndSlow(wants, total, drawn, signal));
      this.deps.claimTook(performance.now() - sentAt);
      return jobs;
    } catch (error) {
      this.unanswered(drawn);
      throw error;
    }
  }

  /**
   * Remembers a claim whose reply never came: it may have committed before it failed (its reply
   * lost, or a cancel too late). Kept bounded through a long outage, when every poll fails: the
   * oldest are left to the sweep.
   */
  private unanswered(drawn: ClaimDraw): void {
    this.unreturned = {
      seeds: [...this.unreturned.seeds, drawn.seed].slice(-MAX_UNRETURNED_TOKENS),
      tokens: [...this.unreturned.tokens, ...drawn.tokens].slice(-MAX_UNRETURNED_TOKENS),
    };
  }

  /**
   * The claim's two paths. Jobs that name a queue and jobs of limited tasks are claimed only by the
   * slow claim (claimLimited: serialised in the database, one round trip); every other job by the
   * fast claim, exactly as without queues. The slow claim runs when work for it may be ready: a
   * NOTIFY marked queued work (`!queued`) or named a limited task this worker has a free slot for,
   * a job it took ended (its queue or limit has room), its last run took jobs (more may wait), or a
   * poll interval has passed since it last ran (jobs retried, released or swept announce nothing,
   * nor does a rate limit's window reopening). A worker with no queued or limited jobs about
   * therefore adds one slow claim per poll interval and nothing to any claim. The slow claim goes
   * first so that a stream of plain jobs cannot crowd queued ones out; the fast claim gets what is left.
   */
  private async claimFastAndSlow(wants: ClaimWant[], total: number, drawn: ClaimDraw, signal: AbortSignal): Promise<ClaimedJob[]> {
    const options = { ...this.deps.statements, signal };
    const fastWants = this.limitedTypes.size === 0 ? wants : wants.filter((want) => !this.limitedTypes.has(want.type));
    // Plain jobs only: when the slow claim is not due, or another worker's is running.
    const fastOnly = () => (fastWants.length === 0 ? [] : claimJobs(this.deps.pool(), this.deps.config.workerId, fastWants, { ...options, total, seed: drawn.seed }));
    const now = performance.now();
    const limitedDue = this.limitedWorkDue && wants.some((want) => want.limit > 0 && this.limitedTypes.has(want.type));
    if (!limitedDue && !this.queuedWorkDue && now - this.lastSlowClaimAt < this.deps.config.pollIntervalMs) {
      return fastOnly();
    }
    const due = { queued: this.queuedWorkDue, limited: this.limitedWorkDue };
    this.queuedWorkDue = false;
    this.limitedWorkDue = false;
    const slowWants = wants.map((want) => {
      const task = this.deps.tasks.get(want.type);
      return {
        ...want,
        ...(task?.clusterConcurrency !== undefined ? { clusterConcurrency: task.clusterConcurrency } : {}),
        ...(task?.rateLimit !== undefined ? { rateLimit: task.rateLimit } : {}),
      };
    });
    drawn.tokens = drawClaimTokens(total);
    // Another worker's slow claim is not waited for (each holds its poll, the fast claim too, while
    // it waits): this worker claims its plain jobs and tries again at its next poll. Only once a
    // poll interval has passed without a slow claim here does it wait its turn.
    const slow = await claimLimited(this.deps.pool(), this.deps.config.workerId, slowWants, {
      ...options,
      total,
      tokens: drawn.tokens,
      queues: this.deps.config.queues,
      unlessBusy: now - this.lastSlowClaimAt < this.deps.config.pollIntervalMs,
    });
    // Its reply arrived: from here on only the fast claim's seed can go unanswered.
    drawn.tokens = [];
    if (slow === "busy") {
      this.queuedWorkDue ||= due.queued;
      this.limitedWorkDue ||= due.limited;
      return fastOnly();
    }
    this.lastSlowClaimAt = now;
    for (const job of slow) this.slowClaimed.set(job, job.queue);
    if (slow.some((job) => job.queue !== null)) this.queuedWorkDue = true;
    if (slow.some((job) => job.queue === null)) this.limitedWorkDue = true;
    const left = total - slow.length;
    if (left <= 0) return slow;
    const takenByType = new Map<string, number>();
    for (const job of slow) takenByType.set(job.type, (takenByType.get(job.type) ?? 0) + 1);
    const rest = fastWants.map((want) => ({ ...want, limit: Math.max(0, want.limit - (takenByType.get(want.type) ?? 0)) }));
    if (rest.length === 0) return slow;
    try {
      const fast = await claimJobs(this.deps.pool(), this.deps.config.workerId, rest, { ...options, total: left, seed: drawn.seed });
      return [...slow, ...fast];
    } catch (error) {
      if (slow.length === 0) throw error;
      // The slow claim's jobs are this worker's: dropped here, nobody would run them until the sweep
      // charged their attempt (with maxAttempts 1, dead unrun). They run; the fast claim is given back.
      this.unanswered(drawn);
      this.deps.logger.error({ err: error }, "claim failed after the slow claim took jobs; running those, and giving back what the failed claim may have taken");
      return slow;
    }
  }

  /**
   * Gives back, unrun and uncharged, jobs of claims whose reply never came (no statement when there
   * are none). Claims are made one at a time, so none is in flight here. When it fails (the
   * database is still away), the tokens are kept for the next try; the claim goes ahead meanwhile.
   */
  async giveBackUnreturned(timeoutMs: number, signal: AbortSignal): Promise<void> {
    try {
      const ids = await giveBackUnreturnedClaims(this.deps.pool(), { workerId: this.deps.config.workerId, ...this.unreturned }, { ...this.deps.statements, timeoutMs, signal });
      this.unreturned = { seeds: [], tokens: [] };
      if (ids.length > 0) this.deps.logger.warn({ jobs: ids }, `a claim's reply never arrived: gave back ${ids.length} job(s) it had taken, unrun and uncharged`);
    } catch (error) {
      this.deps.logger.debug({ err: error }, "could not yet give back the jobs of a claim whose reply never arrived; trying again before the next claim");
    }
  }
}
