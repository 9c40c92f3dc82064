// Durable statecharts (issue 31) against a real server: a user's XState machine run as a workflow.
// Exactly-once application under concurrent sends, a stale claim that applies nothing, timers that
// fire after downtime, a late task result dropped, what is refused at definition, versions pinned
// and migrated, and start/send inside the caller's transaction.
import type pg from "pg";
import { describe, expect, it } from "vitest";
import { assign, fromCallback, fromPromise, log, raise, setup, createMachine, sendTo } from "xstate";
import { applyBulk, cancelJob, claimJobs, completeJobs, countBulk, deleteFinishedJob, enqueueJob, getJob, retryDeadJob, sweepExpiredClaims, type JobId } from "../src/db/index.ts";
import { jobActionMessage } from "../src/dashboard/action-words.ts";
import {
  cancelWorkflow,
  getWorkflow,
  sendToWorkflow,
  startWorkflow,
  workflowHistory,
  workflowJobs,
  holdForApply,
  writeApply,
} from "../src/db/workflows.ts";
import { APPLIER_TASK } from "../src/db/job-spec.ts";
import { defineWorkflow, task } from "../src/workflows/definition.ts";
import { applyDueEvents, WorkflowRegistry } from "../src/workflows/applier.ts";
import { defineTask } from "../src/runtime/task.ts";
import { createSupervisor } from "../src/runtime/supervisor.ts";
import { createLogger } from "../src/runtime/logger.ts";
import { startWorker } from "./support/worker.ts";
import { useTestDatabase } from "./support/db.ts";
import { expireLease, want } from "./support/factory.ts";

const db = useTestDatabase();
/** An instance's events: the history in the order applied, then the inbox. */
const allEvents = async (id: string) => {
  const { history, inbox } = await workflowHistory(db.pool, id);
  return [...history, ...inbox];
};

const until = async (what: string, check: () => Promise<boolean>, timeoutMs = 20_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
};
const settled = (id: JobId) => until(`workflow ${id} to finish`, async () => ["done", "failed", "cancelled"].includes((await getWorkflow(db.pool, id))!.status));
const inState = (id: JobId, state: unknown) => until(`workflow ${id} in ${JSON.stringify(state)}`, async () => JSON.stringify((await getWorkflow(db.pool, id))!.state) === JSON.stringify(state));
const quietLogger = createLogger({ level: "silent" });
/** Tests that claim appliers by hand claim only their own instance's. */
const otherAppliersGone = (id: JobId) => db.pool.query("DELETE FROM picket.jobs WHERE type = $1 AND payload->>'workflow' <> $2", [APPLIER_TASK, id]);
/** Sends on a client rather than the pool: the event brings an applier job of its own, as one sent in a caller's transaction does. */
const sendWithOwnApplier = async (id: JobId, event: { type: string }) => {
  const client = await db.pool.connect();
  try {
    return await sendToWorkflow(client, id, event);
  } finally {
    client.release();
  }
};
const worker = (options: Omit<Parameters<typeof startWorker>[0], "connectionString">) => startWorker({ connectionString: db.url, ...options });

// Counts INC events; FINISH ends with the count.
const counter = defineWorkflow({
  name: "counter",
  machine: setup({ types: {} as { context: { n: number } } }).createMachine({
    id: "counter",
    context: { n: 0 },
    initial: "counting",
    states: {
      counting: { on: { INC: { actions: assign({ n: ({ context }) => context.n + 1 }) }, FINISH: "finished" } },
      finished: { type: "final" },
    },
    output: ({ context }) => ({ n: context.n }),
  }),
});

const chargeCard = task<{ amount: number }, { receipt: string }>("charge-card");
const payment = defineWorkflow({
  name: "payment",
  machine: setup({
    types: {} as { context: { amount: number; receipt: string | null; error: string | null }; input: { amount: number } },
    actors: { chargeCard },
  }).createMachine({
    id: "payment",
    context: ({ input }) => ({ amount: input.amount, receipt: null, error: null }),
    initial: "charging",
    states: {
      charging: {
        invoke: {
          id: "charge",
          src: "chargeCard",
          input: ({ context }) => ({ amount: context.amount }),
          onDone: { target: "paid", actions: assign({ receipt: ({ event }) => event.output.receipt }) },
          onError: { target: "declined", actions: assign({ error: ({ event }) => (event.error as { message: string }).message }) },
        },
        after: { 400: "gaveUp" },
      },
      paid: { type: "final" },
      declined: { type: "final" },
      gaveUp: { on: { RETRY: "charging", ABANDON: "abandoned" } },
      abandoned: { type: "final" },
    },
  }),
});

describe("defineWorkflow refuses what cannot be made durable", () => {
  const refused = (machine: any) => {
    try {
      defineWorkflow({ name: "w", machine });
    } catch (error) {
      return (error as Error).message;
    }
    throw new Error("not refused");
  };

  it("a callback actor, a fromPromise actor, a child machine, an inline actor: each named, with the reason", () => {
    expect(refused(setup({ actors: { listen: fromCallback(() => undefined) } }).createMachine({ initial: "a", states: { a: { invoke: { src: "listen" } } } }))).toMatch(
      /state "\(machine\)\.a" invokes "listen": a fromPromise, fromCallback or fromObservable actor runs in memory and is lost on a crash: declare it with task\("name"\)/,
    );
    expect(refused(setup({ actors: { fetch: fromPromise(async () => 1) } }).createMachine({ initial: "a", states: { a: { invoke: { src: "fetch" } } } }))).toMatch(
      /invokes "fetch": .*declare it with task/,
    );
    const child = createMachine({});
    expect(refused(setup({ actors: { child } }).createMachine({ initial: "a", states: { a: { invoke: { src: "child" } } } }))).toMatch(
      /invokes "child": a child machine runs in memory and is lost on a crash: make it a workflow of its own \(defineWorkflow\) and invoke it as childWorkflow\(thatWorkflow\)/,
    );
    expect(refused(createMachine({ initial: "a", states: { a: { invoke: { src: task("x") } } } }))).toMatch(/invokes an actor given inline: name it in setup/);
  });

  it("side-effect actions (a function, a custom action, sendTo) are refused; assign, raise, log and after are accepted", () => {
    expect(refused(setup({}).createMachine({ initial: "a", states: { a: { entry: () => console.log("hi") } } }))).toMatch(
      /entry of state "\(machine\)\.a" runs an inline function, a side effect that is not durable/,
    );
    expect(refused(setup({ actions: { email: () => undefined } }).createMachine({ initial: "a", states: { a: { on: { GO: { actions: "email" } } } } }))).toMatch(
      /a transition of state "\(machine\)\.a" runs the action "email"/,
    );
    expect(refused(setup({}).createMachine({ initial: "a", states: { a: { exit: sendTo("someone", { type: "X" }) } } }))).toMatch(/exit of state "\(machine\)\.a" runs the action "xstate.sendTo"/);
    const accepted = defineWorkflow({
      name: "fine",
      machine: setup({ actors: { t: task("t") }, types: {} as { context: { n: number } } }).createMachine({
        context: { n: 0 },
        initial: "a",
        states: { a: { entry: [assign({ n: 1 }), log("in a")], after: { 1000: "b" }, invoke: { src: "t" } }, b: { always: "c" }, c: { type: "final" } },
      }),
    });
    expect([...accepted.tasks.values()].map((t) => t.name)).toEqual(["t"]);
    expect(() => defineWorkflow({ name: "bad name!", machine: counter.machine })).toThrow(/letters, digits/);
    expect(() => defineWorkflow({ name: "w", machine: {} as any })).toThrow(/machine must be an XState machine/);
  });
});

describe("start and send", () => {
  it("start and send commit with the caller's transaction, or not at all; a key starts one instance", async () => {
    const client = await db.connect();
    await client.query("BEGIN");
    const { id } = await startWorkflow(client, counter, null);
    await sendToWorkflow(client, id, { type: "INC" });
    await client.query("ROLLBACK");
    expect(await getWorkflow(db.pool, id)).toBeNull();
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.workflow_events WHERE workflow_id = $1", [id])).rows[0].n).toBe(0);
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE payload->>'workflow' = $1", [id])).rows[0].n).toBe(0);

    const first = await startWorkflow(db.pool, "counter", null, { key: "order-1" });
    const again = await startWorkflow(db.pool, "counter", null, { key: "order-1" });
    expect(first.created).toBe(true);
    expect(again).toEqual({ id: first.id, created: false });
  });

  it("refuses events a caller may not send, and sends to a finished or missing instance, with what to do", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    await expect(sendToWorkflow(db.pool, id, { type: "xstate.done.actor.charge" } as any)).rejects.toThrow(/"xstate\.\*" events come from the workflow's tasks and timers/);
    await expect(sendToWorkflow(db.pool, id, "INC" as any)).rejects.toThrow(/an object with a string type/);
    await expect(sendToWorkflow(db.pool, id, { type: "INC", note: "a\u0000b" })).rejects.toThrow(/NUL character/);
    await expect(sendToWorkflow(db.pool, "999999999", { type: "INC" })).rejects.toThrow(/no workflow 999999999/);
    await cancelWorkflow(db.pool, id);
    await expect(sendToWorkflow(db.pool, id, { type: "INC" })).rejects.toThrow(/has finished \(cancelled\); an event cannot change it, and none was sent/);
  });
});

