// checkTask's walk, beyond the judgement of each path: the clean run it learns the handler from,
// what it hands a user's payload function, effect and property, which tables it puts back, the
// faults it injects (a crashed worker's handler runs no further), and the report it returns.
import { AssertionError } from "node:assert";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimJobs, enqueueJob, migrate } from "../src/db/index.ts";
import { createLogger } from "../src/runtime/logger.ts";
import { defineTask, type StandardSchema } from "../src/runtime/task.ts";
import { checkTask, formatReport, useTestDatabase, type CheckTaskReport } from "../src/testing/index.ts";
import { wantFor } from "../src/testing/run-jobs.ts";

const db = useTestDatabase({ beforeAll, afterAll });
const refusal = async (run: Promise<unknown>): Promise<Error> => run.then(() => new Error("it did not throw"), (e: unknown) => e as Error);

describe("the report", () => {
  it("counts the paths that passed, failed and were skipped, as listed", async () => {
    await db.pool.query("CREATE TABLE walk_charges (job_id bigint NOT NULL)");
    const careless = defineTask({
      name: "walk.careless",
      handler: async (_p, ctx) => {
        await db.pool.query("INSERT INTO walk_charges VALUES ($1)", [ctx.job.id]);
        await ctx.step("receipt", () => "sent");
      },
    });
    const effect = async ({ id }: { id: string }) => (await db.pool.query("SELECT count(*)::int AS n FROM walk_charges WHERE job_id = $1", [id])).rows[0].n;
    const report = await checkTask(careless, { db: db.pool, payload: {}, idempotent: { effect }, throwOnFailure: false });
    const count = (status: string) => report.paths.filter((p) => p.status === status).length;
    expect([report.passed, report.failed, report.skipped]).toEqual([count("passed"), count("failed"), count("skipped")]);
    expect(Math.min(report.passed, report.failed, report.skipped)).toBeGreaterThan(0);
    expect(report.passed + report.failed + report.skipped).toBe(report.paths.length);
    // A skipped path has a reason and no problem.
    expect(report.paths.filter((p) => p.status === "skipped").every((p) => p.reason !== undefined && p.problems.length === 0)).toBe(true);
    // Thrown, the report is an AssertionError an assertion library shows: its failed count against 0.
    const error = await refusal(checkTask(careless, { db: db.pool, payload: {}, idempotent: { effect }, only: (name) => name.includes("LEASE_LOST") }));
    expect(error).toBeInstanceOf(AssertionError);
    expect(error).toMatchObject({ operator: "checkTask", expected: 0 });
    expect((error as AssertionError).actual).toBeGreaterThan(0);
    expect(error.message.split("\n")[0]).toMatch(/^checkTask\("walk\.careless"\): \d+ paths passed, [1-9]\d* failed, 0 skipped \(the handler's clean run: completed, 1 step\)$/);
  });

  it("reads as one line a path, a failed path's problems under it", () => {
    const report: CheckTaskReport = {
      task: "t",
      baseline: { outcome: "completed", steps: 2 },
      paths: [
        { name: "t: a", status: "passed", problems: [] },
        { name: "t: b", status: "failed", problems: ["first\nsecond", "third"] },
        { name: "t: c", status: "skipped", reason: "the handler records no step (ctx.step)", problems: [] },
      ],
      passed: 1,
      failed: 1,
      skipped: 1,
    };
    expect(formatReport(report)).toBe(
      [
        `checkTask("t"): 1 paths passed, 1 failed, 1 skipped (the handler's clean run: completed, 2 steps)`,
        "  ok   t: a",
        "  FAIL t: b",
        "         first",
        "         second",
        "         third",
        "  skip t: c (the handler records no step (ctx.step))",
      ].join("\n"),
    );
    expect(formatReport({ ...report, baseline: { outcome: "dead", steps: 1 }, paths: [] }).split("\n")).toEqual([`checkTask("t"): 1 paths passed, 1 failed, 1 skipped (the handler's clean run: dead, 1 step)`]);
  });
});

describe("the clean run", () => {
  const walkNone = { only: () => false };

  it("counts the steps of the handler's first attempt only", async () => {
    // Fails its first attempt after one step; later attempts replay it and record a second.
    let calls = 0;
    const flaky = defineTask({
      name: "walk.flaky",
      maxAttempts: 3,
      handler: async (_p, ctx) => {
        await ctx.step("a", () => 1);
        if (++calls === 1) throw new Error("not yet");
        await ctx.step("b", () => 2);
      },
    });
    const report = await checkTask(flaky, { db: db.pool, payload: {}, ...walkNone });
    expect(report.baseline).toEqual({ outcome: "completed", steps: 1 });
  });

  it("takes a handler that always fails, and measures no effect when the job never completed", async () => {
    const failing = defineTask({ name: "walk.failing", maxAttempts: 2, handler: async () => Promise.reject(new Error("down")) });
    const report = await checkTask(failing, { db: db.pool, payload: {}, idempotent: { effect: () => 1 }, ...walkNone });
    expect(report.baseline).toEqual({ outcome: "dead", steps: 0 });
    expect(report.baseline).not.toHaveProperty("effect");
  });

  it("refuses a handler that ends neither way on its own, saying how it ended", async () => {
    const sleepy = defineTask({ name: "walk.sleepy", timeoutMs: 50, handler: (_p, ctx) => new Promise((_resolve, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason))) });
    const error = await refusal(checkTask(sleepy, { db: db.pool, payload: {} }));
    expect(error.message).toMatch(/^picket\/testing: the first clean run of "walk\.sleepy" ended retried \(timeout: .+\); checkTask needs a handler that completes or fails on its own with the sample payload\.$/);
  });

  it("refuses options without a database as it refuses a database that is not a pool", async () => {
    const task = defineTask({ name: "walk.no-db", handler: () => 1 });
    const error = await refusal(checkTask(task, { payload: {} } as never));
    expect(error.message).toBe("picket/testing: checkTask needs { db: pg.Pool } (the test database's pool).");
  });

  it("refuses a task with a job being processed, as one with a pending job", async () => {
    const held = defineTask({ name: "walk.held", handler: () => 1 });
    await enqueueJob(db.pool, { type: "walk.held" });
    expect(await claimJobs(db.pool, "walk-test", [wantFor(held)])).toHaveLength(1);
    const error = await refusal(checkTask(held, { db: db.pool, payload: {} }));
    expect(error.message).toMatch(/job \d+ of that type is processing/);
  });

  it("hands the payload function the clean run as baseline, then each path its index in order", async () => {
    const asked: Array<[number, string]> = [];
    const task = defineTask<{ n: number }>({ name: "walk.payloads", handler: async () => undefined });
    await checkTask(task, { db: db.pool, payload: ({ index, name }) => (asked.push([index, name]), { n: index }), only: (name) => name.includes("CANCEL") || name.includes("LEASE_LOST") });
    expect(asked[0]).toEqual([-1, "baseline"]);
    expect(asked.slice(1).map(([index]) => index)).toEqual(asked.slice(1).map((_, i) => i));
    expect(asked.length).toBeGreaterThan(3);
  });
});

describe("the walk", () => {
  it("lets a handler go on after a lost lease, and runs nothing more of a crashed worker's", async () => {
    // How many times each job's handler got past its step.
    const past = new Map<string, number>();
    const task = defineTask({
      name: "walk.crash",
      handler: async (_p, ctx) => {
        await ctx.step("one", () => 1);
        past.set(ctx.job.id, (past.get(ctx.job.id) ?? 0) + 1);
      },
    });
    const jobs = new Map<string, string>();
    const report = await checkTask(task, { db: db.pool, payload: {}, only: (name) => name.includes("STEP_RECORDED > LEASE_LOST => fenced"), property: ({ path, job }) => void jobs.set(path, job.id) });
    expect(report.failed).toBe(0);
    const byPath = Object.fromEntries([...jobs].map(([path, id]) => [path.replace(/^.*\[/, "["), past.get(id)]));
    // The handler that lost its lease went on past its step, and the worker that took over ran it again.
    expect(byPath).toEqual({ "[after step 1; the handler goes on]": 2, "[crash after step 1: the worker is gone]": 1 });
  });

  it("finishes a job taken over on the worker that took it: its claim is run, not swept and charged again", async () => {
    const rows: Array<{ attempts: number; errors: number; runs: string[] }> = [];
    const task = defineTask({ name: "walk.takeover", handler: async (_p, ctx) => void (await ctx.step("one", () => 1)) });
    const report = await checkTask(task, {
      db: db.pool,
      payload: {},
      only: (name) => name.includes("STEP_RECORDED > LEASE_LOST => fenced"),
      property: ({ row, runs }) => void rows.push({ attempts: row.attempts, errors: row.errors.length, runs: runs.map((r) => r.outcome) }),
    });
    expect(report.failed).toBe(0);
    // Two claims (the lost one, the other worker's), the one lease that expired in the history, two runs.
    expect(rows).toEqual([
      { attempts: 2, errors: 1, runs: ["fenced", "completed"] },
      { attempts: 2, errors: 1, runs: ["fenced", "completed"] },
    ]);
  });

  it("walks a task whose attempts outlast its runs: the clean run's job is cancelled, each path's job runs to its end", async () => {
    const runsOf: number[] = [];
    const hopeless = defineTask({ name: "walk.hopeless", maxAttempts: 50, backoff: { baseMs: 0, maxMs: 0 }, handler: async () => Promise.reject(new Error("never")) });
    const report = await checkTask(hopeless, {
      db: db.pool,
      payload: {},
      throwOnFailure: false,
      only: (name) => name.endsWith(": error:handler > done:write(pending) => done"),
      property: ({ runs }) => void runsOf.push(runs.length),
    });
    expect(report).toMatchObject({ baseline: { outcome: "retried" }, passed: 1, failed: 0 });
    // The clean run stopped after checkTask's 20 runs, its job still pending: cancelled, so the path
    // claimed its own job. A path's job may take 20 attempts, and ran them all.
    expect(runsOf).toEqual([20]);
    const statuses = (await db.pool.query("SELECT status FROM picket.jobs WHERE type = 'walk.hopeless' ORDER BY id")).rows.map((r) => r.status);
    expect(statuses).toEqual(["cancelled", "dead"]);
  });

  it("says a path could not be run when another job of the task turns up, naming both", async () => {
    // A handler that enqueues another job of its own task the second time it runs.
    let calls = 0;
    const task = defineTask({
      name: "walk.breeds",
      handler: async () => {
        if (++calls === 2) await enqueueJob(db.pool, { type: "walk.breeds" });
      },
    });
    const report = await checkTask(task, {
      db: db.pool,
      payload: {},
      throwOnFailure: false,
      only: (name) => name.endsWith(": done:handler > done:write(completed) => done") || name.endsWith(": done:handler > done:write(fenced) => fenced"),
    });
    const [first, second] = report.paths.filter((p) => p.status !== "skipped");
    // The first path's job ran and bred; the second path claims the bred job instead of its own.
    expect(first).toMatchObject({ status: "passed" });
    expect(second!.problems).toEqual([expect.stringMatching(/^the path could not be run: picket\/testing: expected to claim job \d+ of "walk\.breeds", got \d+$/)]);
    expect(second!.status).toBe("failed");
  });

  it("says which job it claimed instead when another of the task is due while it finishes a path's job", async () => {
    let calls = 0;
    const task = defineTask({
      name: "walk.breeds-later",
      handler: async (_p, ctx) => {
        // The path's run (the second) enqueues another job, then fails: the job is retried, and
        // the other one is due first.
        if (++calls === 2) {
          await enqueueJob(db.pool, { type: "walk.breeds-later" });
          await new Promise((resolve) => setTimeout(resolve, 20));
          throw new Error("once");
        }
        return ctx.job.id;
      },
    });
    const report = await checkTask(task, { db: db.pool, payload: {}, throwOnFailure: false, only: (name) => name.endsWith(": timeout > done:write(pending) => done [at the handler's start]") });
    const [path] = report.paths.filter((p) => p.status !== "skipped");
    expect(path!.problems).toEqual([
      expect.stringMatching(/^the path could not be run: picket\/testing: claimed job \d+ of "walk\.breeds-later" while checking job \d+; another job of the task was enqueued meanwhile\.$/),
    ]);
  });

  it("gives a property the job as the handler saw it, and names a property that throws", async () => {
    const seen: Array<{ key: string; payload: unknown; status: string }> = [];
    const task = defineTask<{ order: string }>({ name: "walk.property", handler: async (_p, ctx) => ctx.idempotencyKey });
    const report = await checkTask(task, {
      db: db.pool,
      payload: { order: "o-1" },
      only: (name) => name.endsWith("done:handler > done:write(completed) => done") || name.includes("CANCEL"),
      throwOnFailure: false,
      property: ({ job, row }) => {
        seen.push({ key: job.idempotencyKey, payload: job.payload, status: row.status });
        if (row.status === "completed") expect(row.result).toBe(job.idempotencyKey);
        if (row.status === "cancelled") throw new Error("cancelled jobs are not allowed here");
      },
    });
    expect(seen.length).toBeGreaterThan(1);
    for (const s of seen) expect(s).toMatchObject({ key: expect.stringMatching(/^picket:picket:\d+$/), payload: { order: "o-1" } });
    const cancelled = report.paths.filter((p) => p.name.includes("CANCEL") && p.status !== "skipped");
    expect(cancelled.length).toBeGreaterThan(0);
    for (const p of cancelled) expect(p).toMatchObject({ status: "failed", problems: ["property: cancelled jobs are not allowed here"] });
    expect(report.paths.find((p) => p.name.endsWith("done:write(completed) => done"))).toMatchObject({ status: "passed", problems: [] });
  });

  const schema: StandardSchema<{ to: string }> = {
    "~standard": {
      version: 1,
      vendor: "walk",
      validate: (value) => (typeof (value as { to?: unknown })?.to === "string" ? { value: value as { to: string } } : { issues: [{ message: "to must be a string", path: ["to"] }] }),
    },
  };

  it("dead-letters the invalid payload given, with the schema's words, on each write the refusal can meet", async () => {
    const rows: Array<{ path: string; payload: unknown; lastError: string | null; status: string }> = [];
    const task = defineTask({ name: "walk.invalid", schema, handler: async () => "sent" });
    const report = await checkTask(task, {
      db: db.pool,
      payload: { to: "x" },
      invalidPayload: { to: 7 },
      only: (name) => name.includes("error:payloadCheck"),
      property: ({ path, job, row }) => void rows.push({ path, payload: job.payload, lastError: row.lastError, status: row.status }),
    });
    expect(report.passed).toBe(4);
    const dead = rows.find((r) => r.path.endsWith("error:payloadCheck > done:write(dead) => done"));
    expect(dead).toMatchObject({ payload: { to: 7 }, status: "dead" });
    expect(dead!.lastError).toContain("to must be a string");
    // The refusal met a failing write: the job was left for the sweep, then dead-lettered with the same words.
    expect(rows.find((r) => r.path.endsWith("error:payloadCheck > error:write => abandoned"))!.lastError).toContain("to must be a string");
  });

  it("skips the invalid-payload paths when the schema accepts the payload said to be invalid", async () => {
    const task = defineTask({ name: "walk.accepts", schema, handler: async () => "sent" });
    const report = await checkTask(task, { db: db.pool, payload: { to: "x" }, invalidPayload: { to: "y" }, only: (name) => name.includes("error:payloadCheck > done:write(dead)") });
    expect(report.paths).toEqual([
      {
        name: "walk.accepts: error:payloadCheck > done:write(dead) => done",
        status: "skipped",
        expected: "dead",
        outcome: "completed",
        reason: 'the task accepts invalidPayload {"to":"y"}; pass one its schema refuses',
        problems: [],
      },
    ]);
  });

  it("leaves its jobs for inspection, puts back only the user's tables, and drops its copy", async () => {
    await db.pool.query("CREATE TABLE walk_notes (note text NOT NULL)");
    const task = defineTask({ name: "walk.notes", handler: async () => void (await db.pool.query("INSERT INTO walk_notes VALUES ('x')")) });
    await checkTask(task, { db: db.pool, payload: {}, only: (name) => name.includes("CANCEL") });
    expect((await db.pool.query("SELECT count(*)::int AS n FROM walk_notes")).rows[0].n).toBe(0);
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'walk.notes'")).rows[0].n).toBeGreaterThan(1);
    expect((await db.pool.query("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'picket_check_%'")).rows).toEqual([]);
  });

  it("works in a schema of the user's choosing, and logs through the logger given", async () => {
    await migrate(db.pool, { schema: "walk_schema" });
    const lines: Array<{ job_id?: string }> = [];
    const destination = new Writable({ write: (chunk, _enc, done) => (lines.push(JSON.parse(String(chunk))), done()) });
    const task = defineTask({ name: "walk.elsewhere", handler: async (_p, ctx) => ctx.idempotencyKey });
    // A live job of the task in that schema is found there.
    const live = await enqueueJob(db.pool, { type: "walk.elsewhere" }, { schema: "walk_schema" });
    expect((await refusal(checkTask(task, { db: db.pool, payload: {}, schema: "walk_schema" }))).message).toMatch(/job \d+ of that type is pending/);
    await db.pool.query("DELETE FROM walk_schema.jobs WHERE id = $1", [live.id]);
    const ids: string[] = [];
    const report = await checkTask(task, {
      db: db.pool,
      payload: {},
      schema: "walk_schema",
      logger: createLogger({ level: "trace", destination }),
      only: (name) => name.endsWith("done:handler > done:write(completed) => done"),
      property: ({ job, row }) => (ids.push(job.id), expect(row.result).toBe(`picket:walk_schema:${job.id}`)),
    });
    expect(report).toMatchObject({ passed: 1, failed: 0 });
    expect((await db.pool.query("SELECT count(*)::int AS n FROM walk_schema.jobs WHERE type = 'walk.elsewhere'")).rows[0].n).toBe(2);
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'walk.elsewhere'")).rows[0].n).toBe(0);
    // Lines of the clean run's job and of the path's, through the logger given.
    const logged = new Set(lines.map((l) => l.job_id).filter((id) => id !== undefined));
    expect(logged.size).toBe(2);
    expect(logged.has(ids[0]!)).toBe(true);
  });
});
