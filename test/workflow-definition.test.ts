// defineWorkflow's checks, the registry a worker builds of its workflows, and the pure step (the
// actions a transition asks for, as the database must carry them out): no database needed.
import { describe, expect, it } from "vitest";
import { assign, cancel, createActor, fromCallback, log, raise, setup, spawnChild } from "xstate";
import { childWorkflow, defineWorkflow, task, taskOf } from "../src/workflows/definition.ts";
import { WorkflowRegistry, workflowRegistry } from "../src/workflows/applier.ts";
import { eventStep, MAX_DELAY_MS, startStep } from "../src/workflows/step.ts";
import { workflowPaths } from "../src/testing/workflow-paths.ts";

const simple = setup({}).createMachine({ initial: "a", states: { a: {} } });
const message = (run: () => unknown): string => {
  try {
    run();
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error("not refused");
};

describe("defineWorkflow refuses bad options, saying what is wrong", () => {
  it("options, machine, version, migrations", () => {
    expect(message(() => defineWorkflow(null as never))).toBe("picket: defineWorkflow takes { name, machine, version?, migrations?, timers? }.");
    expect(message(() => defineWorkflow({ name: "w", machine: { root: {} } as never }))).toMatch(/machine must be an XState machine/);
    expect(message(() => defineWorkflow({ name: "w", machine: simple, version: "" }))).toMatch(/version must be 1–512 characters/);
    expect(message(() => defineWorkflow({ name: "w", machine: simple, version: "v".repeat(513) }))).toMatch(/version must be 1–512 characters/);
    expect(defineWorkflow({ name: "w", machine: simple, version: "v".repeat(512) }).version).toHaveLength(512);
    expect(message(() => defineWorkflow({ name: "w", machine: simple, migrations: { "1": "nope" } as never }))).toMatch(/migrations must map each older version to a function/);
    expect(message(() => defineWorkflow({ name: "w", machine: simple, version: 2, migrations: { "2": (old) => old } }))).toMatch(/a migration from version 2 to itself/);
    expect(defineWorkflow({ name: "w", machine: simple, version: 3 }).version).toBe("3");
  });

  it("timers: the missed policy and its grace, with their defaults", () => {
    expect(defineWorkflow({ name: "w", machine: simple }).timers).toEqual({ missed: "fire", graceMs: 60_000 });
    expect(defineWorkflow({ name: "w", machine: simple, timers: { missed: "skip" } }).timers).toEqual({ missed: "skip", graceMs: 60_000 });
    expect(defineWorkflow({ name: "w", machine: simple, timers: { missed: "skip", graceMs: 0 } }).timers).toEqual({ missed: "skip", graceMs: 0 });
    for (const timers of ["skip", null, []]) {
      expect(message(() => defineWorkflow({ name: "w", machine: simple, timers: timers as never })), JSON.stringify(timers)).toBe('picket: workflow "w": timers must be { missed: "fire" | "skip", graceMs? }.');
    }
    expect(message(() => defineWorkflow({ name: "w", machine: simple, timers: { missed: "skip", grace: 5 } as never }))).toBe('picket: workflow "w": timers takes missed and graceMs; "grace" is not one of them.');
    expect(message(() => defineWorkflow({ name: "w", machine: simple, timers: { graceMs: 5_000 } }))).toBe(
      'picket: workflow "w": timers.graceMs is the grace of missed: "skip"; with missed: "fire" a late timer fires however late it is. Set missed: "skip", or remove graceMs.',
    );
    expect(message(() => defineWorkflow({ name: "w", machine: simple, timers: { missed: "latest" as never } }))).toBe(
      'picket: workflow "w": timers.missed must be "fire" (a late timer fires, late) or "skip" (it is recorded as missed); got "latest".',
    );
    for (const graceMs of [-1, Number.NaN, Number.POSITIVE_INFINITY, "60000"]) {
      expect(message(() => defineWorkflow({ name: "w", machine: simple, timers: { missed: "skip", graceMs: graceMs as never } })), String(graceMs)).toMatch(
        /^picket: workflow "w": timers\.graceMs must be a number of milliseconds, 0 or more \(how late a timer may be applied and still fire\); got /,
      );
    }
  });

  it("named built-in actions and action objects are accepted; named custom ones, in always transitions too, are not", () => {
    const named = setup({ actions: { bump: assign({}), note: log("x") } }).createMachine({
      initial: "a",
      states: { a: { entry: "bump", on: { GO: { actions: [{ type: "note" }] } }, always: { guard: () => false, target: "a", actions: "bump" } } },
    });
    expect(defineWorkflow({ name: "named", machine: named }).name).toBe("named");
    const custom = setup({ actions: { email: () => undefined } }).createMachine({ initial: "a", states: { a: { always: { guard: () => false, target: "a", actions: [{ type: "email" }] } } } });
    expect(message(() => defineWorkflow({ name: "custom", machine: custom }))).toMatch(/an always transition of state "\(machine\)\.a" runs the action "email"/);
  });

  it("task() runs only under picket: a plain actor says so; taskOf reads what task() recorded", async () => {
    const charge = task("charge-card", { queue: "payments", maxAttempts: 3 });
    expect(taskOf(charge)).toEqual({ name: "charge-card", queue: "payments", maxAttempts: 3 });
    expect(taskOf(null)).toBeUndefined();
    expect(taskOf("charge-card")).toBeUndefined();
    const actor = createActor(charge, { input: {} });
    const failed = new Promise<unknown>((resolve) => actor.subscribe({ error: resolve }));
    actor.start();
    expect(((await failed) as Error).message).toMatch(/^picket: task "charge-card" runs as a picket job of a workflow; this machine was run outside picket\./);
    expect(() => task("bad name!")).toThrow(/letters, digits/);
  });
});

describe("the registry a worker builds", () => {
  const v1 = defineWorkflow({ name: "r", version: 1, machine: simple });
  it("refuses a grace for missed timers under two of the worker's polls: a poll finds a timer's job", () => {
    const skipping = (graceMs: number) => new WorkflowRegistry([defineWorkflow({ name: "w", machine: simple, timers: { missed: "skip", graceMs } })]);
    expect(() => skipping(1_999).checkTimerGrace(1_000)).toThrow(
      'picket: workflow "w": timers.graceMs (1999 ms) is less than two of this worker\'s polls (pollIntervalMs 1000): a timer\'s job is found by a poll, so timers would be skipped with no downtime at all. Set graceMs to 2000 or more.',
    );
    skipping(2_000).checkTimerGrace(1_000);
    // "fire" has no grace to keep.
    new WorkflowRegistry([defineWorkflow({ name: "w", machine: simple })]).checkTimerGrace(1_000_000);
  });

  it("refuses what defineWorkflow did not make, a version given twice, and workflows that are no array", () => {
    expect(message(() => new WorkflowRegistry([{ name: "r" } as never]))).toBe("picket: workflows must be made with defineWorkflow({ name, machine }).");
    expect(message(() => new WorkflowRegistry([v1, defineWorkflow({ name: "r", version: 1, machine: simple })]))).toMatch(/version 1 is given twice/);
    expect(message(() => workflowRegistry({ workflows: v1 as never }))).toMatch(/workflows must be an array/);
    expect(workflowRegistry({})).toBeUndefined();
    expect(workflowRegistry({ workflows: [] })).toBeUndefined();
    expect(workflowRegistry({ workflows: [v1] })!.machines().map((m) => [m.name, m.version])).toEqual([["r", "1"]]);
  });

  it("resolves an unknown name with what to do; the last version given starts new instances", () => {
    const v2 = defineWorkflow({ name: "r", version: 2, machine: simple });
    const registry = new WorkflowRegistry([v1, v2]);
    expect(registry.resolve({ id: "1", name: "r", version: null, fingerprint: null }).definition).toBe(v2);
    expect(message(() => registry.resolve({ id: "9", name: "other", version: null, fingerprint: null }))).toMatch(/workflow 9 is a "other", which this worker does not run/);
  });
});

describe("the step: what a transition asks the database for", () => {
  const t = task("t");
  it("a timer set and cancelled in one step, and a task started and stopped in one step, come to nothing; log() is kept", () => {
    const child = defineWorkflow({ name: "child", machine: simple });
    const machine = setup({ actors: { t, child: childWorkflow(child) } }).createMachine({
      initial: "a",
      states: {
        a: { on: { GO: "passing" } },
        // Entered and left in the same step: its timer and its invocations never exist.
        passing: { entry: log("passing through"), after: { 1000: "a" }, invoke: [{ id: "tt", src: "t" }, { id: "kid", src: "child" }], always: "b" },
        b: { after: { 500: "a" } },
      },
    });
    const definition = defineWorkflow({ name: "step", machine });
    const start = startStep(definition, undefined);
    const step = eventStep(definition, start.snapshot, { type: "GO" });
    expect(step.value).toBe("b");
    expect(step.startTasks).toEqual([]);
    expect(step.startChildren).toEqual([]);
    expect(step.stopTasks).toEqual([]);
    expect(step.startTimers.map((x) => [x.sendId, x.delayMs])).toEqual([["xstate.after.500.(machine).b", 500]]);
    expect(step.cancelTimers).toEqual([]);
    expect(step.logs).toEqual(["passing through"]);
  });

  it("a timer raised twice under one id in one step is one timer", () => {
    const machine = setup({}).createMachine({ initial: "a", states: { a: { on: { GO: { actions: [raise({ type: "X" }, { delay: 10, id: "x" }), raise({ type: "X" }, { delay: 20, id: "x" })] } } } } });
    const definition = defineWorkflow({ name: "twice", machine });
    const step = eventStep(definition, startStep(definition, undefined).snapshot, { type: "GO" });
    expect(step.startTimers.map((x) => [x.sendId, x.delayMs])).toEqual([["x", 20]]);
  });

  it("a cancel in the step drops only the timer it names; one set in an earlier step is cancelled in the database", () => {
    const machine = setup({}).createMachine({
      initial: "a",
      states: {
        a: { entry: [raise({ type: "X" }, { delay: 1000, id: "x" }), raise({ type: "Y" }, { delay: 2000, id: "y" }), cancel("x")], on: { GO: "b" }, exit: cancel("y") },
        b: {},
      },
    });
    const definition = defineWorkflow({ name: "cancels", machine });
    const start = startStep(definition, undefined);
    expect(start.startTimers.map((x) => x.sendId)).toEqual(["y"]);
    expect(start.cancelTimers).toEqual([]);
    const left = eventStep(definition, start.snapshot, { type: "GO" });
    expect(left.startTimers).toEqual([]);
    expect(left.cancelTimers).toEqual(["y"]);
  });

  it("a stop in the step drops only the invocation it names; one started in an earlier step is stopped in the database", () => {
    const machine = setup({ actors: { t } }).createMachine({
      type: "parallel",
      states: {
        // Region one invokes and leaves at once; region two's invocation stays until GO.
        one: { initial: "p", states: { p: { invoke: { id: "first", src: "t" }, always: "q" }, q: {} } },
        two: { initial: "p", states: { p: { invoke: { id: "second", src: "t" }, on: { GO: "q" } }, q: {} } },
      },
    });
    const definition = defineWorkflow({ name: "stops", machine });
    const start = startStep(definition, undefined);
    expect(start.startTasks.map((x) => x.invokeId)).toEqual(["second"]);
    expect(start.stopTasks).toEqual([]);
    const stopped = eventStep(definition, start.snapshot, { type: "GO" });
    expect(stopped.startTasks).toEqual([]);
    expect(stopped.stopTasks).toEqual(["second"]);
  });

  it("a delay from 0 ms to 100 years is a timer; anything else is refused, saying why; a raise without a delay is taken at once", () => {
    const machine = setup({ types: {} as { context: { d: unknown }; input: { d: unknown } }, delays: { wait: ({ context }) => context.d as number } }).createMachine({
      context: ({ input }) => ({ d: input.d }),
      initial: "a",
      states: { a: { entry: raise({ type: "NOW" }), on: { NOW: "b" } }, b: { after: { wait: "c" } }, c: {} },
    });
    const definition = defineWorkflow({ name: "delays", machine });
    for (const d of [0, MAX_DELAY_MS]) {
      const step = startStep(definition, { d });
      expect(step.value).toBe("b");
      expect(step.startTimers.map((x) => x.delayMs)).toEqual([d]);
    }
    for (const d of [-1, MAX_DELAY_MS + 1, Number.POSITIVE_INFINITY, Number.NaN, "5"]) {
      expect(message(() => startStep(definition, { d })), String(d)).toMatch(/^delays xstate\.after\.wait\.\(machine\)\.b by .+ ms: a delay is a number of milliseconds from 0 to 3155760000000 \(100 years\)\.$/);
    }
  });

  it("an event no transition takes leaves the instance unchanged; one taken, to a final state too, does not", () => {
    const machine = setup({}).createMachine({ initial: "a", states: { a: { on: { GO: "b", END: "z" } }, b: {}, z: { type: "final" } } });
    const definition = defineWorkflow({ name: "takes", machine });
    const start = startStep(definition, undefined).snapshot;
    expect(eventStep(definition, start, { type: "NOPE" })).toMatchObject({ unchanged: true, status: "running", value: "a" });
    expect(eventStep(definition, start, { type: "GO" })).toMatchObject({ unchanged: false, status: "running", value: "b" });
    expect(eventStep(definition, start, { type: "END" })).toMatchObject({ unchanged: false, status: "done", value: "z" });
  });

  it("a task spawned by the spawnChild action is started as an invoked one is", () => {
    const machine = setup({ actors: { t } }).createMachine({ initial: "a", states: { a: { entry: spawnChild("t", { id: "side", input: { n: 1 } }) } } });
    const step = startStep(defineWorkflow({ name: "spawns-task", machine }), undefined);
    expect(step.startTasks.map((x) => [x.invokeId, x.task.name, x.input])).toEqual([["side", "t", { n: 1 }]]);
  });

  it("a child spawned by spawnChild that is not a task() is refused when the step runs", () => {
    const machine = setup({ actors: { listen: fromCallback(() => undefined) } }).createMachine({ initial: "a", states: { a: { entry: spawnChild("listen") } } });
    const definition = defineWorkflow({ name: "spawns", machine });
    expect(message(() => startStep(definition, undefined))).toBe('spawns "listen", which is not a task() or a childWorkflow(): only those can be made durable.');
  });
});

describe("workflowPaths and missed timers", () => {
  // A reminder that waits for a reply: the timer is its only way out but for REPLY.
  const machine = setup({}).createMachine({ initial: "waiting", states: { waiting: { after: { 1000: "expired" }, on: { REPLY: "replied" } }, expired: { type: "final" }, replied: { type: "final" } } });

  it("under \"skip\", a missed timer is a path of its own: a state whose only way out is the timer is reported as never ending", () => {
    const report = workflowPaths(defineWorkflow({ name: "skips", machine, timers: { missed: "skip" } }));
    expect(report.ok).toBe(false);
    expect(report.neverEnd).toEqual([{ state: "waiting", path: ["start", "timer 1000.(machine).waiting missed"] }]);
    expect(report.finals.map((f) => f.path)).toEqual([["start", "timer 1000.(machine).waiting fired"]]);
    // With the reply possible, every path ends, the missed timer's too.
    const replied = workflowPaths(defineWorkflow({ name: "skips", machine, timers: { missed: "skip" } }), { events: [{ type: "REPLY" }] });
    expect(replied.ok).toBe(true);
    // start, the timer missed (waiting with no timer), and the two ends.
    expect([replied.configurations, replied.transitions]).toEqual([4, 4]);
  });

  it("a timer missed in a state re-entered keeps what the re-entry set: the other timer, the task it invoked", () => {
    // PING re-enters once: its step cancels and sets both timers, stops and starts the task.
    const once = setup({ types: {} as { context: { pinged: boolean } } });
    const ping = { guard: ({ context }: { context: { pinged: boolean } }) => !context.pinged, target: "waiting", reenter: true, actions: assign({ pinged: true }) } as const;
    const timers = once.createMachine({
      context: { pinged: false },
      initial: "waiting",
      states: { waiting: { after: { 1000: "a", 5000: "b" }, on: { PING: ping as never } }, a: { type: "final" }, b: { type: "final" } },
    });
    const both = workflowPaths(defineWorkflow({ name: "two-timers", machine: timers, timers: { missed: "skip" } }), { events: [{ type: "PING" }] });
    // Only both timers missed after the re-entry never ends (before it, PING sets them again); one
    // missed, the other still fires.
    expect(both.neverEnd.map((n) => n.path)).toEqual([["start", "PING", "timer 1000.(machine).waiting missed", "timer 5000.(machine).waiting missed"]]);
    const working = setup({ types: {} as { context: { pinged: boolean } }, actors: { t: task("t") } }).createMachine({
      context: { pinged: false },
      initial: "waiting",
      states: {
        waiting: { invoke: { id: "t", src: "t", onDone: "done" }, after: { 1000: "late" }, on: { PING: ping as never } },
        done: { type: "final" },
        late: { type: "final" },
      },
    });
    const withTask = workflowPaths(defineWorkflow({ name: "task-and-timer", machine: working, timers: { missed: "skip" } }), { events: [{ type: "PING" }] });
    // The task invoked again by the re-entry is still in flight once the timer is missed: every path ends.
    expect(withTask.neverEnd).toEqual([]);
  });

  it("under \"fire\" (the default) a timer only fires; a delayed raise missed is named by its event", () => {
    const fires = workflowPaths(defineWorkflow({ name: "fires", machine }), { events: [{ type: "REPLY" }] });
    expect(fires.ok).toBe(true);
    expect([fires.configurations, fires.transitions]).toEqual([3, 2]);
    const pings = setup({}).createMachine({ initial: "a", states: { a: { entry: raise({ type: "PING" }, { delay: 50 }), on: { PING: "b" } }, b: { type: "final" } } });
    const report = workflowPaths(defineWorkflow({ name: "pings", machine: pings, timers: { missed: "skip" } }));
    expect(report.neverEnd).toEqual([{ state: "a", path: ["start", "delayed PING missed"] }]);
  });
});
