// Model-based tests of a user's own task: the job machine's paths (generated from the machine, as
// picket's own model test does) are each taken with the user's real handler, run through picket's
// job runtime against a real database, with the faults picket can meet injected where the path
// names them. Each path is checked against the machine's guarantees and, when asked, the user's
// own property (running the job again after a fault has the effect of running it once).
import { AssertionError } from "node:assert";
import { isDeepStrictEqual } from "node:util";
import * as Effect from "effect/Effect";
import type pg from "pg";
import { cancelJob, getJob } from "../db/admin.ts";
import { claimJobs } from "../db/claim.ts";
import { enqueueJob } from "../db/enqueue.ts";
import { InvalidConfigError } from "../db/errors.ts";
import { renewLeases } from "../db/fenced.ts";
import type { ClaimedJob, Job, JobId } from "../db/job-row.ts";
import { DEFAULT_SCHEMA } from "../db/schema-name.ts";
import { sweepExpiredClaims } from "../db/sweep.ts";
import { snapshotTables } from "../db/table-snapshot.ts";
import { allowWrites, expireClaim, listJobsOfType, makeDue, refuseWrites, stepRecords, type StepRecord } from "../db/testing.ts";
import type { JobOutcome } from "../machines/job-machine.ts";
import type { JobOutput } from "../runtime/job-runtime.ts";
import type { Logger } from "../runtime/logger.ts";
import { checkPayload, type HandlerContext, type Task } from "../runtime/task.ts";
import { distinctStates, generateJobPaths, leaseExpired } from "./job-paths.ts";
import { abortedOnLeavingRunning, describeFaults, scenariosFor, type Natural, type RunningFault, type Scenario } from "./path-scenarios.ts";
import { TestRuntime, wantFor, type JobRunResult } from "./run-jobs.ts";

/** The job a path ran, as the user's effect and property see it. */
export interface CheckedJob<P> {
  id: JobId;
  /** The key the handler's ctx.idempotencyKey held. */
  idempotencyKey: string;
  payload: P;
}

/** One path's run, for a user's property. */
export interface PathRun<P> {
  db: pg.Pool;
  /** The path's name, as the report names it. */
  path: string;
  job: CheckedJob<P>;
  /** Every run of the job on this path: the faulted one first, then the runs that finished it. */
  runs: JobRunResult[];
  /** The job's row at the end. */
  row: Job;
}

export interface CheckTaskOptions<P> {
  /** The test database (useTestDatabase / createTestDatabase); migrated. */
  db: pg.Pool;
  /**
   * A payload the task accepts, given to the job of every path; or a function that gives each path
   * a payload of its own, called with the path's index and name (index -1, name "baseline": the
   * clean first run). Your tables are put back before each path anyway (restoreTables), so one
   * payload serves most tasks; give one per path when the effect lives outside `db` (a fake
   * mailer in memory, another database) and is counted by a key from the payload:
   * `payload: ({ index }) => ({ orderId: "order-" + index })`.
   */
  payload: P | ((path: { index: number; name: string }) => P);
  /**
   * Before each path, put every table of `db` outside picket's schema back as it was before the
   * clean first run (rows and sequences; your triggers do not fire), so each path's effect is its
   * own: a handler idempotent by a key from its payload meets the key fresh, and rows of earlier
   * paths do not add up. The tables are put back once more at the end. Default true; false runs
   * every path on the tables as the paths before it left them (then give each path its own
   * payload). Needs the test's role to own the tables.
   */
  restoreTables?: boolean;
  /** A payload the task's schema refuses, for the path that checks it; default null. */
  invalidPayload?: unknown;
  /**
   * The property most tasks need: after a fault, running the job again (as picket will) has the
   * effect of running it once. `effect(job)` returns what the job did to the world, as a value
   * compared with deep equality (say, the rows it wrote, counted by job id, idempotency key or a
   * key of the payload, such as an order id); each path's value, once its job completed, must
   * equal a clean run's. Each path starts from the tables the clean run started from (restoreTables).
   */
  idempotent?: { effect: (job: CheckedJob<P>) => unknown };
  /** Your own check, called after each path (throw to fail it). */
  property?: (run: PathRun<P>) => void | Promise<void>;
  /** Only the paths whose name this accepts (default all). */
  only?: (name: string) => boolean;
  /** picket's schema; default "picket". */
  schema?: string;
  /**
   * How long the handler may go on after the machine left running before the path fails with
   * "does it ignore ctx.signal?"; default 10 s.
   */
  settleMs?: number;
  /** Throw an AssertionError naming every failed path (default true); false: only report. */
  throwOnFailure?: boolean;
  logger?: Logger;
}

