// A job's history (src/db/job-history.ts): every attempt that did not finish, numbered across
// operator retries, and every operator action (retry, cancel) with who asked, each time in the one
// format `picket jobs show` and the dashboard's API print every other time in.
import { hostname, userInfo } from "node:os";
import { describe, expect, it } from "vitest";
import {
  cancelJob,
  claimJobs,
  deadLetterJobs,
  enqueueJob,
  getJob,
  InvalidConfigError,
  listJobs,
  recordStep,
  retryDeadJob,
  sweepExpiredClaims,
  type HistoryEntry,
} from "../src/db/index.ts";
import { createDashboardHandler } from "../src/dashboard/server.ts";
import { defineTask } from "../src/runtime/task.ts";
import { picket } from "./support/cli.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, expireLease, row, want } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

/** How JSON.stringify prints a Date: the format of every other time in a job's output. */
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** The history in short: "1: message" per attempt, "retry by x" / "cancel" per operator action. */
const outline = (entries: HistoryEntry[]): string[] =>
  entries.map((e) => ("operator" in e ? `${e.operator}${e.by === undefined ? "" : ` by ${e.by}`}` : `${e.attempt}: ${e.message}`));

/** Every string in a JSON value that a Date would parse as a time of this century, with its path. */
const timesIn = (value: unknown, path = "$"): Array<[string, string]> => {
  if (typeof value === "string") return /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}/.test(value) ? [[path, value]] : [];
  if (typeof value !== "object" || value === null) return [];
  return Object.entries(value).flatMap(([key, child]) => timesIn(child, `${path}.${key}`));
};

