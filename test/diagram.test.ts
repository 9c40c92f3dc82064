// The machines as people and tools read them: the JSON config (Stately's editor, createMachine),
// the Mermaid diagram (README, reviews, `picket machines`) and the transition rows the model-based
// tests count coverage with. All are read from the machines' own state nodes. The exports are
// checked by rebuilding: the JSON through createMachine, the Mermaid through Mermaid's own parser,
// and what comes back is compared with the original, transition by transition.
import { JSDOM } from "jsdom";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { and, createMachine, fromPromise, not, setup, type AnyStateMachine, type AnyStateNode } from "xstate";
import { toDirectedGraph, type DirectedGraphNode } from "xstate/graph";
import { jobMachine, machineJson, machineMermaid, supervisorMachine } from "../src/index.ts";
import { guardName, machineConfig, machineTransitions, transitionRows } from "../src/machines/diagram.ts";

const MACHINES: AnyStateMachine[] = [jobMachine, supervisorMachine];

/** Everything a machine's states and transitions say, the root's own included, as comparable text. */
const anatomy = (machine: AnyStateMachine): string[] => {
  const lines: string[] = [];
  const names = (actions: readonly unknown[]) =>
    actions.map((a) => (typeof a === "string" ? a : ((a as { type?: string }).type ?? (a as { name?: string }).name))).filter((n) => n !== undefined && !n.startsWith("xstate."));
  const visit = (node: AnyStateNode) => {
    lines.push(`state ${node.id} ${node.type} initial=${node.initial?.target.map((t) => t.id).join(",") ?? "-"} entry=${names(node.entry)} exit=${names(node.exit)}`);
    for (const inv of node.invoke) lines.push(`  invoke ${inv.id} ${String(inv.src)}`);
    for (const t of node.after) lines.push(`  after ${String((t as { delay: unknown }).delay)} ${t.eventType}`);
    for (const t of [...[...node.transitions.values()].flat(), ...(node.always ?? [])]) {
      lines.push(`  ${t.eventType || "(always)"} [${guardName(t.guard) ?? ""}] -> ${t.target?.map((n) => n.id).join(",") ?? "(none)"} actions=${names(t.actions)} reenter=${t.reenter}`);
    }
    for (const child of Object.values(node.states)) visit(child);
  };
  visit(machine.root);
  return lines;
};

/** xstate/graph's edges, flattened: source, event, target. */
const graphEdges = (machine: AnyStateMachine): string[] => {
  const edges: string[] = [];
  const walk = (node: DirectedGraphNode) => {
    for (const edge of node.edges) edges.push(`${edge.source.id} --${edge.label.text}--> ${edge.target.id}`);
    node.children.forEach(walk);
  };
  walk(toDirectedGraph(machine));
  return edges.sort();
};

describe("the JSON export round-trips through createMachine", () => {
  it.each(MACHINES.map((m) => [m.id, m] as const))("%s: every state, transition, guard (negations too), delay, invocation and named action comes back", (_, machine) => {
    const rebuilt = createMachine(JSON.parse(machineJson(machine)));
    expect(anatomy(rebuilt)).toEqual(anatomy(machine));
    expect(graphEdges(rebuilt)).toEqual(graphEdges(machine));
    expect(machineTransitions(rebuilt)).toEqual(machineTransitions(machine));
  });

  it("counts what the old export lost: eventless transitions and not(...) guards are all there", () => {
    const json = machineJson(jobMachine);
    const config = JSON.parse(json);
    expect(config.states.claimed.always.map((t: { guard?: string }) => t.guard ?? null)).toEqual(["not(hasToken)", "not(hasHandler)", "not(slotFree)", "not(hasSchema)", null]);
    expect(config.states.running.after).toEqual({ jobTimeout: [expect.objectContaining({ target: "failing", actions: ["setError"] })] });
    expect(machineTransitions(createMachine(config))).toHaveLength(51);
    // The events of invocations and delays are written where the editor shows them (onDone,
    // onError, after), not again as raw xstate.* events under `on`.
    const onKeys = (state: { on?: object; states?: Record<string, object> }): string[] => [
      ...Object.keys(state.on ?? {}),
      ...Object.values(state.states ?? {}).flatMap((child) => onKeys(child)),
    ];
    for (const machine of MACHINES) expect(onKeys(JSON.parse(machineJson(machine))).filter((key) => key.startsWith("xstate."))).toEqual([]);
    expect(machineTransitions(createMachine(JSON.parse(machineJson(supervisorMachine))))).toHaveLength(13);
  });

  it("names targets outside the state's parent by id, and keeps a delay in milliseconds, several targets and re-entry", () => {
    const machine = createMachine({
      id: "shapes",
      initial: "a",
      states: {
        a: { initial: "x", states: { x: { on: { OUT: "#shapes.b", BACK: { target: "x", reenter: true } } } }, after: { 250: "b" } },
        b: { type: "parallel", states: { p: {}, q: {} }, on: { BOTH: { target: [".p", ".q"] } } },
      },
    });
    const config = JSON.parse(machineJson(machine));
    expect(config.states.a.states.x.on.OUT).toEqual([{ target: "#shapes.b" }]);
    expect(config.states.a.after).toEqual({ 250: [{ target: "b" }] });
    expect(config.states.b.on.BOTH).toEqual([{ target: ["#shapes.b.p", "#shapes.b.q"] }]);
    expect(anatomy(createMachine(config))).toEqual(anatomy(machine));
  });
});

