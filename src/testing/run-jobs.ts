// Running jobs inside a test: claims the due jobs of the given tasks one at a time and runs each
// through picket's own job runtime (createJobRuntime: the job machine, the handler runner, the
// fenced writes), in this process, until none is due.
import { Writable } from "node:stream";
import { claimJobs, type ClaimWant } from "../db/claim.ts";
import { getJob } from "../db/admin.ts";
import { InvalidConfigError } from "../db/errors.ts";
import type { ClaimedJob, JobId } from "../db/job-row.ts";
import type { Queryable } from "../db/queryable.ts";
import { DEFAULT_SCHEMA } from "../db/schema-name.ts";
import { advancePendingJobs } from "../db/testing.ts";
import type { JobMachineEvent, JobOutcome } from "../machines/job-machine.ts";
import { createJobRuntime, type JobHandle, type JobOutput, type JobRuntime } from "../runtime/job-runtime.ts";
import { createLogger, type Logger } from "../runtime/logger.ts";
import type { Task } from "../runtime/task.ts";

/** One job's run, as runUntilIdle and checkTask report it. */
export interface JobRunResult {
  id: JobId;
  type: string;
  /** The attempt this run was (1 on the first). */
  attempt: number;
  /** The outcome the job's machine ended with. */
  outcome: JobOutcome;
  /** The handler's result, as written on the row (completed jobs). */
  result: unknown;
  /** "<kind>: <message>" of the failure that ended the run, or null. */
  error: string | null;
}

export interface TestRuntimeOptions {
  db: Queryable;
  tasks: ReadonlyArray<Task<any, any>>;
  /** picket's schema; default "picket". */
  schema?: string;
  /** Default: a logger that writes nothing. */
  logger?: Logger;
  /**
   * Keep completed jobs' rows, so a test reads their status and result; default true here (a
   * worker's default is false: see SupervisorOptions.keepCompleted). false runs as a default worker.
   */
  keepCompleted?: boolean;
}

/** Hooks a run can be given: the runtime's own events about the job, and each state it enters. */
export interface RunHooks {
  /** The job's machine entered `state` (after each event it took). */
  onState?: (state: string, handle: JobHandle) => void;
}

export const silentLogger = (): Logger =>
  createLogger({ level: "silent", destination: new Writable({ write: (_chunk, _encoding, done) => done() }) });

export const wantFor = (task: Task<any, any>, limit = 1): ClaimWant => ({
  type: task.name,
  limit,
  leaseMs: task.leaseMs,
  backoffBaseMs: task.backoffBaseMs,
  backoffMaxMs: task.backoffMaxMs,
  maxAttempts: task.maxAttempts,
});

/**
 * picket's job runtime wired as a supervisor wires it, without the supervisor's loop: the test
 * claims, and each claimed job runs to its end. A lost lease or a cancel found by a write reaches
 * the job's machine as the supervisor would send it. No lease renewal runs: a job's lease is its
 * task's leaseMs (20 s by default), longer than a test's job should take.
 */
export class TestRuntime {
  readonly runtime: JobRuntime;
  private readonly handles = new Map<JobId, JobHandle>();
  private readonly tasks: Map<string, Task<any, any>>;

  readonly options: TestRuntimeOptions;

  constructor(options: TestRuntimeOptions) {
    this.options = options;
    this.tasks = new Map(options.tasks.map((task) => [task.name, task]));
    const send = (job: ClaimedJob, event: JobMachineEvent) => {
      this.send(job.id, event);
    };
    this.runtime = createJobRuntime({
      db: options.db,
      statements: { schema: options.schema ?? DEFAULT_SCHEMA },
      logger: options.logger ?? silentLogger(),
      logPayloads: false,
      keepCompleted: options.keepCompleted ?? true,
      taskFor: (type) => this.tasks.get(type) as Task | undefined,
      leaseLost: (job) => send(job, { type: "LEASE_LOST" }),
      cancelled: (job) => send(job, { type: "CANCEL" }),
      stepRecorded: (job, name) => send(job, { type: "STEP_RECORDED", name }),
      handlerSettled: () => undefined,
      // The lease was granted for the task's leaseMs a moment ago, and nothing else claims here.
      leaseProvable: () => true,
      leaseConfirmed: () => undefined,
    });
  }

