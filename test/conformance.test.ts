// The derived path runs the job machine exactly as XState's interpreter does. Both are driven side
// by side with the same machine, the same promise actors (settled by the test) and the same fake
// clock: over every simple path the machine's graph generates, and over random event sequences.
// After every step the two must agree on the state, the status, the context, the output, and the
// log of what ran (invocations started with their input, invocations aborted, custom actions).
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { and, assign, createActor, createMachine, fromCallback, fromPromise, fromTransition, not, raise, setup, type AnyActor, type AnyStateMachine } from "xstate";
import { getSimplePaths } from "xstate/graph";
import type { ClaimedJob } from "../src/db/index.ts";
import { derivePath, MachineShapeError } from "../src/machines/derive-path.ts";
import { jobMachine, type JobMachineInput } from "../src/machines/job-machine.ts";
import { runAlongPath } from "../src/runtime/job-runner.ts";

type AnyEvent = { type: string; [key: string]: unknown };

const TIMEOUT_MS = 1_000;
const SOURCES = ["validatePayload", "runHandler", "writeCompletion", "writeFailure", "writeDeadLetter", "writeRelease"] as const;

const job = (token: string): ClaimedJob =>
  ({ id: "7", type: "mail", payload: { to: "a@example.com" }, claimToken: token, leaseMs: 30_000, attempts: 1, maxAttempts: 3 }) as unknown as ClaimedJob;

const inputs: Array<{ name: string; input: JobMachineInput }> = [];
for (const token of ["tok", ""])
  for (const hasHandler of [true, false])
    for (const hasSchema of [false, true])
      for (const slotFree of [true, false])
        inputs.push({
          name: `${token ? "token" : "no token"}, ${hasHandler ? "handler" : "no handler"}, ${hasSchema ? "schema" : "no schema"}, ${slotFree ? "slot" : "no slot"}`,
          input: { job: job(token), hasHandler, hasSchema, timeoutMs: TIMEOUT_MS, slotFree },
        });

const applied = (status: string) => ({ id: "7", outcome: "applied", status, runAt: new Date(0), lockUntil: null });
const failure = (error: unknown) => error;

/** The events the test can produce: sent by the supervisor, or the outcome of the state's invocation, or its timeout. */
const EVENTS: AnyEvent[] = [
  { type: "START" },
  { type: "RELEASE" },
  { type: "DRAIN_DEADLINE" },
  { type: "LEASE_LOST" },
  { type: "LEASE_EXPIRED", unconfirmedMs: 31_234 },
  { type: "ABANDON" },
  { type: "xstate.done.actor.payloadCheck", output: undefined },
  { type: "xstate.error.actor.payloadCheck", error: failure({ permanent: false, message: "to: not an address" }) },
  { type: "xstate.error.actor.payloadCheck", error: failure({ permanent: false, leaseLapsed: true, message: "lapsed" }) },
  { type: "xstate.done.actor.handler", output: { sent: 1 } },
  { type: "xstate.error.actor.handler", error: failure({ permanent: true, message: "never" }) },
  { type: "xstate.error.actor.handler", error: failure({ permanent: false, leaseLapsed: true, message: "lapsed" }) },
  { type: "xstate.error.actor.handler", error: new Error("boom") },
  { type: "xstate.done.actor.write", output: applied("succeeded") },
  { type: "xstate.done.actor.write", output: applied("pending") },
  { type: "xstate.done.actor.write", output: applied("dead") },
  { type: "xstate.done.actor.write", output: { id: "7", outcome: "fenced" } },
  { type: "xstate.error.actor.write", error: new Error("connection lost") },
  { type: "xstate.after.jobTimeout.job.running" },
  { type: "xstate.after.jobTimeout.job.checkingPayload" },
  { type: "CANCEL" },
  { type: "xstate.done.actor.write", output: { id: "7", outcome: "cancelled" } },
  { type: "STEP_RECORDED", name: "charge" },
];

/**
 * The job machine with promise actors the test settles and custom actions that log. One per side:
 * each side's log must come out the same.
 */
