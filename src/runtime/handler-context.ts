// The context a handler receives (HandlerContext), one per run. A no-op handler reads none of it,
// so each member is made when first read: the job's view, its signal, its logger, its steps and
// its progress writer are the class's getters, not closures made per job. (Built per job, the context was a
// no-op job's largest allocation: 1.9 KB of its 13.5.) The getters sit on the prototype, so a view
// made with Object.create(ctx) reads through them.
import {
  ClaimLostError,
  enqueueChildren,
  getJob,
  isDeadlock,
  jobDependencies,
  reportProgress,
  type ChildJobSpec,
  type ClaimedJob,
  type Dependency,
  type DependencyFailurePolicy,
  type Queryable,
  type StatementOptions,
} from "../db/index.ts";
import type { SignalSource } from "./signal-source.ts";
import type { Logger } from "./logger.ts";
import { stepsFor, type StepDeps } from "./steps.ts";
import type { HandlerContext, JobInfo } from "./task.ts";

/** What every run's context shares: made once per runtime. */
export interface HandlerContextDeps extends StepDeps {
  db: Queryable;
  statements: StatementOptions & { schema: string };
  /** The job's child logger (made at most once per run). */
  log: (job: ClaimedJob) => Logger;
  /** A write under the claim, sent at `sentAt` (performance.now()), granted its lease again. */
  leaseConfirmed: (job: ClaimedJob, sentAt: number) => void;
}

/** The claim a run holds, read by picket's own tasks that write under it (the workflow applier). */
export const claimOfRun = (ctx: HandlerContext): { id: ClaimedJob["id"]; token: string } => {
  const job = (ctx as unknown as { claimed?: ClaimedJob }).claimed;
  if (job === undefined) throw new Error("picket: claimOfRun takes the context a worker gave a handler.");
  return { id: job.id, token: job.claimToken };
};

export class JobContext implements HandlerContext {
  private info: JobInfo | undefined;
  private jobLog: Logger | undefined;
  private steps: HandlerContext["step"] | undefined;
  private progress: HandlerContext["reportProgress"] | undefined;
  private keyOfStep: HandlerContext["stepKey"] | undefined;

  private readonly deps: HandlerContextDeps;
  private readonly claimed: ClaimedJob;
  private readonly abort: SignalSource;

  constructor(deps: HandlerContextDeps, job: ClaimedJob, abort: SignalSource) {
    this.deps = deps;
    this.claimed = job;
    this.abort = abort;
  }

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get job(): JobInfo {
    const job = this.claimed;
    return (this.info ??= { id: job.id, task: job.type, attempt: job.attempts, maxAttempts: job.maxAttempts, enqueuedAt: job.createdAt });
  }

  get logger(): Logger {
    return (this.jobLog ??= this.deps.log(this.claimed));
  }

  get idempotencyKey(): string {
    return `picket:${this.deps.statements.schema}:${this.claimed.id}`;
  }

  get stepKey(): HandlerContext["stepKey"] {
    return (this.keyOfStep ??= (step) => `${this.idempotencyKey}:${step}`);
  }

  get step(): HandlerContext["step"] {
    return (this.steps ??= stepsFor(this.deps, this.claimed, this.signal));
  }

  dependencies<R extends Record<string, unknown> = Record<string, unknown>>(): Promise<{ [K in keyof R]: Dependency<R[K]> }> {
    return jobDependencies(this.deps.db, this.claimed.id, this.deps.statements) as Promise<{ [K in keyof R]: Dependency<R[K]> }>;
  }

  async enqueueChildren(children: readonly ChildJobSpec[], options: { onFailure?: DependencyFailurePolicy } = {}): ReturnType<HandlerContext["enqueueChildren"]> {
    const { deps, claimed: job } = this;
    try {
      // A deadlock with a child's completion (each waits for the other's row: the parent's, the
      // parent's count) rolls the statement back whole: tried again, a few times, before the
      // handler hears of it.
      for (let tries = 1; ; tries++) {
        try {
          return await enqueueChildren(deps.db, { id: job.id, token: job.claimToken, type: job.type }, children, { ...deps.statements, onFailure: options.onFailure });
        } catch (error) {
          if (tries === 3 || !isDeadlock(error)) throw error;
        }
      }
    } catch (error) {
      if (error instanceof ClaimLostError) {
        // Lost to a cancel (the row cancelled under this claim) or to another claim: the run stops either way.
        const row = await getJob(deps.db, job.id, deps.statements).catch(() => null);
        if (row?.status === "cancelled" && row.claimToken === job.claimToken) deps.cancelled(job);
        else deps.leaseLost(job);
      }
      throw error;
    }
  }

  get reportProgress(): HandlerContext["reportProgress"] {
    return (this.progress ??= (progress) => this.writeProgress(progress));
  }

  // Progress is telemetry: a failed write is logged, never thrown into the handler. A fenced one
  // means the claim is gone, so the handler is interrupted like on a fenced renewal.
  private async writeProgress(progress: unknown): Promise<void> {
    const { deps, claimed: job } = this;
    try {
      // A row held for a moment (another worker's claim, or the rollback of a statement that just
      // failed) is tried again a few times, 315 ms in all; progress is telemetry, so a row held
      // longer than that does not hold the handler up: this value is dropped.
      for (let wait = 5; ; wait *= 2) {
        const sentAt = performance.now();
        const [result] = await reportProgress(deps.db, [{ id: job.id, token: job.claimToken, progress, leaseMs: job.leaseMs }], deps.statements);
        if (result?.outcome === "applied") deps.leaseConfirmed(job, sentAt);
        if (result?.outcome === "fenced") deps.leaseLost(job);
        if (result?.outcome === "cancelled") deps.cancelled(job);
        if (result?.outcome !== "busy") return;
        if (wait > 160) return this.logger.debug("progress not written: the job's row is held by another session");
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    } catch (error) {
      this.logger.warn({ err: error }, "progress write failed; the job goes on");
    }
  }
}