describe("the JSON export writes a machine's config as it was written", () => {
  // Written as the export writes a config (every transition a list of objects), so the export of
  // the machine must give back exactly this: no key more (an empty list, a state's default type,
  // an id XState generated), none less (a description, tags, a history's depth).
  const written = {
    id: "written",
    initial: "idle",
    description: "every part a config can have",
    states: {
      idle: {
        description: "waiting",
        tags: ["quiet", "start"],
        entry: ["track", "reset"],
        exit: ["untrack"],
        on: { GO: [{ target: "busy", guard: "allowed", actions: ["count"] }, { target: "done" }], PING: [{ actions: ["pong"] }] },
      },
      busy: {
        initial: "loading",
        states: {
          loading: {
            invoke: [
              { src: "fetcher", onDone: [{ target: "loaded" }], onError: [{ target: "#written.done", actions: ["logError"] }] },
              { id: "watch", src: "watcher" },
            ],
          },
          loaded: { after: { 250: [{ target: "loading", reenter: true }], slow: [{ target: "#written.done" }] } },
          remembered: { type: "history", history: "deep" },
          last: { type: "history", history: "shallow" },
        },
        always: [{ target: "done", guard: "finished" }],
      },
      both: { type: "parallel", states: { left: {}, right: { type: "final" } } },
      done: { type: "final" },
    },
  };

  it("gives back exactly the config it was made from", () => {
    expect(machineConfig(createMachine(written as never))).toEqual(written);
  });

  it("names functions by their names (an unnamed inline one is left out) and an inline actor by its invocation's id", () => {
    // A function passed as an argument gets no name from where it is written.
    const anonymous = <F>(f: F): F => f;
    const inline = fromPromise(async () => 1);
    const machine = createMachine({
      id: "functions",
      initial: "a",
      states: {
        a: {
          entry: [function notify() {}, { type: "named" }],
          exit: [anonymous(() => undefined)],
          invoke: { id: "work", src: inline, onDone: { target: "b", guard: and(["ready", "allowed"]) } },
        },
        b: { on: { X: { target: "a", guard: anonymous(() => true) } } },
      },
    });
    const config = machineConfig(machine) as { states: Record<string, Record<string, unknown>> };
    expect(config.states.a).toEqual({ entry: ["notify", "named"], invoke: [{ id: "work", src: "work", onDone: [{ target: "b", guard: "and(ready, allowed)" }] }] });
    expect(config.states.b).toEqual({ on: { X: [{ target: "a", guard: "inline" }] } });
  });

  it("guardName: none, a string, a named function, a higher-order guard written as called, an object by its type", () => {
    expect(guardName(undefined)).toBeNull();
    expect(guardName(null)).toBeNull();
    expect(guardName("ready")).toBe("ready");
    expect(guardName(function isReady() {})).toBe("isReady");
    expect(guardName(and(["a", not("b")]))).toBe("and(a, not(b))");
    expect(guardName({ type: "ready" })).toBe("ready");
    expect(guardName({})).toBe("guard");
  });

  it("labels only XState's own events as done, error and after: a user's event that contains their words keeps its name", () => {
    const machine = createMachine({
      id: "labels",
      initial: "a",
      states: { a: { on: { "job.xstate.done.actor.x": "b", "job.xstate.error.actor.x": "b", "job.xstate.after.5.x": "b" } }, b: {} },
    });
    expect(machineTransitions(machine).map((row) => row.event)).toEqual(["job.xstate.done.actor.x", "job.xstate.error.actor.x", "job.xstate.after.5.x"]);
  });
});

