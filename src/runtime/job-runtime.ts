// The job machine with the runtime's Effects as its actors, built once per supervisor, the path
// derived from it (src/machines/derive-path.ts), and the start of one run of that machine per
// claimed job. Everything job-specific reaches the actors through the machine's context (the
// claimed row), so providing the machine once costs nothing per job. Measured
// (bench/throughput.ts): providing it per job spent ~20% of a worker's CPU building state nodes.
import { fromPromise, type AnyActorRef } from "xstate";
import {
  completeJobs,
  deadLetterJobs,
  failJobs,
  releaseJobs,
  type Claim,
  type ClaimedJob,
  type FencedResult,
  type Queryable,
  type StatementOptions,
} from "../db/index.ts";
import { derivePath } from "../machines/derive-path.ts";
import { jobMachine, type HandlerFailure, type JobError, type JobMachineEvent, type JobOutcome, type WriteInput } from "../machines/job-machine.ts";
import { writeOutcome } from "./db-write.ts";
import { logAttempt } from "./attempt-log.ts";
import { WorkerMetrics } from "./metrics.ts";
import { jobLogger, type Logger } from "./logger.ts";
import { reportOverrun } from "./overrun.ts";
import { runHandler } from "./run-handler.ts";
import { JobContext, type HandlerContextDeps } from "./handler-context.ts";
import { checkPayload, type Task } from "./task.ts";
import type { Inspector } from "./inspection.ts";
import { runAlongPath, type JobRun, type RunObserver, type RunOptions } from "./job-runner.ts";
import type { SignalSource } from "./signal-source.ts";
import { createWriteBatcher, MAX_WRITE_BATCH } from "./write-batcher.ts";

/** What a job's machine ends with. */
export interface JobOutput {
  outcome: JobOutcome;
  error: JobError | null;
  intended: JobOutcome | null;
  writeError: string | null;
}

export type JobObserver = RunObserver<JobOutput>;

/** One claimed job's machine as the supervisor drives it. */
export interface JobHandle {
  start(): void;
  send(event: JobMachineEvent): void;
  readonly state: string;
  readonly status: JobRun["status"];
}

export interface JobRuntimeDeps {
  db: Queryable;
  /** Schema, statement bound and naming, as the worker runs every statement. */
  statements: StatementOptions & { schema: string };
  logger: Logger;
  /** Times each outcome statement; default a registry nobody reads. */
  metrics?: WorkerMetrics;
  logPayloads: boolean;
  /** Completed jobs' rows stay (else deleted at completion, unless they hold a dedupe key); default false. */
  keepCompleted?: boolean;
  /** The task for a job type, or undefined when this worker has none. */
  taskFor: (type: string) => Task | undefined;
  /** A progress write found the claim fenced: the job's machine must be told. */
  leaseLost: (job: ClaimedJob) => void;
  /** A write under the claim found the job cancelled: the job's machine must be told. */
  cancelled: (job: ClaimedJob) => void;
  /** A durable step's result was recorded under the claim: the job's machine is told. */
  stepRecorded: (job: ClaimedJob, name: string) => void;
  /** The job's handler has returned or thrown (its outcome is on its way to the machine). */
  handlerSettled: (job: ClaimedJob) => void;
  /** Whether the worker can still prove the job's lease on its own clock (user code may start). */
  leaseProvable: (job: ClaimedJob) => boolean;
  /** A write under the claim, sent at `sentAt` (performance.now()), granted its lease again. */
  leaseConfirmed: (job: ClaimedJob, sentAt: number) => void;
  /** Every job runs as an XState actor under this one (the supervisor's), seen by its inspector. */
  parent?: () => AnyActorRef | undefined;
  /** Every job runs as an XState actor with this inspector (a job runtime used on its own). */
  inspect?: Inspector;
}

export interface JobRuntime {
  /** Creates (does not start) the machine for one claimed job; without a free slot it waits for START. */
  create(job: ClaimedJob, slotFree: boolean, observer: JobObserver): JobHandle;
}

// How long an outcome waits for others to share its statement. Sent at the end of its turn of the
// event loop, a worker at concurrency 10 wrote its completions ten at a time. Measured (30,000
// no-op jobs, defaults, alternating runs): 0 ms 9,416 jobs/s, 0.111 statements, 70 µs worker and
// 94 µs PostgreSQL CPU per job; 1 ms 11,351, 0.049, 60 and 69; 4 ms 10,512. At concurrency 200,
// where a turn fills a batch, 1 ms and 0 measured the same within the runs' spread.
const OUTCOME_GATHER_MS = 1;

/** A job run without an inspector: one options object for all of them. */
const NO_RUN_OPTIONS: RunOptions = {};

const errorText = (error: JobError | null): string => (error === null ? "unknown error" : `${error.kind}: ${error.message}`);

const claimOf = (job: ClaimedJob): Claim => ({ id: job.id, token: job.claimToken });

/**
 * No user code starts on a lease the worker cannot prove: a claim that came back late, or a
 * worker that woke after its deadline, must not begin what another worker may already be running.
 */