describe("a job's history across operator retries", () => {
  it("numbers a worker's attempts 1–3, records the retry with who asked, then 4–6 with the full budget again", async () => {
    let runs = 0;
    const failing = defineTask({
      name: "history-failing",
      maxAttempts: 3,
      backoff: { baseMs: 0, maxMs: 0 },
      handler: async () => {
        runs += 1;
        throw new Error(`run ${runs} failed`);
      },
    });
    const job = await enqueueJob(db.pool, { type: "history-failing" });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [failing] });
    try {
      await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 20_000 }).toBe("dead");
      expect(await retryDeadJob(db.pool, job.id, { by: "alice@ops" })).toMatchObject({ outcome: "applied", job: { attempts: 0, priorAttempts: 3 } });
      await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 20_000 }).toBe("dead");
    } finally {
      await supervisor.stop();
    }
    // The retry gave the whole budget again: three more runs, not one.
    expect(runs).toBe(6);
    const shown = (await getJob(db.pool, job.id))!;
    expect(shown).toMatchObject({ status: "dead", attempts: 3, priorAttempts: 3, maxAttempts: 3 });
    expect(outline(shown.errors)).toEqual([
      "1: error: run 1 failed",
      "2: error: run 2 failed",
      "3: error: run 3 failed",
      "retry by alice@ops",
      "4: error: run 4 failed",
      "5: error: run 5 failed",
      "6: error: run 6 failed",
    ]);
    // One time format, as stored (what a reader of the row sees) and as read, in the order things happened.
    const stored: HistoryEntry[] = (await row(db.pool, job.id)).errors;
    expect(stored.map((e) => e.at)).toEqual(shown.errors.map((e) => e.at));
    for (const entry of stored) expect(entry.at).toMatch(ISO_UTC);
    const times = shown.errors.map((e) => Date.parse(e.at));
    expect(times).toEqual([...times].sort((a, b) => a - b));
    // Each failed attempt keeps its stack.
    expect(shown.errors.filter((e) => !("operator" in e)).every((e) => "stack" in e && /Error: run \d failed/.test(e.stack!))).toBe(true);
  }, 60_000);

  it("numbers on through every path that ends an attempt: a permanent failure, a lost worker found by the sweep, a second retry", async () => {
    const [first] = await claimed(db.pool, "history-paths", 1, { spec: { maxAttempts: 2 } });
    await deadLetterJobs(db.pool, [{ id: first!.id, token: first!.claimToken, error: "permanent: no such customer" }]);
    await retryDeadJob(db.pool, first!.id);
    // The sweep charges a claim whose worker stopped renewing: twice, and the job is dead.
    for (let i = 0; i < 2; i++) {
      const [again] = await claimJobs(db.pool, "worker-gone", [want("history-paths")]);
      expect(again).toMatchObject({ id: first!.id, attempts: i + 1 });
      await expireLease(db.pool, again!.id);
      expect(await sweepExpiredClaims(db.pool, 10)).toHaveLength(1);
      if (i === 0) await db.pool.query("UPDATE picket.jobs SET run_at = now() WHERE id = $1", [first!.id]);
    }
    expect((await row(db.pool, first!.id)).status).toBe("dead");
    // From a session whose time zone is not UTC: the entry's time is still the instant, in UTC.
    const kolkata = await db.connect();
    try {
      await kolkata.query("SET TIME ZONE 'Asia/Kolkata'");
      await retryDeadJob(kolkata, first!.id, { by: "bob" });
    } finally {
      await kolkata.end();
    }
    const [last] = await claimJobs(db.pool, "worker-b", [want("history-paths")]);
    expect(last).toMatchObject({ attempts: 1, maxAttempts: 2 });
    await deadLetterJobs(db.pool, [{ id: last!.id, token: last!.claimToken, error: "permanent: still no customer" }]);
    const shown = (await getJob(db.pool, first!.id))!;
    expect(outline(shown.errors).map((line) => line.replace(/lease expired: .*/, "lease expired"))).toEqual([
      "1: permanent: no such customer",
      "retry",
      "2: lease expired",
      "3: lease expired",
      "retry by bob",
      "4: permanent: still no customer",
    ]);
    expect(shown).toMatchObject({ attempts: 1, priorAttempts: 3 });
    // Each attempt names the worker that held it, the one a lost lease was lost by too.
    expect(shown.errors.map((e) => ("operator" in e ? e.operator : e.worker))).toEqual(["worker-a", "retry", "worker-gone", "worker-gone", "retry", "worker-b"]);
    const stored: HistoryEntry[] = (await row(db.pool, first!.id)).errors;
    for (const entry of stored) {
      expect(entry.at).toMatch(ISO_UTC);
      expect(Math.abs(Date.parse(entry.at) - Date.now())).toBeLessThan(10 * 60_000);
    }
  });

  it("records a cancel, of a pending job and of a running one, with who asked", async () => {
    const pending = await enqueueJob(db.pool, { type: "history-cancel-pending" });
    expect(await cancelJob(db.pool, pending.id, { by: "carol" })).toMatchObject({ outcome: "applied", job: { errors: [{ operator: "cancel", by: "carol" }] } });
    const [running] = await claimed(db.pool, "history-cancel-running");
    await cancelJob(db.pool, running!.id);
    const shown = (await getJob(db.pool, running!.id))!;
    expect(shown.errors).toEqual([{ at: expect.stringMatching(ISO_UTC), operator: "cancel" }]);
    // A refused action records nothing.
    expect(await cancelJob(db.pool, running!.id, { by: "carol" })).toEqual({ outcome: "wrong_status", status: "cancelled" });
    expect(await retryDeadJob(db.pool, running!.id, { by: "carol" })).toEqual({ outcome: "wrong_status", status: "cancelled" });
    expect((await getJob(db.pool, running!.id))!.errors).toHaveLength(1);
  });

  it("refuses a name the history cannot hold, before touching the row", async () => {
    const job = await enqueueJob(db.pool, { type: "history-bad-name" });
    for (const by of ["", "x".repeat(201), "a\u0000b"]) {
      await expect(cancelJob(db.pool, job.id, { by })).rejects.toThrow(InvalidConfigError);
    }
    await expect(cancelJob(db.pool, job.id, { by: "" })).rejects.toThrow(/"by" names who asked for an operator action, as 1 to 200 characters/);
    expect((await row(db.pool, job.id)).status).toBe("pending");
  });

  it("reads entries written in the old format (a timestamptz in jsonb) in the one format", async () => {
    const job = await enqueueJob(db.pool, { type: "history-old" });
    const client = await db.connect();
    try {
      // An older picket wrote now() itself: microseconds, and the session's offset.
      await client.query("SET TIME ZONE 'Asia/Kolkata'");
      await client.query(
        `UPDATE picket.jobs SET status = 'dead', finished_at = now(),
           errors = jsonb_build_array(jsonb_build_object('at', timestamptz '2025-03-04 05:06:07.123456+00', 'attempt', 1, 'message', 'old'))
         WHERE id = $1`,
        [job.id],
      );
      expect((await client.query("SELECT errors->0->>'at' AS at FROM picket.jobs WHERE id = $1", [job.id])).rows[0].at).toBe("2025-03-04T10:36:07.123456+05:30");
    } finally {
      await client.end();
    }
    const expected = [{ at: "2025-03-04T05:06:07.123Z", attempt: 1, message: "old" }];
    expect((await getJob(db.pool, job.id))!.errors).toEqual(expected);
    expect((await listJobs(db.pool, { type: "history-old" }))[0]!.errors).toEqual(expected);
    const { handler, dispose } = createDashboardHandler({ db: db.pool });
    try {
      const snapshot = await (await handler(new Request("http://service.local/api/snapshot"))).json();
      expect(snapshot.dead.find((j: { id: string }) => j.id === job.id).errors).toEqual(expected);
    } finally {
      await dispose();
    }
  });
});