const harness = () => {
  const log: string[] = [];
  let live: { src: string; resolve: (value: unknown) => void; reject: (error: unknown) => void; signal: AbortSignal } | undefined;
  const actor = (src: string) =>
    fromPromise<unknown, unknown>(({ input, signal }) => {
      log.push(`start ${src} ${JSON.stringify(input)}`);
      signal.addEventListener("abort", () => log.push(`abort ${src}`));
      return new Promise((resolve, reject) => (live = { src, resolve, reject, signal }));
    });
  const report = (name: string) => ({ context }: { context: { outcome: unknown; intended: unknown; writeError: unknown } }) =>
    log.push(`${name} outcome=${String(context.outcome)} intended=${String(context.intended)} writeError=${String(context.writeError)}`);
  const machine = jobMachine.provide({
    actors: Object.fromEntries(SOURCES.map((src) => [src, actor(src)])) as never,
    actions: { reportOutcome: report("reportOutcome"), reportFenced: report("reportFenced"), reportAbandoned: report("reportAbandoned"), reportRefused: report("reportRefused") },
  });
  return {
    machine,
    log,
    /** Settles the invocation in flight, if one is and has not been aborted: true when it did. */
    settle(event: AnyEvent): boolean {
      const current = live;
      if (current === undefined || current.signal.aborted) return false;
      live = undefined;
      if (event.type.startsWith("xstate.done.actor.")) current.resolve(event.output);
      else current.reject(event.error);
      return true;
    },
  };
};

interface Side {
  view(): { state: string; status: string; context: unknown; output: unknown };
  send(event: AnyEvent): void;
  settle(event: AnyEvent): boolean;
  log: string[];
  /** What the side's observer was told: each new state, then done (with the output) or failed. */
  told: string[];
}

/** An observer's record: a state repeated is told once (the supervisor acts on changes). */
const recorder = () => {
  const told: string[] = [];
  return {
    told,
    changed: (state: string) => {
      if (told.at(-1) !== `state ${state}`) told.push(`state ${state}`);
    },
    done: (output: unknown) => void told.push(`done ${JSON.stringify(output)}`),
    failed: () => void told.push("failed"),
  };
};

/** Tells `observer` what an XState actor does, as the runner tells its own. */
const observeActor = (actor: AnyActor, observer: ReturnType<typeof recorder>) =>
  actor.subscribe({
    next: (snapshot) => snapshot.status === "active" && observer.changed(String(snapshot.value)),
    complete: () => {
      observer.changed(String(actor.getSnapshot().value));
      observer.done(actor.getSnapshot().output);
    },
    error: observer.failed,
  });

const derive = (machine: AnyStateMachine) => derivePath(machine, { goal: "done", events: ["START"] });

const interpreter = (input: JobMachineInput, early: AnyEvent[]): Side => {
  const h = harness();
  const actor = createActor(h.machine, { input });
  const observer = recorder();
  observeActor(actor, observer);
  for (const event of early) actor.send(event as never);
  actor.start();
  return {
    view: () => {
      const s = actor.getSnapshot();
      return { state: String(s.value), status: s.status, context: s.context, output: s.output };
    },
    send: (event) => actor.send(event as never),
    settle: h.settle,
    log: h.log,
    told: observer.told,
  };
};

const derived = (input: JobMachineInput, early: AnyEvent[]): Side => {
  const h = harness();
  const observer = recorder();
  const run = runAlongPath(derive(h.machine), input, observer);
  for (const event of early) run.send(event);
  run.start();
  return {
    view: () => ({ state: run.state, status: run.status, context: run.context, output: run.output }),
    send: (event) => run.send(event),
    settle: h.settle,
    log: h.log,
    told: observer.told,
  };
};


// Promise settlements reach the machine a few microtasks later.
const flush = async () => {
  for (let i = 0; i < 10; i++) await Promise.resolve();
};

/** Applies one event to a side the way the world would produce it. */
const apply = (side: Side, event: AnyEvent): void => {
  if (event.type.startsWith("xstate.after.")) return; // time, advanced for both sides at once
  if (event.type.startsWith("xstate.done.actor.") || event.type.startsWith("xstate.error.actor.")) {
    side.settle(event);
    return;
  }
  side.send(event);
};

