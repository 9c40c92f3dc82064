// picket/testing, tested with itself: its database per file, runUntilIdle, expectEnqueued and
// checkTask, which must fail a task that is not idempotent and pass one that is.
import { AssertionError } from "node:assert";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { enqueueJob, enqueueJobs, getJob, InvalidConfigError, type Job } from "../src/db/index.ts";
import { defineTask, PermanentError, type StandardSchema } from "../src/runtime/task.ts";
import {
  checkTask,
  createTestDatabase,
  expectEnqueued,
  formatReport,
  judgePath,
  matchesPartially,
  runUntilIdle,
  useTestDatabase,
  type PathObservation,
} from "../src/testing/index.ts";

const db = useTestDatabase({ beforeAll, afterAll });

describe("a database per test file", () => {
  it("is a fresh database, migrated from the run's template", async () => {
    expect(db.name).toMatch(/^picket_test_[0-9a-f]{12}$/);
    const { rows } = await db.pool.query("SELECT current_database() AS name, to_regclass('picket.jobs') IS NOT NULL AS migrated");
    expect(rows[0]).toEqual({ name: db.name, migrated: true });
  });

  it("gives every caller its own database, and drop() removes it", async () => {
    const other = await createTestDatabase();
    expect(other.name).not.toBe(db.name);
    await enqueueJob(other.pool, { type: "only-there" });
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'only-there'")).rows[0].n).toBe(0);
    await other.drop();
    const { rows } = await db.pool.query("SELECT count(*)::int AS n FROM pg_database WHERE datname = $1", [other.name]);
    expect(rows[0].n).toBe(0);
  });
});

const runNodeTest = async (args: string[], env: NodeJS.ProcessEnv) => {
  try {
    const { stdout } = await promisify(execFile)(process.execPath, ["--test", ...args], { env, timeout: 240_000 });
    return { code: 0, stdout };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? 1, stdout: `${e.stdout ?? ""}${e.stderr ?? ""}` };
  }
};

describe("the database under node:test", { tags: ["spawns"] }, () => {
  // Without the run's server in the environment: no DATABASE_URL, no PICKET_TEST_* variables.
  const { DATABASE_URL: _url, PICKET_TEST_ADMIN_URL: _admin, PICKET_TEST_TEMPLATE: _template, ...bare } = process.env;

  it("uses the run's server when a global set-up started one (this run's)", async () => {
    expect(new URL(db.url).port).toBe(new URL(inject("adminUrl")).port);
    const { code, stdout } = await runNodeTest(["test/fixtures/kit-node-test.ts"], process.env);
    expect(stdout).toContain(`kit-node-test port=${new URL(inject("adminUrl")).port} template=${inject("templateDatabase")}`);
    expect(code, stdout).toBe(0);
  }, 240_000);

  it("starts a server through node's --test-global-setup, and hands it to the test files", async () => {
    const { code, stdout } = await runNodeTest(["--test-global-setup=src/testing/global-setup.ts", "test/fixtures/kit-node-test.ts"], bare);
    expect(stdout).toMatch(/kit-node-test port=\d+ template=picket_template_\d+_[0-9a-f]{6}\n/);
    expect(stdout).not.toContain(`port=${new URL(inject("adminUrl")).port} `);
    expect(code, stdout).toBe(0);
  }, 240_000);

  it("with no set-up at all, starts a server for the file and stops it after", async () => {
    const { code, stdout } = await runNodeTest(["test/fixtures/kit-node-test.ts"], bare);
    expect(stdout).toMatch(/kit-node-test port=\d+ template=none\n/);
    expect(code, stdout).toBe(0);
    // Its server went with its last database: nothing listens on its port any more.
    const port = Number(/port=(\d+)/.exec(stdout)![1]);
    const probe = new pg.Client({ host: "127.0.0.1", port, user: "postgres", database: "postgres", connectionTimeoutMillis: 5_000 });
    await expect(probe.connect()).rejects.toThrow(/ECONNREFUSED/);
  }, 240_000);

  it("runs the worked example under node:test", async () => {
    const { code, stdout } = await runNodeTest(["examples/testing/signup.node-test.ts"], process.env);
    expect(stdout).toMatch(/checkTask: \d+ paths passed/);
    expect(code, stdout).toBe(0);
  }, 240_000);
});

