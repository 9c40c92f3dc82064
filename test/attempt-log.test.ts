// One log line per attempt that did not complete, at the level an operator acts on, with the
// job's stable fields and the error's kind, message and stack; the row's error history keeps the
// stack too. Each case runs a real worker against the test database and reads its captured pino
// lines.
import { describe, expect, it } from "vitest";
import { enqueueJob, type ClaimedJob } from "../src/db/index.ts";
import { ERROR_STACK_LIMIT } from "../src/db/job-row.ts";
import type { JobError, JobOutcome } from "../src/machines/job-machine.ts";
import { logAttempt } from "../src/runtime/attempt-log.ts";
import { defineTask, PermanentError } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { captureLogs, startWorker, type LogLine } from "./support/worker.ts";

const db = useTestDatabase();

const WARN = 40;
const ERROR = 50;
const INFO = 30;
const DEBUG = 20;

/** The job's line with this outcome, once written. */
const lineOf = (logs: LogLine[], id: string, outcome: string) =>
  expect.poll(() => logs.find((l) => l.job_id === id && l.outcome === outcome), { timeout: 10_000 }).toBeDefined();

const find = (logs: LogLine[], id: string, outcome: string) => logs.find((l) => l.job_id === id && l.outcome === outcome)!;

describe("a line per attempt that did not complete", () => {
  it("a handler's error: retried at warn, then dead at error, each with the stack; the row keeps the stack", async () => {
    const task = defineTask({ name: "parses", maxAttempts: 2, backoff: { baseMs: 1, maxMs: 1 }, handler: async () => JSON.parse("{oops") });
    const job = await enqueueJob(db.pool, { type: "parses", maxAttempts: 2 });
    const { logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await lineOf(logs, job.id, "dead");

    const retried = find(logs, job.id, "retried");
    expect(retried).toMatchObject({ level: WARN, task: "parses", attempt: 1, max_attempts: 2, claim_token: expect.any(String), err: { kind: "error" } });
    expect(retried.msg).toMatch(new RegExp(`^job ${job.id} failed \\(attempt 1 of 2\\); it runs again after its backoff: .*JSON`));
    const err = retried.err as { message: string; stack: string };
    expect(err.message).toMatch(/JSON/);
    // The stack says where: the error's class and this file's handler.
    expect(err.stack).toMatch(/^SyntaxError: /);
    expect(err.stack).toContain("attempt-log.test.ts");

    const dead = find(logs, job.id, "dead");
    expect(dead).toMatchObject({ level: ERROR, task: "parses", attempt: 2, max_attempts: 2, err: { kind: "error", stack: expect.stringContaining("attempt-log.test.ts") } });
    expect(dead.msg).toMatch(new RegExp(`^job ${job.id} failed \\(attempt 2 of 2\\) and is dead: .*JSON.*\\. Once fixed, run it again with: picket jobs retry ${job.id}$`));
    // Each attempt has its own claim: the lines say which wrote what.
    expect(dead.claim_token).not.toBe(retried.claim_token);

    const { errors, last_error } = await row(db.pool, job.id);
    expect(last_error).toMatch(/^error: .*JSON/);
    expect(errors).toHaveLength(2);
    for (const entry of errors) expect(entry.stack).toMatch(/^SyntaxError: [\s\S]*attempt-log\.test\.ts/);
  });

  it("a timeout: warn while attempts remain, no stack (nothing was thrown)", async () => {
    const task = defineTask({ name: "slow", timeoutMs: 100, maxAttempts: 3, handler: (_p, { signal }) => new Promise((r) => signal.addEventListener("abort", r)) });
    const job = await enqueueJob(db.pool, { type: "slow", maxAttempts: 3 });
    const { logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await lineOf(logs, job.id, "retried");
    const line = find(logs, job.id, "retried");
    expect(line).toMatchObject({ level: WARN, attempt: 1, max_attempts: 3, err: { kind: "timeout", message: "timed out after 100 ms; the handler was interrupted" } });
    expect(line.err).not.toHaveProperty("stack");
    expect(line.msg).toBe(`job ${job.id} timed out (attempt 1 of 3); it runs again after its backoff: timed out after 100 ms; the handler was interrupted`);
    const { errors } = await row(db.pool, job.id);
    expect(errors[0]).not.toHaveProperty("stack");
  });

  it("a permanent failure: dead at error on its first attempt, with the stack", async () => {
    const task = defineTask({
      name: "refuses",
      handler: async () => {
        throw new PermanentError("the account is closed");
      },
    });
    const job = await enqueueJob(db.pool, { type: "refuses" });
    const { logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await lineOf(logs, job.id, "dead");
    const line = find(logs, job.id, "dead");
    expect(line).toMatchObject({ level: ERROR, attempt: 1, max_attempts: 5, err: { kind: "permanent", message: "the account is closed" } });
    expect((line.err as { stack: string }).stack).toMatch(/^PermanentError: the account is closed\n[\s\S]*attempt-log\.test\.ts/);
    expect(line.msg).toBe(`job ${job.id} failed permanently (attempt 1 of 5) and is dead: the account is closed. Once fixed, run it again with: picket jobs retry ${job.id}`);
    const { errors } = await row(db.pool, job.id);
    expect(errors[0].stack).toMatch(/^PermanentError: the account is closed\n[\s\S]*attempt-log\.test\.ts/);
  });

  it("a job given back at the drain deadline: info, its attempt not charged", async () => {
    const task = defineTask({ name: "outlasts", timeoutMs: 60_000, handler: (_p, { signal }) => new Promise((_r, reject) => signal.addEventListener("abort", () => reject(new Error("stopped")))) });
    const job = await enqueueJob(db.pool, { type: "outlasts" });
    const { logs, supervisor } = await startWorker({ connectionString: db.url, tasks: [task], drainTimeoutMs: 100 });
    await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 5_000 }).toBe("processing");
    await supervisor.stop();
    const line = find(logs, job.id, "released");
    expect(line).toMatchObject({ level: INFO, attempt: 1, msg: `job ${job.id} given back (attempt 1 of 5 not charged): the drain, or a lease it could no longer prove` });
    expect(await row(db.pool, job.id)).toMatchObject({ status: "pending", attempts: 0 });
  });

  it("a claim lost while the handler ran: warn, nothing written", async () => {
    let claimed!: () => void;
    const running = new Promise<void>((r) => (claimed = r));
    let finish!: () => void;
    const gate = new Promise<void>((r) => (finish = r));
    const task = defineTask({ name: "outrun", handler: async () => (claimed(), await gate, "late") });
    const job = await enqueueJob(db.pool, { type: "outrun" });
    const { logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await running;
    // Another worker's sweep and claim, as far as this row can tell: a new token.
    await db.pool.query("UPDATE picket.jobs SET claim_token = gen_random_uuid() WHERE id = $1", [job.id]);
    finish();
    await expect.poll(() => logs.find((l) => l.job_id === job.id && /^claim lost/.test(l.msg)), { timeout: 5_000 }).toMatchObject({
      level: WARN,
      task: "outrun",
      attempt: 1,
      intended: "completed",
    });
  });

  it("a completion at debug only, and nothing at info for it", async () => {
    const task = defineTask({ name: "fine", handler: async () => "ok" });
    const job = await enqueueJob(db.pool, { type: "fine" });
    const { logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await lineOf(logs, job.id, "completed");
    expect(find(logs, job.id, "completed")).toMatchObject({ level: DEBUG, msg: `job ${job.id} completed`, attempt: 1 });
    expect(logs.filter((l) => l.job_id === job.id && l.level > DEBUG)).toEqual([]);
  });

  it("records an error whose text PostgreSQL cannot store, its NUL characters dropped", async () => {
    const task = defineTask({
      name: "nul",
      maxAttempts: 1,
      handler: async () => {
        throw new Error("before\u0000after");
      },
    });
    const job = await enqueueJob(db.pool, { type: "nul", maxAttempts: 1 });
    const { logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await lineOf(logs, job.id, "dead");
    const { errors, last_error } = await row(db.pool, job.id);
    expect(last_error).toBe("error: beforeafter");
    expect(errors[0].stack).toMatch(/^Error: beforeafter\n/);
  });

  it("keeps the stack bounded in the row, the message too", async () => {
    const task = defineTask({
      name: "deep",
      maxAttempts: 1,
      handler: async () => {
        const error = new Error("x".repeat(5_000));
        error.stack = `Error: deep\n${"    at frame (file.js:1:1)\n".repeat(1_000)}`;
        throw error;
      },
    });
    const job = await enqueueJob(db.pool, { type: "deep", maxAttempts: 1 });
    const { logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await lineOf(logs, job.id, "dead");
    const { errors } = await row(db.pool, job.id);
    expect(errors[0].stack).toHaveLength(ERROR_STACK_LIMIT);
    expect(errors[0].stack).toMatch(/^Error: deep\n {4}at frame/);
    expect(errors[0].message.length).toBe(2_000);
  });
});

// logAttempt itself, line by line, for every error kind and outcome (no worker needed): what each
// kind of failure is called, the level each outcome is logged at, and what a line holds without
// an error or with the payload asked for.
describe("logAttempt's lines", () => {
  const job: ClaimedJob = {
    id: "41",
    type: "mail",
    payload: { to: "a@example.com" },
    attempts: 2,
    maxAttempts: 3,
    createdAt: new Date(0),
    claimToken: "00000000-0000-4000-8000-000000000001",
    leaseMs: 30_000,
    readyMs: 0,
  };
  const logged = (outcome: JobOutcome | null, error: JobError | null, { logPayload = false, level = "debug" } = {}) => {
    const { lines, logger } = captureLogs();
    logger.level = level;
    logAttempt(logger, job, outcome, error, logPayload);
    return lines;
  };

  it.each([
    ["error", "failed"],
    ["timeout", "timed out"],
    ["permanent", "failed permanently"],
    ["no_handler", "has no handler in this worker"],
    ["invalid_payload", "has a payload its task's schema refuses"],
    ["lease_expired", "lost its lease"],
  ] as const)("names a %s as %j", (kind, what) => {
    const [line] = logged("retried", { kind, message: "why" });
    expect(line!.msg).toBe(`job 41 ${what} (attempt 2 of 3); it runs again after its backoff: why`);
    expect(line).toMatchObject({ level: WARN, outcome: "retried", err: { kind, message: "why" } });
  });

  it("logs a dead job at error, with how to run it again", () => {
    const lines = logged("dead", { kind: "error", message: "boom", stack: "Error: boom\n    at here" });
    expect(lines).toEqual([
      expect.objectContaining({
        level: ERROR,
        msg: "job 41 failed (attempt 2 of 3) and is dead: boom. Once fixed, run it again with: picket jobs retry 41",
        job_id: "41",
        task: "mail",
        attempt: 2,
        max_attempts: 3,
        claim_token: job.claimToken,
        outcome: "dead",
        err: { kind: "error", message: "boom", stack: "Error: boom\n    at here" },
      }),
    ]);
  });

  it("says 'failed' and 'unknown error' when there is no error, and has no err field", () => {
    const [line] = logged("retried", null);
    expect(line!.msg).toBe("job 41 failed (attempt 2 of 3); it runs again after its backoff: unknown error");
    expect(line).not.toHaveProperty("err");
  });

  it("logs a job given back at info, and nothing for a machine that ended with no outcome", () => {
    expect(logged("released", null)).toEqual([
      expect.objectContaining({ level: INFO, outcome: "released", msg: "job 41 given back (attempt 2 of 3 not charged): the drain, or a lease it could no longer prove" }),
    ]);
    expect(logged(null, { kind: "error", message: "x" })).toEqual([]);
  });

  it("logs a completion at debug, without an error, and not at all above debug", () => {
    expect(logged("completed", null)).toEqual([expect.objectContaining({ level: DEBUG, outcome: "completed", msg: "job 41 completed", job_id: "41" })]);
    expect(logged("completed", null, { level: "info" })).toEqual([]);
  });

  it("puts the payload in the line only when asked", () => {
    expect(logged("retried", null)[0]).not.toHaveProperty("payload");
    expect(logged("retried", null, { logPayload: true })[0]).toMatchObject({ payload: { to: "a@example.com" } });
    expect(logged("completed", null, { logPayload: true })[0]).toMatchObject({ payload: { to: "a@example.com" } });
  });
});
