// ctx.step(name, fn): a named piece of a handler whose result is recorded under the job's claim,
// so that a later attempt of the same job gets the result back instead of running fn again.
import * as Effect from "effect/Effect";
import { checkStepName, jobSteps, recordStep, type ClaimedJob, type Queryable, type StatementOptions } from "../db/index.ts";
import { dbWrite } from "./db-write.ts";

/** A step's result could not be recorded because the run no longer holds the job. */
export class StepFencedError extends Error {
  override readonly name = "StepFencedError";
}

export interface StepDeps {
  db: Queryable;
  statements: StatementOptions & { schema: string };
  /** The step's result was written under the claim. */
  recorded: (job: ClaimedJob, name: string) => void;
  /** The step write found the claim lost (the run must stop). */
  leaseLost: (job: ClaimedJob) => void;
  /** The step write found the job cancelled under its claim (the run must stop). */
  cancelled: (job: ClaimedJob) => void;
}


/** The `step` function of one run's handler context. */
export const stepsFor = (deps: StepDeps, job: ClaimedJob, signal: AbortSignal) => {
  // Every step this job recorded, in any attempt: read once per run, when the first step is asked for.
  let recorded: Promise<Map<string, unknown>> | undefined;
  // A name asked for twice in one run (even concurrently) runs its function once.
  const started = new Map<string, Promise<unknown>>();

  // A transient error (a restart, a dropped connection, a statement past its bound) or a row another
  // session holds is retried, as an outcome write is, while the handler may run: the step's work is
  // done, and losing its record would mean doing it again.
  const record = (name: string, result: unknown) =>
    Effect.runPromise(
      dbWrite(() => recordStep(deps.db, { id: job.id, token: job.claimToken }, { name, result, attempt: job.attempts }, deps.statements)),
      { signal },
    );

  const run = async <T>(name: string, fn: () => T | Promise<T>): Promise<T> => {
    recorded ??= jobSteps(deps.db, job.id, deps.statements).then((steps) => new Map(steps.map((s) => [s.name, s.result])));
    const known = await recorded;
    if (known.has(name)) return known.get(name) as T;
    signal.throwIfAborted();
    const result = await fn();
    // Recorded even when the run was interrupted meanwhile: the work is done, and the fence
    // decides whether this run may still say so.
    const write = await record(name, result);
    switch (write.outcome) {
      case "recorded":
        deps.recorded(job, name);
        return result;
      case "exists": {
        // Recorded under this claim by a call this run did not make (another process holding the
        // same claim cannot exist; a step of an earlier run is read at the start): the record wins.
        const steps = await jobSteps(deps.db, job.id, deps.statements);
        const step = steps.find((s) => s.name === name);
        return (step === undefined ? result : step.result) as T;
      }
      case "cancelled":
        deps.cancelled(job);
        throw new StepFencedError(`picket: step "${name}" of job ${job.id} was not recorded: the job was cancelled.`);
      case "fenced":
        deps.leaseLost(job);
        throw new StepFencedError(
          `picket: step "${name}" of job ${job.id} was not recorded: this run's claim was lost (the job was reclaimed or finished elsewhere); the run is stopped.`,
        );
    }
  };

  return <T>(name: string, fn: () => T | Promise<T>): Promise<T> => {
    try {
      checkStepName(name);
      if (typeof fn !== "function") throw new TypeError(`picket: step "${name}" needs a function to run (got ${typeof fn}).`);
    } catch (error) {
      return Promise.reject(error);
    }
    let running = started.get(name);
    if (running === undefined) {
      running = run(name, fn);
      started.set(name, running);
    }
    return running as Promise<T>;
  };
};
