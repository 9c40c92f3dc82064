// Serial queues and cluster-wide task limits at the statement level (issue 15, items 2 and 3):
// claimLimited (claim_limited() of migration 0007) against a real PostgreSQL, including claims
// racing on several connections. The whole runtime under kills and a PostgreSQL restart is in
// test/queues-chaos.test.ts.
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import {
  claimJobs,
  claimLimited,
  completeJobs,
  drawClaimTokens,
  enqueueJob,
  enqueueJobs,
  InvalidConfigError,
  InvalidJobError,
  releaseJobs,
  sweepExpiredClaims,
  type LimitedClaimedJob,
  type LimitedClaimWant,
  type Queryable,
} from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { expireLease, row, want } from "./support/factory.ts";

const db = useTestDatabase();

const slow = (type: string, overrides: Partial<LimitedClaimWant> = {}): LimitedClaimWant => ({ ...want(type, { limit: 10 }), ...overrides });

const claimSlow = (
  client: Queryable,
  wants: LimitedClaimWant[],
  options: { worker?: string; queues?: Record<string, { concurrency: number }>; total?: number } = {},
): Promise<LimitedClaimedJob[]> => {
  const total = options.total ?? wants.reduce((sum, w) => sum + w.limit, 0);
  return claimLimited(client, options.worker ?? "w", wants, { total, tokens: drawClaimTokens(total), ...(options.queues ? { queues: options.queues } : {}) });
};

// Completed rows are kept: the tests read their claims' stamps (locked_at) afterwards.
const complete = async (client: Queryable, jobs: LimitedClaimedJob[]) => {
  const results = await completeJobs(client, jobs.map((j) => ({ id: j.id, token: j.claimToken })), { keepCompleted: true });
  expect(results.every((r) => r.outcome === "applied")).toBe(true);
};

/** The most intervals open at once; `intervals` are [start, end]. */
const peakOverlap = (intervals: Array<[number, number]>): number => {
  const events = intervals.flatMap(([start, end]) => [
    [start, 1],
    [end, -1],
  ]);
  // At equal times an end comes before a start: touching is not overlapping.
  events.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  let open = 0;
  let peak = 0;
  for (const [, delta] of events) peak = Math.max(peak, (open += delta!));
  return peak;
};