describe("a send joins the instance's applier job waiting to be claimed", () => {
  const appliers = async (id: JobId, on: { query: typeof db.pool.query } = db.pool) =>
    (await on.query<{ status: string; due: boolean }>("SELECT status, run_at <= now() AS due FROM picket.jobs WHERE type = $1 AND payload->>'workflow' = $2 ORDER BY id", [APPLIER_TASK, id])).rows;
  /** A pool whose one connection is `client`, in the transaction the test opened on it: a send on it takes a pool's path. */
  const poolOf = (client: pg.PoolClient) => {
    const kept = new Proxy(client, {
      get: (target, property) => {
        if (property === "release") return () => undefined;
        const value = Reflect.get(target, property, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    return { totalCount: 1, connect: (callback: (error: undefined, client: pg.PoolClient) => void) => callback(undefined, kept) } as unknown as pg.Pool;
  };

  it("a burst sent on the pool adds no job: the start's applier applies every event, once and in order", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    for (let i = 0; i < 5; i++) await sendToWorkflow(db.pool, id, { type: "INC" });
    await sendToWorkflow(db.pool, id, { type: "FINISH" });
    expect(await appliers(id)).toEqual([{ status: "pending", due: true }]);
    await worker({ tasks: [], workflows: [counter] });
    await settled(id);
    expect(await getWorkflow(db.pool, id)).toMatchObject({ status: "done", seq: 7, output: { n: 5 } });
    expect((await allEvents(id)).map((e) => [e.seq, (e.event as { type?: string }).type ?? "start", e.outcome])).toEqual([
      [1, "start", "applied"], ...[2, 3, 4, 5, 6].map((seq) => [seq, "INC", "applied"]), [7, "FINISH", "applied"],
    ]);
  });

  it("the job it joined is passed over by claims until the send commits, then applies its event", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    await otherAppliersGone(id);
    const client = await db.pool.connect();
    try {
      await client.query("BEGIN");
      await sendToWorkflow(poolOf(client), id, { type: "INC" });
      // Joined (no job of its own, even seen from its own transaction), and held: no claim takes it yet.
      expect(await appliers(id, client)).toEqual([{ status: "pending", due: true }]);
      expect(await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })])).toEqual([]);
      await client.query("COMMIT");
    } finally {
      client.release();
    }
    const [job] = await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })]);
    const deps = { db: db.pool, statements: { schema: "picket" }, logger: quietLogger };
    expect(await applyDueEvents(deps, new WorkflowRegistry([counter]), id, { id: job!.id, token: job!.claimToken }, new AbortController().signal)).toBe(2);
    expect(await getWorkflow(db.pool, id)).toMatchObject({ seq: 2, context: { n: 1 } });
  });

  it("sent in a caller's transaction, it brings its own job and holds none: the waiting one is claimed meanwhile", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    await otherAppliersGone(id);
    const client = await db.pool.connect();
    try {
      await client.query("BEGIN");
      await sendToWorkflow(client, id, { type: "INC" });
      expect(await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })])).toHaveLength(1);
      await client.query("COMMIT");
    } finally {
      client.release();
    }
    expect(await appliers(id)).toEqual([{ status: "processing", due: true }, { status: "pending", due: true }]);
  });

  it("it passes over a job being claimed, one claimed, one due later and another instance's, and brings its own", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    await otherAppliersGone(id);
    // Another instance's job waits too: never this instance's.
    const other = await startWorkflow(db.pool, counter, null);
    // Being claimed: a claim has the row locked. The send does not wait for it.
    const client = await db.pool.connect();
    try {
      await client.query("BEGIN");
      await client.query("SELECT id FROM picket.jobs WHERE type = $1 AND payload->>'workflow' = $2 FOR UPDATE", [APPLIER_TASK, id]);
      await sendToWorkflow(db.pool, id, { type: "INC" }, { timeoutMs: 5_000 });
      await client.query("ROLLBACK");
    } finally {
      client.release();
    }
    expect(await appliers(id)).toEqual([{ status: "pending", due: true }, { status: "pending", due: true }]);
    // Claimed: no longer waiting.
    await db.pool.query("UPDATE picket.jobs SET status = 'processing', claim_token = gen_random_uuid(), lock_until = now() + interval '1 minute' WHERE type = $1 AND payload->>'workflow' = $2", [APPLIER_TASK, id]);
    await sendToWorkflow(db.pool, id, { type: "INC" });
    expect(await appliers(id)).toEqual([{ status: "processing", due: true }, { status: "processing", due: true }, { status: "pending", due: true }]);
    // Due later (seconds from now): the event would wait with it.
    await db.pool.query("UPDATE picket.jobs SET run_at = now() + interval '10 seconds' WHERE type = $1 AND payload->>'workflow' = $2 AND status = 'pending'", [APPLIER_TASK, id]);
    await sendToWorkflow(db.pool, id, { type: "INC" });
    expect((await appliers(id)).slice(2)).toEqual([{ status: "pending", due: false }, { status: "pending", due: true }]);
    // Due now, but tried before (it may fail again and back off, or die), or a timer's (its timer's
    // cancel deletes it), or a user's own job naming the instance: none of them either.
    const naming = async () => (await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE payload->>'workflow' = $1", [id])).rows[0].n as number;
    for (const change of ["attempts = 1", `payload = payload || '{"timer": true}'`, "type = 'user-task'"]) {
      // The job the last send brought: the one waiting that a send would join.
      await db.pool.query(`UPDATE picket.jobs SET ${change} WHERE id = (SELECT max(id) FROM picket.jobs WHERE type = $1 AND payload->>'workflow' = $2)`, [APPLIER_TASK, id]);
      const before = await naming();
      await sendToWorkflow(db.pool, id, { type: "INC" });
      expect(await naming(), change).toBe(before + 1);
    }
    // ...and the next send joins the one it brought.
    const before = await naming();
    await sendToWorkflow(db.pool, id, { type: "INC" });
    expect(await naming()).toBe(before);
    expect(await appliers(other.id)).toEqual([{ status: "pending", due: true }]);
  });

  it("a send that joins wakes the workers itself (it inserts no job for the enqueue trigger to announce)", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    const listener = await db.connect();
    try {
      const heard: string[] = [];
      listener.on("notification", (message) => heard.push(message.payload ?? ""));
      await listener.query('LISTEN "picket:picket"');
      await sendToWorkflow(db.pool, id, { type: "INC" });
      expect(await appliers(id)).toHaveLength(1);
      await until("the wake-up", async () => heard.includes(APPLIER_TASK), 10_000);
    } finally {
      await listener.query("UNLISTEN *");
    }
  });

  it("a send racing a cancel of its instance: its event is dropped, not left in the inbox with no job (a timer's job, which the cancel deletes, is not joined)", async () => {
    const timed = defineWorkflow({
      name: "timed-join",
      machine: setup({}).createMachine({ initial: "waiting", states: { waiting: { after: { 50: "late" }, on: { X: "got" } }, late: { on: { X: "got" } }, got: { type: "final" } } }),
    });
    const registry = new WorkflowRegistry([timed]);
    const deps = { db: db.pool, statements: { schema: "picket" }, logger: quietLogger };
    const signal = new AbortController().signal;
    const { id } = await startWorkflow(db.pool, timed, null);
    await otherAppliersGone(id);
    const [start] = await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })]);
    expect(await applyDueEvents(deps, registry, id, { id: start!.id, token: start!.claimToken }, signal)).toBe(1);
    // The timer's job is due and no worker has claimed it: the one applier job waiting.
    await db.pool.query("UPDATE picket.jobs SET run_at = now() WHERE type = $1 AND payload->>'workflow' = $2 AND status = 'pending'", [APPLIER_TASK, id]);
    expect(await appliers(id)).toEqual([{ status: "processing", due: true }, { status: "pending", due: true }]);
    const client = await db.pool.connect();
    let cancel: Promise<unknown> | undefined;
    try {
      await client.query("BEGIN");
      await sendToWorkflow(poolOf(client), id, { type: "X" });
      // The cancel begins before the send commits: it cannot see the event, and it deletes the
      // timer's job (waiting for the send's lock on it, had the send joined it).
      let done = false;
      cancel = cancelWorkflow(db.pool, id).finally(() => (done = true));
      await until("the cancel done, or waiting for a lock", async () =>
        done || (await db.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).rows[0].n > 0,
      );
      await client.query("COMMIT");
    } finally {
      client.release();
    }
    await cancel;
    // Every applier job left runs: the event is dropped, as one sent as an instance ends is.
    for (let job = (await claimJobs(db.pool, "worker-b", [want(APPLIER_TASK, { limit: 1 })]))[0]; job !== undefined; job = (await claimJobs(db.pool, "worker-b", [want(APPLIER_TASK, { limit: 1 })]))[0]) {
      await applyDueEvents(deps, registry, id, { id: job.id, token: job.claimToken }, signal);
    }
    const { history, inbox } = await workflowHistory(db.pool, id);
    expect(inbox).toEqual([]);
    expect(history.filter((e) => e.kind === "send").map((e) => [e.outcome, e.note])).toEqual([["dropped", "workflow cancelled"]]);
  });
});

