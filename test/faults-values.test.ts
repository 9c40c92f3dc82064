// Values and names PostgreSQL refuses, as users produce them: a handler result holding half an
// emoji (scenario 4 of the lease review), a bulk enqueue of many long task names (scenario 7), a
// schema named by a reserved word and a retry whose dedupe key a live job holds (scenario 9). Each
// fails the one thing at fault, with picket's own words, and nothing else.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { enqueueJob, enqueueJobs, InvalidConfigError, InvalidJobError, retryDeadJob } from "../src/db/index.ts";
import { createSupervisor } from "../src/runtime/supervisor.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();
const CLI = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));

const picket = (args: string[]): Promise<{ code: number | null; stderr: string }> =>
  new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, DATABASE_URL: db.url }, stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("exit", (code) => resolve({ code, stderr }));
  });

describe("a value PostgreSQL cannot store", () => {
  it("fails only the attempt that returned it, with the path that holds it: the nineteen completed beside it are written", async () => {
    const task = defineTask({
      name: "poison-batch",
      // Twenty handlers end in one turn: their completions go out as one batched statement.
      handler: async (payload: { n: number }) => ({ n: payload.n, label: payload.n === 7 ? "🙂 smile".slice(0, 1) : "fine" }),
    });
    const jobs = await enqueueJobs(db.pool, Array.from({ length: 20 }, (_, n) => ({ type: "poison-batch", payload: { n }, maxAttempts: 2 })));
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 20, prefetch: 0 });
    await expect.poll(() => outcomes.filter((o) => o.outcome === "completed").length, { timeout: 10_000 }).toBe(19);
    const poison = jobs[7]!;
    await expect.poll(async () => (await row(db.pool, poison.id)).status, { timeout: 10_000 }).toBe("dead");
    for (const job of jobs.filter((j) => j.id !== poison.id)) {
      expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", attempts: 1, result: { label: "fine" } });
    }
    const dead = await row(db.pool, poison.id);
    expect(dead.attempts).toBe(2);
    expect(dead.last_error).toBe(
      "error: picket: the job's result.label contains a lone UTF-16 surrogate (half of a character such as an emoji, e.g. cut by slice), which PostgreSQL cannot store.",
    );
    expect(outcomes.filter((o) => o.id === poison.id).map((o) => o.outcome)).toEqual(["retried", "dead"]);
  });

  it("is refused at enqueue with the path that holds it, and nothing is written", async () => {
    const attempt = enqueueJobs(db.pool, [{ type: "poison-enqueue", payload: { ok: 1 } }, { type: "poison-enqueue", payload: { name: "🙂".slice(1) } }]);
    await expect(attempt).rejects.toThrow(InvalidJobError);
    await expect(attempt).rejects.toThrow(/payload\.name contains a lone UTF-16 surrogate/);
    await expect(enqueueJob(db.pool, { type: "poison-enqueue", payload: { ["a\u0000b"]: 1 } })).rejects.toThrow(/the key "a\\u0000b" of payload contains a NUL character/);
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'poison-enqueue'")).rows[0].n).toBe(0);
  });
});

describe("a payload nested too deep", () => {
  it("is refused with picket's message (not a RangeError from the check's own recursion), and 100 levels pass", async () => {
    let deep: unknown = 1;
    for (let i = 0; i < 5_000; i++) deep = { a: deep };
    const attempt = enqueueJob(db.pool, { type: "too-deep", payload: deep });
    await expect(attempt).rejects.toThrow(InvalidJobError);
    await expect(attempt).rejects.toThrow(/^picket: job "too-deep": payload is not JSON-serialisable: payload[.a]+… is nested more than 100 levels deep, the most a payload may be; flatten it/);
    let hundred: unknown = "bottom";
    for (let i = 0; i < 100; i++) hundred = [hundred];
    const job = await enqueueJob(db.pool, { type: "too-deep", payload: hundred });
    expect(job.payload).toEqual(hundred);
    let more: unknown = "bottom";
    for (let i = 0; i < 101; i++) more = [more];
    await expect(enqueueJob(db.pool, { type: "too-deep", payload: more })).rejects.toThrow(/nested more than 100 levels deep/);
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'too-deep'")).rows[0].n).toBe(1);
  });
});