/** Mermaid's own parser, in a DOM of jsdom's (it needs one to load). */
let mermaid: typeof import("mermaid").default;
let dom: JSDOM;
beforeAll(async () => {
  dom = new JSDOM("");
  Object.assign(globalThis, { window: dom.window, document: dom.window.document });
  mermaid = (await import("mermaid")).default;
  await mermaid.parse("stateDiagram-v2\n  a --> b\n"); // registers the diagram types
}, 60_000);
// Files may share a worker (the mutation config does not isolate them): leave no DOM behind.
afterAll(() => {
  Reflect.deleteProperty(globalThis, "window");
  Reflect.deleteProperty(globalThis, "document");
  dom.window.close();
});

/** The diagram as Mermaid understood it: its transitions (source, target, label), starts and nesting. */
const parsed = async (text: string) => {
  const diagram = await mermaid.mermaidAPI.getDiagramFromText(text);
  const data = (diagram.db as unknown as { getData(): { edges: Array<{ start: string; end: string; label: string }>; nodes: Array<{ id: string; parentId?: string }> } }).getData();
  const pseudo = (id: string) => /_(start|end)$/.test(id) || /^root_(start|end)$/.test(id);
  return {
    transitions: data.edges.filter((e) => !pseudo(e.start) && !pseudo(e.end)).map((e) => `${e.start} --> ${e.end} : ${e.label}`),
    starts: data.edges.filter((e) => pseudo(e.start)).map((e) => `${e.start} --> ${e.end}`),
    ends: data.edges.filter((e) => pseudo(e.end)).map((e) => e.start),
    parents: Object.fromEntries(data.nodes.filter((n) => !pseudo(n.id)).map((n) => [n.id, n.parentId ?? null])),
  };
};

describe("the Mermaid export is one diagram Mermaid's parser reads back as the machine", () => {
  it.each(MACHINES.map((m) => [m.id, m] as const))("%s: the same transitions, starts, final states and nesting", async (_, machine) => {
    const text = machineMermaid(machine);
    expect(text.match(/stateDiagram-v2/g)).toHaveLength(1);
    await expect(mermaid.parse(text)).resolves.toMatchObject({ diagramType: "stateDiagram" });
    const back = await parsed(text);
    const rows = machineTransitions(machine);
    expect(back.transitions.sort()).toEqual(rows.map((r) => `${r.source} --> ${r.target} : ${r.event}${r.guard ? ` [${r.guard}]` : ""}`).sort());
    // Each compound state (the root too) starts at its initial state; nothing else starts.
    const compound: AnyStateNode[] = [];
    const collect = (node: AnyStateNode) => {
      if (node.type === "compound") compound.push(node);
      Object.values(node.states).forEach(collect);
    };
    collect(machine.root);
    const id = (node: AnyStateNode) => node.path.join("_");
    expect(back.starts.sort()).toEqual(compound.map((node) => `${node === machine.root ? "root" : id(node)}_start --> ${id(node.initial!.target[0]!)}`).sort());
    // Every state sits in its parent's block: no state drawn loose (the supervisor's running was).
    const all: AnyStateNode[] = [];
    const every = (node: AnyStateNode) => Object.values(node.states).forEach((child) => (all.push(child), every(child)));
    every(machine.root);
    expect(back.parents).toEqual(Object.fromEntries(all.map((node) => [id(node), node.parent === machine.root ? null : id(node.parent!)])));
    expect(back.ends.sort()).toEqual(all.filter((node) => node.type === "final").map(id).sort());
  });

  it("rejects what is not a diagram, so the check above can fail", async () => {
    await expect(mermaid.parse("stateDiagram-v2\n  a --> : GO\n")).rejects.toThrow(/Parse error/);
  });
});

