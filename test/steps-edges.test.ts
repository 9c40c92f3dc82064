// ctx.step's outcomes one by one, with stepsFor called directly on a claimed job: a step recorded
// under the claim by a call this run did not make, the job cancelled or reclaimed while the step's
// function ran, and the refusals of a bad name or function.
import { describe, expect, it, vi } from "vitest";
import { cancelJob, checkStepName, completeJobs, failJobs, InvalidJobError, jobSteps, recordStep } from "../src/db/index.ts";
import { StepFencedError, stepsFor, type StepDeps } from "../src/runtime/steps.ts";
import { useTestDatabase } from "./support/db.ts";
import { refusalOf, rejectionOf } from "./support/errors.ts";
import { claimed } from "./support/factory.ts";

const db = useTestDatabase();

const stepOf = async (type: string) => {
  const [job] = await claimed(db.pool, type);
  const deps = { db: db.pool, statements: { schema: "picket" }, recorded: vi.fn(), leaseLost: vi.fn(), cancelled: vi.fn() } satisfies StepDeps;
  return { job: job!, deps, step: stepsFor(deps, job!, new AbortController().signal) };
};

describe("a step's outcomes", () => {
  it("returns its function's result once recorded, says so, and is not run again by the job's next run", async () => {
    const { job, deps, step } = await stepOf("step-recorded");
    expect(await step("charge", async () => ({ charged: 5 }))).toEqual({ charged: 5 });
    expect(deps.recorded).toHaveBeenCalledWith(job, "charge");
    const again = vi.fn(async () => ({ charged: 6 }));
    expect(await stepsFor(deps, job, new AbortController().signal)("charge", again)).toEqual({ charged: 5 });
    expect(again).not.toHaveBeenCalled();
  });

  it("runs nothing once the run was interrupted", async () => {
    const { deps, job } = await stepOf("step-aborted");
    const controller = new AbortController();
    controller.abort(new Error("the run timed out"));
    const run = vi.fn();
    expect((await rejectionOf(stepsFor(deps, job, controller.signal)("late", run))).message).toBe("the run timed out");
    expect(run).not.toHaveBeenCalled();
  });

  it("returns the record a call this run did not make wrote under the same claim, not its own result", async () => {
    const { job, deps, step } = await stepOf("step-exists");
    const result = await step("charge", async () => {
      await recordStep(db.pool, { id: job.id, token: job.claimToken }, { name: "other", result: "unrelated", attempt: job.attempts });
      await recordStep(db.pool, { id: job.id, token: job.claimToken }, { name: "charge", result: "recorded first", attempt: job.attempts });
      return "this call's";
    });
    expect(result).toBe("recorded first");
    expect(deps.recorded).not.toHaveBeenCalled();
  });

  it("stops the run when the job was cancelled while the step ran, saying so", async () => {
    const { job, deps, step } = await stepOf("step-cancelled");
    const error = await rejectionOf(
      step("ship", async () => {
        await cancelJob(db.pool, job.id);
        return 1;
      }),
    );
    expect(error).toBeInstanceOf(StepFencedError);
    expect(error.name).toBe("StepFencedError");
    expect(error.message).toBe(`picket: step "ship" of job ${job.id} was not recorded: the job was cancelled.`);
    expect(deps.cancelled).toHaveBeenCalledWith(job);
    expect(deps.leaseLost).not.toHaveBeenCalled();
    expect(await jobSteps(db.pool, job.id)).toEqual([]);
  });

  it("stops the run when another claim took the job while the step ran, saying so", async () => {
    const { job, deps, step } = await stepOf("step-fenced");
    const error = await rejectionOf(
      step("ship", async () => {
        await db.pool.query("UPDATE picket.jobs SET claim_token = gen_random_uuid() WHERE id = $1", [job.id]);
        return 1;
      }),
    );
    expect(error).toBeInstanceOf(StepFencedError);
    expect(error.message).toBe(
      `picket: step "ship" of job ${job.id} was not recorded: this run's claim was lost (the job was reclaimed or finished elsewhere); the run is stopped.`,
    );
    expect(deps.leaseLost).toHaveBeenCalledWith(job);
    expect(deps.cancelled).not.toHaveBeenCalled();
  });

  it("reports a step write that arrives after its own run finished the job as fenced, not cancelled", async () => {
    // A handler that started a step without awaiting it and returned (or threw): the outcome was written first.
    for (const finish of ["complete", "fail"] as const) {
      const { job } = await stepOf(`step-after-${finish}`);
      const claim = { id: job.id, token: job.claimToken };
      if (finish === "complete") await completeJobs(db.pool, [claim]);
      else await failJobs(db.pool, [{ ...claim, error: "boom" }]);
      expect(await recordStep(db.pool, claim, { name: "late", result: 1, attempt: job.attempts })).toEqual({ outcome: "fenced" });
    }
  });

  it("refuses a step without a function, and a bad name, before running anything", async () => {
    const { job, step } = await stepOf("step-refused");
    const error = await rejectionOf(step("x", 5 as never));
    expect(error).toBeInstanceOf(TypeError);
    expect(error.message).toBe('picket: step "x" needs a function to run (got number).');
    const run = vi.fn();
    expect(await rejectionOf(step("", run))).toBeInstanceOf(InvalidJobError);
    expect(run).not.toHaveBeenCalled();
    expect(await jobSteps(db.pool, job.id)).toEqual([]);
  });
});

describe("checkStepName", () => {
  it("shows what it was given, at most 40 characters of it", () => {
    const message = (fn: () => unknown) => refusalOf(fn, InvalidJobError);
    expect(message(() => checkStepName(5))).toBe("picket: a step name must be a string of 1 to 200 characters (got 5).");
    expect(message(() => checkStepName(""))).toBe('picket: a step name must be a string of 1 to 200 characters (got "").');
    expect(message(() => checkStepName("n".repeat(201)))).toBe(`picket: a step name must be a string of 1 to 200 characters (got "${"n".repeat(40)}").`);
    expect(message(() => checkStepName(`${"n".repeat(45)}\u0000`))).toMatch(new RegExp(`^picket: step name "${"n".repeat(40)}" contains a NUL character`));
    expect(checkStepName("n".repeat(200))).toBe("n".repeat(200));
  });
});