describe("applying events", () => {
  // On clients, each event brings its own applier job; on the pool, sends join a waiting one.
  it.each(["10 connections", "10 senders on the pool"])("applies each of 300 events sent concurrently from %s exactly once, in one order, with three workers applying", async (senders) => {
    const workers = await Promise.all([1, 2, 3].map(() => worker({ tasks: [], workflows: [counter], concurrency: 4 })));
    const { id } = await startWorkflow(db.pool, counter, null);
    const clients = senders === "10 connections" ? await Promise.all(Array.from({ length: 10 }, () => db.connect())) : Array.from({ length: 10 }, () => db.pool);
    await Promise.all(
      clients.map(async (client, from) => {
        for (let i = 0; i < 30; i++) await sendToWorkflow(client, id, { type: "INC", from, i });
      }),
    );
    await until("300 events applied", async () => (await db.pool.query("SELECT count(*)::int AS n FROM picket.workflow_events WHERE workflow_id = $1 AND kind = 'send' AND applied_at IS NOT NULL", [id])).rows[0].n === 300);
    await sendToWorkflow(db.pool, id, { type: "FINISH" });
    await settled(id);
    const wf = (await getWorkflow(db.pool, id))!;
    expect(wf.status).toBe("done");
    expect(wf.output).toEqual({ n: 300 });
    const history = await allEvents(id);
    // One seq per event, 1..302 (start, 300 INC, FINISH): no event applied twice, none skipped.
    expect(history.map((e) => e.seq)).toEqual(Array.from({ length: 302 }, (_, i) => i + 1));
    // Each sender's events in the order it sent them.
    for (const from of clients.keys()) {
      const mine = history.filter((e) => (e.event as { from?: number }).from === from).map((e) => (e.event as { i: number }).i);
      expect(mine).toEqual(Array.from({ length: 30 }, (_, i) => i));
    }
    expect(workers.flatMap((w) => w.outcomes).filter((o) => o.outcome !== "completed")).toEqual([]);
  });

  it("a stale claim applies nothing: the event stays in the inbox for the claim that holds the job now", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    await otherAppliersGone(id);
    const registry = new WorkflowRegistry([counter]);
    const deps = { db: db.pool, statements: { schema: "picket" }, logger: quietLogger };
    const [stale] = await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })]);
    await expireLease(db.pool, stale!.id);
    expect((await sweepExpiredClaims(db.pool, 10)).map((s) => s.id)).toContain(stale!.id);
    await db.pool.query("UPDATE picket.jobs SET run_at = now() WHERE id = $1", [stale!.id]);
    const [live] = await claimJobs(db.pool, "worker-b", [want(APPLIER_TASK, { limit: 1 })]);
    expect(live!.id).toBe(stale!.id);

    expect(await applyDueEvents(deps, registry, id, { id: stale!.id, token: stale!.claimToken }, new AbortController().signal).catch((e: Error) => e.message)).toMatch(/the claim of job [0-9]+, which applies its events, was lost \(reclaimed, cancelled or finished\): nothing was applied/);
    expect((await getWorkflow(db.pool, id))!).toMatchObject({ status: "starting", seq: 0, state: null });
    expect(await applyDueEvents(deps, registry, id, { id: live!.id, token: live!.claimToken }, new AbortController().signal)).toBe(1);
    expect((await getWorkflow(db.pool, id))!).toMatchObject({ status: "running", seq: 1, state: "counting" });
  });

  it("one applier holds an instance at a time: another ends at once and the holder applies its event; a dead holder's hold is taken", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    await otherAppliersGone(id);
    const registry = new WorkflowRegistry([counter]);
    const deps = { db: db.pool, statements: { schema: "picket" }, logger: quietLogger };
    const signal = new AbortController().signal;
    const claimOne = async (worker: string) => {
      const [job] = await claimJobs(db.pool, worker, [want(APPLIER_TASK, { limit: 1 })]);
      return { id: job!.id, token: job!.claimToken };
    };
    const a = await claimOne("worker-a");
    expect(await holdForApply(db.pool, id, a)).toMatchObject({ outcome: "held" });
    // An event sent while A holds: its applier finds the instance held and ends, applying nothing.
    await sendToWorkflow(db.pool, id, { type: "INC" });
    const b = await claimOne("worker-b");
    expect(await holdForApply(db.pool, id, b)).toEqual({ outcome: "busy" });
    expect(await applyDueEvents(deps, registry, id, b, signal)).toBe(0);
    expect((await getWorkflow(db.pool, id))!.seq).toBe(0);
    // A applies both the start and that event, lets go, and finds nothing more due.
    expect(await applyDueEvents(deps, registry, id, a, signal)).toBe(2);
    expect((await getWorkflow(db.pool, id))!).toMatchObject({ seq: 2, context: { n: 1 } });
    expect((await db.pool.query("SELECT applier_job FROM picket.workflows WHERE id = $1", [id])).rows[0].applier_job).toBeNull();

    // A holder that dies: its claim swept, its hold is free to the next applier.
    await sendWithOwnApplier(id, { type: "INC" });
    await sendWithOwnApplier(id, { type: "INC" });
    const c = await claimOne("worker-c");
    expect(await holdForApply(db.pool, id, c)).toMatchObject({ outcome: "held" });
    const d = await claimOne("worker-d");
    expect(await holdForApply(db.pool, id, d)).toEqual({ outcome: "busy" });
    await expireLease(db.pool, c.id);
    expect((await sweepExpiredClaims(db.pool, 10)).map((swept) => swept.id)).toContain(c.id);
    expect(await applyDueEvents(deps, registry, id, d, signal)).toBe(2);
    expect((await getWorkflow(db.pool, id))!).toMatchObject({ seq: 4, context: { n: 3 } });
  });

  it("an apply returns the next due event and keeps the hold; the apply that finds none lets go in its own write", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    const { eventId: inc } = await sendToWorkflow(db.pool, id, { type: "INC" });
    await otherAppliersGone(id);
    const [job] = await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })]);
    const a = { id: job!.id, token: job!.claimToken };
    const hold = await holdForApply(db.pool, id, a);
    if (hold.outcome !== "held") throw new Error(`not held: ${hold.outcome}`);
    // The database does not read the snapshot: any JSON stands for the machine's.
    const write = (seq: number, eventId: string) => writeApply(db.pool, { workflowId: id, seq, eventId, claim: a, snapshot: { n: seq }, state: "counting", status: "running", version: "1", fingerprint: "f", outcome: "applied", note: null, startTasks: [], stopTasks: [], startTimers: [], cancelTimers: [], startChildren: [], stopChildren: [] });
    const holder = async () => (await db.pool.query("SELECT applier_job::text FROM picket.workflows WHERE id = $1", [id])).rows[0].applier_job;
    const first = await write(0, hold.row.eventId!);
    expect(first).toMatchObject({ outcome: "applied", next: { id, seq: 1, eventId: inc, kind: "send", event: { type: "INC" }, snapshot: { n: 0 } } });
    expect(await holder()).toBe(a.id);
    const last = await write(1, inc);
    expect(last).toMatchObject({ outcome: "applied", next: { id, seq: 2, eventId: null } });
    expect(await holder()).toBeNull();
    expect((await db.pool.query("SELECT applier_token FROM picket.workflows WHERE id = $1", [id])).rows[0].applier_token).toBeNull();
    // A stale seq writes nothing and keeps whatever hold there is.
    expect(await write(1, inc)).toEqual({ outcome: "raced", next: null });
  });

  it("a run over a backlog sends one statement per event, with only the hold before and the look for events due after", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    for (let i = 0; i < 5; i++) await sendToWorkflow(db.pool, id, { type: "INC" });
    await otherAppliersGone(id);
    const [job] = await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })]);
    const sent: string[] = [];
    const counted = { query: (config: { name?: string; text: string }) => (sent.push(config.name ?? config.text), db.pool.query(config as never)) };
    const deps = { db: counted as never, statements: { schema: "picket" }, logger: quietLogger };
    expect(await applyDueEvents(deps, new WorkflowRegistry([counter]), id, { id: job!.id, token: job!.claimToken }, new AbortController().signal)).toBe(6);
    expect(sent.map((name) => name.replace(/^picket_workflow_(\w+)_picket$/, "$1"))).toEqual(["hold", ...Array(6).fill("apply"), "due"]);
    expect(await getWorkflow(db.pool, id)).toMatchObject({ seq: 6, context: { n: 5 } });
  });

  it("a run stopped with events due (a drain) leaves them to a new applier job", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    await otherAppliersGone(id);
    const registry = new WorkflowRegistry([counter]);
    const deps = { db: db.pool, statements: { schema: "picket" }, logger: quietLogger };
    const [job] = await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })]);
    const drained = new AbortController();
    drained.abort();
    expect(await applyDueEvents(deps, registry, id, { id: job!.id, token: job!.claimToken }, drained.signal)).toBe(0);
    const pending = await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = $1 AND status = 'pending' AND payload->>'workflow' = $2", [APPLIER_TASK, id]);
    expect(pending.rows[0].n).toBe(1);
    expect((await db.pool.query("SELECT applier_job FROM picket.workflows WHERE id = $1", [id])).rows[0].applier_job).toBeNull();
  });

  it("a run applies at most 200 events, then lets go with a new applier job for the rest", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    for (let i = 0; i < 250; i++) await sendToWorkflow(db.pool, id, { type: "INC" });
    await otherAppliersGone(id);
    const registry = new WorkflowRegistry([counter]);
    const deps = { db: db.pool, statements: { schema: "picket" }, logger: quietLogger };
    const live = new AbortController();
    const pendingAppliers = async () =>
      (await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = $1 AND status = 'pending' AND payload->>'workflow' = $2", [APPLIER_TASK, id])).rows[0].n as number;
    const before = await pendingAppliers();
    const [first] = await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })]);
    expect(await applyDueEvents(deps, registry, id, { id: first!.id, token: first!.claimToken }, live.signal)).toBe(200);
    expect(await getWorkflow(db.pool, id)).toMatchObject({ seq: 200, context: { n: 199 } });
    // Let go: the next run takes the instance at once.
    expect((await db.pool.query("SELECT applier_job FROM picket.workflows WHERE id = $1", [id])).rows[0].applier_job).toBeNull();
    expect((await workflowHistory(db.pool, id)).inbox).toHaveLength(51);
    // One pending applier was claimed (still processing: its worker completes it), one continuation added.
    expect(await pendingAppliers()).toBe(before);
    const [next] = await claimJobs(db.pool, "worker-b", [want(APPLIER_TASK, { limit: 1 })]);
    expect(await applyDueEvents(deps, registry, id, { id: next!.id, token: next!.claimToken }, live.signal)).toBe(51);
    expect(await getWorkflow(db.pool, id)).toMatchObject({ seq: 251, context: { n: 250 } });
  });

  it("an event that re-enters a state whose timer is already due cancels that timer: the run applies the new one only when it is due", async () => {
    const retimer = defineWorkflow({
      name: "retimer",
      machine: setup({}).createMachine({
        initial: "waiting",
        states: { waiting: { after: { 60_000: "reminded" }, on: { RESET: { target: "waiting", reenter: true } } }, reminded: { type: "final" } },
      }),
    });
    const registry = new WorkflowRegistry([retimer]);
    const deps = { db: db.pool, statements: { schema: "picket" }, logger: quietLogger };
    const { id } = await startWorkflow(db.pool, retimer, null);
    await otherAppliersGone(id);
    const applyAs = async (worker: string) => {
      const [job] = await claimJobs(db.pool, worker, [want(APPLIER_TASK, { limit: 1 })]);
      return applyDueEvents(deps, registry, id, { id: job!.id, token: job!.claimToken }, new AbortController().signal);
    };
    expect(await applyAs("worker-a")).toBe(1);
    // RESET is sent, then the timer comes due before any applier runs (a worker was down): RESET goes
    // first, as it was sent first, and its re-entry replaces the timer.
    await sendToWorkflow(db.pool, id, { type: "RESET" });
    await db.pool.query("UPDATE picket.workflow_events SET due_at = clock_timestamp() WHERE workflow_id = $1 AND kind = 'timer'", [id]);
    const timers = async () => (await db.pool.query<{ id: string; late: boolean }>("SELECT id::text, due_at > now() + interval '50 seconds' AS late FROM picket.workflow_events WHERE workflow_id = $1 AND kind = 'timer' AND applied_at IS NULL", [id])).rows;
    const [due] = await timers();
    expect(due!.late).toBe(false);
    // The apply of RESET deletes the due timer: the same run does not apply it afterwards.
    expect(await applyAs("worker-b")).toBe(1);
    expect((await getWorkflow(db.pool, id))!).toMatchObject({ status: "running", state: "waiting", seq: 2 });
    expect((await allEvents(id)).map((e) => [e.kind, e.outcome, e.state])).toEqual([["start", "applied", "waiting"], ["send", "applied", "waiting"], ["timer", null, null]]);
    const [replaced] = await timers();
    expect(replaced).toMatchObject({ late: true });
    expect(replaced!.id).not.toBe(due!.id);
  });

  it("a task's job carries its input, and the queue, priority and attempts task() gives it", async () => {
    const ship = task<{ n: number }, unknown>("ship-parcel", { queue: "shipping", priority: 7, maxAttempts: 9 });
    const shipping = defineWorkflow({ name: "shipping", machine: setup({ actors: { ship } }).createMachine({ initial: "a", states: { a: { invoke: { id: "s", src: "ship", input: { n: 1 } } } } }) });
    const { id } = await startWorkflow(db.pool, shipping, null);
    await otherAppliersGone(id);
    const [job] = await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })]);
    const deps = { db: db.pool, statements: { schema: "picket" }, logger: quietLogger };
    expect(await applyDueEvents(deps, new WorkflowRegistry([shipping]), id, { id: job!.id, token: job!.claimToken }, new AbortController().signal)).toBe(1);
    const { rows } = await db.pool.query("SELECT type, payload, queue, priority, max_attempts FROM picket.jobs WHERE workflow_id = $1", [id]);
    expect(rows).toEqual([{ type: "ship-parcel", payload: { n: 1 }, queue: "shipping", priority: 7, max_attempts: 9 }]);
  });

  it("an event still waiting when the instance finished is dropped, saying why", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    await sendWithOwnApplier(id, { type: "FINISH" });
    await sendWithOwnApplier(id, { type: "INC" });
    const { outcomes } = await worker({ tasks: [], workflows: [counter] });
    await settled(id);
    await until("the inbox empty, and every applier of it ended", async () =>
      (await workflowHistory(db.pool, id)).inbox.length === 0 &&
      (await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = $1 AND payload->>'workflow' = $2 AND status IN ('pending', 'processing')", [APPLIER_TASK, id])).rows[0].n === 0,
    );
    // Each of its applier runs ended without an error (the drop is not a step: it has no logs, no snapshot).
    const mine = new Set((await db.pool.query<{ id: string }>("SELECT id::text FROM picket.jobs WHERE type = $1 AND payload->>'workflow' = $2", [APPLIER_TASK, id])).rows.map((r) => r.id));
    expect(mine.size).toBeGreaterThanOrEqual(3);
    expect(outcomes.filter((o) => mine.has(o.id) && o.error !== null)).toEqual([]);
    expect((await allEvents(id)).map((e) => [e.kind, (e.event as { type?: string }).type ?? null, e.outcome, e.note, e.seq])).toEqual([
      ["start", null, "applied", null, 1],
      ["send", "FINISH", "applied", null, 2],
      ["send", "INC", "dropped", "workflow done", null],
    ]);
    expect(await getWorkflow(db.pool, id)).toMatchObject({ status: "done", output: { n: 0 }, seq: 2 });
  });

  it("a task job an operator cancels comes back as its error event, saying it was cancelled", async () => {
    const chargeOnce = defineWorkflow({
      name: "charge-once",
      machine: setup({ types: {} as { context: { error: string | null } }, actors: { chargeCard } }).createMachine({
        context: { error: null },
        initial: "charging",
        states: {
          charging: {
            invoke: { id: "charge", src: "chargeCard", input: { amount: 1 }, onError: { target: "failed", actions: assign({ error: ({ event }) => (event.error as { message: string }).message }) } },
          },
          failed: { type: "final" },
        },
      }),
    });
    // Runs until it is stopped.
    const charge = defineTask({
      name: "charge-card",
      handler: (_payload: unknown, ctx) => new Promise((_resolve, reject) => ctx.signal.addEventListener("abort", () => reject(new Error("stopped")), { once: true })),
    });
    await worker({ tasks: [charge], workflows: [chargeOnce] });
    const { id } = await startWorkflow(db.pool, chargeOnce, null);
    await until("the charge running", async () => (await workflowJobs(db.pool, id))[0]?.status === "processing");
    const [job] = await workflowJobs(db.pool, id);
    expect((await cancelJob(db.pool, job!.id, { by: "ops" })).outcome).toBe("applied");
    await settled(id);
    expect(await getWorkflow(db.pool, id)).toMatchObject({ status: "done", state: "failed", context: { error: "the task's job was cancelled" } });
  });

  it("a task's result comes back as its done event, its failure as its error event (the task's retries are its own)", async () => {
    let calls = 0;
    const charge = defineTask({
      name: "charge-card",
      maxAttempts: 2,
      backoff: { baseMs: 10, maxMs: 10 },
      handler: async (payload: { amount: number }) => {
        calls++;
        if (payload.amount < 0) throw new Error(`amount ${payload.amount} refused`);
        return { receipt: `r-${payload.amount}` };
      },
    });
    const { supervisor } = await worker({ tasks: [charge], workflows: [payment], keepCompleted: false });
    const paid = await startWorkflow(db.pool, payment, { amount: 5 });
    const declined = await startWorkflow(db.pool, payment, { amount: -1 });
    await Promise.all([settled(paid.id), settled(declined.id)]);
    expect(await getWorkflow(db.pool, paid.id)).toMatchObject({ status: "done", state: "paid", context: { amount: 5, receipt: "r-5", error: null } });
    expect(await getWorkflow(db.pool, declined.id)).toMatchObject({ status: "done", state: "declined", context: { error: "error: amount -1 refused" } });
    expect(calls).toBe(3);
    const jobs = await workflowJobs(db.pool, declined.id);
    expect(jobs).toMatchObject([{ type: "charge-card", status: "dead", attempts: 2 }]);
    // The timer the charging state set was cancelled with it: no timer left in the inbox.
    const inbox = await db.pool.query("SELECT count(*)::int AS n FROM picket.workflow_events WHERE workflow_id = ANY($1) AND applied_at IS NULL", [[paid.id, declined.id]]);
    expect(inbox.rows[0].n).toBe(0);
    await supervisor.stop();
  });

  it("a late task result, of an invocation the machine stopped, is dropped and recorded as such, though the same invocation id runs again", async () => {
    const { id } = await startWorkflow(db.pool, payment, { amount: 7 });
    await otherAppliersGone(id);
    const registry = new WorkflowRegistry([payment]);
    const deps = { db: db.pool, statements: { schema: "picket" }, logger: quietLogger };
    const applyAll = async () => {
      for (;;) {
        const [applier] = await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })]);
        if (applier === undefined) return;
        await applyDueEvents(deps, registry, id, { id: applier.id, token: applier.claimToken }, new AbortController().signal);
        await completeJobs(db.pool, [{ id: applier.id, token: applier.claimToken }]);
      }
    };
    await applyAll();
    const [charge] = await claimJobs(db.pool, "worker-a", [want("charge-card", { limit: 1 })]);
    expect(charge).toBeDefined();
    // The timer comes due; RETRY is sent; the job completes: all three wait in the inbox, in that
    // order. The timer takes the machine to gaveUp (stopping the invocation), RETRY charges again
    // under the same invocation id with a new job, and then the first job's result arrives.
    await new Promise((resolve) => setTimeout(resolve, 450));
    await sendToWorkflow(db.pool, id, { type: "RETRY" });
    expect(await completeJobs(db.pool, [{ id: charge!.id, token: charge!.claimToken, result: { receipt: "late" } }], { keepCompleted: false })).toMatchObject([{ outcome: "applied" }]);
    await applyAll();
    const second = (await getWorkflow(db.pool, id))!.tasks.charge;
    expect(second).toBeDefined();
    expect(second).not.toBe(charge!.id);
    const wf = (await getWorkflow(db.pool, id))!;
    expect(wf).toMatchObject({ status: "running", state: "charging", context: { receipt: null }, tasks: { charge: second } });
    const history = await allEvents(id);
    // Applied ones in order, then the inbox: the second charge's timer.
    expect(history.map((e) => [e.kind, e.outcome])).toEqual([["start", "applied"], ["timer", "applied"], ["send", "applied"], ["task", "dropped"], ["timer", null]]);
    expect(history[3]!.note).toBe(`late result: job ${charge!.id} (completed) answered an invocation the workflow had already stopped`);
    expect(history[3]!.jobId).toBe(charge!.id);
    expect(await getJob(db.pool, second!)).toMatchObject({ status: "pending" });
  });

  it("an invocation the machine stops while its job runs: the job is cancelled and its handler's signal aborted; its report is dropped", async () => {
    const started = new Set<string>();
    const aborted = new Set<string>();
    const slow = defineTask({
      name: "charge-card",
      handler: async (_payload: unknown, ctx) => {
        started.add(ctx.job.id);
        await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
        aborted.add(ctx.job.id);
        return { receipt: "too late" };
      },
    });
    const { outcomes } = await worker({ tasks: [slow], workflows: [payment] });
    const { id } = await startWorkflow(db.pool, payment, { amount: 3 });
    await until("the charge to run", async () => (await workflowJobs(db.pool, id)).some((job) => started.has(job.id)));
    const [charge] = await workflowJobs(db.pool, id);
    // The 400 ms timer takes the machine to gaveUp, stopping the charge.
    await inState(id, "gaveUp");
    await until("the handler to be told", async () => aborted.has(charge!.id));
    await until("the job's outcome", async () => outcomes.some((o) => o.id === charge!.id));
    expect(outcomes.find((o) => o.id === charge!.id)!.outcome).toBe("cancelled");
    expect(await getJob(db.pool, charge!.id)).toMatchObject({ status: "cancelled" });
    await until("the report dropped", async () => (await allEvents(id)).some((e) => e.kind === "task" && e.outcome === "dropped"));
    expect((await getWorkflow(db.pool, id))!).toMatchObject({ state: "gaveUp", tasks: {}, context: { receipt: null } });
  });

  it("a task whose done event takes no state away leaves no invocation in flight", async () => {
    const staying = defineWorkflow({
      name: "staying",
      machine: setup({ types: {} as { context: { got: unknown } }, actors: { charge: chargeCard } }).createMachine({
        context: { got: null },
        initial: "a",
        states: { a: { invoke: { id: "w", src: "charge", input: { amount: 1 }, onDone: { actions: assign({ got: ({ event }) => event.output }) } }, on: { NEXT: "b" } }, b: {} },
      }),
    });
    const charge = defineTask({ name: "charge-card", handler: async () => ({ receipt: "kept" }) });
    await worker({ tasks: [charge], workflows: [staying] });
    const { id } = await startWorkflow(db.pool, staying, null);
    await until("the result", async () => ((await getWorkflow(db.pool, id))!.context as { got: unknown } | null)?.got !== null && (await getWorkflow(db.pool, id))!.seq >= 2);
    expect((await getWorkflow(db.pool, id))!).toMatchObject({ state: "a", tasks: {}, context: { got: { receipt: "kept" } } });
  });

  it("a task job reports once: a later write to its finished row sends nothing", async () => {
    const { id } = await startWorkflow(db.pool, payment, { amount: 4 });
    const charge = defineTask({ name: "charge-card", handler: async () => ({ receipt: "r" }) });
    const { supervisor } = await worker({ tasks: [charge], workflows: [payment] });
    await settled(id);
    await supervisor.stop();
    const [job] = await workflowJobs(db.pool, id);
    const reports = async () => (await db.pool.query("SELECT count(*)::int AS n FROM picket.workflow_events WHERE job_id = $1", [job!.id])).rows[0].n;
    expect(await reports()).toBe(1);
    // An operator's write to the finished row (a note, a fix-up) is one more UPDATE of it.
    await db.pool.query("UPDATE picket.jobs SET updated_at = now() WHERE id = $1", [job!.id]);
    expect(await reports()).toBe(1);
  });

  it("a timer set before a downtime fires when a worker is back, once", async () => {
    const reminder = defineWorkflow({
      name: "reminder",
      machine: setup({}).createMachine({ initial: "waiting", states: { waiting: { after: { 300: "reminded" }, on: { REPLY: "replied" } }, reminded: { type: "final" }, replied: { type: "final" } } }),
    });
    const first = await worker({ tasks: [], workflows: [reminder] });
    const { id } = await startWorkflow(db.pool, reminder, null);
    await inState(id, "waiting");
    await first.supervisor.stop();
    // Down for three times the delay.
    await new Promise((resolve) => setTimeout(resolve, 900));
    expect((await getWorkflow(db.pool, id))!.state).toBe("waiting");
    await worker({ tasks: [], workflows: [reminder] });
    await settled(id);
    const history = await allEvents(id);
    expect(history.map((e) => [e.kind, e.outcome, e.state])).toEqual([["start", "applied", "waiting"], ["timer", "applied", "reminded"]]);
    expect(history[1]!.appliedAt!.getTime() - history[1]!.dueAt.getTime()).toBeGreaterThan(500);
  });

  it("an event that takes the machine out of a state cancels its timer: the timer's row and its job go", async () => {
    const reminder = defineWorkflow({
      name: "reminder2",
      machine: setup({}).createMachine({
        initial: "waiting",
        states: {
          waiting: { after: { 3_600_000: "reminded" }, on: { REPLY: "replied" } },
          // Not final: the instance runs on, so the timer goes because its state was left (by its send id).
          replied: { after: { 7_200_000: "reminded" }, on: { CLOSE: "closed" } },
          reminded: { type: "final" },
          closed: { type: "final" },
        },
      }),
    });
    await worker({ tasks: [], workflows: [reminder] });
    const { id } = await startWorkflow(db.pool, reminder, null);
    await inState(id, "waiting");
    const timers = async () => (await db.pool.query<{ send_id: string; wake_job: string }>("SELECT send_id, wake_job::text FROM picket.workflow_events WHERE workflow_id = $1 AND kind = 'timer'", [id])).rows;
    const [timer] = await timers();
    expect(timer!.send_id).toBe("xstate.after.3600000.(machine).waiting");
    expect(await getJob(db.pool, timer!.wake_job)).toMatchObject({ status: "pending" });
    await sendToWorkflow(db.pool, id, { type: "REPLY" });
    await inState(id, "replied");
    expect(await getJob(db.pool, timer!.wake_job)).toBeNull();
    expect((await timers()).map((t) => t.send_id)).toEqual(["xstate.after.7200000.(machine).replied"]);
    await sendToWorkflow(db.pool, id, { type: "CLOSE" });
    await settled(id);
    expect(await timers()).toEqual([]);
  });

  it("cancelWorkflow ends the instance, drops its inbox and cancels its tasks in flight", async () => {
    const { id } = await startWorkflow(db.pool, payment, { amount: 1 });
    await worker({ tasks: [], workflows: [payment] });
    await inState(id, "charging");
    const [charge] = await workflowJobs(db.pool, id);
    expect(charge).toMatchObject({ type: "charge-card", status: "pending" });
    expect(await cancelWorkflow(db.pool, id, { by: "test" })).toEqual({ outcome: "cancelled", status: "cancelled", tasks: 1 });
    expect(await getJob(db.pool, charge!.id)).toMatchObject({ status: "cancelled" });
    expect(await cancelWorkflow(db.pool, id)).toEqual({ outcome: "finished", status: "cancelled", tasks: 0 });
    expect(await cancelWorkflow(db.pool, "123456789")).toEqual({ outcome: "not_found", tasks: 0 });
    // The cancelled task's report arrives after: dropped, the instance stays cancelled.
    await until("the report dropped", async () => (await allEvents(id)).some((e) => e.kind === "task" && e.outcome === "dropped"));
    expect((await getWorkflow(db.pool, id))!.status).toBe("cancelled");
  });
});