/** Drives both sides through the events (`early` ones sent before the start); they must agree after every step. */
const conform = async (input: JobMachineInput, events: AnyEvent[], early: AnyEvent[] = []) => {
  // Timers of earlier runs in the same test (machines left active) are not this run's.
  vi.clearAllTimers();
  const xstate = interpreter(input, early);
  const path = derived(input, early);
  const views: unknown[] = [];
  const compare = (step: string) => {
    const a = xstate.view();
    const b = path.view();
    expect(b, `after ${step}`).toEqual(a);
    expect(path.log, `log after ${step}`).toEqual(xstate.log);
    expect(path.told, `observer after ${step}`).toEqual(xstate.told);
    views.push(a);
  };
  await flush();
  compare("start");
  for (const event of events) {
    apply(xstate, event);
    apply(path, event);
    if (event.type.startsWith("xstate.after.")) await vi.advanceTimersByTimeAsync(TIMEOUT_MS);
    await flush();
    compare(event.type);
  }
  // A machine that has ended leaves no timer behind, on either side (XState cancels its delay on exit).
  if (xstate.view().status !== "active") expect(vi.getTimerCount(), "timers left behind").toBe(0);
  return { final: xstate.view(), views };
};

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
});
afterEach(() => {
  vi.useRealTimers();
});

const modelPaths = inputs.flatMap(({ name, input }) =>
  getSimplePaths(jobMachine, { input, events: EVENTS as never, toState: (snapshot) => snapshot.status === "done" }).map((path) => ({
    name: `${name}: ${path.steps.slice(1).map((s) => s.event.type).join(" > ") || "(always)"} => ${String(path.state.value)}`,
    input,
    events: path.steps.slice(1).map((s) => s.event as AnyEvent),
    final: String(path.state.value),
  })),
);

describe("the derived path runs the job machine as XState's interpreter does", () => {
  it("generates paths covering every final state from every input", () => {
    expect(new Set(modelPaths.map((p) => p.final))).toEqual(new Set(["done", "fenced", "abandoned", "cancelled", "refused"]));
    expect(modelPaths.length).toBeGreaterThan(100);
  });

  it.each(modelPaths)("$name", async ({ input, events, final }) => {
    const { final: reached } = await conform(input, events);
    expect(reached.state).toBe(final);
    expect(reached.status).toBe("done");
  });

  it("random event sequences, any input, some sent before the job's start (as the supervisor may)", async () => {
    const sent = EVENTS.slice(0, 6);
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...inputs),
        fc.array(fc.constantFrom(...sent), { maxLength: 2 }),
        fc.array(fc.constantFrom(...EVENTS), { maxLength: 10 }),
        async ({ input }, early, events) => {
          await conform(input, events, early);
        },
      ),
      { numRuns: 400 },
    );
  });

  it("a job that completes never leaves the path: no XState actor is created for it", async () => {
    for (const { input } of inputs.filter(({ input }) => input.hasHandler && input.job.claimToken !== "")) {
      const h = harness();
      const run = runAlongPath(derive(h.machine), input, { done: () => undefined, failed: () => undefined });
      run.start();
      if (!input.slotFree) run.send({ type: "START" });
      const success: Record<string, AnyEvent> = { checkingPayload: EVENTS[6]!, running: EVENTS[9]!, completing: EVENTS[13]! };
      for (let step = 0; step < 3 && run.state !== "done"; step++) {
        h.settle(success[run.state]!);
        await flush();
      }
      expect(run.state).toBe("done");
      expect(run.output).toMatchObject({ outcome: "completed" });
      expect(run.actor, "the path ran the job on its own").toBeUndefined();
    }
  });

  it("hands a job that leaves the path to an XState actor in the state it was in", async () => {
    const h = harness();
    const run = runAlongPath(derive(h.machine), inputs[0]!.input, { done: () => undefined, failed: () => undefined });
    run.start();
    run.send({ type: "LEASE_EXPIRED", unconfirmedMs: 31_000 });
    expect(run.actor?.getSnapshot().value).toBe("failing");
    expect(h.log.slice(-2)).toEqual(["abort runHandler", expect.stringMatching(/^start writeFailure /)]);
  });
});