describe("serial queues", () => {
  it("one job of a queue at a time, in run_at then id order, whatever the priority", async () => {
    const now = Date.now();
    // Enqueued out of order: ids and run_at disagree, and priority must not matter in a queue.
    const [c, a, b] = await enqueueJobs(db.pool, [
      { type: "ser", queue: "acct-1", runAt: new Date(now - 1_000), priority: 100 },
      { type: "ser", queue: "acct-1", runAt: new Date(now - 3_000) },
      { type: "ser", queue: "acct-1", runAt: new Date(now - 2_000) },
    ]);
    const order: string[] = [];
    for (let i = 0; i < 3; i++) {
      const jobs = await claimSlow(db.pool, [slow("ser")]);
      expect(jobs).toHaveLength(1);
      expect(jobs[0]!.queue).toBe("acct-1");
      // While it is processing, the queue is held: nothing more, on any worker.
      expect(await claimSlow(db.pool, [slow("ser")], { worker: "other" })).toEqual([]);
      order.push(jobs[0]!.id);
      await complete(db.pool, jobs);
    }
    expect(order).toEqual([a!.id, b!.id, c!.id]);
  });

  it("queues are independent, and a configured concurrency lets that many run at once", async () => {
    await enqueueJobs(db.pool, [
      ...Array.from({ length: 3 }, () => ({ type: "par", queue: "wide" })),
      ...Array.from({ length: 3 }, () => ({ type: "par", queue: "narrow" })),
    ]);
    const jobs = await claimSlow(db.pool, [slow("par")], { queues: { wide: { concurrency: 2 } } });
    const byQueue = (queue: string) => jobs.filter((j) => j.queue === queue).length;
    expect(byQueue("wide")).toBe(2);
    expect(byQueue("narrow")).toBe(1);
  });

  it("the fast claim never takes a queued job, and the slow one never a plain job of an unlimited task", async () => {
    const queued = await enqueueJob(db.pool, { type: "mixed", queue: "q-mixed" });
    const plain = await enqueueJob(db.pool, { type: "mixed" });
    const fast = await claimJobs(db.pool, "w", [want("mixed", { limit: 10 })]);
    expect(fast.map((j) => j.id)).toEqual([plain.id]);
    const slowJobs = await claimSlow(db.pool, [slow("mixed")]);
    expect(slowJobs.map((j) => j.id)).toEqual([queued.id]);
  });

  it("a queue's head this worker has no handler for holds the jobs behind it (order is kept)", async () => {
    await enqueueJob(db.pool, { type: "other-task", queue: "strict", runAt: new Date(Date.now() - 2_000) });
    await enqueueJob(db.pool, { type: "mine", queue: "strict", runAt: new Date(Date.now() - 1_000) });
    expect(await claimSlow(db.pool, [slow("mine")])).toEqual([]);
    // Even with room for two: the second may not start before the first has.
    expect(await claimSlow(db.pool, [slow("mine")], { queues: { strict: { concurrency: 2 } } })).toEqual([]);
  });

  it("a hold ends with the row's processing: a crashed worker's by the sweep; a fenced write releases nothing", async () => {
    const [first, second] = await enqueueJobs(db.pool, [
      { type: "held", queue: "crash", runAt: new Date(Date.now() - 2_000) },
      { type: "held", queue: "crash", runAt: new Date(Date.now() - 1_000) },
    ]);
    const [claimedFirst] = await claimSlow(db.pool, [slow("held", { backoffBaseMs: 0, backoffMaxMs: 0 })], { worker: "dies" });
    expect(claimedFirst!.id).toBe(first!.id);
    // The worker dies; its lease runs out; until the sweep, the queue is still held.
    await expireLease(db.pool, first!.id);
    expect(await claimSlow(db.pool, [slow("held")])).toEqual([]);
    await sweepExpiredClaims(db.pool, 10);
    // Released by the sweep. The retried first job's run_at moved past the second's (order is run_at then id).
    const [next] = await claimSlow(db.pool, [slow("held")], { worker: "next" });
    expect(next).toBeDefined();
    // The dead worker's late writes are fenced and change nothing: the new holder keeps the queue.
    expect((await completeJobs(db.pool, [{ id: claimedFirst!.id, token: claimedFirst!.claimToken }]))[0]!.outcome).toBe("fenced");
    expect((await releaseJobs(db.pool, [{ id: claimedFirst!.id, token: claimedFirst!.claimToken }]))[0]!.outcome).toBe("fenced");
    expect(await claimSlow(db.pool, [slow("held")], { worker: "third" })).toEqual([]);
    expect((await row(db.pool, next!.id)).status).toBe("processing");
    void second;
  });

  it("unlessBusy: while another slow claim holds the lock, claims nothing and says busy; once it is free, claims", async () => {
    await enqueueJobs(db.pool, [{ type: "busy-q", queue: "busy-serial" }]);
    const holder = await db.pool.connect();
    try {
      // What a running slow claim holds (0007): the schema's advisory lock, until its transaction ends.
      await holder.query("BEGIN");
      await holder.query("SELECT pg_advisory_xact_lock(hashtextextended('picket.claim_limited:picket', 0))");
      const tokens = drawClaimTokens(1);
      // (Bounded, so that a try that waited fails here rather than at the test's timeout.)
      expect(await claimLimited(db.pool, "w", [slow("busy-q", { limit: 1 })], { total: 1, tokens, unlessBusy: true, timeoutMs: 2_000 })).toBe("busy");
      expect(await row(db.pool, (await db.pool.query("SELECT id FROM picket.jobs WHERE type = 'busy-q'")).rows[0].id)).toMatchObject({ status: "pending" });
      await holder.query("COMMIT");
      const claimed = await claimLimited(db.pool, "w", [slow("busy-q", { limit: 1 })], { total: 1, tokens: drawClaimTokens(1), unlessBusy: true });
      expect(claimed).toEqual([expect.objectContaining({ type: "busy-q", queue: "busy-serial" })]);
      expect(Object.keys((claimed as LimitedClaimedJob[])[0]!)).not.toContain("busy");
    } finally {
      await holder.query("ROLLBACK").catch(() => undefined);
      holder.release();
    }
  });

  it("fills a job's max_attempts from the task on the slow path too", async () => {
    const job = await enqueueJob(db.pool, { type: "q-attempts", queue: "attempts" });
    const [claimed] = await claimSlow(db.pool, [slow("q-attempts", { maxAttempts: 7 })]);
    expect(claimed!.maxAttempts).toBe(7);
    expect((await row(db.pool, job.id)).max_attempts).toBe(7);
  });

  it("refuses a bad queue name with a message that says what to do", async () => {
    await expect(enqueueJob(db.pool, { type: "t", queue: "" })).rejects.toThrow(InvalidJobError);
    await expect(enqueueJob(db.pool, { type: "t", queue: "x".repeat(129) })).rejects.toThrow(/queue must be a string of 1 to 128 characters/);
    await expect(claimSlow(db.pool, [slow("t")], { queues: { q: { concurrency: 0 } } })).rejects.toThrow(InvalidConfigError);
    await expect(db.pool.query("SELECT picket.add_job('t', job_queue => '')")).rejects.toThrow(/jobs_queue_check/);
    const { rows } = await db.pool.query("SELECT (picket.add_job('t', job_queue => 'from-sql')).queue");
    expect(rows[0].queue).toBe("from-sql");
  });

  it("claims racing on six connections never hold one queue twice", async () => {
    const queues = Array.from({ length: 8 }, (_, i) => `race-${i}`);
    await enqueueJobs(
      db.pool,
      queues.flatMap((queue) => Array.from({ length: 12 }, () => ({ type: "race", queue }))),
    );
    const clients = await Promise.all(Array.from({ length: 6 }, () => db.connect()));
    // Each holder's interval on this process's clock: from the claim's reply to the completion's
    // send. It lies inside the row's processing interval, so two that overlap mean two rows of
    // one queue were processing at once.
    const held = new Map<string, Array<[number, number]>>();
    let done = 0;
    await Promise.all(
      clients.map(async (client, n) => {
        while (done < queues.length * 12) {
          const jobs = await claimSlow(client, [slow("race", { limit: 3 })], { worker: `c${n}` });
          if (jobs.length === 0) {
            await sleep(1);
            continue;
          }
          const from = performance.now();
          await sleep(2 + Math.random() * 4);
          const to = performance.now();
          for (const job of jobs) {
            const list = held.get(job.queue!) ?? [];
            list.push([from, to]);
            held.set(job.queue!, list);
          }
          await complete(client, jobs);
          done += jobs.length;
        }
      }),
    );
    expect(done).toBe(queues.length * 12);
    for (const queue of queues) expect(peakOverlap(held.get(queue)!), queue).toBe(1);
  }, 60_000);
});