describe("a key or queue name PostgreSQL would alter or refuse", () => {
  // pg encodes a JavaScript string as UTF-8, turning a lone surrogate into U+FFFD: the key stored
  // was not the key given, so the enqueue could not find its own job and reported it "not created"
  // while it was committed (a caller who retried got two); a queue's setting never applied.
  for (const [field, value, why] of [
    ["key", "k\ud800", "contains a lone UTF-16 surrogate"],
    ["key", "k\u0000", "contains a NUL character"],
    ["queue", "q\udc00", "contains a lone UTF-16 surrogate"],
    ["queue", "q\u0000", "contains a NUL character"],
  ] as const) {
    it(`refuses ${JSON.stringify(value)} as a ${field} before anything is written, in picket's words`, async () => {
      const attempt = enqueueJobs(db.pool, [{ type: "bad-name" }, { type: "bad-name", [field]: value }]);
      await expect(attempt).rejects.toThrow(InvalidJobError);
      await expect(attempt).rejects.toThrow(`picket: job "bad-name": ${field} ${JSON.stringify(value)} ${why}`);
      expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'bad-name'")).rows[0].n).toBe(0);
    });
  }

  it("refuses such a queue name in a worker's queues setting, where it could never apply", () => {
    const task = defineTask({ name: "bad-queue-setting", handler: async () => undefined });
    expect(() => createSupervisor({ connectionString: db.url, tasks: [task], queues: { "q\ud800": { concurrency: 2 } } })).toThrow(InvalidConfigError);
    expect(() => createSupervisor({ connectionString: db.url, tasks: [task], queues: { "q\ud800": { concurrency: 2 } } })).toThrow(/the queue name "q\\ud800" contains a lone UTF-16 surrogate/);
  });
});

describe("the wake-up notification", () => {
  it("never fails an enqueue: seventy task names of 125 characters in one statement, and a listening worker still wakes", async () => {
    const names = Array.from({ length: 70 }, (_, i) => `${String(i).padStart(3, "0")}-${"x".repeat(121)}`);
    expect(names.join(",").length).toBeGreaterThan(8_000);
    const task = defineTask({ name: names[42]!, handler: async () => "woken" });
    // A minute between polls: only the notification can start the job within the test.
    const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task], pollIntervalMs: 60_000 });
    await expect.poll(() => logs.some((l) => l.msg === "listening for new jobs"), { timeout: 5_000 }).toBe(true);
    const jobs = await enqueueJobs(db.pool, names.map((type) => ({ type })));
    expect(jobs).toHaveLength(70);
    await expect.poll(() => outcomes.find((o) => o.id === jobs[42]!.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
  });
});

describe("names and keys PostgreSQL would refuse", () => {
  it("refuses a schema named by a reserved word, or starting with pg_, with picket's message (library and CLI)", { tags: ["spawns"] }, async () => {
    const task = defineTask({ name: "kw", handler: async () => undefined });
    expect(() => createSupervisor({ connectionString: db.url, tasks: [task], schema: "user" })).toThrow(InvalidConfigError);
    expect(() => createSupervisor({ connectionString: db.url, tasks: [task], schema: "user" })).toThrow(
      'picket: schema name "user" is a keyword PostgreSQL reserves; pick another name, e.g. "user_jobs".',
    );
    expect(() => createSupervisor({ connectionString: db.url, tasks: [task], schema: "pg_jobs" })).toThrow(/starts with pg_, which PostgreSQL reserves/);
    const run = await picket(["migrate", "--schema", "user"]);
    expect(run).toEqual({ code: 1, stderr: 'picket: schema name "user" is a keyword PostgreSQL reserves; pick another name, e.g. "user_jobs".\n' });
  });

  it("knows every keyword this server reserves in any way", async () => {
    const { rows } = await db.pool.query<{ word: string }>("SELECT word FROM pg_get_keywords() WHERE catcode <> 'U'");
    const task = defineTask({ name: "kw2", handler: async () => undefined });
    const unguarded = rows.map((r) => r.word).filter((word) => {
      try {
        createSupervisor({ connectionString: db.url, tasks: [task], schema: word });
        return true;
      } catch {
        return false;
      }
    });
    expect(unguarded).toEqual([]);
    // And an unreserved keyword is a fine schema name.
    expect(() => createSupervisor({ connectionString: db.url, tasks: [task], schema: "jobs" })).not.toThrow();
  });

  it("says which live job holds the key when a dead job with that key is retried (library and CLI)", { tags: ["spawns"] }, async () => {
    // An earlier job with the key finished long ago: it holds nothing.
    const earlier = await enqueueJob(db.pool, { type: "keyed", key: "welcome:ada" });
    await db.pool.query("UPDATE picket.jobs SET status = 'completed', finished_at = now() WHERE id = $1", [earlier.id]);
    const dead = await enqueueJob(db.pool, { type: "keyed", key: "welcome:ada" });
    await db.pool.query("UPDATE picket.jobs SET status = 'dead', finished_at = now() WHERE id = $1", [dead.id]);
    const live = await enqueueJob(db.pool, { type: "keyed", key: "welcome:ada" });
    expect(live.id).not.toBe(dead.id);
    expect(await retryDeadJob(db.pool, dead.id)).toEqual({ outcome: "key_taken", key: "welcome:ada", heldBy: live.id, heldByStatus: "pending" });
    const run = await picket(["jobs", "retry", dead.id]);
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(
      `picket: job ${dead.id} cannot be retried: its key "welcome:ada" is held by job ${live.id}, which is pending. ` +
        `Let that job finish (or cancel it: picket jobs cancel ${live.id}), then retry this one.\n`,
    );
    expect(await row(db.pool, dead.id)).toMatchObject({ status: "dead" });
  });
});
