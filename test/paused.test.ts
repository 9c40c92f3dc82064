// Pausing a queue or a task (migration 0012): enforced by the claims in SQL, so that no worker on
// any host takes the jobs once the pause has committed, and undone by a resume that wakes them.
import { afterEach, describe, expect, it } from "vitest";
import {
  claimJobs,
  claimLimited,
  drawClaimTokens,
  enqueueJob,
  InvalidConfigError,
  InvalidJobError,
  listPaused,
  listQueues,
  migrate,
  pauseClaims,
  resumeClaims,
  type LimitedClaimWant,
} from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { rejectionOf } from "./support/errors.ts";
import { want } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();
// A test that fails before its resume must not leave later ones paused.
afterEach(async () => {
  await db.pool.query("DELETE FROM picket.paused");
});

const slow = (type: string, overrides: Partial<LimitedClaimWant> = {}): LimitedClaimWant => ({ ...want(type, { limit: 10 }), ...overrides });
const claimSlow = (wants: LimitedClaimWant[], total = 10) => claimLimited(db.pool, "w", wants, { total, tokens: drawClaimTokens(total) });
const ids = (jobs: Array<{ id: string }>) => jobs.map((job) => job.id);

describe("a paused task", () => {
  it("is left out of the fast claim, whose other types are claimed, until it is resumed", async () => {
    const held = await enqueueJob(db.pool, { type: "paused-plain" });
    const other = await enqueueJob(db.pool, { type: "unpaused-plain" });
    expect(await pauseClaims(db.pool, { task: "paused-plain" }, { by: "alice" })).toEqual({
      outcome: "applied",
      paused: { kind: "task", name: "paused-plain", pausedAt: expect.any(Date), pausedBy: "alice" },
    });
    expect(ids(await claimJobs(db.pool, "w", [want("paused-plain"), want("unpaused-plain")]))).toEqual([other.id]);
    expect(await resumeClaims(db.pool, { task: "paused-plain" })).toEqual({ outcome: "applied" });
    expect(ids(await claimJobs(db.pool, "w", [want("paused-plain")]))).toEqual([held.id]);
  });

  it("is given no budget by the slow claim: its queued jobs hold their queue in order, and a limited task's jobs wait", async () => {
    const head = await enqueueJob(db.pool, { type: "paused-head", queue: "held-in-order" });
    const behind = await enqueueJob(db.pool, { type: "runs-after-head", queue: "held-in-order" });
    const limited = await enqueueJob(db.pool, { type: "paused-limited" });
    await pauseClaims(db.pool, { task: "paused-head" });
    await pauseClaims(db.pool, { task: "paused-limited" });
    // The queue's head is paused: the job behind it waits too (a serial queue runs in order).
    expect(await claimSlow([slow("paused-head"), slow("runs-after-head"), slow("paused-limited", { clusterConcurrency: 5 })])).toEqual([]);
    await resumeClaims(db.pool, { task: "paused-head" });
    await resumeClaims(db.pool, { task: "paused-limited" });
    const claimed = await claimSlow([slow("paused-head"), slow("runs-after-head"), slow("paused-limited", { clusterConcurrency: 5 })]);
    // Concurrency 1: the head now, the one behind it after the head ends.
    expect(ids(claimed).sort()).toEqual([head.id, limited.id].sort());
    expect(ids(claimed)).not.toContain(behind.id);
  });

  it("keeps the first pause's time and author when paused again, and says a resume of what is not paused changed nothing", async () => {
    const first = await pauseClaims(db.pool, { task: "paused-twice" }, { by: "first" });
    const second = await pauseClaims(db.pool, { task: "paused-twice" }, { by: "second" });
    expect(second).toEqual({ outcome: "already_paused", paused: first.paused });
    expect(await listPaused(db.pool)).toEqual([first.paused]);
    expect(await resumeClaims(db.pool, { task: "paused-twice" })).toEqual({ outcome: "applied" });
    expect(await resumeClaims(db.pool, { task: "paused-twice" })).toEqual({ outcome: "not_paused" });
    expect(await listPaused(db.pool)).toEqual([]);
  });
});

