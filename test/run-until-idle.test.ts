// picket/testing's runUntilIdle at its edges: another schema, a job cancelled or taken while its
// handler runs (found by its next step write, as a worker's runtime finds them), and the options it
// refuses. test/testing-kit.test.ts holds its ordinary use.
import { describe, expect, it } from "vitest";
import { cancelJob, enqueueJob, InvalidConfigError, migrate } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { runUntilIdle } from "../src/testing/run-jobs.ts";
import { useTestDatabase } from "./support/db.ts";
import { rejectionOf } from "./support/errors.ts";

const db = useTestDatabase();

describe("runUntilIdle", () => {
  it("runs the jobs of the schema it is given, and reads their results from there", async () => {
    const schema = "kit_run_elsewhere";
    await migrate(db.pool, { schema });
    const task = defineTask<{ n: number }>({ name: "run-elsewhere", handler: async ({ n }, { step }) => step("double", () => n * 2) });
    await enqueueJob(db.pool, { type: "run-elsewhere", payload: { n: 21 } }, { schema });
    await enqueueJob(db.pool, { type: "run-elsewhere", payload: { n: 1 } });
    expect(await runUntilIdle({ db: db.pool, tasks: [task], schema })).toEqual([expect.objectContaining({ outcome: "completed", result: 42, error: null })]);
    // The job in picket's own schema was left alone.
    expect((await db.pool.query("SELECT status FROM picket.jobs WHERE type = 'run-elsewhere'")).rows).toEqual([{ status: "pending" }]);
  });

  it("ends a job cancelled while its handler runs as cancelled, and one whose claim was taken as fenced, when a step write finds out", async () => {
    const cancelled = defineTask({
      name: "run-cancelled",
      handler: async (_p, { job, step }) => {
        await cancelJob(db.pool, job.id);
        await step("after the cancel", () => "never recorded");
      },
    });
    const taken = defineTask({
      name: "run-taken",
      handler: async (_p, { job, step }) => {
        await db.pool.query("UPDATE picket.jobs SET claim_token = gen_random_uuid() WHERE id = $1", [job.id]);
        await step("after the loss", () => "never recorded");
      },
    });
    await enqueueJob(db.pool, { type: "run-cancelled" });
    await enqueueJob(db.pool, { type: "run-taken" });
    // Two tasks with a job due each: both run (a claim of one per task once ran the first and held
    // the second, claimed and never run, until its lease ran out).
    const results = await runUntilIdle({ db: db.pool, tasks: [cancelled, taken] });
    expect(results.map((r) => [r.type, r.outcome])).toEqual([["run-cancelled", "cancelled"], ["run-taken", "fenced"]]);
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.job_steps")).rows[0].n).toBe(0);
  });

  it("refuses a maxJobs that is no integer ≥ 1, saying so", async () => {
    const task = defineTask({ name: "run-refused", handler: async () => undefined });
    for (const maxJobs of [0, 1.5, -3]) {
      const error = await rejectionOf(runUntilIdle({ db: db.pool, tasks: [task], maxJobs }));
      expect(error).toBeInstanceOf(InvalidConfigError);
      expect((error as Error).message).toBe(`picket/testing: runUntilIdle's maxJobs must be an integer ≥ 1 (got ${maxJobs}).`);
    }
  });
});