export interface PathReport {
  name: string;
  status: "passed" | "failed" | "skipped";
  /** Why the path was skipped. */
  reason?: string;
  /** The outcome the machine names at the path's end. */
  expected?: JobOutcome;
  /** The outcome the job's machine ended with. */
  outcome?: JobOutcome;
  /** The outcomes of the runs that finished the job after the path (a retry, another worker's run). */
  reruns?: JobOutcome[];
  /** What went wrong, one entry each (the idempotency check's spans four lines). */
  problems: string[];
}

export interface CheckTaskReport {
  task: string;
  /** How the handler's first clean run ended, and how many steps it recorded. */
  baseline: { outcome: JobOutcome; steps: number; effect?: unknown };
  paths: PathReport[];
  passed: number;
  failed: number;
  skipped: number;
}

/** What one path's run showed; judgePath turns it into problems. */
export interface PathObservation {
  expectedStates: string[];
  observedStates: string[];
  expectedOutcome: JobOutcome;
  outcome: JobOutcome;
  fault: RunningFault | null;
  /** Whether the handler's signal had aborted when the machine left running after the fault (null: it did not leave). */
  abortedOnLeavingRunning: boolean | null;
  /** The claim was lost (fenced): the row and our steps as they were at that moment, and at the end. */
  fence: { rowAtFence: Job; stepsAtFence: StepRecord[]; finalSteps: StepRecord[]; token: string } | null;
  /** The row when the write was refused (a failing write). */
  rowBeforeWrite: Job | null;
  claimedAttempts: number;
  finalRow: Job;
  /** The user's effect after a clean run and after this path (once its job completed). */
  effect: EffectSeen | null;
}

/** What the idempotency check measured on one path, so its failure can say what was counted. */
export interface EffectSeen {
  /** What idempotent.effect returned after one clean run: the value every path must match. */
  once: unknown;
  /** What it returned after this path, once the job completed. */
  here: unknown;
  /** What effect was asked about: this path's job. */
  job: CheckedJob<unknown>;
  /** The path's faults, in words (describeFaults). */
  faults: string;
  /** How each run of the job on this path ended: the faulted one first, then the runs that finished it. */
  runs: JobOutcome[];
  /** The path started from the tables the clean run started from (restoreTables). */
  tablesRestored: boolean;
}

const expectedStatus: Partial<Record<JobOutcome, string>> = {
  completed: "completed",
  retried: "pending",
  dead: "dead",
  released: "pending",
  cancelled: "cancelled",
};