describe("cluster-wide limits", () => {
  it("clusterConcurrency: never more than N processing across claims racing on six connections", async () => {
    await enqueueJobs(db.pool, Array.from({ length: 60 }, () => ({ type: "capped" })));
    const clients = await Promise.all(Array.from({ length: 6 }, () => db.connect()));
    const runs: Array<[number, number]> = [];
    let done = 0;
    await Promise.all(
      clients.map(async (client, n) => {
        while (done < 60) {
          const jobs = await claimSlow(client, [slow("capped", { limit: 3, clusterConcurrency: 3 })], { worker: `c${n}` });
          if (jobs.length === 0) {
            await sleep(1);
            continue;
          }
          const from = performance.now();
          await sleep(3 + Math.random() * 4);
          const to = performance.now();
          for (const _ of jobs) runs.push([from, to]);
          await complete(client, jobs);
          done += jobs.length;
        }
      }),
    );
    expect(done).toBe(60);
    expect(peakOverlap(runs)).toBe(3);
  }, 60_000);

  it("rateLimit: starts in any window never exceed max, across claims racing on three connections", async () => {
    const max = 4;
    const windowMs = 400;
    await enqueueJobs(db.pool, Array.from({ length: 20 }, () => ({ type: "rated" })));
    const clients = await Promise.all(Array.from({ length: 3 }, () => db.connect()));
    const ids: string[] = [];
    await Promise.all(
      clients.map(async (client, n) => {
        while (ids.length < 20) {
          const jobs = await claimSlow(client, [slow("rated", { limit: 5, rateLimit: { max, windowMs } })], { worker: `c${n}` });
          ids.push(...jobs.map((j) => j.id));
          await complete(client, jobs);
          await sleep(5);
        }
      }),
    );
    expect(new Set(ids).size).toBe(20);
    // locked_at is the claim's stamp, taken under the lock: the moment the start counted.
    const { rows } = await db.pool.query<{ at: string }>(
      "SELECT (extract(epoch FROM locked_at) * 1000000)::bigint::text AS at FROM picket.jobs WHERE type = 'rated' ORDER BY locked_at",
    );
    const starts = rows.map((r) => Number(r.at) / 1000);
    let fullest = 0;
    for (let i = 0; i < starts.length; i++) {
      const inWindow = starts.filter((s) => s > starts[i]! - windowMs && s <= starts[i]!).length;
      fullest = Math.max(fullest, inWindow);
    }
    expect(fullest).toBe(max);
    // Twenty starts at four per 400 ms take at least four full windows.
    expect(starts.at(-1)! - starts[0]!).toBeGreaterThanOrEqual(4 * windowMs);
  }, 60_000);

  it("rateLimit: a claim counts the window ending when it holds the lock, not when its transaction began", async () => {
    const max = 3;
    const windowMs = 5_000;
    await enqueueJobs(db.pool, Array.from({ length: 6 }, () => ({ type: "rated-late" })));
    const rate = [slow("rated-late", { limit: 6, rateLimit: { max, windowMs } })];
    const late = await db.connect();
    // A claim whose transaction began long before it ran (it waited, for the lock or otherwise).
    await late.query("BEGIN");
    await late.query("SELECT 1");
    await sleep(300);
    expect(await claimSlow(db.pool, rate, { worker: "on-time" })).toHaveLength(max);
    const lateJobs = await claimSlow(late, rate, { worker: "late" });
    await late.query("COMMIT");
    expect(lateJobs).toEqual([]);
    // The claim's stamp (its row's locked_at) is when it counted, not when its transaction began.
    const [stamped] = await enqueueJobs(db.pool, [{ type: "stamped" }]);
    await late.query("BEGIN");
    const { rows: [began] } = await late.query<{ at: Date }>("SELECT now() AS at");
    await sleep(300);
    await claimSlow(late, [slow("stamped", { rateLimit: { max: 1, windowMs: 1_000 } })], { worker: "late" });
    await late.query("COMMIT");
    expect((await row(db.pool, stamped!.id)).locked_at.getTime() - began!.at.getTime()).toBeGreaterThanOrEqual(250);
  });

  it("a limited task's jobs in a queue obey both the queue and the limit", async () => {
    await enqueueJobs(db.pool, [
      ...Array.from({ length: 2 }, () => ({ type: "both", queue: "b1" })),
      ...Array.from({ length: 2 }, () => ({ type: "both", queue: "b2" })),
      ...Array.from({ length: 2 }, () => ({ type: "both" })),
    ]);
    const jobs = await claimSlow(db.pool, [slow("both", { clusterConcurrency: 2 })]);
    expect(jobs).toHaveLength(2);
    expect(new Set(jobs.map((j) => j.queue)).size).toBe(2);
    expect(await claimSlow(db.pool, [slow("both", { clusterConcurrency: 2 })])).toEqual([]);
  });

  it("a limited task's budget never takes a queued job out of its queue's turn", async () => {
    await enqueueJobs(db.pool, [
      { type: "limited-q", queue: "lq", runAt: new Date(Date.now() - 2_000) },
      { type: "limited-q", queue: "lq", runAt: new Date(Date.now() - 1_000) },
    ]);
    const limited = [slow("limited-q", { clusterConcurrency: 5 })];
    expect(await claimSlow(db.pool, limited)).toHaveLength(1);
    // The queue is held; the task's limit has room for four more, but not for the queue's second job.
    expect(await claimSlow(db.pool, limited)).toEqual([]);
  });

  it("refuses bad limits with a clear error", async () => {
    await expect(claimSlow(db.pool, [slow("t", { clusterConcurrency: 0 })])).rejects.toThrow(/clusterConcurrency must be an integer from 1/);
    await expect(claimSlow(db.pool, [slow("t", { rateLimit: { max: 1, windowMs: -1 } })])).rejects.toThrow(/rateLimit.windowMs/);
  });
});