  /** Runs one claimed job to the end of its machine. */
  run(job: ClaimedJob, hooks: RunHooks = {}): Promise<JobOutput> {
    return new Promise<JobOutput>((resolve, reject) => {
      const handle = this.runtime.create(job, true, {
        changed: (state) => hooks.onState?.(state, handle),
        done: (output) => {
          this.handles.delete(job.id);
          resolve(output);
        },
        failed: (error) => {
          this.handles.delete(job.id);
          reject(error);
        },
      });
      this.handles.set(job.id, handle);
      handle.start();
    });
  }

  /** Sends an event to a running job's machine (as the supervisor would); false when that job is not running here. */
  send(id: JobId, event: JobMachineEvent): boolean {
    const handle = this.handles.get(id);
    if (handle === undefined) return false;
    handle.send(event);
    return true;
  }

  /** Claims one due job of the tasks, or null when none is due. */
  async claimOne(): Promise<ClaimedJob | null> {
    // One job in all (the claim's default total is the sum of the wants' limits: one per task, and
    // the jobs after the first would be claimed, never run, and held until their lease ran out).
    const [job] = await claimJobs(this.options.db, "picket-testing", [...this.tasks.values()].map((task) => wantFor(task)), {
      schema: this.options.schema ?? DEFAULT_SCHEMA,
      total: 1,
    });
    return job ?? null;
  }

  /** What a finished run reports: the machine's outcome with the row's result. */
  async resultOf(job: ClaimedJob, output: JobOutput): Promise<JobRunResult> {
    const row = await getJob(this.options.db, job.id, { schema: this.options.schema ?? DEFAULT_SCHEMA });
    return {
      id: job.id,
      type: job.type,
      attempt: job.attempts,
      outcome: output.outcome,
      result: output.outcome === "completed" ? (row?.result ?? null) : null,
      error: output.error === null ? null : `${output.error.kind}: ${output.error.message}`,
    };
  }
}

export interface RunUntilIdleOptions extends TestRuntimeOptions {
  /**
   * Time travel, in ms. Before each claim, every pending job of these tasks due within this long
   * of the database's clock has its run_at moved back by this much (so it is due now, in the same
   * order): delayed jobs run, and so do retries whose backoff is shorter. Default 0 (only jobs due now).
   */
  advance?: number;
  /** Most jobs run before giving up (a task that enqueues itself forever); default 1000. */
  maxJobs?: number;
}

const MAX_ADVANCE_MS = 100 * 365 * 24 * 3_600_000;

/**
 * Runs every due job of `tasks`, one at a time in claim order, through picket's job runtime in
 * this process, until no job of those tasks is due; returns each run's outcome in order (a job
 * retried within the call appears once per attempt). Jobs of other types are left alone, as are
 * jobs in a serial queue and jobs of tasks with clusterConcurrency or rateLimit (the limited
 * claim takes those; run a supervisor for them).
 */
export const runUntilIdle = async (options: RunUntilIdleOptions): Promise<JobRunResult[]> => {
  const advance = options.advance ?? 0;
  if (!Number.isInteger(advance) || advance < 0 || advance > MAX_ADVANCE_MS) {
    throw new InvalidConfigError(`picket/testing: runUntilIdle's advance must be a whole number of milliseconds from 0 to ${MAX_ADVANCE_MS} (got ${String(options.advance)}).`);
  }
  const maxJobs = options.maxJobs ?? 1000;
  if (!Number.isInteger(maxJobs) || maxJobs < 1) {
    throw new InvalidConfigError(`picket/testing: runUntilIdle's maxJobs must be an integer ≥ 1 (got ${String(options.maxJobs)}).`);
  }
  if (options.tasks.length === 0) {
    throw new InvalidConfigError("picket/testing: runUntilIdle needs the tasks whose jobs it runs (tasks: [myTask]).");
  }
  const runtime = new TestRuntime(options);
  const types = options.tasks.map((task) => task.name);
  const results: JobRunResult[] = [];
  for (;;) {
    if (advance > 0) await advancePendingJobs(options.db, types, advance, { schema: options.schema ?? DEFAULT_SCHEMA });
    const job = await runtime.claimOne();
    if (job === null) return results;
    if (results.length === maxJobs) {
      // The claim is given back untouched by the sweep after its lease: say so rather than hide it.
      throw new Error(
        `picket/testing: runUntilIdle ran ${maxJobs} jobs and job ${job.id} (${job.type}) is still due; does a task enqueue more jobs on every run? Raise maxJobs if this is expected.`,
      );
    }
    results.push(await runtime.resultOf(job, await runtime.run(job)));
  }
};