/** The machine's guarantees, and the idempotency property, on one path's observation. */
export const judgePath = (o: PathObservation): string[] => {
  const problems: string[] = [];
  if (!isDeepStrictEqual(o.observedStates, o.expectedStates)) {
    problems.push(`the job's machine went ${o.observedStates.join(" > ")}, not along the path (${o.expectedStates.join(" > ")})`);
  }
  if (o.outcome !== o.expectedOutcome) problems.push(`the job ended ${o.outcome}; the machine names ${o.expectedOutcome} for this path`);
  // Leaving running and interrupting the handler are one event: the signal must have aborted.
  if (o.fault !== null && o.abortedOnLeavingRunning !== true) {
    problems.push(`the machine left running (${o.fault}) but the handler's signal had not aborted`);
  }
  if (o.fence !== null) {
    // Nothing of ours may land after the claim is lost: the row is exactly as the new claim left it.
    if (!isDeepStrictEqual(o.finalRow, o.fence.rowAtFence)) {
      const before = o.fence.rowAtFence as unknown as Record<string, unknown>;
      const after = o.finalRow as unknown as Record<string, unknown>;
      const changed = Object.keys({ ...before, ...after }).filter((key) => !isDeepStrictEqual(before[key], after[key]));
      problems.push(`the row changed after the claim was lost: ${changed.map((key) => `${key} ${JSON.stringify(before[key])} -> ${JSON.stringify(after[key])}`).join(", ")}`);
    }
    const ours = (steps: StepRecord[]) => steps.filter((step) => step.claimToken === o.fence!.token).map((step) => step.name);
    if (!isDeepStrictEqual(ours(o.fence.finalSteps), ours(o.fence.stepsAtFence))) {
      problems.push(`steps were recorded under the lost claim after it was lost: ${ours(o.fence.finalSteps).join(", ")} (at the fence: ${ours(o.fence.stepsAtFence).join(", ") || "none"})`);
    }
  }
  const status = expectedStatus[o.outcome];
  if (status !== undefined && o.finalRow.status !== status) problems.push(`the job ended ${o.outcome} but its row is ${o.finalRow.status}`);
  if (o.outcome === "released" && o.finalRow.attempts !== o.claimedAttempts - 1) {
    problems.push(`a released job's attempt is not charged, but its row counts ${o.finalRow.attempts} attempts (claimed as attempt ${o.claimedAttempts})`);
  }
  if (o.outcome === "cancelled" && (o.finalRow.result !== null || o.finalRow.lastError !== null)) {
    problems.push("the job was cancelled, yet an outcome was written after the cancel");
  }
  if (o.outcome === "abandoned" && o.rowBeforeWrite !== null && !isDeepStrictEqual(o.finalRow, o.rowBeforeWrite)) {
    problems.push("the outcome write failed, yet the row changed");
  }
  if (o.effect !== null && !isDeepStrictEqual(o.effect.here, o.effect.once)) problems.push(notIdempotent(o.effect));
  return problems;
};

const show = (value: unknown): string => JSON.stringify(value) ?? String(value);
const ordinal = (n: number): string => `${n}${n % 100 >= 11 && n % 100 <= 13 ? "th" : (["th", "st", "nd", "rd"][n % 10] ?? "th")}`;

/** The idempotency failure, in four lines: the two values, what was measured, the path, and why it counts. */
const notIdempotent = (e: EffectSeen): string => {
  const { once, here, job, runs } = e;
  return [
    `not idempotent: expected ${show(once)} (what idempotent.effect measures after one clean run), observed ${show(here)} after this path`,
    `  measured: effect({ id: ${show(job.id)}, idempotencyKey: ${show(job.idempotencyKey)}, payload: ${show(job.payload)} }), once the job had completed`,
    `  the path: ${e.faults}; the job was run ${runs.length} time${runs.length === 1 ? "" : "s"} (${runs.map((outcome, i) => `${ordinal(i + 1)} ${outcome}`).join(", ")})`,
    e.tablesRestored
      ? `  the path started from your tables as the clean run found them, so ${show(here)} is this job's own doing: running it again after the fault did not leave the effect of one run. ` +
        `Make the work happen once: inside ctx.step, or keyed by ctx.idempotencyKey or a key from the payload (INSERT ... ON CONFLICT DO NOTHING)`
      : `  your tables were not put back between paths (restoreTables: false), so unless effect counts by a key this path's payload alone holds, ${show(here)} includes what earlier paths did`,
  ].join("\n");
};

