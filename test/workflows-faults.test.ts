// Workflows under the faults an operator causes short of a crash (the chaos test has the SIGKILLs
// and the restart): the workers' connections killed again and again (pg_terminate_backend) while
// they apply events and report task results, and the whole server paused (SIGSTOP) while events
// wait. What must hold afterwards, read from the tables: every instance finished with the count
// its events call for, every event sent applied exactly once (its seq numbered 1..n, no gap, no
// repeat), and every task job run once. On a PostgreSQL of this file's own (a paused server must
// not stall the other files).
import { describe, expect, it } from "vitest";
import { assign, setup } from "xstate";
import { getWorkflow, sendToWorkflow, startWorkflow } from "../src/db/workflows.ts";
import type { JobId } from "../src/db/job-row.ts";
import { defineTask } from "../src/runtime/task.ts";
import { defineWorkflow, task } from "../src/workflows/definition.ts";
import { withApplicationName } from "./support/db.ts";
import { useOwnServer } from "./support/own-server.ts";
import { startWorker } from "./support/worker.ts";

const server = useOwnServer();

const INCS = 10;
const BUMPS = 3;

/** Counts each bump job's runs: a job run twice would show here. */
const runs = new Map<string, number>();
/** What bump runs wait for before they return (the pause test holds them until after the pause). */
let gate: Promise<void> = Promise.resolve();
const bumpTask = defineTask<{ i: number }, { i: number }>({
  name: "wf-faults.bump",
  // Longer than any fault here lasts: a lease that ran out would let a second run happen by design.
  leaseMs: 30_000,
  // Two: a claim statement cut off at its bound while the server is paused can still commit when
  // it resumes (the cancel arrives after it ran), and the worker never hears of that claim. The
  // job then waits for its lease and is retried, charged an attempt (README, "Every statement is
  // bounded"); it has still run once, which expectEachAppliedOnce checks.
  maxAttempts: 2,
  handler: async (payload, { job }) => {
    runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
    await gate;
    return { i: payload.i };
  },
});

// Three task runs one after the other, then INC events counted (they are counted in any state)
// until there are INCS of them.
const bump = task<{ i: number }, { i: number }>("wf-faults.bump");
const chain = defineWorkflow({
  name: "wf-faults.chain",
  machine: setup({ types: {} as { context: { n: number; bumps: number } }, actors: { bump } }).createMachine({
    id: "chain",
    context: { n: 0, bumps: 0 },
    on: { INC: { actions: assign({ n: ({ context }) => context.n + 1 }) } },
    initial: "bumping",
    states: {
      bumping: {
        invoke: {
          src: "bump",
          input: ({ context }) => ({ i: context.bumps }),
          onDone: { target: "next", actions: assign({ bumps: ({ context }) => context.bumps + 1 }) },
        },
      },
      next: { always: [{ guard: ({ context }) => context.bumps < BUMPS, target: "bumping" }, { target: "counting" }] },
      counting: { always: { guard: ({ context }) => context.n >= INCS, target: "done" } },
      done: { type: "final" },
    },
    output: ({ context }) => context,
  }),
});

/** Starts `count` instances and sends each INCS INC events, interleaved across instances. */
const startAndSend = async (count: number): Promise<JobId[]> => {
  const ids: JobId[] = [];
  for (let i = 0; i < count; i++) ids.push((await startWorkflow(server.pool, chain)).id);
  for (let k = 0; k < INCS; k++) for (const id of ids) await sendToWorkflow(server.pool, id, { type: "INC" });
  return ids;
};

const appliedBetween = async (ids: JobId[], from: Date, to: Date) =>
  (await server.pool.query("SELECT count(*)::int AS n FROM picket.workflow_events WHERE workflow_id = ANY($1::bigint[]) AND applied_at > $2 AND applied_at < $3", [ids, from, to])).rows[0].n as number;

const finished = async (ids: JobId[]) =>
  (await server.pool.query("SELECT count(*)::int AS n FROM picket.workflows WHERE id = ANY($1::bigint[]) AND status <> 'starting' AND status <> 'running'", [ids])).rows[0].n as number;