describe("the history as operators see it", () => {
  it("picket jobs retry and cancel name the OS user at this host (or --by); jobs show prints every time in one format", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const env = { env: { DATABASE_URL: db.url } };
    const [job] = await claimed(db.pool, "history-cli", 1, { spec: { maxAttempts: 1 } });
    await recordStep(db.pool, { id: job!.id, token: job!.claimToken }, { name: "charged", result: { receipt: 1 }, attempt: 1 });
    await deadLetterJobs(db.pool, [{ id: job!.id, token: job!.claimToken, error: "card declined" }]);
    expect(await picket(["jobs", "retry", job!.id], env)).toMatchObject({ code: 0, stdout: `job ${job!.id} retried\n` });
    expect(await picket(["jobs", "cancel", job!.id, "--by", "on-call bot"], env)).toMatchObject({ code: 0, stdout: `job ${job!.id} cancelled\n` });
    const shown = await picket(["jobs", "show", job!.id], env);
    expect(shown.code).toBe(0);
    const printed = JSON.parse(shown.stdout);
    expect(outline(printed.errors)).toEqual(["1: card declined", `retry by ${userInfo().username}@${hostname()}`, "cancel by on-call bot"]);
    // Every time the command prints: the row's, the history's and the steps'.
    const times = timesIn(printed);
    expect(times.map(([path]) => path)).toEqual(
      expect.arrayContaining(["$.runAt", "$.createdAt", "$.errors.0.at", "$.errors.1.at", "$.errors.2.at", "$.steps.0.createdAt"]),
    );
    for (const [path, time] of times) expect({ path, time }).toEqual({ path, time: expect.stringMatching(ISO_UTC) });
  });

  it("the dashboard's actions name the dashboard, and its job API prints the history's times as its others", async () => {
    const token = "history-token";
    const [job] = await claimed(db.pool, "history-dashboard", 1, { spec: { maxAttempts: 1 } });
    await deadLetterJobs(db.pool, [{ id: job!.id, token: job!.claimToken, error: "boom" }]);
    const { handler, dispose } = createDashboardHandler({ db: db.pool, token });
    try {
      const retried = await handler(new Request(`http://service.local/api/jobs/${job!.id}/retry`, { method: "POST", headers: { authorization: `Bearer ${token}` } }));
      expect(retried.status).toBe(200);
      const body = await (await handler(new Request(`http://service.local/api/jobs/${job!.id}`))).json();
      expect(outline(body.errors)).toEqual(["1: boom", "retry by dashboard"]);
      expect(body.priorAttempts).toBe(1);
      const times = timesIn(body);
      expect(times.length).toBeGreaterThanOrEqual(4);
      for (const [path, time] of times) expect({ path, time }).toEqual({ path, time: expect.stringMatching(ISO_UTC) });
    } finally {
      await dispose();
    }
  });
});
