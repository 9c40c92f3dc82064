// Model-based coverage of the supervisor machine against the real runtime: the transitions to
// cover come from the machine itself (its definition, and a shortest path to each one generated
// by xstate/graph); each scenario runs a real Supervisor on PostgreSQL with real jobs and faults,
// and the transitions it takes are recorded through XState inspection. A transition of the
// machine that no scenario takes fails the suite by name.
import { afterAll, describe, expect, it, vi } from "vitest";
import { getShortestPaths } from "xstate/graph";
import { enqueueJobs } from "../src/db/index.ts";
import { machineTransitions, supervisorMachine, transitionRows } from "../src/machines/index.ts";
import { PollLoop } from "../src/runtime/poll-loop.ts";
import { defineTask } from "../src/runtime/task.ts";
import { interceptedPool, useTestDatabase } from "./support/db.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();
const covered = new Set<string>();

/** Records every transition the supervisor machine takes (not the job machines). */
const recorder = () => ({
  inspect: (event: unknown) => {
    const e = event as { type: string; actorRef?: { logic?: unknown }; _transitions?: unknown[] };
    if (e.type !== "@xstate.microstep" || e.actorRef?.logic === undefined) return;
    if ((e.actorRef.logic as { id?: string }).id !== "supervisor") return;
    for (const t of e._transitions ?? []) for (const row of transitionRows(t as never)) covered.add(row.key);
  },
});