describe("machine diagrams", () => {
  it("draws the job machine: its start, its final states and every transition with its event and guard", () => {
    expect(machineMermaid(jobMachine)).toBe(
      [
        "stateDiagram-v2",
        "  [*] --> claimed",
        ...["fenced", "abandoned", "cancelled", "refused", "done"].map((s) => `  ${s} --> [*]`),
        "  claimed --> refused : always [not(hasToken)]",
        "  claimed --> deadLettering : always [not(hasHandler)]",
        "  claimed --> waitingForSlot : always [not(slotFree)]",
        "  claimed --> running : always [not(hasSchema)]",
        "  claimed --> checkingPayload : always",
        "  waitingForSlot --> running : START [not(hasSchema)]",
        "  waitingForSlot --> checkingPayload : START",
        "  waitingForSlot --> releasing : RELEASE",
        "  waitingForSlot --> releasing : DRAIN_DEADLINE",
        "  waitingForSlot --> fenced : LEASE_LOST",
        "  waitingForSlot --> cancelled : CANCEL",
        "  waitingForSlot --> releasing : LEASE_EXPIRED",
        "  checkingPayload --> fenced : LEASE_LOST",
        "  checkingPayload --> cancelled : CANCEL",
        "  checkingPayload --> releasing : DRAIN_DEADLINE",
        "  checkingPayload --> failing : LEASE_EXPIRED",
        "  checkingPayload --> running : done",
        "  checkingPayload --> releasing : error [leaseLapsed]",
        "  checkingPayload --> deadLettering : error",
        "  checkingPayload --> failing : after jobTimeout",
        "  running --> fenced : LEASE_LOST",
        "  running --> cancelled : CANCEL",
        "  running --> running : STEP_RECORDED",
        "  running --> releasing : DRAIN_DEADLINE",
        "  running --> failing : LEASE_EXPIRED",
        "  running --> completing : done",
        "  running --> releasing : error [leaseLapsed]",
        "  running --> deadLettering : error [isPermanent]",
        "  running --> failing : error",
        "  running --> failing : after jobTimeout",
        "  completing --> abandoned : ABANDON",
        "  completing --> done : done [applied]",
        "  completing --> cancelled : done [cancelledMeanwhile]",
        "  completing --> fenced : done",
        "  completing --> abandoned : error",
        "  failing --> abandoned : ABANDON",
        "  failing --> done : done [wentDead]",
        "  failing --> done : done [applied]",
        "  failing --> cancelled : done [cancelledMeanwhile]",
        "  failing --> fenced : done",
        "  failing --> abandoned : error",
        "  deadLettering --> abandoned : ABANDON",
        "  deadLettering --> done : done [applied]",
        "  deadLettering --> cancelled : done [cancelledMeanwhile]",
        "  deadLettering --> fenced : done",
        "  deadLettering --> abandoned : error",
        "  releasing --> abandoned : ABANDON",
        "  releasing --> done : done [applied]",
        "  releasing --> cancelled : done [cancelledMeanwhile]",
        "  releasing --> fenced : done",
        "  releasing --> abandoned : error",
        "",
      ].join("\n"),
    );
  });

  it("names nested states by their path, starts only at the root's initial state, and leaves the root's own transitions out", () => {
    // The supervisor machine's shape before its poll cycle left it: a poll loop nested in running.
    const poller = setup({ guards: { full: () => true }, delays: { interval: 100 } }).createMachine({
      id: "poller",
      initial: "running",
      on: { COUNT: { actions: () => undefined } },
      states: {
        running: {
          initial: "polling",
          states: {
            polling: { on: { DONE: [{ guard: "full", target: "polling", reenter: true }, { target: "waiting" }] } },
            waiting: { after: { interval: "polling" }, on: { SLOT: "polling" } },
          },
          on: { STOP: "stopped" },
        },
        stopped: { type: "final" },
      },
    });
    const lines = machineMermaid(poller).split("\n");
    // The root starts at running, running at its polling: each start inside its own block.
    expect(lines.filter((l) => l.includes("[*] -->"))).toEqual(["  [*] --> running", "    [*] --> running_polling"]);
    expect(lines).toContain("  state running {");
    expect(lines).toContain('    state "polling" as running_polling');
    expect(lines.filter((l) => l.endsWith("--> [*]"))).toEqual(["  stopped --> [*]"]);
    // Drawn in the innermost block holding both ends: inside running, or at the root.
    expect(lines).toContain("    running_polling --> running_polling : DONE [full]");
    expect(lines).toContain("    running_waiting --> running_polling : after interval");
    expect(lines).toContain("    running_waiting --> running_polling : SLOT");
    expect(lines).toContain("  running --> stopped : STOP");
    // The root's COUNT is not a transition between states.
    expect(machineTransitions(poller).map((row) => row.source)).toEqual(["running", "running_polling", "running_polling", "running_waiting", "running_waiting"]);
    // The supervisor's own, and its root's JOBS_HELD counter left out likewise.
    expect(machineMermaid(supervisorMachine).split("\n")).toContain("  endingPoll --> draining : done");
    expect(machineTransitions(supervisorMachine).map((row) => row.source)).not.toContain("supervisor");
    expect(machineTransitions(supervisorMachine)).toHaveLength(13);
    expect(machineTransitions(jobMachine)).toHaveLength(51);
  });

  it("draws final states inside nested states, a machine without an initial state, and an inline guard by its name", () => {
    const isReady = () => true;
    const nested = createMachine({
      id: "nested",
      initial: "outer",
      states: {
        outer: {
          initial: "inner",
          states: { inner: { on: { GO: { target: "end", guard: isReady } } }, end: { type: "final" } },
        },
      },
    });
    expect(machineMermaid(nested).split("\n")).toEqual([
      "stateDiagram-v2",
      "  [*] --> outer",
      "  state outer {",
      "    [*] --> outer_inner",
      '    state "inner" as outer_inner',
      '    state "end" as outer_end',
      "    outer_end --> [*]",
      "    outer_inner --> outer_end : GO [isReady]",
      "  }",
      "",
    ]);
    const parallel = createMachine({ id: "both", type: "parallel", states: { a: {}, b: {} } });
    expect(machineMermaid(parallel)).toBe("stateDiagram-v2\n");
  });

  it("draws a transition at the innermost block holding both ends, by whole state names, and a parallel state's regions without a start", () => {
    // a.bc and ab.c spell the same letters: only whole names tell that they share no block.
    const machine = createMachine({
      id: "m",
      initial: "a",
      states: {
        a: { initial: "bc", states: { bc: { initial: "x", states: { x: { on: { JUMP: "#m.ab.c.y", NEAR: "z" } }, z: {} } } } },
        ab: { initial: "c", states: { c: { initial: "y", states: { y: {} } } } },
        p: { type: "parallel", states: { l: {}, r: {} } },
      },
    });
    const lines = machineMermaid(machine).split("\n");
    expect(lines).toContain("  a_bc_x --> ab_c_y : JUMP");
    expect(lines).toContain("      a_bc_x --> a_bc_z : NEAR");
    expect(lines.slice(lines.indexOf("  state p {"), lines.indexOf("  state p {") + 4)).toEqual(["  state p {", '    state "l" as p_l', '    state "r" as p_r', "  }"]);
  });

  it("keys each transition row by source, event, guard and target; a targetless transition stays in its state", () => {
    const machine = createMachine({
      id: "m",
      initial: "a",
      states: {
        a: {
          on: { GO: { target: "b", guard: { type: "ready" } }, STAY: {}, ODD: { target: "b", guard: {} as never } },
          after: { 1000: "b" },
        },
        b: { type: "final" },
      },
    });
    const rows = machineTransitions(machine);
    expect(rows.map((row) => row.key)).toEqual(["a --GO [ready]--> b", "a --STAY--> a", "a --ODD [guard]--> b", "a --after 1000--> b"]);
    expect(rows[0]).toEqual({ source: "a", target: "b", event: "GO", guard: "ready", key: "a --GO [ready]--> b" });
    expect(rows[1]!.guard).toBeNull();
    const [stay] = transitionRows({ source: machine.root.states.a!, eventType: "STAY" });
    expect(stay).toEqual({ source: "a", target: "a", event: "STAY", guard: null, key: "a --STAY--> a" });
    expect(machineMermaid(machine)).toBe(
      "stateDiagram-v2\n  [*] --> a\n  b --> [*]\n  a --> b : GO [ready]\n  a --> a : STAY\n  a --> b : ODD [guard]\n  a --> b : after 1000\n",
    );
  });

});
