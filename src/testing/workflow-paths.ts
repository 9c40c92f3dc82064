// Every path of a workflow's machine, walked without a worker or a database: from the start, each
// task in flight may succeed, fail or time out (a child workflow end, fail or be cancelled), each
// timer may fire (and, under timers: { missed: "skip" }, be missed), and each event the test names
// may arrive; each is applied with the same pure step the worker applies (src/workflows/step.ts),
// so tasks started and stopped and timers set and cancelled are tracked as a worker would. The walk
// reports states no path reaches, configurations from which no path ends, invariants broken (with
// the events that lead there), and transitions in which the machine itself failed.
import { getInitialMicrosteps, getMicrosteps, type AnyMachineSnapshot, type AnyStateMachine } from "xstate";
import type { WorkflowDefinition } from "../workflows/definition.ts";
import { eventStep, restore, startStep, type Step } from "../workflows/step.ts";

type Event = { type: string } & Record<string, unknown>;

/** What an invariant sees: the state value, the context, the status, and matches() as XState's. */
export interface WorkflowState {
  value: unknown;
  context: any;
  status: "running" | "done" | "failed";
  matches: (value: string | Record<string, unknown>) => boolean;
  output?: unknown;
}

export interface WorkflowPathsOptions {
  /** The machine's input. */
  input?: unknown;
  /** Events from outside (sendToWorkflow) tried in every configuration; a function picks per state. */
  events?: readonly Event[] | ((state: WorkflowState) => readonly Event[]);
  /** A task's output when it succeeds, by task name (a child workflow's, by its workflow name), from its input; default {}. */
  outputs?: Record<string, (input: any) => unknown>;
  /** Properties every reachable configuration must have, by name. */
  invariants?: Record<string, (state: WorkflowState) => boolean>;
  /** The walk stops after this many configurations (reported as truncated); default 20,000. */
  maxStates?: number;
}

export interface WorkflowPathsReport {
  /** Configurations (state, context, tasks in flight, timers set) reached. */
  configurations: number;
  transitions: number;
  truncated: boolean;
  /** State node ids (e.g. "order.compensating.refunding") no path enters. */
  unreachable: string[];
  /** Configurations from which no path reaches a final state, each with the shortest path there (none judged when truncated). */
  neverEnd: Array<{ state: unknown; path: string[] }>;
  violations: Array<{ invariant: string; state: unknown; path: string[] }>;
  /** Transitions in which the machine threw (the instance would end failed). */
  failures: Array<{ error: string; path: string[] }>;
  /** The final configurations, each with its output and the shortest path there. */
  finals: Array<{ state: unknown; output: unknown; path: string[] }>;
  ok: boolean;
}

interface Node {
  key: string;
  step: Step;
  tasks: Map<string, { name: string; input: unknown; child?: true }>;
  timers: Map<string, Event>;
  path: string[];
}

const label = (event: Event): string => {
  const m = /^xstate\.(done|error)\.actor\.(.+)$/.exec(event.type);
  if (m) return `${m[2]} ${m[1] === "done" ? "succeeded" : (event.error as { message: string }).message}`;
  if (event.type.startsWith("xstate.after.")) return `timer ${event.type.slice("xstate.after.".length)} fired`;
  return event.type;
};

const missedLabel = (event: Event): string =>
  event.type.startsWith("xstate.after.") ? `timer ${event.type.slice("xstate.after.".length)} missed` : `delayed ${event.type} missed`;

const allStateIds = (definition: WorkflowDefinition): string[] => {
  const ids: string[] = [];
  const visit = (node: { id: string; states: Record<string, unknown> }, root: boolean) => {
    if (!root) ids.push(node.id);
    for (const child of Object.values(node.states)) visit(child as typeof node, false);
  };
  visit(definition.machine.root as unknown as { id: string; states: Record<string, unknown> }, true);
  return ids;
};

