// Dedupe modes beyond "live" (migration 0008): "replace" and a window after completion. Every
// row is PostgreSQL's; races are either real (many connections at once) or made deterministic by
// holding one side's transaction open and watching the other wait on the key's advisory lock.
import pg from "pg";
import { describe, expect, it } from "vitest";
import {
  completeJobs,
  enqueueJob,
  enqueueJobs,
  failJobs,
  InvalidJobError,
  sweepExpiredClaims,
  type Job,
  type JobSpec,
  type Queryable,
} from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, expireLease, row } from "./support/factory.ts";

const db = useTestDatabase();

const rowsWithKey = async (key: string) =>
  (await db.pool.query("SELECT j.id::text AS id, status, payload, attempts FROM picket.jobs AS j WHERE key = $1 ORDER BY j.id", [key])).rows;
const successor = async (key: string) => (await db.pool.query("SELECT * FROM picket.key_successors WHERE key = $1", [key])).rows[0];

/** Resolves once some session waits for an advisory lock (a replace or window enqueue of a held key, or a worker's write). */
const someoneWaitsOnKeyLock = () =>
  expect
    .poll(async () => (await db.pool.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")).rows[0].n, {
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
    const second = await enqueueJob(db.pool, { type: "index.v2", key: "doc-1", payload: { v: 2 }, dedupe: "replace" });
    expect(second.id).toBe(first.id);
    expect(second).toMatchObject({ type: "index.v2", payload: { v: 2 }, priority: 5, maxAttempts: 3, status: "pending", attempts: 0, lastError: null });
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

  it("never writes a processing job: it is returned untouched and the spec becomes the key's next job when it completes", async () => {
    const [running] = await claimed(db.pool, "index-doc-3", 1, { spec: { key: "doc-3", payload: { v: 1 } } });
    const before = await row(db.pool, running!.id);
    const returned = await enqueueJob(db.pool, { type: "index-doc-3", key: "doc-3", payload: { v: 2 }, dedupe: "replace" });
    const later = await enqueueJob(db.pool, { type: "index-doc-3", key: "doc-3", payload: { v: 3 }, dedupe: "replace", priority: 4 });
    expect([returned.id, later.id]).toEqual([running!.id, running!.id]);
    expect(returned.status).toBe("processing");
    // Every column of the running row as it was: payload, claim token, lease, updated_at.
    expect(await row(db.pool, running!.id)).toEqual(before);
    expect(await successor("doc-3")).toMatchObject({ type: "index-doc-3", payload: { v: 3 }, priority: 4, waits_for: running!.id });
    // The claim is intact: its owner's fenced write applies.
    const [outcome] = await completeJobs(db.pool, [{ id: running!.id, token: running!.claimToken }]);
    expect(outcome!.outcome).toBe("applied");
    const rows = await rowsWithKey("doc-3");
    expect(rows).toEqual([
      { id: running!.id, status: "completed", payload: { v: 1 }, attempts: 1 },
      { id: expect.any(String), status: "pending", payload: { v: 3 }, attempts: 0 },
    ]);
    expect(await successor("doc-3")).toBeUndefined();
  });

  it("hands the key to the successor when the running job goes back to pending (a retry) or is reclaimed dead", async () => {
    const [retried] = await claimed(db.pool, "index-doc-4", 1, { spec: { key: "doc-4", payload: { v: 1 }, maxAttempts: 5 } });
    await enqueueJob(db.pool, { type: "index-doc-4", key: "doc-4", payload: { v: 2 }, dedupe: "replace" });
    expect((await failJobs(db.pool, [{ id: retried!.id, token: retried!.claimToken, error: "boom" }]))[0]!.outcome).toBe("applied");
    // The same row, pending again, now carries the newest spec with its attempts started again.
    expect(await rowsWithKey("doc-4")).toEqual([{ id: retried!.id, status: "pending", payload: { v: 2 }, attempts: 0 }]);
    expect(await row(db.pool, retried!.id)).toMatchObject({ last_error: null, claim_token: null });

    const [lost] = await claimed(db.pool, "index-doc-5", 1, { spec: { key: "doc-5", payload: { v: 1 }, maxAttempts: 1 } });
    await enqueueJob(db.pool, { type: "index-doc-5", key: "doc-5", payload: { v: 2 }, dedupe: "replace" });
    await expireLease(db.pool, lost!.id);
    await sweepExpiredClaims(db.pool, 100);
    expect((await rowsWithKey("doc-5")).map((r) => [r.status, r.payload])).toEqual([
      ["dead", { v: 1 }],
      ["pending", { v: 2 }],
    ]);
  });

  it("a worker finishing the running job while a replace of its key is uncommitted waits for it, so the successor is never left behind", async () => {
    const [running] = await claimed(db.pool, "index-doc-6", 1, { spec: { key: "doc-6", payload: { v: 1 } } });
    const replacer = await db.connect();
    await replacer.query("BEGIN");
    await enqueueJob(replacer, { type: "index-doc-6", key: "doc-6", payload: { v: 2 }, dedupe: "replace" });
    const completing = completeJobs(db.pool, [{ id: running!.id, token: running!.claimToken }]);
    await someoneWaitsOnKeyLock();
    await replacer.query("COMMIT");
    expect((await completing)[0]!.outcome).toBe("applied");
    expect((await rowsWithKey("doc-6")).map((r) => [r.status, r.payload])).toEqual([
      ["completed", { v: 1 }],
      ["pending", { v: 2 }],
    ]);
    expect(await successor("doc-6")).toBeUndefined();
  });

  it("a replace holding the key's lock is never made to wait for the worker it holds up (the worker locks before it writes)", async () => {
    const [running] = await claimed(db.pool, "index-doc-9", 1, { spec: { key: "doc-9", payload: { v: 1 } } });
    const replacer = await db.connect();
    await replacer.query("BEGIN");
    await enqueueJob(replacer, { type: "index-doc-9", key: "doc-9", payload: { v: 2 }, dedupe: "replace" });
    const completing = completeJobs(db.pool, [{ id: running!.id, token: running!.claimToken }]);
    await someoneWaitsOnKeyLock();
    // Had the worker changed the row before asking for the lock, this INSERT attempt would wait for
    // the worker while the worker waits for this transaction: a deadlock.
    const again = await enqueueJob(replacer, { type: "index-doc-9", key: "doc-9", payload: { v: 3 }, dedupe: "replace" });
    expect(again.id).toBe(running!.id);
    await replacer.query("COMMIT");
    expect((await completing)[0]!.outcome).toBe("applied");
    expect((await rowsWithKey("doc-9")).map((r) => [r.status, r.payload])).toEqual([
      ["completed", { v: 1 }],
      ["pending", { v: 3 }],
    ]);
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
  });

  it("a successor that cannot be enqueued never fails the worker's write: the outcome is recorded, the successor kept", async () => {
    const [running] = await claimed(db.pool, "index-doc-11", 1, { spec: { key: "doc-11", payload: { v: 1 } } });
    await enqueueJob(db.pool, { type: "index-refused", key: "doc-11", payload: { v: 2 }, dedupe: "replace" });
    // Stands for any failure of the successor's INSERT (a user's trigger, a constraint added later).
    await db.pool.query(`
      CREATE FUNCTION public.refuse_job() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.type = 'index-refused' THEN RAISE EXCEPTION 'refused by a test trigger'; END IF; RETURN NEW; END $$;
      CREATE TRIGGER refuse_job BEFORE INSERT ON picket.jobs FOR EACH ROW EXECUTE FUNCTION public.refuse_job();`);
    try {
      expect((await completeJobs(db.pool, [{ id: running!.id, token: running!.claimToken }]))[0]!.outcome).toBe("applied");
    } finally {
      await db.pool.query("DROP TRIGGER refuse_job ON picket.jobs; DROP FUNCTION public.refuse_job()");
    }
    expect((await rowsWithKey("doc-11")).map((r) => r.status)).toEqual(["completed"]);
    expect(await successor("doc-11")).toMatchObject({ type: "index-refused", payload: { v: 2 } });
  });

  it("concurrent replaces of one key create exactly one job, which ends with one of their payloads", async () => {
    const clients = await Promise.all(Array.from({ length: 12 }, () => db.connect()));
    const jobs = await Promise.all(clients.map((c, i) => enqueueJob(c, { type: "index", key: "doc-7", payload: { i }, dedupe: "replace" })));
    expect(new Set(jobs.map((j) => j.id)).size).toBe(1);
    const rows = await rowsWithKey("doc-7");
    expect(rows).toHaveLength(1);
    expect(jobs.map((j) => j.payload)).toContainEqual(rows[0].payload);
  });

  it("concurrent replaces while the key's job runs, racing its completion, leave exactly one job after it", async () => {
    const [running] = await claimed(db.pool, "index-doc-8", 1, { spec: { key: "doc-8", payload: { i: -1 } } });
    const clients = await Promise.all(Array.from({ length: 12 }, () => db.connect()));
    const replaces = clients.map((c, i) => enqueueJob(c, { type: "index-doc-8", key: "doc-8", payload: { i }, dedupe: "replace" }));
    const completion = completeJobs(db.pool, [{ id: running!.id, token: running!.claimToken }]);
    await Promise.all([...replaces, completion]);
    const rows = await rowsWithKey("doc-8");
    expect(rows.map((r) => r.status)).toEqual(["completed", "pending"]);
    expect(await successor("doc-8")).toBeUndefined();
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
    expect(defaults).toMatchObject({ priority: 0, max_attempts: 5, key: null });
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