describe("runUntilIdle", () => {
  it("runs every due job of the given tasks through the runtime, and leaves the rest", async () => {
    const seen: unknown[] = [];
    const square = defineTask<{ n: number }, number>({ name: "kit.square", handler: async ({ n }) => (seen.push(n), n * n) });
    await enqueueJobs(db.pool, [
      { type: "kit.square", payload: { n: 2 } },
      { type: "kit.square", payload: { n: 3 } },
      { type: "kit.square", payload: { n: 4 }, delayMs: 10 * 60_000 },
      { type: "kit.not-given", payload: {} },
    ]);
    const runs = await runUntilIdle({ db: db.pool, tasks: [square] });
    expect(runs.map(({ type, outcome, result, error, attempt }) => ({ type, outcome, result, error, attempt }))).toEqual([
      { type: "kit.square", outcome: "completed", result: 4, error: null, attempt: 1 },
      { type: "kit.square", outcome: "completed", result: 9, error: null, attempt: 1 },
    ]);
    expect(seen).toEqual([2, 3]);
    expect((await db.pool.query("SELECT status FROM picket.jobs WHERE type = 'kit.not-given'")).rows).toEqual([{ status: "pending" }]);
    // Time travel: the delayed job is due within 15 minutes, so it runs now.
    expect(await runUntilIdle({ db: db.pool, tasks: [square], advance: 5 * 60_000 })).toEqual([]);
    // A job further out than the advance stays where it was.
    const { rows } = await db.pool.query("SELECT run_at > now() + interval '9 minutes' AS untouched FROM picket.jobs WHERE type = 'kit.square' AND status = 'pending'");
    expect(rows).toEqual([{ untouched: true }]);
    const later = await runUntilIdle({ db: db.pool, tasks: [square], advance: 15 * 60_000 });
    expect(later.map((r) => r.result)).toEqual([16]);
  });

  it("travels past a retry's backoff, and reports each attempt", async () => {
    let calls = 0;
    const flaky = defineTask({
      name: "kit.flaky",
      backoff: { baseMs: 60_000, maxMs: 60_000 },
      handler: async () => {
        if (++calls === 1) throw new Error("first time fails");
        return "ok";
      },
    });
    const job = await enqueueJob(db.pool, { type: "kit.flaky" });
    const first = await runUntilIdle({ db: db.pool, tasks: [flaky] });
    expect(first).toEqual([{ id: job.id, type: "kit.flaky", attempt: 1, outcome: "retried", result: null, error: "error: first time fails" }]);
    const row = (await getJob(db.pool, job.id))!;
    expect(row.status).toBe("pending");
    const second = await runUntilIdle({ db: db.pool, tasks: [flaky], advance: 2 * 60_000 });
    expect(second).toEqual([{ id: job.id, type: "kit.flaky", attempt: 2, outcome: "completed", result: "ok", error: null }]);
  });

  it("applies the task's timeout: the handler's signal aborts and the attempt is retried", async () => {
    let aborted = false;
    const slow = defineTask({
      name: "kit.slow",
      timeoutMs: 100,
      handler: (_p, { signal }) =>
        new Promise((_resolve, reject) =>
          signal.addEventListener("abort", () => {
            aborted = true;
            reject(new Error("stopped"));
          }),
        ),
    });
    await enqueueJob(db.pool, { type: "kit.slow" });
    const [run] = await runUntilIdle({ db: db.pool, tasks: [slow] });
    expect(run).toMatchObject({ outcome: "retried", error: expect.stringMatching(/^timeout: /) });
    expect(aborted).toBe(true);
  });

  it("runs the jobs a job enqueues, and stops a task that enqueues itself forever", async () => {
    const follow = defineTask({ name: "kit.follow", handler: async () => "followed" });
    const lead = defineTask({ name: "kit.lead", handler: async () => (await enqueueJob(db.pool, { type: "kit.follow" }), "led") });
    await enqueueJob(db.pool, { type: "kit.lead" });
    const runs = await runUntilIdle({ db: db.pool, tasks: [lead, follow] });
    expect(runs.map((r) => [r.type, r.result])).toEqual([["kit.lead", "led"], ["kit.follow", "followed"]]);

    const forever = defineTask({ name: "kit.forever", handler: async () => void (await enqueueJob(db.pool, { type: "kit.forever" })) });
    await enqueueJob(db.pool, { type: "kit.forever" });
    await expect(runUntilIdle({ db: db.pool, tasks: [forever], maxJobs: 5 })).rejects.toThrow(/ran 5 jobs and job \d+ \(kit\.forever\) is still due/);
  });

  it("refuses bad options clearly", async () => {
    await expect(runUntilIdle({ db: db.pool, tasks: [] })).rejects.toThrow(/needs the tasks/);
    await expect(runUntilIdle({ db: db.pool, tasks: [defineTask({ name: "kit.x", handler: () => 1 })], advance: -1 })).rejects.toThrow(/advance must be/);
  });
});