const hang = (signal: AbortSignal) => new Promise<never>((_r, reject) => signal.addEventListener("abort", () => reject(new Error("interrupted")), { once: true }));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("supervisor machine against the real runtime", () => {
  it("has a generated shortest path to every transition (the coverage target)", () => {
    // Bounded model: at most one running job, so the state space is finite.
    const paths = getShortestPaths(supervisorMachine, {
      input: { drainTimeoutMs: 100, releaseGraceMs: 100 },
      events: () =>
        [
          { type: "STOP" },
          { type: "FORCE" },
          { type: "JOBS_HELD", count: 0 },
          { type: "xstate.done.actor.0.supervisor.endingPoll", output: { held: 1 } },
          { type: "xstate.done.actor.0.supervisor.endingPoll", output: { held: 0 } },
          { type: "DRAIN_DEADLINE" },
          { type: "xstate.after.releaseGrace.supervisor.releasing" },
        ] as never,
    });
    const reached = new Set(paths.map((p) => JSON.stringify(p.state.value)));
    for (const state of ['"running"', '"endingPoll"', '"draining"', '"releasing"', '"abandoning"', '"stopped"']) {
      expect(reached, `no generated path reaches ${state}`).toContain(state);
    }
  });

  it("polls again at once after a full batch, waits after a partial one, and wakes on NOTIFY, a freed slot, or the interval", async () => {
    const quick = defineTask({ name: "sv-quick", handler: () => sleep(30) });
    await enqueueJobs(db.pool, Array.from({ length: 5 }, () => ({ type: "sv-quick" })));
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [quick], concurrency: 2, pollIntervalMs: 100, ...recorder() });
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(5);
    await enqueueJobs(db.pool, [{ type: "sv-quick" }]); // NOTIFY wakes the waiting poller
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(6);
    await sleep(300); // idle intervals pass
    await supervisor.stop(); // STOP while waiting; nothing running: straight to stopped
  });

  it("wakes from waiting on NOTIFY alone when the interval is far away", async () => {
    // With a one-minute interval and nothing running, only the NOTIFY (WAKE) can start the next
    // poll: the transition is taken however loaded the machine is.
    const quick = defineTask({ name: "sv-woken", handler: async () => "ok" });
    const { supervisor, outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [quick], pollIntervalMs: 60_000, ...recorder() });
    await expect.poll(() => logs.some((l) => l.msg === "listening for new jobs"), { timeout: 10_000 }).toBe(true);
    await sleep(100); // the first poll has found nothing and waits
    await enqueueJobs(db.pool, [{ type: "sv-woken" }]);
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(1);
    await supervisor.stop();
  });

  it("polls again as soon as a poll ends when a NOTIFY arrived while it was in flight", async () => {
    // The first claim (it finds nothing) is held until the job has been enqueued and its NOTIFY
    // has reached the supervisor: the claim read the table before the job was there. With a
    // one-minute interval, only the remembered wake-up can find the job.
    let claimHeld: () => void = () => undefined;
    const claimRead = new Promise<void>((r) => (claimHeld = r));
    let releaseClaim: () => void = () => undefined;
    const claimReleased = new Promise<void>((r) => (releaseClaim = r));
    let first = true;
    let claims = 0;
    const { pool, end } = interceptedPool(db.url, async (statement, forward) => {
      const result = await forward();
      if (statement.name.startsWith("picket_claim")) claims++;
      if (first && statement.name.startsWith("picket_claim")) {
        first = false;
        claimHeld();
        await claimReleased;
      }
      return result;
    });
    const wake = vi.spyOn(PollLoop.prototype, "wake");
    try {
      const quick = defineTask({ name: "sv-woken-polling", handler: async () => "ok" });
      const { supervisor, outcomes, logs } = await startWorker({
        pool,
        listenConnectionString: db.url,
        tasks: [quick],
        pollIntervalMs: 60_000,
        ...recorder(),
      });
      await claimRead;
      await expect.poll(() => logs.some((l) => l.msg === "listening for new jobs"), { timeout: 10_000 }).toBe(true);
      const before = wake.mock.calls.length;
      const [job] = await enqueueJobs(db.pool, [{ type: "sv-woken-polling" }]);
      // The NOTIFY has reached the poll loop while the claim that cannot see the job is in flight.
      await expect.poll(() => wake.mock.calls.length, { timeout: 10_000 }).toBeGreaterThan(before);
      releaseClaim();
      await expect.poll(() => outcomes.find((o) => o.id === job!.id), { timeout: 10_000 }).toMatchObject({ outcome: "completed" });
      // The wake-up was spent on that poll: an idle worker then waits for its interval.
      const claimsThen = claims;
      await sleep(500);
      expect(claims - claimsThen).toBeLessThanOrEqual(2);
      await supervisor.stop();
    } finally {
      wake.mockRestore();
      releaseClaim();
      await end();
    }
  });

  it("finishes a job while waiting without a full batch, and stays waiting", async () => {
    let release: () => void = () => undefined;
    const held = defineTask({ name: "sv-held", handler: () => new Promise<void>((r) => (release = r)) });
    await enqueueJobs(db.pool, [{ type: "sv-held" }]);
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [held], concurrency: 3, pollIntervalMs: 60_000, listen: false, ...recorder() });
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    await sleep(100);
    release();
    await expect.poll(() => outcomes.length, { timeout: 5_000 }).toBe(1);
    await supervisor.stop();
  });

  it("awaits a poll in flight when stopped, and drains after it", async () => {
    const quick = defineTask({ name: "sv-inflight", handler: async () => "ok" });
    await enqueueJobs(db.pool, [{ type: "sv-inflight" }]);
    const blocker = await db.connect();
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE picket.jobs IN EXCLUSIVE MODE");
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [quick], ...recorder() });
    await sleep(150);
    const stopped = supervisor.stop();
    await sleep(50);
    await blocker.query("COMMIT");
    await stopped;
  });

  it("ends the wait for an in-flight poll at a force(): the claim is cancelled, its job left pending and unclaimed", async () => {
    const endless = defineTask({ name: "sv-forced", timeoutMs: 60_000, handler: (_p, { signal }) => hang(signal) });
    const [job] = await enqueueJobs(db.pool, [{ type: "sv-forced" }]);
    const blocker = await db.connect();
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE picket.jobs IN EXCLUSIVE MODE");
    try {
      const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [endless], drainTimeoutMs: 60_000, ...recorder() });
      await sleep(150);
      const stopped = supervisor.stop();
      const forcedAt = Date.now();
      supervisor.force();
      await stopped; // while the table is still locked: without the cancel this would wait for the lock
      expect(Date.now() - forcedAt).toBeLessThan(2_000);
      expect(outcomes).toEqual([]);
    } finally {
      await blocker.query("COMMIT");
    }
    expect(await db.pool.query("SELECT status, attempts FROM picket.jobs WHERE id = $1", [job!.id]).then((r) => r.rows[0])).toEqual({ status: "pending", attempts: 0 });
  });

  it("cancels a poll still in flight at the drain deadline, counted from the STOP, and ends the drain a grace later", async () => {
    const endless = defineTask({ name: "sv-deadline-poll", timeoutMs: 60_000, handler: (_p, { signal }) => hang(signal) });
    const [running, waiting] = await enqueueJobs(db.pool, [{ type: "sv-deadline-poll" }, { type: "sv-deadline-poll", runAt: new Date(Date.now() + 60_000) }]);
    // Statements may wait a minute: only the drain deadline can end the poll.
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [endless], concurrency: 2, drainTimeoutMs: 300, statementTimeoutMs: 60_000, ...recorder() });
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    // The next poll (a slot is free) blocks on the table, and so will the release of the running job.
    const blocker = await db.connect();
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE picket.jobs IN EXCLUSIVE MODE");
    try {
      await sleep(300);
      const stoppedAt = Date.now();
      const stopped = supervisor.stop().then(() => Date.now() - stoppedAt);
      // The deadline (300 ms), the release grace (1 s), the last steps (250 ms): all while the
      // table stays locked. Without the cancel, stop() would wait for the lock.
      const took = await Promise.race([stopped, sleep(10_000).then(() => Infinity)]);
      expect(took).toBeGreaterThanOrEqual(1_300);
      expect(took).toBeLessThan(300 + 2_000);
      expect(outcomes).toEqual([expect.objectContaining({ id: running!.id, outcome: "abandoned" })]);
    } finally {
      await blocker.query("COMMIT");
    }
    // The cancelled claim took nothing; the running job is left to the sweep.
    expect(await db.pool.query("SELECT id, status, attempts FROM picket.jobs WHERE id = ANY($1) ORDER BY id", [[running!.id, waiting!.id]]).then((r) => r.rows)).toEqual([
      { id: running!.id, status: "processing", attempts: 1 },
      { id: waiting!.id, status: "pending", attempts: 0 },
    ]);
  });

  it("goes on to release the running jobs when a force() cut an in-flight poll short", async () => {
    const endless = defineTask({ name: "sv-forced-running", timeoutMs: 60_000, handler: (_p, { signal }) => hang(signal) });
    const [running] = await enqueueJobs(db.pool, [{ type: "sv-forced-running" }]);
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [endless], concurrency: 2, drainTimeoutMs: 60_000, ...recorder() });
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    // The next poll (a slot is free) blocks on the table; the running job waits to be released.
    const blocker = await db.connect();
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE picket.jobs IN EXCLUSIVE MODE");
    await sleep(300);
    const stopped = supervisor.stop();
    supervisor.force();
    await sleep(100);
    await blocker.query("COMMIT");
    await stopped;
    expect(outcomes).toEqual([expect.objectContaining({ id: running!.id, outcome: "released" })]);
  });

  it("logs a failing poll and polls again; a poll that fails after STOP ends in the drain", async () => {
    const task = defineTask({ name: "sv-broken", handler: async () => "ok" });
    // A fault only claims hit: no row may become processing.
    await db.pool.query("ALTER TABLE picket.jobs ADD CONSTRAINT sv_no_claims CHECK (status <> 'processing' OR type <> 'sv-broken') NOT VALID");
    try {
      await enqueueJobs(db.pool, [{ type: "sv-broken" }]);
      const { supervisor, logs } = await startWorker({ connectionString: db.url, tasks: [task], pollIntervalMs: 50, ...recorder() });
      await expect.poll(() => logs.filter((l) => /^poll failed/.test(l.msg)).length, { timeout: 5_000 }).toBeGreaterThan(1);
      // Now make the next poll block, stop during it, and let it fail.
      const blocker = await db.connect();
      await blocker.query("BEGIN");
      await blocker.query("LOCK TABLE picket.jobs IN EXCLUSIVE MODE");
      await sleep(200);
      const stopped = supervisor.stop();
      await sleep(50);
      await blocker.query("COMMIT");
      await stopped;
    } finally {
      await db.pool.query("ALTER TABLE picket.jobs DROP CONSTRAINT sv_no_claims");
    }
  });

  it("interrupts and releases at the drain deadline, or at once when forced", async () => {
    const endless = defineTask({ name: "sv-endless", timeoutMs: 60_000, handler: (_p, { signal }) => hang(signal) });
    await enqueueJobs(db.pool, [{ type: "sv-endless" }]);
    const first = await startWorker({ connectionString: db.url, tasks: [endless], drainTimeoutMs: 100, ...recorder() });
    await expect.poll(() => first.supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    await first.supervisor.stop();
    expect(first.outcomes.map((o) => o.outcome)).toEqual(["released"]);

    const second = await startWorker({ connectionString: db.url, tasks: [endless], drainTimeoutMs: 60_000, ...recorder() });
    await expect.poll(() => second.supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    const stopping = second.supervisor.stop();
    second.supervisor.force(); // before the last poll has ended: remembered
    await stopping;
    expect(second.outcomes.map((o) => o.outcome)).toEqual(["released"]);

    const third = await startWorker({ connectionString: db.url, tasks: [endless], drainTimeoutMs: 60_000, ...recorder() });
    await expect.poll(() => third.supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    const draining = third.supervisor.stop();
    await expect.poll(() => third.logs.some((l) => l.msg.startsWith("draining")), { timeout: 5_000 }).toBe(true);
    third.supervisor.force(); // while draining: at once
    await draining;
    expect(third.outcomes.map((o) => o.outcome)).toEqual(["released"]);
  });

  it("waits in the drain for a running job to finish", async () => {
    const short = defineTask({ name: "sv-short", handler: () => sleep(200) });
    await enqueueJobs(db.pool, [{ type: "sv-short" }]);
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [short], ...recorder() });
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    await supervisor.stop();
    expect(outcomes.map((o) => o.outcome)).toEqual(["completed"]);
  });

  it("claims nothing when every slot is taken, and polls again when one frees", async () => {
    let releaseAll: () => void = () => undefined;
    const gate = new Promise<void>((r) => (releaseAll = r));
    const busy = defineTask({ name: "sv-busy", handler: () => gate });
    await enqueueJobs(db.pool, Array.from({ length: 3 }, () => ({ type: "sv-busy" })));
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [busy], concurrency: 2, pollIntervalMs: 50, listen: false, ...recorder() });
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(2);
    await sleep(200); // polls with no free slot
    releaseAll();
    await expect.poll(() => outcomes.length, { timeout: 5_000 }).toBe(3);
    await supervisor.stop();
  });

  it("frees a slot when the handler ends, not when its outcome is written, and claims no more while four times the concurrency are writing", async () => {
    // Completion writes are held until the test lets them go (through a caller's pool, so every
    // statement is real and only their timing is the test's).
    let letWritesGo: () => void = () => undefined;
    const writesHeld = new Promise<void>((r) => (letWritesGo = r));
    const { pool, end } = interceptedPool(db.url, async (statement, forward) => {
      if (statement.name.startsWith("picket_complete")) await writesHeld;
      return forward();
    });
    try {
      let started = 0;
      const quick = defineTask({ name: "sv-writes", handler: async () => void started++ });
      await enqueueJobs(db.pool, Array.from({ length: 6 }, () => ({ type: "sv-writes" })));
      const { supervisor, outcomes } = await startWorker({ pool, tasks: [quick], concurrency: 1, prefetch: 0, pollIntervalMs: 60_000, listen: false, ...recorder() });
      // One slot, yet more handlers run while the first jobs' outcomes are still being written.
      await expect.poll(() => started, { timeout: 5_000 }).toBe(4);
      await sleep(300);
      // Four machines writing (four times the concurrency): nothing more is claimed until one is done.
      expect(started).toBe(4);
      expect(supervisor.stats()).toMatchObject({ running: 4, waiting: 0 });
      expect(outcomes).toEqual([]);
      letWritesGo();
      await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(6);
      expect(outcomes.map((o) => o.outcome)).toEqual(Array(6).fill("completed"));
      await supervisor.stop();
    } finally {
      letWritesGo();
      await end();
    }
  });

  it("gives up outcomes still being written once the release grace has passed, or at a second force", async () => {
    // Completion writes never reach the database during this test (as with a server that stopped
    // answering): the drain must end anyway, a grace after its deadline.
    let letWritesGo: () => void = () => undefined;
    const writesHeld = new Promise<void>((r) => (letWritesGo = r));
    const { pool, end } = interceptedPool(db.url, async (statement, forward) => {
      if (statement.name.startsWith("picket_complete")) await writesHeld;
      return forward();
    });
    try {
      const quick = defineTask({ name: "sv-unwritten", handler: async () => "ok" });
      await enqueueJobs(db.pool, [{ type: "sv-unwritten" }]);
      const first = await startWorker({ pool, tasks: [quick], drainTimeoutMs: 100, statementTimeoutMs: 60_000, ...recorder() });
      await expect.poll(() => first.logs.some((l) => l.msg === "worker started") && first.supervisor.stats().running, { timeout: 5_000 }).toBe(1);
      await sleep(100);
      const stoppedAt = Date.now();
      await first.supervisor.stop();
      // The deadline (100 ms), then the release grace (1 s): generous bounds for a loaded machine.
      expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(1_000);
      expect(Date.now() - stoppedAt).toBeLessThan(3_000);
      expect(first.outcomes.map((o) => o.outcome)).toEqual(["abandoned"]);

      await enqueueJobs(db.pool, [{ type: "sv-unwritten" }]);
      const second = await startWorker({ pool, tasks: [quick], drainTimeoutMs: 60_000, statementTimeoutMs: 60_000, ...recorder() });
      await expect.poll(() => second.supervisor.stats().running, { timeout: 5_000 }).toBe(1);
      await sleep(100);
      const stopping = second.supervisor.stop();
      const forcedAt = Date.now();
      second.supervisor.force(); // to releasing: nothing to release, the write goes on
      await sleep(50);
      second.supervisor.force(); // and now: give it up
      await stopping;
      expect(Date.now() - forcedAt).toBeLessThan(900);
      expect(second.outcomes.map((o) => o.outcome)).toEqual(["abandoned"]);
    } finally {
      letWritesGo();
      await end();
    }
  });

  afterAll(() => {
    const all = machineTransitions(supervisorMachine).map((t) => t.key);
    const missing = all.filter((key) => !covered.has(key));
    expect(missing, `transitions of the supervisor machine that no scenario took:\n  ${missing.join("\n  ")}`).toEqual([]);
  });
});