/** Waits until the signal aborts, or `ms` at most (only a broken runtime would leave it unaborted). */
const untilAborted = (signal: AbortSignal, ms: number): Promise<void> =>
  signal.aborted
    ? Promise.resolve()
    : new Promise((resolve) => {
        const timer = setTimeout(resolve, ms);
        signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
      });

/** The job machine's input for a user's task (the paths are generated once per task shape). */
const MODEL_TOKEN = "3f0c2b52-8a8e-4f0e-9a77-0d1f1c2b3a4d";

/** How long a handler may go on after its signal aborted before checkTask says it ignores the signal. */
const SETTLE_MS = 10_000;

/** Attempts every checked job may take: faults charge some, and the job must still be able to finish. */
const CHECK_ATTEMPTS = 20;

/**
 * Walks the job machine's paths with your task's real handler and the faults picket can inject
 * (timeout, lost lease, crash, drain deadline, cancel, a fenced, cancelled or failing outcome
 * write, a payload the schema refuses), each after every durable step the handler records.
 * Checks on each path that the job took the path, ended with the outcome the machine names, had
 * its handler's signal aborted when the machine left running, and wrote nothing after its claim
 * was lost; and your property (options.idempotent, options.property). Each path starts from your
 * tables as the clean first run found them (options.restoreTables), so what one path did never
 * counts on the next. Returns the report of every path; throws an AssertionError naming the
 * failed ones unless throwOnFailure is false.
 *
 * The task's type must have no live job in the database while it runs (its jobs are claimed by
 * type). Isolated tasks (isolate) are not supported: their handlers run in a thread of their own.
 */
export const checkTask = async <P>(task: Task<P, any>, options: CheckTaskOptions<P>): Promise<CheckTaskReport> => {
  const { db } = options;
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const so = { schema };
  if (task.handler === undefined) {
    throw new InvalidConfigError(`picket/testing: checkTask runs a task's handler in this process; task "${task.name}" is isolated (isolate), which it does not support.`);
  }
  if (typeof db?.connect !== "function") throw new InvalidConfigError("picket/testing: checkTask needs { db: pg.Pool } (the test database's pool).");
  if (!("payload" in options)) throw new InvalidConfigError(`picket/testing: checkTask needs a sample payload the task "${task.name}" accepts: { payload }.`);
  const live = await listJobsOfType(db, task.name, ["pending", "processing"], 1, so);
  if (live.length > 0) {
    throw new InvalidConfigError(
      `picket/testing: checkTask claims jobs of "${task.name}" by type, and job ${live[0]!.id} of that type is ${live[0]!.status}; run checkTask where the task has no live job (a database of its own).`,
    );
  }
  // Every path is compared with the clean run, so every path starts from the world the clean run
  // started from: the tables as they are now, put back before each path and once more at the end.
  const snapshot = options.restoreTables === false ? null : await snapshotTables(db, [schema]);
  const leave = async (): Promise<void> => {
    if (snapshot === null) return;
    try {
      await snapshot.restore();
    } finally {
      await snapshot.drop();
    }
  };
  let result: CheckTaskReport;
  try {
    result = await walkPaths(task, options, async () => void (await snapshot?.restore()));
  } catch (error) {
    await leave().catch(() => undefined);
    throw error;
  }
  await leave();
  if (result.failed > 0 && options.throwOnFailure !== false) {
    throw new AssertionError({ message: formatReport(result), actual: result.failed, expected: 0, operator: "checkTask" });
  }
  return result;
};