describe("expectEnqueued", () => {
  const signUp = async (email: string) => {
    await enqueueJob(db.pool, { type: "kit.welcome", payload: { email, locale: "en", tags: ["new"] } });
  };

  it("matches type, a partial payload and a count, and returns the jobs", async () => {
    await signUp("a@example.com");
    await signUp("b@example.com");
    const jobs: Job[] = await expectEnqueued(db.pool, { type: "kit.welcome", payload: { email: "a@example.com" } });
    expect(jobs.map((j) => j.payload)).toEqual([{ email: "a@example.com", locale: "en", tags: ["new"] }]);
    await expectEnqueued(db.pool, { type: "kit.welcome", count: 2 });
    await expectEnqueued(db.pool, { type: "kit.welcome", payload: { locale: "en" }, count: 2 });
    await expectEnqueued(db.pool, { type: "kit.welcome", payload: { email: "nobody@example.com" }, count: 0 });
  });

  it("fails with a message that lists what was enqueued", async () => {
    const failure = await expectEnqueued(db.pool, { type: "kit.welcome", payload: { email: "c@example.com" } }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(AssertionError);
    const message = (failure as Error).message;
    expect(message).toContain('expected at least one job of type "kit.welcome" with a payload matching {"email":"c@example.com"} in status pending; found 0.');
    expect(message).toMatch(/Jobs of type "kit.welcome" in status pending \(2\):\n  #\d+ kit\.welcome pending payload \{.*"email":"a@example\.com".*\}\n  #\d+ kit\.welcome pending payload \{.*"email":"b@example\.com".*\}$/);
    await expect(expectEnqueued(db.pool, { type: "kit.welcome", count: 3 })).rejects.toThrow(/expected 3 jobs of type "kit.welcome" in status pending; found 2/);
    // No job of the type at all: the jobs of other types are listed instead.
    await expect(expectEnqueued(db.pool, { type: "kit.welcom" })).rejects.toThrow(/No job of that type; the jobs there are[\s\S]*kit\.welcome pending/);
  });

  it("matches payloads partially: objects by their given fields, arrays element by element", () => {
    expect(matchesPartially({ a: 1, b: { c: 2, d: 3 } }, { b: { c: 2 } })).toBe(true);
    expect(matchesPartially({ a: 1 }, { a: 2 })).toBe(false);
    expect(matchesPartially({ a: 1 }, { b: undefined })).toBe(false);
    expect(matchesPartially([{ a: 1, b: 2 }], [{ a: 1 }])).toBe(true);
    expect(matchesPartially([1, 2], [1])).toBe(false);
    expect(matchesPartially("x", "x")).toBe(true);
    expect(matchesPartially(null, {})).toBe(false);
  });
});

describe("checkTask", () => {
  beforeAll(async () => {
    await db.pool.query("CREATE TABLE charges (job_id bigint PRIMARY KEY, times int NOT NULL)");
  });
  // What a job did to the world: how many times it charged.
  const charge = (jobId: string) =>
    db.pool.query("INSERT INTO charges VALUES ($1, 1) ON CONFLICT (job_id) DO UPDATE SET times = charges.times + 1", [jobId]);
  const effect = async ({ id }: { id: string }) => (await db.pool.query("SELECT times FROM charges WHERE job_id = $1", [id])).rows[0]?.times ?? 0;

  it("fails a task that charges outside a step: run again after a fault, it charges twice", async () => {
    const careless = defineTask<{ amount: number }>({
      name: "kit.charge-careless",
      handler: async (_p, ctx) => {
        await charge(ctx.job.id);
        await ctx.step("receipt", () => "sent");
        return "charged";
      },
    });
    const report = await checkTask(careless, { db: db.pool, payload: { amount: 5 }, idempotent: { effect }, throwOnFailure: false });
    expect(report.baseline).toEqual({ outcome: "completed", steps: 1, effect: 1 });
    const failed = report.paths.filter((p) => p.status === "failed");
    // Every path on which the job runs again charges twice; the clean path does not.
    expect(failed.map((p) => p.name)).toEqual(
      expect.arrayContaining([
        "kit.charge-careless: STEP_RECORDED > LEASE_LOST => fenced [crash after step 1: the worker is gone]",
        "kit.charge-careless: STEP_RECORDED > done:handler > done:write(fenced) => fenced",
        "kit.charge-careless: STEP_RECORDED > timeout > done:write(pending) => done [after step 1]",
        "kit.charge-careless: LEASE_LOST => fenced [at the handler's start; the handler goes on]",
      ]),
    );
    for (const path of failed) expect(path.problems.join("\n")).toMatch(/^not idempotent: expected 1 \(what idempotent.effect measures after one clean run\), observed 2 after this path\n/);
    // Each failure says what happened on its path, in words: the fault, where, and the write after it.
    const faultsOf = Object.fromEntries(failed.map((p) => [p.name.replace("kit.charge-careless: ", ""), /\n {2}the path: (.*); the job was run/.exec(p.problems.join("\n"))?.[1]]));
    expect(faultsOf).toMatchObject({
      "LEASE_LOST => fenced [at the handler's start; the handler goes on]": "the worker lost its lease at the handler's start (another worker took the job over) and the handler went on",
      "STEP_RECORDED > LEASE_LOST => fenced [crash after step 1: the worker is gone]": "the worker crashed after step 1 (another worker took the job over)",
      "timeout > done:write(fenced) => fenced [at the handler's start]": "the job timed out at the handler's start, then its outcome write found another worker holding the job",
      "DRAIN_DEADLINE > error:write => abandoned [at the handler's start]": "the drain deadline passed at the handler's start (the job was released), then its outcome write failed",
      "STEP_RECORDED > LEASE_EXPIRED > done:write(pending) => done [after step 1]": "the worker could not confirm its lease after step 1",
      "STEP_RECORDED > done:handler > done:write(fenced) => fenced": "the handler completed, then its outcome write found another worker holding the job",
    });
    expect(report.paths.find((p) => p.name === "kit.charge-careless: STEP_RECORDED > done:handler > done:write(completed) => done")).toMatchObject({ status: "passed", outcome: "completed", reruns: [] });
    // And by default it throws, naming the failed paths.
    await expect(checkTask(careless, { db: db.pool, payload: { amount: 5 }, idempotent: { effect } })).rejects.toThrow(
      /checkTask\("kit.charge-careless"\): \d+ paths passed, \d+ failed[\s\S]*FAIL kit\.charge-careless: STEP_RECORDED > timeout/,
    );
  });

  it("refuses what it cannot check, saying what to give: an isolated task, no pool, no sample payload", async () => {
    const task = defineTask({ name: "kit.refused-options", handler: async () => undefined });
    const refusal = async (run: Promise<unknown>) => {
      const error = await run.then(() => undefined, (e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidConfigError);
      return (error as Error).message;
    };
    expect(await refusal(checkTask({ ...task, handler: undefined } as never, { db: db.pool, payload: {} }))).toBe(
      'picket/testing: checkTask runs a task\'s handler in this process; task "kit.refused-options" is isolated (isolate), which it does not support.',
    );
    expect(await refusal(checkTask(task, { db: { query: () => undefined } as never, payload: {} }))).toBe("picket/testing: checkTask needs { db: pg.Pool } (the test database's pool).");
    expect(await refusal(checkTask(task, { db: db.pool } as never))).toBe('picket/testing: checkTask needs a sample payload the task "kit.refused-options" accepts: { payload }.');
  });

  it("passes the same task once the charge is a durable step, on every path it can take", async () => {
    const careful = defineTask<{ amount: number }>({
      name: "kit.charge-careful",
      handler: async (_p, ctx) => {
        await ctx.step("charge", async () => (await charge(ctx.job.id), "charged"));
        await ctx.step("receipt", () => "sent");
        return "charged";
      },
    });
    const runs: string[] = [];
    const report = await checkTask(careful, {
      db: db.pool,
      payload: { amount: 5 },
      idempotent: { effect },
      property: ({ path, row }) => void runs.push(`${path}: ${row.status}`),
    });
    expect(report.failed).toBe(0);
    expect(report.baseline.steps).toBe(2);
    const ran = report.paths.filter((p) => p.status === "passed");
    // Each fault after each of the two steps, and before the first.
    for (const fault of ["timeout", "LEASE_LOST", "DRAIN_DEADLINE", "LEASE_EXPIRED", "CANCEL"]) {
      for (const where of ["at the handler's start", "after step 1", "after step 2"]) {
        expect(ran.some((p) => p.name.includes(` ${fault} `) && p.name.includes(where)), `${fault} ${where}`).toBe(true);
      }
    }
    for (const write of ["done:write(fenced)", "done:write(cancelled)", "error:write", "done:write(dead)", "done:write(pending)"]) {
      expect(ran.some((p) => p.name.includes(write)), write).toBe(true);
    }
    expect(ran.find((p) => p.name.includes("error:write => abandoned"))).toMatchObject({ outcome: "abandoned", reruns: ["completed"] });
    expect(ran.find((p) => p.name.endsWith("DRAIN_DEADLINE > done:write(pending) => done [after step 1]"))).toMatchObject({ outcome: "released", reruns: ["completed"] });
    // Paths a handler that completes cannot take are reported as skipped, with the reason.
    expect(report.paths.find((p) => p.name === "kit.charge-careful: error:handler > done:write(pending) => done")).toMatchObject({ status: "skipped", reason: "the handler completes with this payload" });
    expect(runs).toHaveLength(ran.length);
  });

  it("takes a failing handler and a schema's refusal along their own paths", async () => {
    const schema: StandardSchema<{ to: string }> = {
      "~standard": {
        version: 1,
        vendor: "kit",
        validate: (value) =>
          typeof (value as { to?: unknown })?.to === "string" ? { value: value as { to: string } } : { issues: [{ message: "Expected a string", path: ["to"] }] },
      },
    };
    const refuses = defineTask({ name: "kit.refuses", schema, handler: async () => Promise.reject(new PermanentError("no such address")) });
    const report = await checkTask(refuses, { db: db.pool, payload: { to: "x" }, invalidPayload: { to: 1 } });
    expect(report.baseline).toMatchObject({ outcome: "dead", steps: 0 });
    expect(report.paths.find((p) => p.name === "kit.refuses: error:payloadCheck > done:write(dead) => done")).toMatchObject({ status: "passed", outcome: "dead" });
    expect(report.paths.find((p) => p.name === "kit.refuses: done:payloadCheck > error:handler(permanent) > done:write(dead) => done")).toMatchObject({ status: "passed", outcome: "dead" });
    expect(report.passed).toBeGreaterThan(10);
  });

  it("leaves no timer running once it returns: a node:test file's process ends with its last test", async () => {
    const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length;
    const quick = defineTask({ name: "kit.quick", handler: async () => "done" });
    const before = timers();
    const report = await checkTask(quick, { db: db.pool, payload: {} });
    expect(report.passed).toBeGreaterThan(10);
    // A handler without steps that completes: the paths through a recorded step, and those where
    // the handler fails, are skipped, each saying why.
    const skipped = report.paths.filter((p) => p.status === "skipped");
    expect([...new Set(skipped.map((p) => p.reason))].sort()).toEqual(["the handler completes with this payload", "the handler records no step (ctx.step)"]);
    const stepOnly = skipped.filter((p) => p.name.includes("STEP_RECORDED") && !p.name.includes("error:handler"));
    expect(stepOnly.length).toBeGreaterThan(0);
    expect(stepOnly.every((p) => p.reason === "the handler records no step (ctx.step)")).toBe(true);
    const failing = skipped.filter((p) => p.name.includes("error:handler") && !p.name.includes("STEP_RECORDED"));
    expect(failing.length).toBeGreaterThan(0);
    expect(failing.every((p) => p.reason === "the handler completes with this payload")).toBe(true);
    // One settle timer per path was left for settleMs (10 s); a pool's idle timer or two may come and go.
    expect(timers() - before).toBeLessThan(3);
  });

  it("names a handler that goes on long after its signal aborted", async () => {
    const deaf = defineTask({ name: "kit.deaf", handler: async (_p, ctx) => (await ctx.step("one", () => 1), await new Promise((resolve) => setTimeout(resolve, 1_500)), "done") });
    const report = await checkTask(deaf, {
      db: db.pool,
      payload: {},
      settleMs: 300,
      only: (name) => name.includes("DRAIN_DEADLINE > done:write(pending)"),
      throwOnFailure: false,
    });
    // Drained at its start, its step is refused and it ends at once; drained after the step, it sleeps on.
    expect(report.paths.filter((p) => p.status !== "skipped").map((p) => [p.name.replace(/^.*\[/, "["), p.status, p.problems])).toEqual([
      ["[at the handler's start]", "passed", []],
      ["[after step 1]", "failed", ["the handler was still running 300 ms after the machine left running: does it ignore ctx.signal?"]],
    ]);
  });

  it("refuses a payload the task does not accept, and a type with live jobs", async () => {
    const strict = defineTask({ name: "kit.strict", schema: { "~standard": { version: 1, vendor: "kit", validate: () => ({ issues: [{ message: "never" }] }) } }, handler: () => 1 });
    await expect(checkTask(strict, { db: db.pool, payload: {} })).rejects.toThrow(/refuses checkTask's sample payload \(invalid_payload: .*never\); pass a payload it accepts/);
    await enqueueJob(db.pool, { type: "kit.busy" });
    await expect(checkTask(defineTask({ name: "kit.busy", handler: () => 1 }), { db: db.pool, payload: {} })).rejects.toThrow(/job \d+ of that type is pending/);
  });
});

describe("checkTask on a task whose effect is counted by a key of its payload", () => {
  beforeAll(async () => {
    await db.pool.query("CREATE TABLE order_charges (order_id text NOT NULL, job_id bigint NOT NULL); CREATE TABLE order_paid (order_id text PRIMARY KEY, job_id bigint NOT NULL)");
  });
  const order = { orderId: "order-7" };
  // What a job did to the world, as a user counts it: the charges of the payload's order.
  const chargesOfOrder = async ({ payload }: { payload: { orderId: string } }) =>
    (await db.pool.query("SELECT count(*)::int AS n FROM order_charges WHERE order_id = $1", [payload.orderId])).rows[0].n;
  const chargeOnce = defineTask<{ orderId: string }>({
    name: "kit.order-charge-step",
    handler: async ({ orderId }, ctx) => {
      await ctx.step("charge", async () => (await db.pool.query("INSERT INTO order_charges VALUES ($1, $2)", [orderId, ctx.job.id]), "charged"));
      await ctx.step("receipt", () => "sent");
      return "charged";
    },
  });

  it("passes a handler that charges once per job: the charges of earlier paths' jobs for the same order do not add up", async () => {
    const report = await checkTask(chargeOnce, { db: db.pool, payload: order, idempotent: { effect: chargesOfOrder } });
    expect(report.failed).toBe(0);
    expect(report.passed).toBeGreaterThan(40);
    // checkTask leaves the tables as it found them.
    expect((await db.pool.query("SELECT count(*)::int AS n FROM order_charges")).rows).toEqual([{ n: 0 }]);
  });

  it("passes a handler idempotent by the order, which meets the order unpaid on every path as the clean run did", async () => {
    const payOnce = defineTask<{ orderId: string }>({
      name: "kit.order-pay-on-conflict",
      handler: async ({ orderId }, ctx) => {
        await db.pool.query("INSERT INTO order_paid VALUES ($1, $2) ON CONFLICT (order_id) DO NOTHING", [orderId, ctx.job.id]);
        await ctx.step("receipt", () => "sent");
        return "paid";
      },
    });
    // The order was paid by this path's job: 1 on a path that starts from an unpaid order.
    const paidByThisJob = async ({ id, payload }: { id: string; payload: { orderId: string } }) =>
      (await db.pool.query("SELECT count(*)::int AS n FROM order_paid WHERE order_id = $1 AND job_id = $2", [payload.orderId, id])).rows[0].n;
    const report = await checkTask(payOnce, { db: db.pool, payload: order, idempotent: { effect: paidByThisJob } });
    expect(report.failed).toBe(0);
    expect(report.baseline.effect).toBe(1);
  });

  it("still fails a handler that charges the order again when it runs again, and says what it counted", async () => {
    const chargeAgain = defineTask<{ orderId: string }>({
      name: "kit.order-charge-again",
      handler: async ({ orderId }, ctx) => {
        await db.pool.query("INSERT INTO order_charges VALUES ($1, $2)", [orderId, ctx.job.id]);
        await ctx.step("receipt", () => "sent");
        return "charged";
      },
    });
    const taken = [
      "kit.order-charge-again: STEP_RECORDED > LEASE_LOST => fenced [crash after step 1: the worker is gone]",
      "kit.order-charge-again: STEP_RECORDED > done:handler > done:write(completed) => done",
      "kit.order-charge-again: STEP_RECORDED > done:handler > error:write => abandoned",
    ];
    const report = await checkTask(chargeAgain, {
      db: db.pool,
      payload: order,
      idempotent: { effect: chargesOfOrder },
      only: (name) => taken.includes(name),
      throwOnFailure: false,
    });
    // The clean path charges once, like the clean run; every path that runs the job again charges twice.
    expect(report.paths.map((p) => [p.name, p.status])).toEqual([
      [taken[0], "failed"],
      [taken[1], "passed"],
      [taken[2], "failed"],
    ]);
    const crash = report.paths[0]!.problems.join("\n").split("\n");
    expect(crash[0]).toBe("not idempotent: expected 1 (what idempotent.effect measures after one clean run), observed 2 after this path");
    expect(crash[1]).toMatch(/^  measured: effect\(\{ id: "(\d+)", idempotencyKey: "picket:picket:\1", payload: \{"orderId":"order-7"\} \}\), once the job had completed$/);
    expect(crash[2]).toBe("  the path: the worker crashed after step 1 (another worker took the job over); the job was run 2 times (1st fenced, 2nd completed)");
    expect(crash[3]).toMatch(/^  the path started from your tables as the clean run found them, so 2 is this job's own doing: .*inside ctx\.step, or keyed by ctx\.idempotencyKey or a key from the payload/);
    // In the report, the lines of one problem stay under their path.
    expect(formatReport(report)).toContain(
      `\n  FAIL ${taken[0]}\n         not idempotent: expected 1 (what idempotent.effect measures after one clean run), observed 2 after this path\n           measured: effect(`,
    );
    expect(report.paths[2]!.problems.join("\n")).toContain("\n  the path: the handler completed, then its outcome write failed; the job was run 2 times (1st abandoned, 2nd completed)\n");
  });

  it("with restoreTables: false runs every path on the tables the paths before it left: a payload per path keeps them apart", async () => {
    const only = (name: string) => name === "kit.order-charge-step: STEP_RECORDED > timeout > done:write(pending) => done [after step 1]";
    const shared = await checkTask(chargeOnce, { db: db.pool, payload: order, idempotent: { effect: chargesOfOrder }, restoreTables: false, only, throwOnFailure: false });
    expect(shared.failed).toBe(1);
    expect(shared.paths.find((p) => p.status === "failed")!.problems[0]).toMatch(
      /observed 2 after this path\n[\s\S]*\n  your tables were not put back between paths \(restoreTables: false\), so unless effect counts by a key this path's payload alone holds, 2 includes what earlier paths did$/,
    );
    await db.pool.query("DELETE FROM order_charges");
    const payloads: string[] = [];
    const apart = await checkTask(chargeOnce, {
      db: db.pool,
      payload: ({ index }) => (payloads.push(`order-${index}`), { orderId: `order-${index}` }),
      idempotent: { effect: chargesOfOrder },
      restoreTables: false,
      only,
    });
    expect(apart.failed).toBe(0);
    expect(payloads).toEqual(["order--1", "order-0"]);
  });
});

describe("checkTask's judgement of one path", () => {
  const row = { id: "1", status: "processing", attempts: 2, result: null, lastError: null, claimToken: "b" } as unknown as Job;
  const clean: PathObservation = {
    expectedStates: ["claimed", "running", "fenced"],
    observedStates: ["claimed", "running", "fenced"],
    expectedOutcome: "fenced",
    outcome: "fenced",
    fault: "leaseLost",
    abortedOnLeavingRunning: true,
    fence: { rowAtFence: row, stepsAtFence: [], finalSteps: [], token: "a" },
    rowBeforeWrite: null,
    claimedAttempts: 1,
    finalRow: row,
    effect: {
      once: 1,
      here: 1,
      job: { id: "7", idempotencyKey: "picket:picket:7", payload: { orderId: "o-1" } },
      faults: "the worker crashed at the handler's start (another worker took the job over)",
      runs: ["fenced", "completed"],
      tablesRestored: true,
    },
  };

  it("finds nothing wrong with a path that kept every guarantee", () => {
    expect(judgePath(clean)).toEqual([]);
  });

  it("names a handler whose signal had not aborted when the machine left running", () => {
    expect(judgePath({ ...clean, abortedOnLeavingRunning: false })).toEqual(["the machine left running (leaseLost) but the handler's signal had not aborted"]);
    expect(judgePath({ ...clean, abortedOnLeavingRunning: null })).toHaveLength(1);
  });

  it("names a write after the fence: the row changed, or a step recorded under the lost claim", () => {
    expect(judgePath({ ...clean, finalRow: { ...row, status: "completed" } as Job })).toEqual(['the row changed after the claim was lost: status "processing" -> "completed"']);
    const step = { name: "late", attempt: 1, claimToken: "a" };
    expect(judgePath({ ...clean, fence: { ...clean.fence!, finalSteps: [step] } })).toEqual(["steps were recorded under the lost claim after it was lost: late (at the fence: none)"]);
    // Several changes and several steps, each named.
    expect(judgePath({ ...clean, finalRow: { ...row, status: "completed", attempts: 3 } as Job })).toEqual(['the row changed after the claim was lost: status "processing" -> "completed", attempts 2 -> 3']);
    const early = [{ name: "first", attempt: 1, claimToken: "a" }, { name: "second", attempt: 1, claimToken: "a" }];
    expect(judgePath({ ...clean, fence: { ...clean.fence!, stepsAtFence: early, finalSteps: [...early, step, { ...step, name: "later" }] } })).toEqual([
      "steps were recorded under the lost claim after it was lost: first, second, late, later (at the fence: first, second)",
    ]);
    // A step the new claim recorded is not ours.
    expect(judgePath({ ...clean, fence: { ...clean.fence!, finalSteps: [{ ...step, claimToken: "b" }] } })).toEqual([]);
  });

  it("names a path that ended otherwise than the machine says, and an effect that differs", () => {
    expect(judgePath({ ...clean, outcome: "completed" })).toContain("the job ended completed; the machine names fenced for this path");
    expect(judgePath({ ...clean, observedStates: ["claimed", "running", "completing", "fenced"] })[0]).toMatch(/not along the path/);
    expect(judgePath({ ...clean, effect: { ...clean.effect!, here: 2 } })).toEqual([
      [
        "not idempotent: expected 1 (what idempotent.effect measures after one clean run), observed 2 after this path",
        '  measured: effect({ id: "7", idempotencyKey: "picket:picket:7", payload: {"orderId":"o-1"} }), once the job had completed',
        "  the path: the worker crashed at the handler's start (another worker took the job over); the job was run 2 times (1st fenced, 2nd completed)",
        "  the path started from your tables as the clean run found them, so 2 is this job's own doing: running it again after the fault did not leave the effect of one run. " +
          "Make the work happen once: inside ctx.step, or keyed by ctx.idempotencyKey or a key from the payload (INSERT ... ON CONFLICT DO NOTHING)",
      ].join("\n"),
    ]);
    expect(judgePath({ ...clean, observedStates: ["claimed", "running", "completing", "fenced"] })[0]).toBe(
      "the job's machine went claimed > running > completing > fenced, not along the path (claimed > running > fenced)",
    );
    // Values of any shape are shown as JSON, undefined too.
    expect(judgePath({ ...clean, effect: { ...clean.effect!, once: { rows: ["a"] }, here: undefined } })[0]).toMatch(/^not idempotent: expected \{"rows":\["a"\]\} .*, observed undefined after this path\n/);
  });
  it("holds each outcome to its row: the status, a released job's attempt, nothing written after a cancel or a failed write", () => {
    const at = (o: Partial<PathObservation>) => judgePath({ ...clean, fence: null, effect: null, ...o });
    expect(at({ outcome: "completed", expectedOutcome: "completed", finalRow: row })).toEqual(["the job ended completed but its row is processing"]);
    const pending = { ...row, status: "pending" } as Job;
    expect(at({ outcome: "released", expectedOutcome: "released", finalRow: pending, claimedAttempts: 2 })).toEqual([
      "a released job's attempt is not charged, but its row counts 2 attempts (claimed as attempt 2)",
    ]);
    expect(at({ outcome: "released", expectedOutcome: "released", finalRow: { ...pending, attempts: 1 } as Job, claimedAttempts: 2 })).toEqual([]);
    const cancelled = { ...row, status: "cancelled" } as Job;
    expect(at({ outcome: "cancelled", expectedOutcome: "cancelled", finalRow: cancelled })).toEqual([]);
    expect(at({ outcome: "cancelled", expectedOutcome: "cancelled", finalRow: { ...cancelled, result: 1 } as Job })).toEqual(["the job was cancelled, yet an outcome was written after the cancel"]);
    expect(at({ outcome: "cancelled", expectedOutcome: "cancelled", finalRow: { ...cancelled, lastError: { message: "x" } } as unknown as Job })).toHaveLength(1);
    expect(at({ outcome: "abandoned", expectedOutcome: "abandoned", rowBeforeWrite: row, finalRow: row })).toEqual([]);
    expect(at({ outcome: "abandoned", expectedOutcome: "abandoned", rowBeforeWrite: row, finalRow: { ...row, attempts: 3 } as Job })).toEqual(["the outcome write failed, yet the row changed"]);
    // A row with no status to expect (fenced, abandoned, refused) is not held to one.
    expect(at({ outcome: "abandoned", expectedOutcome: "abandoned", rowBeforeWrite: null, finalRow: { ...row, status: "dead" } as Job })).toEqual([]);
  });

  it("counts the runs in ordinals, and says when the tables were not put back", () => {
    const runs = Array.from({ length: 23 }, () => "retried" as const);
    const [problem] = judgePath({ ...clean, effect: { ...clean.effect!, here: 2, runs, tablesRestored: false } });
    const lines = problem!.split("\n");
    expect(lines[2]).toContain("the job was run 23 times (1st retried, 2nd retried, 3rd retried, 4th retried,");
    expect(lines[2]).toContain("10th retried, 11th retried, 12th retried, 13th retried, 14th retried,");
    expect(lines[2]).toMatch(/20th retried, 21st retried, 22nd retried, 23rd retried\)$/);
    expect(lines[3]).toBe(
      "  your tables were not put back between paths (restoreTables: false), so unless effect counts by a key this path's payload alone holds, 2 includes what earlier paths did",
    );
    expect(judgePath({ ...clean, effect: { ...clean.effect!, here: 2, runs: ["completed"] } })[0]).toContain("the job was run 1 time (1st completed)");
  });
});