describe("shapes the job machine does not use today, run as XState runs them", () => {
  // A targetless transition with an assign and a custom action on the path, a success event whose
  // first branch has no target, an entry action beside a targetless delay given in milliseconds, an
  // invocation with no onError (its failure fails the machine), a promise creator that throws at
  // once, and a context that cannot be built.
  const machineFor = (log: string[]) =>
    setup({
      types: { context: {} as { n: number; mode: string }, input: {} as { mode: string } },
      actors: {
        work: fromPromise<number, { mode: string }>(({ input }) => {
          if (input.mode === "throw") throw new Error("threw at once");
          return input.mode === "reject" ? Promise.reject(new Error("rejected")) : Promise.resolve(7);
        }),
      },
      actions: { bump: assign({ n: ({ context }) => context.n + 1 }), note: ({ context }) => void log.push(`note ${context.n}`) },
    }).createMachine({
      id: "shapes",
      context: ({ input }) => {
        if (input.mode === "no context") throw new Error("no context");
        return { n: 0, mode: input.mode };
      },
      initial: "idle",
      states: {
        idle: { always: { target: "ready" } },
        ready: { on: { BUMP: { actions: ["bump", "note"] }, GO: [{ guard: ({ context }) => context.n === 0, actions: "bump" }, { target: "pausing" }] } },
        pausing: { entry: "note", after: { 50: { actions: "bump" } }, on: { GO: "working" } },
        working: { invoke: { src: "work", input: ({ context }) => ({ mode: context.mode }), onDone: "done" } },
        done: { type: "final" },
      },
    });

  it.each(["resolve", "reject", "throw", "no context"])("%s", async (mode) => {
    const sides = [0, 1].map((side) => {
      const log: string[] = [];
      const observer = recorder();
      const machine = machineFor(log);
      if (side === 0) {
        const actor = createActor(machine, { input: { mode } });
        observeActor(actor, observer);
        const view = () => ({ status: actor.getSnapshot().status, state: String(actor.getSnapshot().value), context: mode === "no context" ? undefined : actor.getSnapshot().context });
        return { log, observer, start: () => actor.start(), send: (e: AnyEvent) => actor.send(e as never), view };
      }
      const run = runAlongPath(derivePath(machine, { goal: "done", events: ["GO"] }), { mode }, observer);
      const view = () => ({ status: run.status, state: run.state, context: mode === "no context" ? undefined : run.context });
      return { log, observer, start: () => run.start(), send: (e: AnyEvent) => run.send(e), view };
    });
    for (const side of sides) {
      side.start();
      for (const type of ["GO", "BUMP", "BUMP", "GO"]) side.send({ type });
    }
    const [xstate, path] = sides as [(typeof sides)[0], (typeof sides)[0]];
    // The delay is kept to the millisecond: nothing at 49 ms, the bump at 50.
    await vi.advanceTimersByTimeAsync(49);
    expect(path.view()).toEqual(xstate.view());
    await vi.advanceTimersByTimeAsync(1);
    expect(path.view()).toEqual(xstate.view());
    for (const side of sides) side.send({ type: "GO" });
    await flush();
    expect(path.log).toEqual(xstate.log);
    expect(path.observer.told).toEqual(xstate.observer.told);
    expect(path.view()).toEqual(xstate.view());
  });
});

describe("guards, actions, inputs and contexts in every form XState takes, run as XState runs them", () => {
  // Targetless transitions on the path exercise each form the derivation reads: a guard with
  // static and with dynamic params, a named guard that is itself not(...), an inline guard; an
  // assign by function and by object with a static value; a custom action with static and with
  // dynamic params; an inline action; a static context and a static invocation input; an output.
  const machineFor = (log: string[]) =>
    setup({
      types: { context: {} as { n: number } },
      actors: { work: fromPromise<unknown, unknown>(async ({ input }) => input) },
      guards: {
        below: ({ context }, params: { max: number }) => context.n < params.max,
        small: ({ context }) => context.n < 2,
        big: not("small"),
      },
      actions: {
        grow: assign(({ context }) => ({ n: context.n + 1 })),
        record: (_, params: { tag: string }) => void log.push(`record ${params.tag}`),
      },
    }).createMachine({
      id: "forms",
      context: { n: 0 },
      // The runner takes a job over from XState only through the initial state's eventless transition.
      initial: "start",
      output: ({ context }) => ({ n: context.n }),
      states: {
        start: { always: "ready" },
        ready: {
          on: {
            BUMP: [
              { guard: { type: "below", params: ({ context }) => ({ max: context.n === 0 ? 2 : 3 }) }, actions: ["grow", { type: "record", params: ({ context }) => ({ tag: `grew to ${context.n}` }) }] },
              { guard: "big", actions: [{ type: "record", params: { tag: "big" } }, ({ context }) => void log.push(`inline at ${context.n}`)] },
            ],
            RESET: { guard: ({ context }) => context.n > 2, actions: assign({ n: 1 }) },
            STAY: { guard: { type: "below", params: { max: 0 } }, actions: "grow" },
            GO: "working",
          },
        },
        working: { invoke: { src: "work", input: { fixed: true }, onDone: { target: "done", actions: ({ event }) => void log.push(`work gave ${JSON.stringify(event.output)}`) } } },
        done: { type: "final" },
      },
    });

  it("takes the same transitions, runs the same actions and ends with the same output", async () => {
    const events = ["BUMP", "BUMP", "BUMP", "BUMP", "STAY", "RESET", "BUMP", "RESET", "GO"];
    const sides = [0, 1].map((side) => {
      const log: string[] = [];
      const observer = recorder();
      const machine = machineFor(log);
      if (side === 0) {
        const actor = createActor(machine);
        observeActor(actor, observer);
        return { log, observer, start: () => actor.start(), send: (type: string) => actor.send({ type } as never) };
      }
      const run = runAlongPath(derivePath(machine, { goal: "done", events: ["GO"] }), undefined, observer);
      return { log, observer, start: () => run.start(), send: (type: string) => run.send({ type }), run };
    });
    for (const side of sides) {
      side.start();
      for (const type of events) side.send(type);
    }
    await flush();
    const [xstate, path] = sides as [(typeof sides)[0], (typeof sides)[0]];
    expect(path.log).toEqual(xstate.log);
    expect(path.log).toEqual(["record grew to 1", "record grew to 2", "record grew to 3", "record big", "inline at 3", "record grew to 2", "work gave {\"fixed\":true}"]);
    expect(path.observer.told).toEqual(xstate.observer.told);
    expect(path.run?.actor, "every form ran on the path, not handed to XState").toBeUndefined();
  });
});