describe("versions", () => {
  const machine = (states: string[]) =>
    setup({ types: {} as { context: { seen: string[] } } }).createMachine({
      id: "review",
      context: { seen: [] },
      initial: states[0],
      states: Object.fromEntries(
        states.map((s, i) => [s, i === states.length - 1 ? { type: "final" as const } : { on: { NEXT: { target: states[i + 1], actions: assign({ seen: ({ context }) => [...context.seen, s] }) } } }]),
      ),
    });
  const v1 = defineWorkflow({ name: "review", version: 1, machine: machine(["draft", "review", "published"]) });
  const v2 = defineWorkflow({ name: "review", version: 2, machine: machine(["draft", "legal", "review", "published"]) });

  it("an instance keeps the version it started with; a worker without it leaves its events alone and says why", async () => {
    const old = await worker({ tasks: [], workflows: [v1] });
    const { id } = await startWorkflow(db.pool, "review", null);
    await inState(id, "draft");
    await old.supervisor.stop();
    expect((await getWorkflow(db.pool, id))!.version).toBe("1");

    const next = await worker({ tasks: [], workflows: [v2] });
    await sendToWorkflow(db.pool, id, { type: "NEXT" });
    await until("the refusal", async () => next.outcomes.some((o) => o.error !== null));
    expect(next.outcomes.find((o) => o.error !== null)!.error).toMatch(
      /runs "review" version 1, which this worker does not run \(it has 2\) and none of them migrates from\. Keep version 1 deployed until its instances finish, or add migrations/,
    );
    expect((await getWorkflow(db.pool, id))!).toMatchObject({ state: "draft", seq: 1 });
    await next.supervisor.stop();

    // Both deployed: the old instance goes on as version 1, a new one starts on version 2.
    await worker({ tasks: [], workflows: [v1, v2] });
    await inState(id, "review");
    const fresh = await startWorkflow(db.pool, "review", null);
    await inState(fresh.id, "draft");
    await sendToWorkflow(db.pool, fresh.id, { type: "NEXT" });
    await inState(fresh.id, "legal");
    expect((await getWorkflow(db.pool, fresh.id))!.version).toBe("2");
    expect((await getWorkflow(db.pool, id))!.version).toBe("1");
  });

  it("an applier never gives up: refused a thousand times, it is retried still, and the instance moves on once its version is deployed", async () => {
    const old = await worker({ tasks: [], workflows: [v1] });
    const { id } = await startWorkflow(db.pool, "review", null);
    await inState(id, "draft");
    await old.supervisor.stop();
    await otherAppliersGone(id);
    const next = await worker({ tasks: [], workflows: [v2] });
    await sendToWorkflow(db.pool, id, { type: "NEXT" });
    await until("the refusal", async () => next.outcomes.some((o) => o.error !== null));
    // As if it had been refused for a week (at most every ten minutes), then once more.
    const applier = async () =>
      (await db.pool.query<{ id: string; status: string; attempts: number }>("SELECT id::text, status, attempts FROM picket.jobs WHERE type = $1 AND payload->>'workflow' = $2 AND status <> 'completed'", [APPLIER_TASK, id])).rows;
    const [job] = await applier();
    await db.pool.query("UPDATE picket.jobs SET attempts = 1000, run_at = now() WHERE id = $1 AND status = 'pending'", [job!.id]);
    // Counted at the claim (attempts 1,001 while it runs); refused, it is pending again with a backoff.
    await until("the 1,001st refusal", async () => {
      const [now] = await applier();
      return now!.attempts === 1001 && now!.status !== "processing";
    });
    expect(await applier()).toEqual([{ id: job!.id, status: "pending", attempts: 1001 }]);
    await next.supervisor.stop();

    // Version 1 deployed again: the same job, due now, applies the event.
    await db.pool.query("UPDATE picket.jobs SET run_at = now() WHERE id = $1", [job!.id]);
    await worker({ tasks: [], workflows: [v1, v2] });
    await inState(id, "review");
  });

  it("a machine changed under the same version is refused; a migration maps an instance to the new version, recorded in its history", async () => {
    const first = await worker({ tasks: [], workflows: [v1] });
    const { id } = await startWorkflow(db.pool, "review", null);
    await inState(id, "draft");
    await first.supervisor.stop();

    const changed = defineWorkflow({ name: "review", version: 1, machine: machine(["draft", "proofread", "published"]) });
    const sneaky = await worker({ tasks: [], workflows: [changed] });
    await sendToWorkflow(db.pool, id, { type: "NEXT" });
    await until("the refusal", async () => sneaky.outcomes.some((o) => o.error !== null));
    expect(sneaky.outcomes.find((o) => o.error !== null)!.error).toMatch(/started on a machine whose definition differs from this worker's version 1 .*its snapshot is not reinterpreted/);
    await sneaky.supervisor.stop();

    const v3 = defineWorkflow({
      name: "review",
      version: 3,
      machine: machine(["draft", "legal", "review", "published"]),
      migrations: { "1": (old) => ({ value: old.value, context: { seen: [...(old.context as { seen: string[] }).seen, "migrated"] } }) },
    });
    await worker({ tasks: [], workflows: [v3] });
    await inState(id, "legal");
    const wf = (await getWorkflow(db.pool, id))!;
    expect(wf).toMatchObject({ version: "3", fingerprint: v3.fingerprint, context: { seen: ["migrated", "draft"] } });
    const history = await allEvents(id);
    expect(history.find((e) => e.kind === "send")!.note).toBe("migrated from version 1 to 3");
  });
});

describe("retention", () => {
  it("removes instances that ended done or cancelled, with their histories, once old enough; keeps failed and live ones", async () => {
    const done = await startWorkflow(db.pool, counter, null);
    const cancelled = await startWorkflow(db.pool, counter, null);
    const live = await startWorkflow(db.pool, counter, null);
    const failing = defineWorkflow({
      name: "failing",
      machine: setup({ types: {} as { context: { n: number } } }).createMachine({
        context: { n: 0 },
        initial: "a",
        states: { a: { on: { BOOM: { actions: assign({ n: () => { throw new Error("assign threw"); } }) } } } },
      }),
    });
    const failed = await startWorkflow(db.pool, failing, null);
    await worker({ tasks: [], workflows: [counter, failing], retention: { olderThanMs: 0, intervalMs: 1_000 } });
    await inState(done.id, "counting");
    await sendToWorkflow(db.pool, done.id, { type: "FINISH" });
    await cancelWorkflow(db.pool, cancelled.id);
    await inState(failed.id, "a");
    await sendToWorkflow(db.pool, failed.id, { type: "BOOM" });
    await until("the failure", async () => (await getWorkflow(db.pool, failed.id))!.status === "failed");
    expect((await getWorkflow(db.pool, failed.id))!.error).toBe("assign threw");
    await until("retention", async () => (await getWorkflow(db.pool, done.id)) === null && (await getWorkflow(db.pool, cancelled.id)) === null);
    const events = await db.pool.query("SELECT workflow_id::text AS id, count(*)::int AS n FROM picket.workflow_events WHERE workflow_id = ANY($1) GROUP BY 1 ORDER BY 1", [[done.id, cancelled.id, live.id, failed.id]]);
    expect(events.rows).toEqual([{ id: live.id, n: 1 }, { id: failed.id, n: 2 }].sort((a, b) => Number(a.id) - Number(b.id)));
    expect((await getWorkflow(db.pool, live.id))!.status).toBe("running");
    expect((await getWorkflow(db.pool, failed.id))!.status).toBe("failed");
  });
});

describe("what a step cannot do fails the instance, saying why, and nothing waits behind it", () => {
  const failing = (name: string, states: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    defineWorkflow({
      name,
      // Typed loosely: each test's states are built to break a rule.
      machine: setup({ actors: { t: task("t") } }).createMachine({ context: {}, initial: "a", states, ...extra } as any) as any,
    });
  const endsFailed = async (definition: ReturnType<typeof failing>, send?: { type: string }) => {
    // Stopped before the next call's worker starts: a worker without this definition would claim
    // its applier jobs, refuse them (it does not run that workflow), and back them off for seconds.
    const { supervisor } = await worker({ tasks: [], workflows: [definition] });
    const { id } = await startWorkflow(db.pool, definition, null);
    try {
      if (send) {
        await until("the start", async () => (await getWorkflow(db.pool, id))!.seq >= 1);
        await sendToWorkflow(db.pool, id, send);
      }
      await until(`${definition.name} to fail`, async () => (await getWorkflow(db.pool, id))!.status === "failed");
    } finally {
      await supervisor.stop();
    }
    // An event after the failure is refused at the send; the inbox is empty.
    await expect(sendToWorkflow(db.pool, id, { type: "AFTER" })).rejects.toThrow(/has finished \(failed\)/);
    expect((await workflowHistory(db.pool, id)).inbox).toEqual([]);
    return (await getWorkflow(db.pool, id))!;
  };

  it("a start that fails: its context throws, or its first state does what a workflow cannot", async () => {
    const definition = defineWorkflow({
      name: "throws-at-start",
      machine: setup({ types: {} as { input: { card: string } | null } }).createMachine({ context: ({ input }) => ({ card: input!.card }), initial: "a", states: { a: {} } }),
    });
    expect((await endsFailed(definition as never)).error).toMatch(/Cannot read properties of undefined \(reading 'card'\)/);
    // Refused at the start itself: nothing was ever stored, and the failure is written all the same.
    const refusedAtStart = await endsFailed(failing("spawns-at-start", { a: { entry: assign({ child: ({ spawn }: any) => spawn("t", { id: "y" }) }) } }));
    expect(refusedAtStart).toMatchObject({ state: null, error: expect.stringMatching(/spawns "y" inside assign/) });
  });

  it("a context PostgreSQL cannot store (a NUL), and a delay that is no duration", async () => {
    const nul = await endsFailed(failing("stores-nul", { a: { on: { GO: { actions: assign({ note: () => "a\u0000b" }) } } } }), { type: "GO" });
    expect(nul.error).toMatch(/NUL character/);
    expect(nul.state).toBe("a");
    const nan = await endsFailed(
      defineWorkflow({
        name: "delays-nan",
        machine: setup({ delays: { never: () => Number.NaN } }).createMachine({ initial: "a", states: { a: { on: { GO: "b" } }, b: { after: { never: "a" } } } }),
      }) as never,
      { type: "GO" },
    );
    expect(nan.error).toMatch(/a delay is a number of milliseconds from 0 to/);
  });

  it("a task spawned inside assign, which no job would ever run", async () => {
    const wf = await endsFailed(failing("spawns-in-assign", { a: { on: { GO: { actions: assign({ child: ({ spawn }: any) => spawn("t", { id: "x" }) }) } } } }), { type: "GO" });
    expect(wf.error).toMatch(/spawns "x" inside assign \(spawn\(\)\), which a workflow cannot make durable/);
  });

  it("a failed instance's timers and their jobs go with it; a message with a NUL is kept without it", async () => {
    const definition = failing("fails-with-timer", { a: { after: { 3_600_000: "a" }, on: { GO: { actions: assign({ n: () => { throw new Error("bo\u0000om"); } }) } } } });
    const wf = await endsFailed(definition, { type: "GO" });
    // Its message kept without the NUL PostgreSQL would refuse.
    expect(wf.error).toBe("boom");
    const timers = await db.pool.query("SELECT count(*)::int AS n FROM picket.workflow_events WHERE workflow_id = $1 AND kind = 'timer'", [wf.id]);
    expect(timers.rows[0].n).toBe(0);
  });
});

describe("order and timers", () => {
  it("after a downtime, an event sent before a timer was due is applied before the timer", async () => {
    const deadline = defineWorkflow({
      name: "deadline",
      machine: setup({}).createMachine({ initial: "waiting", states: { waiting: { after: { 800: "late" }, on: { REPLY: "replied" } }, late: { type: "final" }, replied: { type: "final" } } }),
    });
    const first = await worker({ tasks: [], workflows: [deadline] });
    const { id } = await startWorkflow(db.pool, deadline, null);
    await inState(id, "waiting");
    await first.supervisor.stop();
    // Sent before the deadline, with no worker to apply it; the deadline passes.
    await sendToWorkflow(db.pool, id, { type: "REPLY" });
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await worker({ tasks: [], workflows: [deadline] });
    await settled(id);
    expect((await getWorkflow(db.pool, id))!.state).toBe("replied");
  });

  it("timers: { missed: \"skip\" }: a timer applied past its grace is recorded as missed and leaves the instance as it was; one within it fires", async () => {
    const machine = setup({}).createMachine({
      initial: "waiting",
      states: { waiting: { after: { 3_600_000: "expired" }, on: { REPLY: "replied" } }, expired: { type: "final" }, replied: { type: "final" } },
    });
    const skipping = defineWorkflow({ name: "skipping", machine, timers: { missed: "skip" } });
    const firing = defineWorkflow({ name: "firing", machine });
    const brief = defineWorkflow({ name: "brief", machine, timers: { missed: "skip", graceMs: 2_000 } });
    await worker({ tasks: [], workflows: [skipping, firing, brief] });
    /** Starts an instance and makes its timer due `lateMs` ago, as after a downtime: its job runs now. */
    const lateBy = async (definition: typeof skipping, lateMs: number) => {
      const { id } = await startWorkflow(db.pool, definition, null);
      await inState(id, "waiting");
      const { rows } = await db.pool.query<{ wake_job: string }>(
        "UPDATE picket.workflow_events SET due_at = now() - $2 * interval '1 millisecond' WHERE workflow_id = $1 AND kind = 'timer' RETURNING wake_job::text",
        [id, lateMs],
      );
      await db.pool.query("UPDATE picket.jobs SET run_at = now() WHERE id = $1", [rows[0]!.wake_job]);
      await until(`the timer of ${id} applied`, async () => (await workflowHistory(db.pool, id)).inbox.length === 0);
      return id;
    };

    // Ten minutes late, past the default grace of a minute: skipped, recorded with why.
    const missed = await lateBy(skipping, 600_000);
    const [, timer] = (await workflowHistory(db.pool, missed)).history;
    expect(timer).toMatchObject({ kind: "timer", outcome: "dropped", state: "waiting" });
    expect(timer!.note).toMatch(/^missed: the timer xstate\.after\.3600000\.\(machine\)\.waiting was applied 6\d\d s after it was due, past the grace of 60 s \(timers: \{ missed: "skip" \}\)$/);
    const wf = (await getWorkflow(db.pool, missed))!;
    expect(wf).toMatchObject({ status: "running", state: "waiting" });
    // The instance runs on in its state: an event still takes it out, one applied as late too (only timers are skipped).
    const client = await db.pool.connect();
    try {
      await client.query("BEGIN");
      const { eventId } = await sendToWorkflow(client, missed, { type: "REPLY" });
      await client.query("UPDATE picket.workflow_events SET due_at = now() - interval '10 minutes' WHERE id = $1", [eventId]);
      await client.query("COMMIT");
    } finally {
      client.release();
    }
    await settled(missed);
    expect((await getWorkflow(db.pool, missed))!.state).toBe("replied");

    // Thirty seconds late, within the grace: it fires.
    const within = await lateBy(skipping, 30_000);
    await settled(within);
    expect((await workflowHistory(db.pool, within)).history.map((e) => [e.kind, e.outcome, e.state])).toEqual([["start", "applied", "waiting"], ["timer", "applied", "expired"]]);

    // A grace of its own: five seconds late is past two.
    const pastBrief = await lateBy(brief, 5_000);
    const [, briefTimer] = (await workflowHistory(db.pool, pastBrief)).history;
    expect(briefTimer!.note).toMatch(/^missed: the timer xstate\.after\.3600000\.\(machine\)\.waiting was applied 5\.\d s after it was due, past the grace of 2\.0 s /);

    // The default, "fire": ten minutes late, it fires, late.
    const fired = await lateBy(firing, 600_000);
    await settled(fired);
    expect((await getWorkflow(db.pool, fired))!.state).toBe("expired");
  });

  it("a timer skipped in a backlog, read as the next event of the apply before it, is skipped in its turn; the events after it are applied", async () => {
    const pinged = defineWorkflow({
      name: "pinged",
      machine: setup({ types: {} as { context: { pings: number } } }).createMachine({
        context: { pings: 0 },
        initial: "waiting",
        states: { waiting: { after: { 3_600_000: "expired" }, on: { PING: { actions: assign({ pings: ({ context }) => context.pings + 1 }) } } }, expired: { type: "final" } },
      }),
      timers: { missed: "skip" },
    });
    const first = await worker({ tasks: [], workflows: [pinged] });
    const { id } = await startWorkflow(db.pool, pinged, null);
    await inState(id, "waiting");
    await first.supervisor.stop();
    // Three pings twenty minutes ago, the timer due ten minutes ago, one ping now: one run applies
    // all five, each read as the next event of the apply before it.
    for (let i = 0; i < 3; i++) await sendToWorkflow(db.pool, id, { type: "PING" });
    await db.pool.query("UPDATE picket.workflow_events SET due_at = now() - interval '20 minutes' WHERE workflow_id = $1 AND kind = 'send'", [id]);
    await db.pool.query("UPDATE picket.workflow_events SET due_at = now() - interval '10 minutes' WHERE workflow_id = $1 AND kind = 'timer'", [id]);
    await sendToWorkflow(db.pool, id, { type: "PING" });
    await worker({ tasks: [], workflows: [pinged] });
    await until("the backlog applied", async () => (await workflowHistory(db.pool, id)).inbox.length === 0);
    const { history } = await workflowHistory(db.pool, id);
    expect(history.map((e) => [e.kind, e.outcome])).toEqual([["start", "applied"], ["send", "applied"], ["send", "applied"], ["send", "applied"], ["timer", "dropped"], ["send", "applied"]]);
    expect(await getWorkflow(db.pool, id)).toMatchObject({ status: "running", state: "waiting", context: { pings: 4 } });
  });

  it("a worker refuses a grace for missed timers under two of its polls", () => {
    const machine = setup({}).createMachine({ initial: "a", states: { a: {} } });
    const tight = defineWorkflow({ name: "tight", machine, timers: { missed: "skip", graceMs: 1_000 } });
    expect(() => createSupervisor({ connectionString: db.url, tasks: [], workflows: [tight], pollIntervalMs: 1_000 })).toThrow(/timers\.graceMs \(1000 ms\) is less than two of this worker's polls \(pollIntervalMs 1000\)/);
  });

  it("two delayed raises without an id in one transition are two timers", async () => {
    const pings = defineWorkflow({
      name: "pings",
      machine: setup({ types: {} as { context: { pings: number } } }).createMachine({
        context: { pings: 0 },
        initial: "a",
        states: {
          a: {
            entry: [raise({ type: "PING" }, { delay: 50 }), raise({ type: "PING" }, { delay: 60 })],
            on: { PING: { actions: assign({ pings: ({ context }) => context.pings + 1 }) } },
          },
        },
      }),
    });
    await worker({ tasks: [], workflows: [pings] });
    const { id } = await startWorkflow(db.pool, pings, null);
    await until("two pings", async () => ((await getWorkflow(db.pool, id))!.context as { pings: number } | null)?.pings === 2);
  });

  it("a cancel that waited for an apply in progress cancels the tasks that apply started", async () => {
    const { id } = await startWorkflow(db.pool, counter, null);
    await worker({ tasks: [], workflows: [counter] });
    await inState(id, "counting");
    const apply = await db.connect();
    // An apply in progress: the instance's row locked, a task job of it inserted, not yet committed.
    await apply.query("BEGIN");
    await apply.query("UPDATE picket.workflows SET updated_at = now() WHERE id = $1", [id]);
    const { rows: [job] } = await apply.query("INSERT INTO picket.jobs (type, workflow_id) VALUES ('t', $1) RETURNING id::text", [id]);
    const cancelling = cancelWorkflow(db.pool, id);
    await new Promise((resolve) => setTimeout(resolve, 200));
    await apply.query("COMMIT");
    expect(await cancelling).toEqual({ outcome: "cancelled", status: "cancelled", tasks: 1 });
    expect(await getJob(db.pool, job.id)).toMatchObject({ status: "cancelled" });
  });
});

describe("an operator's cancel leaves a workflow's applier jobs", () => {
  const timed = defineWorkflow({
    name: "timed-cancel",
    machine: setup({}).createMachine({ initial: "waiting", states: { waiting: { after: { 3_600_000: "done" }, on: { GO: "done" } }, done: { type: "final" } } }),
  });

  it("while its workflow is live: cancel refuses one, and delete a dead one, naming the workflow; bulk actions neither count nor take them; the workflow runs on", async () => {
    const { id } = await startWorkflow(db.pool, timed);
    const { rows: appliers } = await db.pool.query<{ id: JobId }>("SELECT id FROM picket.jobs WHERE type = $1 AND payload->>'workflow' = $2 AND status = 'pending'", [APPLIER_TASK, id]);
    expect(appliers).toHaveLength(1);
    const applier = appliers[0]!.id;
    const refused = await cancelJob(db.pool, applier, { by: "ops" });
    expect(refused).toEqual({ outcome: "applies_workflow", workflowId: id });
    expect(jobActionMessage("cancel", applier, refused)).toBe(
      `job ${applier} applies the events of workflow ${id}, which has not ended, so nothing was done: cancelled alone, it would leave an event waiting for good. Cancel the workflow instead`,
    );
    const ready = { state: "ready", task: APPLIER_TASK } as const;
    const expected = await countBulk(db.pool, "cancel", ready);
    // (Appliers of instances earlier tests left finished are counted and cancelled: anyone's to cancel.)
    expect(await applyBulk(db.pool, "cancel", ready, { expected, by: "ops" })).toMatchObject({ applied: expected, skipped: 0 });
    expect((await getJob(db.pool, applier))!.status).toBe("pending");

    // Dead, as after a week of failures: a delete is refused (a retry is what brings its event on),
    // a bulk delete of dead jobs leaves it out.
    await db.pool.query("UPDATE picket.jobs SET status = 'dead', finished_at = now() WHERE id = $1", [applier]);
    const notDeleted = await deleteFinishedJob(db.pool, applier);
    expect(notDeleted).toEqual({ outcome: "applies_workflow", workflowId: id });
    expect(jobActionMessage("delete", applier, notDeleted)).toMatch(/so nothing was done: deleted alone, it would leave an event waiting for good\. Retry it, or cancel the workflow$/);
    const dead = { state: "dead", task: APPLIER_TASK } as const;
    const deadCount = await countBulk(db.pool, "delete", dead);
    expect(await applyBulk(db.pool, "delete", dead, { expected: deadCount })).toMatchObject({ applied: deadCount, skipped: 0 });
    expect((await getJob(db.pool, applier))!.status).toBe("dead");
    expect((await retryDeadJob(db.pool, applier)).outcome).toBe("applied");
    // Its start is applied: had the applier been cancelled or deleted, nothing would apply it.
    await worker({ tasks: [], workflows: [timed], keepCompleted: true });
    await inState(id, "waiting");
    expect((await getWorkflow(db.pool, id))!.status).toBe("running");
    // Running: its timer's applier (due in an hour) is refused too.
    const { rows: [timer] } = await db.pool.query<{ id: JobId }>("SELECT id FROM picket.jobs WHERE type = $1 AND payload->>'workflow' = $2 AND status = 'pending'", [APPLIER_TASK, id]);
    expect(await cancelJob(db.pool, timer!.id)).toEqual({ outcome: "applies_workflow", workflowId: id });
    // A finished applier is told apart as any finished job is, and deleted as one (its work is done).
    await until("the applier to complete", async () => (await getJob(db.pool, applier))!.status === "completed");
    expect(await cancelJob(db.pool, applier)).toEqual({ outcome: "wrong_status", status: "completed" });
    expect((await deleteFinishedJob(db.pool, applier)).outcome).toBe("applied");
    await sendToWorkflow(db.pool, id, { type: "GO" });
    await settled(id);
    expect(await getWorkflow(db.pool, id)).toMatchObject({ status: "done", state: "done" });
  });

  it("once its workflow has ended, an applier left pending is anyone's to cancel; a user's own job of that name is any job", async () => {
    const { id } = await startWorkflow(db.pool, timed);
    expect(await cancelWorkflow(db.pool, id)).toMatchObject({ outcome: "cancelled" });
    const { rows: [left] } = await db.pool.query<{ id: JobId }>("SELECT id FROM picket.jobs WHERE type = $1 AND payload->>'workflow' = $2 AND status = 'pending'", [APPLIER_TASK, id]);
    expect((await cancelJob(db.pool, left!.id)).outcome).toBe("applied");
    for (const payload of [{ x: 1 }, { workflow: "not an id" }, { workflow: 99_999_999 }]) {
      const own = await enqueueJob(db.pool, { type: APPLIER_TASK, payload });
      expect((await cancelJob(db.pool, own.id)).outcome, JSON.stringify(payload)).toBe("applied");
    }
  });
});
