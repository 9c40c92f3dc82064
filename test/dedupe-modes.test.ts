// Dedupe modes beyond "live" (migration 0008): "replace" and a window after completion. Every
// row is PostgreSQL's; races are either real (many connections at once) or made deterministic by
// holding one side's transaction open and watching the other wait on the key's advisory lock.
import pg from "pg";
import { describe, expect, it } from "vitest";
import {
  claimLimited,
  completeJobs,
  drawClaimTokens,
  enqueueJob,
  enqueueJobs,
  failJobs,
  InvalidJobError,
  renewLeases,
  StatementTimeoutError,
  type Job,
  type JobSpec,
  type Queryable,
} from "../src/db/index.ts";
import { enqueueWithDedupeModes } from "../src/db/dedupe.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, row, want } from "./support/factory.ts";

const db = useTestDatabase();

const rowsWithKey = async (key: string) =>
  (await db.pool.query("SELECT j.id::text AS id, status, payload, attempts FROM picket.jobs AS j WHERE key = $1 ORDER BY j.id", [key])).rows;

/** Resolves once some session waits for an advisory lock (a replace or window enqueue of a held key). */
const someoneWaitsOnKeyLock = () =>
  expect
    .poll(async () => (await db.pool.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")).rows[0].n, {
      timeout: 10_000,
    })
    .toBe(1);

/** Resolves once some session waits for another transaction (a row lock, or a uniqueness check on an uncommitted row). */
const someoneWaitsOnTransaction = () =>
  expect
    .poll(async () => (await db.pool.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted")).rows[0].n, {
      timeout: 10_000,
    })
    .toBe(1);

/** Counts the statements picket sends. */
const counting = () => {
  const texts: string[] = [];
  const q: Queryable = {
    query: async <R extends pg.QueryResultRow>(config: pg.QueryConfig) => {
      texts.push(config.text);
      return db.pool.query<R>(config);
    },
  };
  return { q, count: () => texts.length, texts };
};

/** Sets a job completed, finished `agoMs` before the database's now(). */
const finishedAgo = (id: string, agoMs: number, status = "completed") =>
  db.pool.query("UPDATE picket.jobs SET status = $2, finished_at = now() - $3::int * interval '1 millisecond' WHERE id = $1", [id, status, agoMs]);