/** The clean run, then every path's scenarios, each after `beforePath`. */
const walkPaths = async <P>(task: Task<P, any>, options: CheckTaskOptions<P>, beforePath: () => Promise<void>): Promise<CheckTaskReport> => {
  const { db } = options;
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const so = { schema };
  const payloadFor = (index: number, name: string): P =>
    typeof options.payload === "function" ? (options.payload as (path: { index: number; name: string }) => P)({ index, name }) : options.payload;
  const clean = new TestRuntime({ db, tasks: [task], schema, ...(options.logger ? { logger: options.logger } : {}) });
  const keyOf = (id: JobId) => `picket:${schema}:${id}`;
  const effectOf = (idempotent: NonNullable<CheckTaskOptions<P>["idempotent"]>, id: JobId, payload: P) => idempotent.effect({ id, idempotencyKey: keyOf(id), payload });

  /** Runs the job (pending or claimed elsewhere) until it is finished, as picket would, retries made due. */
  const finish = async (id: JobId, claimed: ClaimedJob | null): Promise<JobRunResult[]> => {
    const runs: JobRunResult[] = [];
    let next = claimed;
    for (let i = 0; i < CHECK_ATTEMPTS; i++) {
      if (next === null) {
        const row = await getJob(db, id, so);
        if (row === null || (row.status !== "pending" && row.status !== "processing")) break;
        if (row.status === "processing") {
          // A claim nobody will finish (a failed write, a crashed worker): the sweep takes it back.
          await expireClaim(db, id, so);
          await sweepExpiredClaims(db, 1000, so);
        }
        await makeDue(db, id, so);
        next = await clean.claimOne();
        if (next === null) break;
        if (next.id !== id) throw new Error(`picket/testing: claimed job ${next.id} of "${task.name}" while checking job ${id}; another job of the task was enqueued meanwhile.`);
      }
      runs.push(await clean.resultOf(next, await clean.run(next)));
      next = null;
    }
    return runs;
  };

  /**
   * A job still live after `finish` (a task whose attempts outlast CHECK_ATTEMPTS runs) is
   * cancelled: the next path claims by type and must find only its own job.
   */
  const retire = async (id: JobId): Promise<void> => {
    const row = await getJob(db, id, so);
    if (row?.status === "pending" || row?.status === "processing") await cancelJob(db, id, so);
  };

  // The baseline: one clean run, to learn how the handler ends and how many steps it records.
  const baselinePayload = payloadFor(-1, "baseline");
  const baselineJob = await enqueueJob(db, { type: task.name, payload: baselinePayload, maxAttempts: task.maxAttempts }, so);
  const started = performance.now();
  const baselineRuns = await finish(baselineJob.id, null);
  await retire(baselineJob.id);
  const firstMs = performance.now() - started;
  const first = baselineRuns[0];
  if (first === undefined) throw new Error(`picket/testing: checkTask could not claim its first job of "${task.name}".`);
  const firstError = first.error ?? "";
  if (first.outcome !== "completed" && !firstError.startsWith("error:") && !firstError.startsWith("permanent:")) {
    throw new InvalidConfigError(
      firstError.startsWith("invalid_payload:")
        ? `picket/testing: the task "${task.name}" refuses checkTask's sample payload (${firstError}); pass a payload it accepts.`
        : `picket/testing: the first clean run of "${task.name}" ended ${first.outcome} (${firstError}); checkTask needs a handler that completes or fails on its own with the sample payload.`,
    );
  }
  const natural: Natural = first.outcome === "completed" ? "succeed" : firstError.startsWith("permanent:") ? "permanent" : "fail";
  const steps = (await stepRecords(db, baselineJob.id, so)).filter((step) => step.attempt === first.attempt).length;
  const baselineCompleted = baselineRuns.at(-1)?.outcome === "completed";
  const baselineEffect = options.idempotent && baselineCompleted ? await effectOf(options.idempotent, baselineJob.id, baselinePayload) : undefined;
  const timeoutMs = Math.max(300, Math.ceil(firstMs * 4));

  const paths = generateJobPaths(
    [{ name: task.name, input: { job: { id: "1", type: task.name, payload: {}, attempts: 1, maxAttempts: 3, createdAt: new Date(0), claimToken: MODEL_TOKEN, leaseMs: task.leaseMs, readyMs: 0 }, hasHandler: true, hasSchema: task.schema !== undefined, timeoutMs: 100, slotFree: true } }],
    // The faults of picket's own making (an unprovable lease, a hanging payload check, a write the
    // drain gives up) do not depend on the task: picket's own model test takes them.
    { lapses: false, abandon: false, hangingPayloadCheck: false },
  );

  const reports: PathReport[] = [];
  let index = 0;
  for (const path of paths) {
    const scenarios = scenariosFor(path, { natural, steps });
    if (typeof scenarios === "string") {
      if (options.only?.(path.name) ?? true) reports.push({ name: path.name, status: "skipped", reason: scenarios, problems: [] });
      continue;
    }
    for (const scenario of scenarios) {
      if (options.only && !options.only(scenario.name)) continue;
      await beforePath();
      reports.push(await runScenario(scenario, index++));
    }
  }

  async function runScenario(scenario: Scenario, i: number): Promise<PathReport> {
    const report: PathReport = { name: scenario.name, status: "passed", expected: scenario.outcome, problems: [] };
    const payload = scenario.invalid ? (options.invalidPayload ?? null) : payloadFor(i, scenario.name);
    const job = await enqueueJob(db, { type: task.name, payload, maxAttempts: scenario.lastAttempt ? 1 : CHECK_ATTEMPTS }, so);
    let signal: AbortSignal | undefined;
    // Typed by a cast: assigned in a closure (steal), which a plain null would hide from the checker.
    let fence = null as Omit<NonNullable<PathObservation["fence"]>, "finalSteps"> | null;
    let thief: ClaimedJob | null = null;
    let rowBeforeWrite: Job | null = null;
    let refused = false;
    /** Each state the job's machine entered, and whether the handler's signal had aborted by then. */
    const observed: Array<{ state: string; aborted: boolean }> = [];
    let claimed: ClaimedJob | undefined;

    /** Another worker takes the claim over: the lease runs out, the sweep requeues, it claims. */
    const steal = async (): Promise<void> => {
      const client = await db.connect();
      try {
        await client.query("BEGIN");
        await expireClaim(client, job.id, so);
        await sweepExpiredClaims(client, 1000, so);
        await makeDue(client, job.id, so);
        const [stolen] = await claimJobs(client, "picket-testing-other-worker", [wantFor(task)], so);
        if (stolen?.id !== job.id) throw new Error(`picket/testing: could not hand job ${job.id} to another worker`);
        await client.query("COMMIT");
        thief = stolen;
      } catch (error) {
        await client.query("ROLLBACK");
        throw error;
      } finally {
        client.release();
      }
      fence = { rowAtFence: (await getJob(db, job.id, so))!, stepsAtFence: await stepRecords(db, job.id, so), token: claimed!.claimToken };
    };

    const injectFault = async (): Promise<void> => {
      // A path that leaves running by a fault and then meets a fenced, cancelled or failing write:
      // that write's fault is in place before the machine leaves running (it writes at once).
      await injectWriteFault();
      switch (scenario.fault) {
        case "leaseLost":
        case "crash": {
          // As the renewal loop finds it: the claim is gone, the renewal is fenced, the job is told.
          await steal();
          const [renewal] = await renewLeases(db, [{ id: job.id, token: claimed!.claimToken, leaseMs: task.leaseMs }], so);
          if (renewal?.outcome !== "fenced") report.problems.push(`a renewal after the claim was lost was ${renewal?.outcome}, not fenced`);
          runtime.send(job.id, { type: "LEASE_LOST" });
          break;
        }
        case "cancel":
          await cancelJob(db, job.id, so);
          runtime.send(job.id, { type: "CANCEL" });
          break;
        case "drain":
          runtime.send(job.id, { type: "DRAIN_DEADLINE" });
          break;
        case "leaseExpired":
          runtime.send(job.id, leaseExpired as never);
          break;
        default:
        // timeout: the job's own timer fires while the handler is held here.
      }
      // Leaving running aborts the signal at once; the bound only keeps a broken runtime from hanging the check.
      await untilAborted(signal!, timeoutMs + 10_000);
      // A crashed worker runs nothing more of the handler.
      if (scenario.fault === "crash") await new Promise<never>(() => undefined);
    };

    const injectWriteFault = async (): Promise<void> => {
      if (scenario.write === "fenced") await steal();
      if (scenario.write === "cancelled") await cancelJob(db, job.id, so);
      if (scenario.write === "error") {
        await refuseWrites(db, job.id, so);
        refused = true;
        rowBeforeWrite = await getJob(db, job.id, so);
      }
    };

    // The user's handler, unchanged, with the faults put where the path needs them: before its
    // code, after its k-th step, or once it has settled and before its outcome is written.
    let handlerSettled: Promise<unknown> = Promise.resolve();
    const handler = (p: unknown, ctx: HandlerContext): Promise<unknown> => {
      const running = runUserHandler(p, ctx);
      handlerSettled = running.catch(() => undefined);
      return running;
    };
    const runUserHandler = async (p: unknown, ctx: HandlerContext): Promise<unknown> => {
      signal = ctx.signal;
      let recorded = 0;
      const view: HandlerContext = Object.create(ctx, {
        step: {
          value: async <T>(name: string, fn: () => T | Promise<T>): Promise<T> => {
            const result = await ctx.step(name, fn);
            if (scenario.fault !== null && ++recorded === scenario.afterStep) await injectFault();
            return result;
          },
        },
      });
      try {
        // The runtime starts the handler while it enters running: the fault comes once it is in.
        if (scenario.fault !== null && scenario.afterStep === 0) await new Promise((resolve) => setImmediate(resolve)).then(injectFault);
        const returned = task.handler!(p as P, view);
        // An Effect runs under the same signal, as picket's handler runner runs it.
        return await (Effect.isEffect(returned) ? Effect.runPromise(returned as Effect.Effect<unknown, unknown>, { signal: ctx.signal }) : returned);
      } finally {
        if (scenario.fault === null) await injectWriteFault();
      }
    };
    // A payload the schema refuses goes to its dead-letter write: that write's fault comes with the refusal.
    const schemaOf = (): Task["schema"] =>
      scenario.invalid && scenario.write !== "apply"
        ? {
            "~standard": {
              version: 1,
              vendor: "picket-check",
              validate: async (value: unknown) => {
                try {
                  await checkPayload(task as Task, value);
                  return { value };
                } catch (error) {
                  await injectWriteFault();
                  return { issues: [{ message: (error as Error).message }] };
                }
              },
            },
          }
        : (task.schema as Task["schema"]);
    const checked = { ...task, handler, schema: schemaOf(), timeoutMs: scenario.fault === "timeout" ? timeoutMs : task.timeoutMs } as Task;
    const runtime = new TestRuntime({ db, tasks: [checked], schema, ...(options.logger ? { logger: options.logger } : {}) });
    const runs: JobRunResult[] = [];
    try {
      claimed = (await runtime.claimOne()) ?? undefined;
      if (claimed?.id !== job.id) throw new Error(`picket/testing: expected to claim job ${job.id} of "${task.name}", got ${claimed?.id ?? "none"}`);
      let output: JobOutput;
      try {
        output = await runtime.run(claimed, {
          onState: (state) => void observed.push({ state, aborted: signal?.aborted ?? false }),
        });
      } finally {
        if (refused) await allowWrites(db, job.id, so);
      }
      // A handler interrupted by a fault may go on until it notices its signal, and what it does
      // meanwhile counts (at-least-once): the path is judged once it has settled. A crashed
      // worker's handler never does.
      if (scenario.fault !== "crash") {
        const settleMs = options.settleMs ?? SETTLE_MS;
        let timer: ReturnType<typeof setTimeout> | undefined;
        const settled = await Promise.race([handlerSettled.then(() => true), new Promise<boolean>((resolve) => (timer = setTimeout(resolve, settleMs, false)))]);
        // Cleared: a pending timer per path kept a node:test file's process alive settleMs after its last test.
        clearTimeout(timer);
        if (!settled) report.problems.push(`the handler was still running ${settleMs} ms after the machine left running: does it ignore ctx.signal?`);
      }
      runs.push(await runtime.resultOf(claimed, output));
      if (scenario.invalid && output.error?.kind !== "invalid_payload") {
        return { ...report, status: "skipped", reason: `the task accepts invalidPayload ${JSON.stringify(payload)}; pass one its schema refuses`, outcome: output.outcome };
      }
      const finalRow = (await getJob(db, job.id, so))!;
      const fenceSeen: PathObservation["fence"] = fence === null ? null : { ...fence, finalSteps: await stepRecords(db, job.id, so) };
      // Then the job runs on as picket would run it: the worker that took the claim over runs it,
      // a retry or a released job runs again, a claim nobody finishes is swept back first.
      const reruns = await finish(job.id, thief);
      runs.push(...reruns);
      report.outcome = output.outcome;
      report.reruns = reruns.map((run) => run.outcome);
      const endRow = (await getJob(db, job.id, so))!;
      const effect: EffectSeen | null =
        options.idempotent && baselineCompleted && endRow.status === "completed"
          ? {
              once: baselineEffect,
              here: await effectOf(options.idempotent, job.id, payload as P),
              job: { id: job.id, idempotencyKey: keyOf(job.id), payload },
              faults: describeFaults(scenario),
              runs: runs.map((run) => run.outcome),
              tablesRestored: options.restoreTables !== false,
            }
          : null;
      report.problems.push(
        ...judgePath({
          expectedStates: scenario.states,
          observedStates: distinctStates(observed.map((o) => o.state)),
          expectedOutcome: scenario.outcome,
          outcome: output.outcome,
          fault: scenario.fault,
          abortedOnLeavingRunning: abortedOnLeavingRunning(observed),
          fence: fenceSeen,
          rowBeforeWrite,
          claimedAttempts: claimed.attempts,
          finalRow,
          effect,
        }),
      );
      if (options.property) {
        try {
          await options.property({ db, path: scenario.name, job: { id: job.id, idempotencyKey: keyOf(job.id), payload: payload as P }, runs, row: endRow });
        } catch (error) {
          report.problems.push(`property: ${error instanceof Error ? error.message : String(error)}`);
        }
      }
    } catch (error) {
      report.problems.push(`the path could not be run: ${error instanceof Error ? error.message : String(error)}`);
    } finally {
      await retire(job.id);
    }
    if (report.problems.length > 0) report.status = "failed";
    return report;
  }

  return {
    task: task.name,
    baseline: { outcome: baselineRuns.at(-1)!.outcome, steps, ...(options.idempotent && baselineCompleted ? { effect: baselineEffect } : {}) },
    paths: reports,
    passed: reports.filter((r) => r.status === "passed").length,
    failed: reports.filter((r) => r.status === "failed").length,
    skipped: reports.filter((r) => r.status === "skipped").length,
  };
};

/** The report as text: one line per path, the problems of failed ones under them. */
export const formatReport = (report: CheckTaskReport): string =>
  [
    `checkTask("${report.task}"): ${report.passed} paths passed, ${report.failed} failed, ${report.skipped} skipped (the handler's clean run: ${report.baseline.outcome}, ${report.baseline.steps} step${report.baseline.steps === 1 ? "" : "s"})`,
    ...report.paths.flatMap((path) => [
      `  ${path.status === "passed" ? "ok  " : path.status === "failed" ? "FAIL" : "skip"} ${path.name}${path.reason ? ` (${path.reason})` : ""}`,
      ...path.problems.map((problem) => `         ${problem.replaceAll("\n", "\n         ")}`),
    ]),
  ].join("\n");