const lapsed = (job: ClaimedJob): Promise<never> =>
  Promise.reject({ permanent: false, leaseLapsed: true, message: `the lease of job ${job.id} could not be proven when its handler was to start` } satisfies HandlerFailure);

export const createJobRuntime = (deps: JobRuntimeDeps): JobRuntime => {
  const { db, statements: options } = deps;
  // Completions and failures are the hot writes: coalesced, each waiting OUTCOME_GATHER_MS for others.
  const metrics = deps.metrics ?? new WorkerMetrics();
  const completion = { ...options, keepCompleted: deps.keepCompleted ?? false };
  const complete = createWriteBatcher(
    (items: Array<Claim & { result?: unknown }>) => metrics.timed("complete", () => completeJobs(db, items, completion)),
    MAX_WRITE_BATCH,
    OUTCOME_GATHER_MS,
  );
  const fail = createWriteBatcher(
    (items: Array<Claim & { error: string; stack?: string }>) => metrics.timed("fail", () => failJobs(db, items, options)),
    MAX_WRITE_BATCH,
    OUTCOME_GATHER_MS,
  );
  const log = (job: ClaimedJob) => jobLogger(deps.logger, job, { logPayload: deps.logPayloads });

  // The signal aborts when the machine leaves the write state (ABANDON): a batched write not yet
  // sent is dropped, a statement of its own is cancelled, and no retry follows.
  // (The signal is read from its source only when needed: see SignalSource.)
  const write = (run: (input: WriteInput, abort: SignalSource) => Promise<FencedResult>) =>
    fromPromise<FencedResult, WriteInput>((args) => writeOutcome(() => run(args.input, args), args));

  const contextDeps: HandlerContextDeps = {
    db,
    statements: options,
    log,
    recorded: deps.stepRecorded,
    leaseLost: deps.leaseLost,
    cancelled: deps.cancelled,
    leaseConfirmed: deps.leaseConfirmed,
  };

  const machine = jobMachine.provide({
    actors: {
      validatePayload: fromPromise<void, { job: ClaimedJob }>(async ({ input }) => {
        if (!deps.leaseProvable(input.job)) await lapsed(input.job);
        const task = deps.taskFor(input.job.type);
        if (task !== undefined) await checkPayload(task, input.job.payload);
      }),
      runHandler: fromPromise<unknown, { job: ClaimedJob }>((args) => {
        const { input } = args;
        if (!deps.leaseProvable(input.job)) return lapsed(input.job);
        const task = deps.taskFor(input.job.type)!;
        const startedAt = performance.now();
        return runHandler(task, input.job.payload, new JobContext(contextDeps, input.job, args), () => {
          deps.handlerSettled(input.job);
          reportOverrun(task, input.job, startedAt, performance.now(), args, () => log(input.job));
        });
      }),
      writeCompletion: write(({ job, result }, abort) => complete({ ...claimOf(job), result }, abort)),
      writeFailure: write(({ job, error }, abort) => fail({ ...claimOf(job), error: errorText(error), stack: error?.stack }, abort)),
      writeDeadLetter: write(async ({ job, error }, { signal }) => (await metrics.timed("dead_letter", () => deadLetterJobs(db, [{ ...claimOf(job), error: errorText(error), stack: error?.stack }], { ...options, signal })))[0]!),
      writeRelease: write(async ({ job }, { signal }) => (await metrics.timed("release", () => releaseJobs(db, [claimOf(job)], { ...options, signal })))[0]!),
    },
    actions: {
      reportOutcome: ({ context: { job, outcome, error } }) => logAttempt(deps.logger, job, outcome, error, deps.logPayloads),
      reportFenced: ({ context: { job, intended, error } }) =>
        log(job).warn(
          { intended, error: error?.message },
          `claim lost: job ${job.id} (claim ${job.claimToken}) was reclaimed or finished elsewhere; nothing written for it`,
        ),
      reportAbandoned: ({ context: { job, intended, writeError } }) =>
        log(job).error(
          { intended, write_error: writeError },
          `could not record the outcome (${intended}) of job ${job.id}: ${writeError}; it stays processing and the sweep takes it back after its lease`,
        ),
      reportRefused: ({ context: { job } }) => log(job).error(`job ${job.id} has no claim token; refused, never run unfenced`),
      reportCancelled: ({ context: { job } }) =>
        log(job).info(`job ${job.id} was cancelled while claimed; its handler was interrupted and nothing more is written for it`),
    },
  });

  // Refuses to start a runtime whose machine the derived path could not run as XState would.
  const path = derivePath(machine, { goal: "done", events: ["START"] });

  return {
    create: (job, slotFree, observer) => {
      const task = deps.taskFor(job.type);
      const parent = deps.parent?.();
      return runAlongPath(
        path,
        { job, hasHandler: task !== undefined, hasSchema: task?.schema !== undefined, timeoutMs: task?.timeoutMs ?? 1, slotFree },
        observer,
        parent ? { parent } : deps.inspect ? { inspect: deps.inspect } : NO_RUN_OPTIONS,
      );
    },
  };
};