/** What must hold of every instance once all have finished. */
const expectEachAppliedOnce = async (ids: JobId[]) => {
  for (const id of ids) {
    const wf = (await getWorkflow(server.pool, id))!;
    expect(wf, `workflow ${id}`).toMatchObject({ status: "done", state: "done", output: { n: INCS, bumps: BUMPS } });
    const { rows: events } = await server.pool.query<{ kind: string; outcome: string | null; seq: number | null }>(
      "SELECT kind, outcome, seq FROM picket.workflow_events WHERE workflow_id = $1 ORDER BY seq NULLS LAST, id",
      [id],
    );
    // The start, the INCs and one report per bump, each taken once, in a seq without gap or repeat.
    expect(events.map((e) => e.outcome)).toEqual(events.map(() => "applied"));
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.filter((e) => e.kind === "send")).toHaveLength(INCS);
    expect(events.filter((e) => e.kind === "task")).toHaveLength(BUMPS);
    expect(wf.seq).toBe(events.length);
  }
  const { rows: jobs } = await server.pool.query<{ id: string; status: string }>(
    "SELECT id::text, status FROM picket.jobs WHERE workflow_id = ANY($1::bigint[])",
    [ids],
  );
  expect(jobs).toHaveLength(ids.length * BUMPS);
  expect(jobs.filter((j) => j.status !== "completed")).toEqual([]);
  expect(jobs.filter((j) => runs.get(j.id) !== 1)).toEqual([]);
};

describe("workflows under operators' faults", () => {
  it("the workers' connections killed again and again: every event applied once, every task run once, every instance done", { timeout: 150_000 }, async () => {
    const app = "wf-faults-killed";
    const options = { connectionString: withApplicationName(server.url, app), tasks: [bumpTask], workflows: [chain], concurrency: 8, pollIntervalMs: 20 };
    const a = await startWorker(options);
    const b = await startWorker(options);
    let kills = 0;
    // The database's clock at the first kill that landed and at the last: applies must fall between.
    let firstKill: Date | undefined;
    let lastKill: Date | undefined;
    let sent: JobId[] | undefined;
    // Every 50 ms from the first start on, while the events are sent and until a third of the
    // instances have finished, or for 15 s at most (on a loaded machine a reconnect can take longer
    // than the gap between kills, and the workers would then never get that far).
    const killing = (async () => {
      const killUntil = Date.now() + 15_000;
      while ((sent === undefined || (await finished(sent)) < sent.length / 3) && Date.now() < killUntil) {
        const { rows: [round] } = await server.pool.query<{ killed: number; at: Date }>(
          "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS killed, clock_timestamp() AS at FROM pg_stat_activity WHERE application_name = $1",
          [app],
        );
        if (round!.killed > 0) {
          kills += round!.killed;
          firstKill ??= round!.at;
          lastKill = round!.at;
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();
    const ids = (sent = await startAndSend(20));
    await killing;
    expect(kills).toBeGreaterThan(0);
    // The kills landed while events were being applied, not before or after all of them.
    expect(await appliedBetween(ids, firstKill!, lastKill!)).toBeGreaterThan(0);
    await expect.poll(() => finished(ids), { timeout: 90_000, interval: 200 }).toBe(ids.length);
    await Promise.all([a.supervisor.stop(), b.supervisor.stop()]);
    await expectEachAppliedOnce(ids);
  });

  it("the server paused (SIGSTOP) while events wait: statements end at their bound and are tried again; after SIGCONT each event is applied once", { timeout: 180_000 }, async () => {
    let open!: () => void;
    gate = new Promise((resolve) => (open = resolve));
    const ids = await startAndSend(10);
    const { supervisor, logs } = await startWorker({ connectionString: server.url, tasks: [bumpTask], workflows: [chain], concurrency: 8, statementTimeoutMs: 1_000 });
    // Paused once the appliers are at work: some instances applied, most not yet.
    await expect.poll(async () => (await server.pool.query("SELECT count(*)::int AS n FROM picket.workflow_events WHERE applied_at IS NOT NULL AND workflow_id = ANY($1::bigint[])", [ids])).rows[0].n, { timeout: 30_000, interval: 20 }).toBeGreaterThan(0);
    await server.pause();
    try {
      await new Promise((resolve) => setTimeout(resolve, 4_000));
    } finally {
      await server.resume();
    }
    // The task runs end now: their results, at least, are applied after the pause.
    open();
    const { rows: [resumed] } = await server.pool.query<{ at: Date }>("SELECT clock_timestamp() AS at");
    // A claim that committed unheard after the pause waits out its 30 s lease first.
    await expect.poll(() => finished(ids), { timeout: 90_000, interval: 200 }).toBe(ids.length);
    // Events were applied after the pause (the task results, held until then, if nothing else).
    expect(await appliedBetween(ids, resumed!.at, new Date(8.64e15))).toBeGreaterThan(0);
    await supervisor.stop();
    await expectEachAppliedOnce(ids);
    // The pause was felt: some statement failed at its bound (else it did not test the pause).
    expect(logs.some((l) => l.level >= 40)).toBe(true);
  });
});