describe("the derivation refuses a machine it cannot run as XState would", () => {
  const flat = { initial: "a", states: { a: { on: { GO: "done" } }, done: { type: "final" as const } } };
  const withA = (a: object) => ({ ...flat, states: { ...flat.states, a: { on: { GO: "done" }, ...a } } });
  const promise = setup({ actors: { fetch: fromPromise(async () => 1) } });
  // Each shape, and the reason the refusal gives for it (the reason is what tells whoever changed
  // the job machine what to change back, or what to teach the derivation).
  it.each<[string, AnyStateMachine, string]>([
    ["transitions on the root", createMachine({ ...flat, on: { X: ".a" } }), "the root has transitions, actions or invocations"],
    ["entry actions on the root", createMachine({ ...flat, entry: () => undefined }), "the root has transitions, actions or invocations"],
    ["exit actions on the root", createMachine({ ...flat, exit: () => undefined }), "the root has transitions, actions or invocations"],
    ["an invocation on the root", promise.createMachine({ ...flat, invoke: { src: "fetch" } }), "the root has transitions, actions or invocations"],
    ["a parallel root", createMachine({ type: "parallel", states: { a: { on: { GO: "done" } }, done: { type: "final" } } }), "the root is a parallel state"],
    ["an eventless transition on the root", createMachine({ ...flat, always: { target: ".done", guard: () => false } }), "the root has transitions, actions or invocations"],
    ["child states", createMachine({ id: "m", initial: "a", states: { a: { initial: "x", states: { x: { on: { GO: "#m.done" } } } }, done: { type: "final" } } }), 'state "a" is a compound state (only atomic and final states are run)'],
    ["a history state", createMachine({ initial: "a", states: { a: { on: { GO: "h" } }, h: { type: "history", target: "done" }, done: { type: "final" } } }), 'state "h" is a history state (only atomic and final states are run)'],
    ["two invocations in a state", promise.createMachine(withA({ invoke: [{ src: "fetch", onDone: "done" }, { src: "fetch" }] })), 'state "a" invokes more than one actor'],
    ["two delays in a state", createMachine(withA({ after: { 10: "done", 20: "done" } })), 'state "a" has more than one delayed transition'],
    ["exit actions in a state", createMachine(withA({ exit: () => undefined })), 'state "a" has exit actions'],
    ["exit actions beside a state's delay", createMachine(withA({ after: { 10: "done" }, exit: () => undefined })), 'state "a" has exit actions'],
    ["a transition with several targets", createMachine({ initial: "a", states: { a: { on: { GO: { target: ["done", "b"] } } }, b: {}, done: { type: "final" } } }), 'a transition in state "a" has several targets'],
    ["a named guard with no implementation", createMachine(withA({ on: { GO: { target: "done", guard: "missing" } } })), 'guard "missing" in state "a" is not implemented'],
    ["a higher-order guard other than not()", createMachine(withA({ on: { GO: { target: "done", guard: and([() => true]) } } })), 'a higher-order guard other than not() in state "a"'],
    ["a named action with no implementation", createMachine(withA({ on: { GO: { target: "done", actions: "missing" } } })), 'action "missing" in state "a" is not implemented'],
    ["a built-in action other than assign", createMachine(withA({ on: { GO: { target: "done", actions: raise({ type: "X" }) } } })), 'built-in action "xstate.raise" in state "a"'],
    ["a re-entering transition", createMachine(withA({ on: { GO: "done", AGAIN: { target: "a", reenter: true } } })), 'a re-entering transition in state "a"'],
    ["eventless transitions past the initial state", createMachine({ initial: "a", states: { a: { on: { GO: "b" } }, b: { always: "done" }, done: { type: "final" } } }), 'state "b" has eventless transitions (only the initial state may)'],
    ["entry actions on the initial state", createMachine(withA({ entry: () => undefined })), "the initial state has entry actions"],
    ["an actor that is not a promise", setup({ actors: { listen: fromCallback(() => undefined) } }).createMachine(withA({ invoke: { src: "listen", onDone: "done" } })), 'state "a" invokes "listen", which is not a promise actor'],
    ["an actor whose logic is a reducer", setup({ actors: { count: fromTransition((n: number) => n + 1, 0) } }).createMachine(withA({ invoke: { src: "count", onDone: "done" } })), 'state "a" invokes "count", which is not a promise actor'],
    ["an actor whose logic throws on a promise's event", setup({ actors: { strict: fromTransition((): number => { throw new Error("unknown event") }, 0) } }).createMachine(withA({ invoke: { src: "strict", onDone: "done" } })), 'state "a" invokes "strict", which is not a promise actor'],
    ["promise logic with no creator to call", setup({ actors: { hollow: { ...fromPromise(async () => 1), config: undefined } as never } }).createMachine(withA({ invoke: { src: "hollow", onDone: "done" } })), 'state "a" invokes "hollow", which is not a promise actor'],
    ["an actor not named in setup()", createMachine(withA({ invoke: { src: fromPromise(async () => 1), onDone: "done" } })), `state "a" invokes an actor not named in the machine's setup()`],
    ["a named delay with no implementation", createMachine({ initial: "a", states: { a: { on: { GO: "b" } }, b: { on: { GO: "done" }, after: { later: "done" } }, done: { type: "final" } } }), 'delay "later" in state "b" is not implemented'],
    ["a goal the initial state does not lead to", createMachine({ ...flat, states: { a: {}, done: { type: "final" } } }), 'the initial state does not lead to "done"'],
  ])("%s", (_, machine, reason) => {
    expect(() => derivePath(machine, { goal: "done", events: ["GO"] })).toThrow(new MachineShapeError(machine.id, reason));
  });

  it("names the machine, the reason and what to do", () => {
    const machine = createMachine({ id: "jobs", ...flat });
    expect(() => derivePath(machine, { goal: "finished", events: ["GO"] })).toThrow(expect.objectContaining({ name: "MachineShapeError" }));
    expect(() => derivePath(machine, { goal: "finished", events: ["GO"] })).toThrow(
      'picket: the "jobs" machine has a shape the derived path cannot run exactly as XState would (no state "finished"). ' +
        "Keep the job machine flat, with assign and named custom actions, promise actors and at most one invocation and one delay per state, " +
        "or extend src/machines/derive-path.ts and its conformance test.",
    );
  });

  it("but takes the same machine with a promise actor named in setup()", () => {
    const machine = setup({ actors: { fetch: fromPromise(async () => 1) } }).createMachine({ initial: "a", states: { a: { invoke: { src: "fetch", onDone: "done" } }, done: { type: "final" } } });
    expect([...derivePath(machine, { goal: "done", events: [] }).states.keys()]).toEqual(["a", "done"]);
  });

  it("and derives the job machine's path: claimed, waiting, the payload check, running, completing, dead-lettering, done", () => {
    expect([...derive(jobMachine).states.keys()].sort()).toEqual(["checkingPayload", "claimed", "completing", "deadLettering", "done", "running", "waitingForSlot"]);
  });
});