describe("dedupe: replace", () => {
  it("gives the pending job with the key the new spec and returns it; priority and maxAttempts only when given", async () => {
    const first = await enqueueJob(db.pool, { type: "index", key: "doc-1", payload: { v: 1 }, priority: 5, maxAttempts: 3, delayMs: 3_600_000 });
    // A failed attempt earlier: the replacement is new work, so its attempts start again.
    await db.pool.query("UPDATE picket.jobs SET attempts = 2, last_error = 'old' WHERE id = $1", [first.id]);
    const second = await enqueueJob(db.pool, { type: "index.v2", key: "doc-1", payload: { v: 2 }, queue: "doc-q1", dedupe: "replace" });
    expect(second.id).toBe(first.id);
    expect(second).toMatchObject({ type: "index.v2", payload: { v: 2 }, queue: "doc-q1", priority: 5, maxAttempts: 3, status: "pending", attempts: 0, lastError: null });
    // Run time replaced too: the new spec said "now" (no delay), so it is due at once.
    const { rows } = await db.pool.query("SELECT run_at <= now() AS due FROM picket.jobs WHERE id = $1", [first.id]);
    expect(rows[0].due).toBe(true);
    const third = await enqueueJob(db.pool, { type: "index.v2", key: "doc-1", payload: { v: 3 }, dedupe: "replace", priority: -2, maxAttempts: 9, delayMs: 60_000 });
    expect(third).toMatchObject({ id: first.id, payload: { v: 3 }, priority: -2, maxAttempts: 9 });
    expect(third.runAt.getTime() - third.updatedAt.getTime()).toBeGreaterThanOrEqual(59_000);
    expect(await rowsWithKey("doc-1")).toHaveLength(1);
  });

  it("creates the job when no job holds the key, and a key twice in one batch ends as the later spec", async () => {
    const [a, b] = await enqueueJobs(db.pool, [
      { type: "index", key: "doc-2", payload: { v: 1 }, dedupe: "replace" },
      { type: "index", key: "doc-2", payload: { v: 2 }, dedupe: "replace" },
    ]);
    expect(a!.id).toBe(b!.id);
    expect(b!.payload).toEqual({ v: 2 });
    expect(await rowsWithKey("doc-2")).toEqual([{ id: a!.id, status: "pending", payload: { v: 2 }, attempts: 0 }]);
  });

  it("moves the key off a processing job to a new pending job with the spec, writing nothing else of the running row", async () => {
    const [running] = await claimed(db.pool, "index-doc-3", 1, { spec: { key: "doc-3", payload: { v: 1 } } });
    const before = await row(db.pool, running!.id);
    const moved = await enqueueJob(db.pool, { type: "index-doc-3", key: "doc-3", payload: { v: 2 }, dedupe: "replace", priority: 4 });
    expect(moved.id).not.toBe(running!.id);
    expect(moved).toMatchObject({ status: "pending", key: "doc-3", payload: { v: 2 }, priority: 4, attempts: 0 });
    // Every column of the running row as it was (claim token, lease, status, updated_at...) but the key.
    expect(await row(db.pool, running!.id)).toEqual({ ...before, key: null });
    // A later replace finds the new job pending and replaces it: one new job, the newest spec.
    const later = await enqueueJob(db.pool, { type: "index-doc-3", key: "doc-3", payload: { v: 3 }, dedupe: "replace" });
    expect(later.id).toBe(moved.id);
    expect(await rowsWithKey("doc-3")).toEqual([{ id: moved.id, status: "pending", payload: { v: 3 }, attempts: 0 }]);
    // A "live" enqueue of the key now returns the new job.
    expect((await enqueueJob(db.pool, { type: "index-doc-3", key: "doc-3" })).id).toBe(moved.id);
  });

  it("the worker's fenced writes still apply to a job whose key moved: renew, complete, and fail (a retry runs without the key)", async () => {
    const [done, retried] = await claimed(db.pool, "index-fenced", 2, { spec: { maxAttempts: 5 } });
    await db.pool.query("UPDATE picket.jobs SET key = 'f-' || id WHERE id = ANY($1::bigint[])", [[done!.id, retried!.id]]);
    const [doneNext, retriedNext] = await enqueueJobs(db.pool, [
      { type: "index-fenced", key: `f-${done!.id}`, dedupe: "replace" },
      { type: "index-fenced", key: `f-${retried!.id}`, dedupe: "replace" },
    ]);
    const renewed = await renewLeases(db.pool, [
      { id: done!.id, token: done!.claimToken, leaseMs: 120_000 },
      { id: retried!.id, token: retried!.claimToken, leaseMs: 120_000 },
    ]);
    expect(renewed.map((r) => r.outcome)).toEqual(["applied", "applied"]);
    expect((await completeJobs(db.pool, [{ id: done!.id, token: done!.claimToken, result: { ok: 1 } }], { keepCompleted: true }))[0]!.outcome).toBe("applied");
    expect((await failJobs(db.pool, [{ id: retried!.id, token: retried!.claimToken, error: "boom" }]))[0]!.outcome).toBe("applied");
    expect(await row(db.pool, done!.id)).toMatchObject({ status: "completed", result: { ok: 1 }, key: null });
    // The old run's retry no longer holds the key: it is pending beside the new job, which keeps it.
    expect(await row(db.pool, retried!.id)).toMatchObject({ status: "pending", attempts: 1, last_error: "boom", key: null });
    expect(await rowsWithKey(`f-${done!.id}`)).toEqual([{ id: doneNext!.id, status: "pending", payload: {}, attempts: 0 }]);
    expect(await rowsWithKey(`f-${retried!.id}`)).toEqual([{ id: retriedNext!.id, status: "pending", payload: {}, attempts: 0 }]);
  });

  it("a replace waits for a worker's write in flight on the running row only until that statement commits, then sees its outcome", async () => {
    const [finishing, failing] = await claimed(db.pool, "index-inflight", 2, { spec: { maxAttempts: 5 } });
    await db.pool.query("UPDATE picket.jobs SET key = 'w-' || id WHERE id = ANY($1::bigint[])", [[finishing!.id, failing!.id]]);
    // A worker's write is one statement; holding its transaction open makes "in flight" last.
    const worker = await db.connect();
    await worker.query("BEGIN");
    expect((await completeJobs(worker, [{ id: finishing!.id, token: finishing!.claimToken }]))[0]!.outcome).toBe("applied");
    const replacing = enqueueJob(db.pool, { type: "index-inflight", key: `w-${finishing!.id}`, payload: { v: 2 }, dedupe: "replace" });
    await someoneWaitsOnTransaction();
    await worker.query("COMMIT");
    // The job finished first, so it keeps its key (a finished job does not hold it) and the spec is a new job.
    const next = await replacing;
    expect(await row(db.pool, finishing!.id)).toMatchObject({ status: "completed", key: `w-${finishing!.id}` });
    expect(next).toMatchObject({ status: "pending", key: `w-${finishing!.id}`, payload: { v: 2 } });

    // A failure in flight makes the job pending again, holding its key: the replace then replaces it.
    await worker.query("BEGIN");
    expect((await failJobs(worker, [{ id: failing!.id, token: failing!.claimToken, error: "boom" }]))[0]!.outcome).toBe("applied");
    const replacingFailed = enqueueJob(db.pool, { type: "index-inflight", key: `w-${failing!.id}`, payload: { v: 3 }, dedupe: "replace" });
    await someoneWaitsOnTransaction();
    await worker.query("COMMIT");
    expect(await replacingFailed).toMatchObject({ id: failing!.id, status: "pending", payload: { v: 3 }, attempts: 0 });
    expect(await rowsWithKey(`w-${failing!.id}`)).toHaveLength(1);
  });

  it("a replace waiting on a running row that another session keeps locked ends within its statement bound", async () => {
    const [running] = await claimed(db.pool, "index-held", 1, { spec: { key: "held-1" } });
    const operator = await db.connect();
    await operator.query("BEGIN");
    await operator.query("SELECT 1 FROM picket.jobs WHERE id = $1 FOR UPDATE", [running!.id]);
    const started = performance.now();
    await expect(enqueueJob(db.pool, { type: "index-held", key: "held-1", dedupe: "replace" }, { timeoutMs: 1_000 })).rejects.toThrow(StatementTimeoutError);
    expect(performance.now() - started).toBeLessThan(8_000);
    // The cancel reaches the server a moment after the caller hears of it: wait until nothing waits.
    await expect
      .poll(async () => (await db.pool.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted")).rows[0].n, { timeout: 10_000 })
      .toBe(0);
    await operator.query("ROLLBACK");
    expect(await rowsWithKey("held-1")).toEqual([{ id: running!.id, status: "processing", payload: { i: 0 }, attempts: 1 }]);
  });

  it("a worker's batch never waits on an open transaction that replaced one of its jobs: the other job applies at once, that one is busy until it commits", async () => {
    const [moved, other] = await claimed(db.pool, "index-open", 2);
    await db.pool.query("UPDATE picket.jobs SET key = 'open-1' WHERE id = $1", [moved!.id]);
    const replacer = await db.connect();
    await replacer.query("BEGIN");
    const next = await enqueueJob(replacer, { type: "index-open", key: "open-1", payload: { v: 2 }, dedupe: "replace" });
    // The replace's transaction stays open while the worker writes: no wait (SKIP LOCKED), the
    // other job applied, the moved one reported busy (its row carries the uncommitted key move).
    const outcomes = await completeJobs(db.pool, [
      { id: moved!.id, token: moved!.claimToken },
      { id: other!.id, token: other!.claimToken },
    ]);
    expect(outcomes.map((o) => o.outcome)).toEqual(["busy", "applied"]);
    // (Completed without a key: deleted by its completion.)
    expect(await row(db.pool, other!.id)).toBeUndefined();
    await replacer.query("COMMIT");
    // The worker's retry of the busy one applies; its key moved to the new job, so it is deleted too.
    expect((await completeJobs(db.pool, [{ id: moved!.id, token: moved!.claimToken }]))[0]!.outcome).toBe("applied");
    expect(await row(db.pool, moved!.id)).toBeUndefined();
    expect((await rowsWithKey("open-1")).map((r) => [r.id, r.status])).toEqual([[next.id, "pending"]]);
  });

  it("with the same serial queue, the job a replace moved the key to starts only after the old run ends", async () => {
    const claimQueued = () => claimLimited(db.pool, "w", [{ ...want("index-q", { limit: 10 }) }], { total: 10, tokens: drawClaimTokens(10) });
    await enqueueJob(db.pool, { type: "index-q", key: "q-1", queue: "doc-q", payload: { v: 1 } });
    const [running] = await claimQueued();
    const next = await enqueueJob(db.pool, { type: "index-q", key: "q-1", queue: "doc-q", payload: { v: 2 }, dedupe: "replace" });
    expect(next).toMatchObject({ status: "pending", queue: "doc-q", key: "q-1" });
    expect(next.id).not.toBe(running!.id);
    // The queue is held by the old run, which no longer holds the key: the new job waits for it.
    expect(await claimQueued()).toEqual([]);
    expect((await completeJobs(db.pool, [{ id: running!.id, token: running!.claimToken }]))[0]!.outcome).toBe("applied");
    expect((await claimQueued()).map((j) => j.id)).toEqual([next.id]);
  });

  it("two batches naming the same keys in opposite orders take the keys' locks in one order (no deadlock)", async () => {
    const holder = await db.connect();
    await holder.query("BEGIN");
    await enqueueJobs(holder, [
      { type: "order", key: "o-a", dedupe: "replace" },
      { type: "order", key: "o-b", dedupe: "replace" },
    ]);
    const [one, two] = await Promise.all([db.connect(), db.connect()]);
    const forward = enqueueJobs(one, [
      { type: "order", key: "o-a", payload: 1, dedupe: "replace" },
      { type: "order", key: "o-b", payload: 1, dedupe: "replace" },
    ]);
    const backward = enqueueJobs(two, [
      { type: "order", key: "o-b", payload: 2, dedupe: "replace" },
      { type: "order", key: "o-a", payload: 2, dedupe: "replace" },
    ]);
    await expect
      .poll(async () => (await db.pool.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")).rows[0].n, { timeout: 10_000 })
      .toBe(2);
    // Both batches were waiting; released together, in opposite orders they would deadlock.
    await holder.query("COMMIT");
    await Promise.all([forward, backward]);
    expect(await rowsWithKey("o-a")).toHaveLength(1);
    expect(await rowsWithKey("o-b")).toHaveLength(1);
  });

  it("wakes listening workers when a replace makes the pending job due now", async () => {
    await enqueueJob(db.pool, { type: "index-wake", key: "doc-10", delayMs: 3_600_000 });
    const listener = await db.connect();
    const heard: string[] = [];
    listener.on("notification", (n) => heard.push(`${n.channel}|${n.payload}`));
    await listener.query('LISTEN "picket:picket"');
    await enqueueJob(db.pool, { type: "index-wake", key: "doc-10", delayMs: 3_600_000, dedupe: "replace" });
    await enqueueJob(db.pool, { type: "index-wake", key: "doc-10", dedupe: "replace" });
    await expect.poll(() => heard, { timeout: 5_000 }).toEqual(["picket:picket|index-wake"]);
    // A queued job is announced as the insert trigger (0007) announces one, so workers run the slow claim.
    await enqueueJob(db.pool, { type: "index-wake-q", key: "doc-10q", queue: "wake-q", delayMs: 3_600_000 });
    await enqueueJob(db.pool, { type: "index-wake-q", key: "doc-10q", queue: "wake-q", dedupe: "replace" });
    await expect.poll(() => heard, { timeout: 5_000 }).toEqual(["picket:picket|index-wake", "picket:picket|index-wake-q,!queued"]);
  });

  it("concurrent replaces of one key create exactly one job, which ends with one of their payloads", async () => {
    const clients = await Promise.all(Array.from({ length: 12 }, () => db.connect()));
    const jobs = await Promise.all(clients.map((c, i) => enqueueJob(c, { type: "index", key: "doc-7", payload: { i }, dedupe: "replace" })));
    expect(new Set(jobs.map((j) => j.id)).size).toBe(1);
    const rows = await rowsWithKey("doc-7");
    expect(rows).toHaveLength(1);
    expect(jobs.map((j) => j.payload)).toContainEqual(rows[0].payload);
  });

  it("12 concurrent replaces against a running job leave exactly one new pending job with the key", async () => {
    const [running] = await claimed(db.pool, "index-doc-8", 1, { spec: { key: "doc-8", payload: { i: -1 } } });
    const clients = await Promise.all(Array.from({ length: 12 }, () => db.connect()));
    const jobs = await Promise.all(clients.map((c, i) => enqueueJob(c, { type: "index-doc-8", key: "doc-8", payload: { i }, dedupe: "replace" })));
    const rows = await rowsWithKey("doc-8");
    expect(rows).toEqual([{ id: expect.any(String), status: "pending", payload: expect.anything(), attempts: 0 }]);
    expect(new Set(jobs.map((j) => j.id))).toEqual(new Set([rows[0].id]));
    expect(await row(db.pool, running!.id)).toMatchObject({ status: "processing", key: null, claim_token: running!.claimToken });
  });

  it("concurrent replaces racing the running job's completion leave it completed and exactly one pending job with the key", async () => {
    const [running] = await claimed(db.pool, "index-doc-12", 1, { spec: { key: "doc-12", payload: { i: -1 } } });
    const clients = await Promise.all(Array.from({ length: 12 }, () => db.connect()));
    const replaces = clients.map((c, i) => enqueueJob(c, { type: "index-doc-12", key: "doc-12", payload: { i }, dedupe: "replace" }));
    const [outcome] = await completeJobs(db.pool, [{ id: running!.id, token: running!.claimToken }]);
    await Promise.all(replaces);
    // The completion ran beside the replaces: applied at once, or busy while a replace held the row (then retried, as a worker does).
    if (outcome!.outcome === "busy") expect((await completeJobs(db.pool, [{ id: running!.id, token: running!.claimToken }]))[0]!.outcome).toBe("applied");
    else expect(outcome!.outcome).toBe("applied");
    // Completed: kept, holding the key, when it completed before any replace moved the key; else its
    // key had moved to a new job and the completion deleted the row.
    const done = await row(db.pool, running!.id);
    if (done === undefined) expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE key = 'doc-12'")).rows[0].n).toBe(1);
    else expect(done).toMatchObject({ status: "completed", key: "doc-12" });
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE key = 'doc-12' AND status = 'pending'")).rows[0].n).toBe(1);
  });
});

describe("dedupe: a window after completion", () => {
  it("returns a job that completed within the window, and creates one once the window has passed (database clock)", async () => {
    const inside = await enqueueJob(db.pool, { type: "report", key: "r-in" });
    const outside = await enqueueJob(db.pool, { type: "report", key: "r-out" });
    await finishedAgo(inside.id, 59_000);
    await finishedAgo(outside.id, 61_000);
    const window = { windowMs: 60_000 };
    const refused = await enqueueJob(db.pool, { type: "report", key: "r-in", dedupe: window });
    expect(refused).toMatchObject({ id: inside.id, status: "completed" });
    const created = await enqueueJob(db.pool, { type: "report", key: "r-out", dedupe: window, payload: { n: 2 } });
    expect(created.id).not.toBe(outside.id);
    expect(created).toMatchObject({ status: "pending", payload: { n: 2 } });
    expect((await rowsWithKey("r-in")).length).toBe(1);
    expect((await rowsWithKey("r-out")).map((r) => r.status)).toEqual(["completed", "pending"]);
  });

  it("returns the newest completed job in the window, and a live job before any completed one", async () => {
    const old = await enqueueJob(db.pool, { type: "report", key: "r-2" });
    await finishedAgo(old.id, 50_000);
    const recent = await enqueueJob(db.pool, { type: "report", key: "r-2" });
    await finishedAgo(recent.id, 10_000);
    expect((await enqueueJob(db.pool, { type: "report", key: "r-2", dedupe: { windowMs: 60_000 } })).id).toBe(recent.id);
    const live = await enqueueJob(db.pool, { type: "report", key: "r-2" });
    expect((await enqueueJob(db.pool, { type: "report", key: "r-2", dedupe: { windowMs: 60_000 } })).id).toBe(live.id);
  });

  it("is not held by a dead or cancelled job: they did not do the work", async () => {
    for (const status of ["dead", "cancelled"]) {
      const failed = await enqueueJob(db.pool, { type: "report", key: `r-${status}` });
      await finishedAgo(failed.id, 1_000, status);
      const again = await enqueueJob(db.pool, { type: "report", key: `r-${status}`, dedupe: { windowMs: 60_000 } });
      expect(again.id).not.toBe(failed.id);
      expect(again.status).toBe("pending");
    }
  });

  it("a window enqueue waits for another one's transaction, and sees the job it created even if it finished there", async () => {
    const first = await db.connect();
    await first.query("BEGIN");
    const created = await enqueueJob(first, { type: "report", key: "r-3", dedupe: { windowMs: 60_000 } });
    const second = enqueueJob(db.pool, { type: "report", key: "r-3", dedupe: { windowMs: 60_000 } });
    await someoneWaitsOnKeyLock();
    // The job is done before the first transaction commits (no longer live when the second reads).
    await first.query("UPDATE picket.jobs SET status = 'completed', finished_at = now() WHERE id = $1", [created.id]);
    await first.query("COMMIT");
    expect((await second).id).toBe(created.id);
    expect(await rowsWithKey("r-3")).toHaveLength(1);
  });

  it("a window enqueue racing an uncommitted live enqueue of the key returns that job (the live-key index settles it)", async () => {
    const live = await db.connect();
    await live.query("BEGIN");
    const held = await enqueueJob(live, { type: "report", key: "r-5" });
    const windowed = enqueueJob(db.pool, { type: "report", key: "r-5", dedupe: { windowMs: 60_000 } });
    await expect
      .poll(async () => (await db.pool.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted")).rows[0].n, { timeout: 10_000 })
      .toBe(1);
    await live.query("COMMIT");
    expect((await windowed).id).toBe(held.id);
    expect(await rowsWithKey("r-5")).toHaveLength(1);
  });

  it("concurrent window enqueues of one key create exactly one job", async () => {
    const done = await enqueueJob(db.pool, { type: "report", key: "r-4" });
    await finishedAgo(done.id, 120_000);
    const clients = await Promise.all(Array.from({ length: 12 }, () => db.connect()));
    const jobs = await Promise.all(clients.map((c, i) => enqueueJob(c, { type: "report", key: "r-4", payload: { i }, dedupe: { windowMs: 60_000 } })));
    expect(new Set(jobs.map((j) => j.id)).size).toBe(1);
    expect((await rowsWithKey("r-4")).map((r) => r.status)).toEqual(["completed", "pending"]);
  });
});

describe("dedupe modes: batches, SQL and bad input", () => {
  it("returns a mixed batch in the order given, in one statement (all or nothing), whatever its modes", async () => {
    const plain = counting();
    await enqueueJobs(plain.q, [{ type: "mix" }, { type: "mix", key: "m-live" }, { type: "mix", key: "m-live", dedupe: "live" }]);
    // The common path stays the plain INSERT (no PL/pgSQL per job).
    expect(plain.texts.map((t) => t.trimStart().split(" ")[0])).toEqual(["INSERT"]);
    const modal = counting();
    await enqueueJobs(modal.q, [{ type: "mix", key: "m-r", dedupe: "replace" }, { type: "mix", key: "m-w", dedupe: { windowMs: 1_000 } }]);
    expect(modal.count()).toBe(1);
    const mixed = counting();
    const jobs = await enqueueJobs(mixed.q, [
      { type: "mix", payload: 1 },
      { type: "mix", key: "m-r", payload: 2, dedupe: "replace" },
      { type: "mix", key: "m-live", payload: 3 },
      { type: "mix", key: "m-w", payload: 4, dedupe: { windowMs: 1_000 } },
      { type: "mix", key: "m-new", payload: 5, dedupe: "replace" },
    ]);
    expect(jobs.map((j: Job) => [j.key, j.payload])).toEqual([
      [null, 1],
      ["m-r", 2],
      ["m-live", {}],
      ["m-w", {}],
      ["m-new", 5],
    ]);
    expect(mixed.count()).toBe(1);
  });

  it("add_job takes the modes, and its earlier calls mean what they meant", async () => {
    const { rows: [positional] } = await db.pool.query("SELECT (picket.add_job('sql.t', '{\"n\": 1}', NULL, 3, 2, 'sql-1')).*");
    expect(positional).toMatchObject({ priority: 3, max_attempts: 2, key: "sql-1", payload: { n: 1 } });
    const { rows: [defaults] } = await db.pool.query("SELECT (picket.add_job('sql.t')).*");
    expect(defaults).toMatchObject({ priority: 0, max_attempts: null, key: null, queue: null });
    const { rows: [replaced] } = await db.pool.query("SELECT (picket.add_job('sql.t', '{\"n\": 2}', job_key => 'sql-1', dedupe => 'replace')).*");
    expect(replaced).toMatchObject({ id: positional.id, payload: { n: 2 }, priority: 3, max_attempts: 2 });
    await finishedAgo(positional.id, 5_000);
    const { rows: [held] } = await db.pool.query("SELECT (picket.add_job('sql.t', job_key => 'sql-1', dedupe => 'window', dedupe_window => interval '1 minute')).*");
    expect(held.id).toBe(positional.id);
    const { rows: [fresh] } = await db.pool.query("SELECT (picket.add_job('sql.t', job_key => 'sql-1', dedupe => 'window', dedupe_window => interval '2 seconds')).*");
    expect(fresh.id).not.toBe(positional.id);
  });

  it("add_job refuses bad combinations with a message that says what to do", async () => {
    const refused: Array<[string, RegExp]> = [
      ["picket.add_job('t', dedupe => 'replace')", /dedupe 'replace' needs a job_key/],
      ["picket.add_job('t', job_key => 'k', dedupe => 'sometimes')", /dedupe must be 'live', 'replace' or 'window' \(got 'sometimes'\)/],
      ["picket.add_job('t', job_key => 'k', dedupe => 'window')", /needs a positive dedupe_window, e\.g\. interval '10 minutes' \(got NULL\)/],
      ["picket.add_job('t', job_key => 'k', dedupe => 'window', dedupe_window => interval '-1 second')", /needs a positive dedupe_window/],
      ["picket.add_job('t', job_key => 'k', dedupe => 'replace', dedupe_window => interval '1 second')", /dedupe_window applies only with dedupe => 'window'/],
    ];
    for (const [call, message] of refused) await expect(db.pool.query(`SELECT ${call}`)).rejects.toThrow(message);
    const client = await db.connect();
    await client.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
    await expect(enqueueJob(client, { type: "t", key: "k-rr", dedupe: "replace" })).rejects.toThrow(/dedupe 'replace' needs a READ COMMITTED transaction \(this one is repeatable read\)/);
    await client.query("ROLLBACK");
    expect(await rowsWithKey("k-rr")).toEqual([]);
  });

  const bad: Array<[string, unknown, RegExp]> = [
    ["replace without a key", { type: "t", dedupe: "replace" }, /dedupe "replace" needs a key/],
    ["a window without a key", { type: "t", dedupe: { windowMs: 1000 } }, /dedupe \{ windowMs \} needs a key/],
    ["live without a key", { type: "t", dedupe: "live" }, /dedupe "live" needs a key/],
    ["an unknown mode", { type: "t", key: "k", dedupe: "debounce" }, /dedupe must be "live", "replace" or \{ windowMs: <milliseconds> \} \(got "debounce"\)/],
    ["a window of 0", { type: "t", key: "k", dedupe: { windowMs: 0 } }, /windowMs must be a whole number of milliseconds from 1 to 31536000000 \(a year\) \(got 0\)/],
    ["a fractional window", { type: "t", key: "k", dedupe: { windowMs: 1.5 } }, /windowMs must be a whole number/],
    ["a window in a string", { type: "t", key: "k", dedupe: { windowMs: "60s" } }, /windowMs must be a whole number.*\(got "60s"\)/],
    ["a window over a year", { type: "t", key: "k", dedupe: { windowMs: 31_536_000_001 } }, /windowMs must be a whole number/],
  ];
  for (const [name, spec, message] of bad) {
    it(`refuses ${name} before writing anything`, async () => {
      const attempt = enqueueJobs(db.pool, [{ type: "ok-before-bad", key: "never" }, spec as JobSpec]);
      await expect(attempt).rejects.toThrow(InvalidJobError);
      await expect(attempt).rejects.toThrow(message);
      expect(await rowsWithKey("never")).toEqual([]);
    });
  }
});

describe("the moded enqueue's own edges", () => {
  it("runs a replaced or windowed job at the runAt given, and answers an empty batch with no jobs and no statement", async () => {
    const runAt = new Date("2031-05-06T07:08:09.000Z");
    const replaced = await enqueueJob(db.pool, { type: "at", key: "at-1", dedupe: "replace", runAt });
    const windowed = await enqueueJob(db.pool, { type: "at", key: "at-2", dedupe: { windowMs: 60_000 }, runAt });
    expect([replaced.runAt, windowed.runAt]).toEqual([runAt, runAt]);
    const noQueries = { query: () => Promise.reject(new Error("no statement expected")) } as unknown as Queryable;
    expect(await enqueueWithDedupeModes(noQueries, [])).toEqual([]);
  });
});