/** Walks every configuration of the workflow's machine; see WorkflowPathsReport. */
export const workflowPaths = (definition: WorkflowDefinition, options: WorkflowPathsOptions = {}): WorkflowPathsReport => {
  const maxStates = options.maxStates ?? 20_000;
  const nodes = new Map<string, Node>();
  const edges = new Map<string, Set<string>>();
  const reached = new Set<string>();
  const report: WorkflowPathsReport = { configurations: 0, transitions: 0, truncated: false, unreachable: [], neverEnd: [], violations: [], failures: [], finals: [], ok: false };
  const stateOf = (step: Step, snapshot: AnyMachineSnapshot): WorkflowState => ({
    value: step.value,
    context: (step.snapshot as { context?: unknown }).context,
    status: step.status,
    output: step.output,
    matches: (value) => snapshot.matches(value as never),
  });

  const nodeOf = (step: Step, before: Pick<Node, "tasks" | "timers"> | null, path: string[], fired: string | null): Node => {
    const tasks = new Map(before?.tasks ?? []);
    const timers = new Map(before?.timers ?? []);
    if (fired !== null) timers.delete(fired);
    for (const id of step.stopTasks) tasks.delete(id);
    for (const t of step.startTasks) tasks.set(t.invokeId, { name: t.task.name, input: t.input });
    for (const c of step.startChildren) tasks.set(c.invokeId, { name: c.workflow.name, input: c.input, child: true });
    for (const id of step.cancelTimers) timers.delete(id);
    for (const t of step.startTimers) timers.set(t.sendId, t.event as Event);
    if (step.status !== "running") {
      tasks.clear();
      timers.clear();
    }
    const key = JSON.stringify([step.snapshot, [...tasks.keys()].sort(), [...timers.keys()].sort()]);
    return { key, step, tasks, timers, path };
  };

  // States a transition passes through count as reached (a final child whose parent's onDone
  // leaves at once, a state left by always): each microstep's states are recorded.
  const passed = (microsteps: Array<[unknown, unknown]>) => {
    for (const [snapshot] of microsteps) for (const n of (snapshot as { _nodes: Array<{ id: string }> })._nodes) reached.add(n.id);
  };
  const visit = (node: Node, queue: Node[]) => {
    if (nodes.has(node.key)) return;
    nodes.set(node.key, node);
    const snapshot = restore(definition, node.step.snapshot);
    const state = stateOf(node.step, snapshot);
    for (const [name, holds] of Object.entries(options.invariants ?? {})) {
      let ok: boolean;
      try {
        ok = holds(state);
      } catch {
        ok = false;
      }
      if (!ok) report.violations.push({ invariant: name, state: node.step.value, path: node.path });
    }
    if (node.step.status === "done") report.finals.push({ state: node.step.value, output: node.step.output, path: node.path });
    queue.push(node);
  };

  // A timer missed (skipped as late) is consumed without reaching the machine: only the timer goes.
  const skipsMissed = definition.timers.missed === "skip";
  const successors = (node: Node): Array<{ event: Event; fired: string | null; missed?: true }> => {
    const next: Array<{ event: Event; fired: string | null; missed?: true }> = [];
    for (const [invokeId, task] of node.tasks) {
      const output = options.outputs?.[task.name]?.(task.input) ?? {};
      next.push({ event: { type: `xstate.done.actor.${invokeId}`, output, actorId: invokeId }, fired: null });
      next.push({ event: { type: `xstate.error.actor.${invokeId}`, error: { message: "failed" }, actorId: invokeId }, fired: null });
      // A task's job may time out; a child workflow may be cancelled (by an operator).
      next.push({ event: { type: `xstate.error.actor.${invokeId}`, error: { message: task.child ? "cancelled" : "timed out" }, actorId: invokeId }, fired: null });
    }
    for (const [sendId, event] of node.timers) {
      next.push({ event, fired: sendId });
      if (skipsMissed) next.push({ event, fired: sendId, missed: true });
    }
    const snapshot = restore(definition, node.step.snapshot);
    const outside = typeof options.events === "function" ? options.events(stateOf(node.step, snapshot)) : (options.events ?? []);
    for (const event of outside) next.push({ event, fired: null });
    return next;
  };

  let start: Node;
  const machine = definition.machine as AnyStateMachine;
  try {
    start = nodeOf(startStep(definition, options.input), null, ["start"], null);
    passed(getInitialMicrosteps(machine, options.input as never) as Array<[unknown, unknown]>);
  } catch (error) {
    report.failures.push({ error: (error as Error).message, path: ["start"] });
    return report;
  }
  const queue: Node[] = [];
  visit(start, queue);
  for (let i = 0; i < queue.length; i++) {
    const node = queue[i]!;
    if (node.step.status !== "running") continue;
    if (nodes.size >= maxStates) {
      report.truncated = true;
      break;
    }
    const out = new Set<string>();
    edges.set(node.key, out);
    for (const { event, fired, missed } of successors(node)) {
      const path = [...node.path, missed ? missedLabel(event) : label(event)];
      if (missed) {
        const next = nodeOf({ ...node.step, startTasks: [], stopTasks: [], startTimers: [], cancelTimers: [], logs: [], unchanged: true }, node, path, fired);
        report.transitions++;
        out.add(next.key);
        visit(next, queue);
        continue;
      }
      let step: Step;
      try {
        step = eventStep(definition, node.step.snapshot, event);
      } catch (error) {
        report.failures.push({ error: (error as Error).message, path });
        continue;
      }
      if (step.status === "failed") report.failures.push({ error: step.error ?? "failed", path });
      if (step.unchanged && fired === null) continue;
      passed(getMicrosteps(machine, restore(definition, node.step.snapshot) as never, event as never) as Array<[unknown, unknown]>);
      const next = nodeOf(step, node, path, fired);
      report.transitions++;
      out.add(next.key);
      visit(next, queue);
    }
  }
  report.configurations = nodes.size;
  report.unreachable = allStateIds(definition).filter((id) => !reached.has(id));

  // Configurations that can end: the final ones, and back from them along the edges walked.
  const ends = new Set([...nodes.values()].filter((n) => n.step.status !== "running").map((n) => n.key));
  for (let grew = true; grew; ) {
    grew = false;
    for (const [from, out] of edges) {
      if (!ends.has(from) && [...out].some((to) => ends.has(to))) {
        ends.add(from);
        grew = true;
      }
    }
  }
  // A truncated walk judges no configuration: what it did not expand may end.
  if (!report.truncated) {
    for (const node of nodes.values()) if (!ends.has(node.key)) report.neverEnd.push({ state: node.step.value, path: node.path });
  }
  report.ok = !report.truncated && report.unreachable.length + report.neverEnd.length + report.violations.length + report.failures.length === 0;
  return report;
};

/** The report as text: what is wrong, each with the path that shows it. */
export const formatWorkflowPaths = (report: WorkflowPathsReport): string => {
  const lines = [`${report.configurations} configurations, ${report.transitions} transitions, ${report.finals.length} final${report.truncated ? " (truncated)" : ""}`];
  for (const id of report.unreachable) lines.push(`unreachable: ${id}`);
  for (const n of report.neverEnd) lines.push(`never ends from ${JSON.stringify(n.state)}: ${n.path.join(" > ")}`);
  for (const v of report.violations) lines.push(`invariant "${v.invariant}" broken in ${JSON.stringify(v.state)}: ${v.path.join(" > ")}`);
  for (const f of report.failures) lines.push(`machine failed (${f.error}): ${f.path.join(" > ")}`);
  return lines.join("\n");
};
