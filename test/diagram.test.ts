// The machines as people read them: the Mermaid diagram (README, reviews, `picket machines`) and
// the transition rows the model-based tests count coverage with. Both are read from the machines'
// own state nodes; these tests pin how a state node becomes a line.
import { describe, expect, it } from "vitest";
import { createMachine } from "xstate";
import { jobMachine, machineJson, machineMermaid, machineTransitions, supervisorMachine, transitionRows } from "../src/index.ts";

describe("machine diagrams", () => {
  it("draws the job machine: its start, its final states and every transition with its event and guard", () => {
    expect(machineMermaid(jobMachine)).toBe(
      [
        "stateDiagram-v2",
        "  [*] --> claimed",
        ...["fenced", "abandoned", "refused", "done"].map((s) => `  ${s} --> [*]`),
        "  claimed --> refused : always [not hasToken]",
        "  claimed --> deadLettering : always [not hasHandler]",
        "  claimed --> waitingForSlot : always [not slotFree]",
        "  claimed --> running : always [not hasSchema]",
        "  claimed --> checkingPayload : always",
        "  waitingForSlot --> running : START [not hasSchema]",
        "  waitingForSlot --> checkingPayload : START",
        "  waitingForSlot --> releasing : RELEASE",
        "  waitingForSlot --> releasing : DRAIN_DEADLINE",
        "  waitingForSlot --> fenced : LEASE_LOST",
        "  waitingForSlot --> releasing : LEASE_EXPIRED",
        "  checkingPayload --> fenced : LEASE_LOST",
        "  checkingPayload --> releasing : DRAIN_DEADLINE",
        "  checkingPayload --> failing : LEASE_EXPIRED",
        "  checkingPayload --> running : done",
        "  checkingPayload --> releasing : error [leaseLapsed]",
        "  checkingPayload --> deadLettering : error",
        "  checkingPayload --> failing : after jobTimeout",
        "  running --> fenced : LEASE_LOST",
        "  running --> releasing : DRAIN_DEADLINE",
        "  running --> failing : LEASE_EXPIRED",
        "  running --> completing : done",
        "  running --> releasing : error [leaseLapsed]",
        "  running --> deadLettering : error [isPermanent]",
        "  running --> failing : error",
        "  running --> failing : after jobTimeout",
        "  completing --> abandoned : ABANDON",
        "  completing --> done : done [applied]",
        "  completing --> fenced : done",
        "  completing --> abandoned : error",
        "  failing --> abandoned : ABANDON",
        "  failing --> done : done [wentDead]",
        "  failing --> done : done [applied]",
        "  failing --> fenced : done",
        "  failing --> abandoned : error",
        "  deadLettering --> abandoned : ABANDON",
        "  deadLettering --> done : done [applied]",
        "  deadLettering --> fenced : done",
        "  deadLettering --> abandoned : error",
        "  releasing --> abandoned : ABANDON",
        "  releasing --> done : done [applied]",
        "  releasing --> fenced : done",
        "  releasing --> abandoned : error",
        "",
      ].join("\n"),
    );
  });

  it("names nested states by their path, starts only at the root's initial state, and leaves the root's own transitions out", () => {
    const text = machineMermaid(supervisorMachine);
    const lines = text.split("\n");
    expect(lines.filter((l) => l.includes("[*] -->"))).toEqual(["  [*] --> running"]);
    expect(lines.filter((l) => l.endsWith("--> [*]"))).toEqual(["  stopped --> [*]"]);
    expect(lines).toContain("  running_polling --> running_polling : done [pollFull]");
    expect(lines).toContain("  running_waiting --> running_polling : after pollInterval");
    expect(lines).toContain("  draining --> stopped : always [idle]");
    // The root's JOBS_FINISHED counter is not a transition between states.
    expect(machineTransitions(supervisorMachine).map((row) => row.source)).not.toContain("supervisor");
    expect(machineTransitions(supervisorMachine)).toHaveLength(25);
    expect(lines).toContain("  running_polling --> running_polling : done [woken]");
    expect(lines).toContain("  running_waiting --> running_polling : SLOT_FREED [saturated]");
    expect(machineTransitions(jobMachine)).toHaveLength(43);
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
      "  outer_end --> [*]",
      "  outer_inner --> outer_end : GO [isReady]",
      "",
    ]);
    const parallel = createMachine({ id: "both", type: "parallel", states: { a: {}, b: {} } });
    expect(machineMermaid(parallel)).toBe("stateDiagram-v2\n");
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

  it("exports the definition as JSON the Stately visualizer imports", () => {
    const json = JSON.parse(machineJson(jobMachine));
    expect(json.id).toBe("job");
    expect(Object.keys(json.states)).toEqual(Object.keys(jobMachine.root.states));
    expect(machineJson(jobMachine)).toContain('\n  "id": "job"');
  });
});