describe("a paused queue", () => {
  it("has none of its jobs claimed by the slow claim, while other queues run, until it is resumed", async () => {
    const held = await enqueueJob(db.pool, { type: "queued-work", queue: "paused-q" });
    const other = await enqueueJob(db.pool, { type: "queued-work", queue: "running-q" });
    await pauseClaims(db.pool, { queue: "paused-q" });
    // Its configured concurrency does not lift the pause.
    const claimed = await claimLimited(db.pool, "w", [slow("queued-work")], { total: 10, tokens: drawClaimTokens(10), queues: { "paused-q": { concurrency: 5 } } });
    expect(ids(claimed)).toEqual([other.id]);
    await resumeClaims(db.pool, { queue: "paused-q" });
    expect(ids(await claimSlow([slow("queued-work")]))).toEqual([held.id]);
  });

  it("is a different thing from a task of the same name", async () => {
    const plain = await enqueueJob(db.pool, { type: "same-name" });
    await pauseClaims(db.pool, { queue: "same-name" });
    expect(ids(await claimJobs(db.pool, "w", [want("same-name")]))).toEqual([plain.id]);
    await resumeClaims(db.pool, { queue: "same-name" });
  });
});

describe("pausing and resuming, from two workers' side", () => {
  it("stops both workers claiming at once, and a resume wakes them to run what waited without waiting for a poll", async () => {
    const ran: string[] = [];
    const task = defineTask({ name: "paused-across", handler: async (_p, { job }) => void ran.push(job.id) });
    const queuedTask = defineTask({ name: "paused-across-queued", handler: async (_p, { job }) => void ran.push(job.id) });
    // A minute between polls: only a wake-up makes them claim within this test.
    const workers = await Promise.all(
      ["w-pause-1", "w-pause-2"].map((workerId) => startWorker({ connectionString: db.url, tasks: [task, queuedTask], workerId, pollIntervalMs: 60_000 })),
    );
    try {
      const before = await enqueueJob(db.pool, { type: "paused-across" });
      await expect.poll(() => ran, { timeout: 10_000 }).toContain(before.id);
      await pauseClaims(db.pool, { task: "paused-across" });
      await pauseClaims(db.pool, { queue: "paused-across-q" });
      // Enqueued while paused: each insert's wake-up reaches both workers, whose claims take none.
      const waiting = [];
      for (let i = 0; i < 6; i++) waiting.push(await enqueueJob(db.pool, { type: "paused-across" }));
      const queued = await enqueueJob(db.pool, { type: "paused-across-queued", queue: "paused-across-q" });
      // A job of another kind, enqueued after them, runs: the workers did claim since the wake-ups.
      const marker = await enqueueJob(db.pool, { type: "paused-across-queued" });
      await expect.poll(() => ran, { timeout: 10_000 }).toContain(marker.id);
      expect(ran).toEqual([before.id, marker.id]);
      expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE status = 'pending' AND type LIKE 'paused-across%'")).rows[0].n).toBe(7);
      await resumeClaims(db.pool, { task: "paused-across" });
      await resumeClaims(db.pool, { queue: "paused-across-q" });
      await expect.poll(() => ran.length, { timeout: 10_000 }).toBe(9);
      expect(ran.slice(2).sort()).toEqual([...ids(waiting), queued.id].sort());
    } finally {
      for (const { supervisor } of workers) await supervisor.stop();
    }
  });
});

