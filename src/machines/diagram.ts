// Prints a machine's definition for people: JSON for the Stately visualizer, and a Mermaid
// state diagram for docs and reviews. Reads the machine's own state nodes, so it never drifts.
import type { AnyStateMachine, AnyStateNode } from "xstate";

/** The machine's definition as JSON (paste into the Stately visualizer / editor import). */
export const machineJson = (machine: AnyStateMachine): string => JSON.stringify(machine.toJSON(), null, 2);

const label = (eventType: string): string =>
  eventType
    .replace(/^xstate\.done\.actor\..*$/, "done")
    .replace(/^xstate\.error\.actor\..*$/, "error")
    .replace(/^xstate\.after\.(\d+|[^.]+)\..*$/, "after $1");

/** A guard's name: "hasToken", "not hasToken", or the name given in { type }. */
const guardName = (guard: unknown): string | null => {
  if (guard === undefined || guard === null) return null;
  if (typeof guard === "string") return guard;
  if (typeof guard === "function") {
    const inner = (guard as { guards?: unknown[] }).guards ?? [];
    return `${guard.name} ${inner.map(guardName).join(", ")}`.trim();
  }
  return (guard as { type?: string }).type ?? "guard";
};

const mermaidId = (node: AnyStateNode): string => node.path.join("_") || node.machine.id;

export interface TransitionRow {
  source: string;
  target: string;
  event: string;
  guard: string | null;
  /** "source --event [guard]--> target": names one transition, in tests' coverage reports too. */
  key: string;
}

interface TransitionLike {
  source: AnyStateNode;
  target?: readonly AnyStateNode[] | undefined;
  eventType: string;
  guard?: unknown;
}

/** The rows of one transition definition (one per target; a targetless one stays in its source). */
export const transitionRows = (t: TransitionLike): TransitionRow[] => {
  const source = mermaidId(t.source);
  const event = t.eventType === "" ? "always" : label(t.eventType);
  const guard = guardName(t.guard);
  return (t.target ?? [t.source]).map((node) => {
    const target = mermaidId(node);
    return { source, target, event, guard, key: `${source} --${event}${guard ? ` [${guard}]` : ""}--> ${target}` };
  });
};

/** Every transition of a machine, always-transitions included (the root's own are left out). */
export const machineTransitions = (machine: AnyStateMachine): TransitionRow[] => {
  const rows: TransitionRow[] = [];
  const visit = (node: AnyStateNode) => {
    for (const transitions of [...node.transitions.values(), node.always ?? []]) {
      for (const t of transitions) rows.push(...transitionRows(t as TransitionLike));
    }
    for (const child of Object.values(node.states)) visit(child);
  };
  for (const child of Object.values(machine.root.states)) visit(child);
  return rows;
};

export const machineMermaid = (machine: AnyStateMachine): string => {
  const lines = ["stateDiagram-v2"];
  const visitStates = (node: AnyStateNode) => {
    for (const child of Object.values(node.states)) {
      // Only the root's initial state gets a start arrow (its targets are top-level states).
      if (machine.root.initial?.target.includes(child)) lines.push(`  [*] --> ${mermaidId(child)}`);
      if (child.type === "final") lines.push(`  ${mermaidId(child)} --> [*]`);
      visitStates(child);
    }
  };
  visitStates(machine.root);
  for (const row of machineTransitions(machine)) {
    lines.push(`  ${row.source} --> ${row.target} : ${row.event}${row.guard ? ` [${row.guard}]` : ""}`);
  }
  return `${lines.join("\n")}\n`;
};