describe("the queues an operator sees", () => {
  it("lists each queue with jobs pending or held, and each paused one, with its counts, its oldest ready job and its pause", async () => {
    const schema = "queues_listed";
    await migrate(db.pool, { schema });
    const old = new Date(Date.now() - 60_000);
    await enqueueJob(db.pool, { type: "listed", queue: "emails", runAt: old }, { schema });
    await enqueueJob(db.pool, { type: "listed", queue: "emails" }, { schema });
    await enqueueJob(db.pool, { type: "listed", queue: "emails", runAt: new Date(Date.now() + 3_600_000) }, { schema });
    await enqueueJob(db.pool, { type: "listed", queue: "reports", runAt: new Date(Date.now() + 3_600_000) }, { schema });
    await enqueueJob(db.pool, { type: "listed", queue: "held-only" }, { schema });
    await enqueueJob(db.pool, { type: "listed" }, { schema }); // no queue: not listed
    // Each queue's head whose time has come, oldest first, one per queue (concurrency 1): emails'
    // job from a minute ago, then held-only's, which leaves that queue nothing pending.
    const taken = await claimLimited(db.pool, "w", [slow("listed")], { total: 2, tokens: drawClaimTokens(2), schema });
    expect(taken.map((job) => job.queue)).toEqual(["emails", "held-only"]);
    const { paused } = await pauseClaims(db.pool, { queue: "nothing-yet" }, { schema, by: "ops" });
    await pauseClaims(db.pool, { task: "listed" }, { schema });
    const queues = await listQueues(db.pool, { schema });
    const byName = Object.fromEntries(queues.map((q) => [q.name, q]));
    expect(queues.map((q) => q.name)).toEqual(["emails", "held-only", "nothing-yet", "reports"]);
    expect(byName["emails"]).toEqual({ name: "emails", ready: 1, scheduled: 1, processing: 1, oldestReadyAt: expect.any(Date), head: { id: expect.any(String), type: "listed", runAt: expect.any(Date) }, paused: null });
    // Its head is the job after the claimed one: the one due now, not the one due in an hour.
    expect(byName["emails"]!.head!.runAt.getTime()).toBe(byName["emails"]!.oldestReadyAt!.getTime());
    expect(byName["emails"]!.oldestReadyAt!.getTime()).toBeGreaterThan(old.getTime());
    expect(byName["held-only"]).toEqual({ name: "held-only", ready: 0, scheduled: 0, processing: 1, oldestReadyAt: null, head: null, paused: null });
    expect(byName["reports"]).toEqual({ name: "reports", ready: 0, scheduled: 1, processing: 0, oldestReadyAt: null, head: expect.objectContaining({ type: "listed" }), paused: null });
    expect(byName["nothing-yet"]).toEqual({ name: "nothing-yet", ready: 0, scheduled: 0, processing: 0, oldestReadyAt: null, head: null, paused });
    // A schema without queued jobs or pauses has no queues.
    await migrate(db.pool, { schema: "queues_none" });
    expect(await listQueues(db.pool, { schema: "queues_none" })).toEqual([]);
  });
});

describe("what a pause refuses", () => {
  it("a target that names neither or both, an empty or unstorable name, and an unstorable author, each saying what to give", async () => {
    for (const target of [{}, { queue: "a", task: "b" }, null]) {
      expect(((await rejectionOf(pauseClaims(db.pool, target as never))) as Error).message).toBe(
        `picket: a pause names a queue or a task: { queue: "emails" } or { task: "send-email" } (got ${JSON.stringify(target)}).`,
      );
    }
    const emptyQueue = await rejectionOf(pauseClaims(db.pool, { queue: "" }));
    expect(emptyQueue).toBeInstanceOf(InvalidConfigError);
    expect((emptyQueue as Error).message).toBe('picket: pause: a queue name must be a string of 1 to 128 characters (got "").');
    const nul = await rejectionOf(resumeClaims(db.pool, { queue: "a\u0000b" }));
    expect((nul as Error).message).toMatch(/^picket: pause: the queue name "a\\u0000b" /);
    const badTask = await rejectionOf(pauseClaims(db.pool, { task: "has space" }));
    expect(badTask).toBeInstanceOf(InvalidJobError);
    expect((badTask as Error).message).toBe('picket: paused task type "has space" may contain only letters, digits and _ . : / - (no spaces).');
    expect(((await rejectionOf(pauseClaims(db.pool, { task: "t" }, { by: "" }))) as Error).message).toMatch(/^picket: "by" names who asked/);
    expect(await listPaused(db.pool)).toEqual([]);
  });
});
