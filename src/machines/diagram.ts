// Prints a machine's definition for people and tools: a machine config as JSON (which
// createMachine and Stately's editor take back), and a Mermaid state diagram for docs and
// reviews. Both are read from the machine's own state nodes, so they never drift; the tests
// rebuild the machine from each and compare every transition with the original's.
import type { AnyStateMachine, AnyStateNode } from "xstate";

const label = (eventType: string): string =>
  eventType
    .replace(/^xstate\.done\.actor\..*$/, "done")
    .replace(/^xstate\.error\.actor\..*$/, "error")
    .replace(/^xstate\.after\.(\d+|[^.]+)\..*$/, "after $1");

/**
 * A guard's name: "hasToken", the name given in { type }, or a higher-order guard written as
 * called ("not(hasToken)"), which is also how the JSON export names it.
 */
export const guardName = (guard: unknown): string | null => {
  if (guard === undefined || guard === null) return null;
  if (typeof guard === "string") return guard;
  if (typeof guard === "function") {
    const inner = (guard as { guards?: unknown[] }).guards;
    return inner === undefined ? guard.name || "inline" : `${guard.name}(${inner.map(guardName).join(", ")})`;
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
  actions?: readonly unknown[];
  reenter?: boolean;
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

const transitionsOf = (node: AnyStateNode): TransitionLike[] => [...[...node.transitions.values()].flat(), ...(node.always ?? [])] as TransitionLike[];

/** Every transition of a machine, always-transitions included (the root's own are left out). */
export const machineTransitions = (machine: AnyStateMachine): TransitionRow[] => {
  const rows: TransitionRow[] = [];
  const visit = (node: AnyStateNode) => {
    for (const t of transitionsOf(node)) rows.push(...transitionRows(t));
    for (const child of Object.values(node.states)) visit(child);
  };
  for (const child of Object.values(machine.root.states)) visit(child);
  return rows;
};

// --- JSON: the machine's config -------------------------------------------------------------

/** A named action as config names it; XState's own (a delay's raise and cancel) and unnamed inline ones are left out. */
const actionName = (action: unknown): string | undefined => {
  if (typeof action === "string") return action;
  const type = (action as { type?: unknown }).type;
  if (typeof type === "string") return type.startsWith("xstate.") ? undefined : type;
  return typeof action === "function" && action.name !== "" ? action.name : undefined;
};

const actionNames = (actions: readonly unknown[] | undefined): string[] => (actions ?? []).map(actionName).filter((name) => name !== undefined);

/** A target as config writes it: a sibling by its key, anything else by its #id. */
const targetRef = (source: AnyStateNode, target: AnyStateNode): string => (target.parent === source.parent ? target.key : `#${target.id}`);

const transitionConfig = (t: TransitionLike): Record<string, unknown> => {
  const config: Record<string, unknown> = {};
  const targets = (t.target ?? []).map((target) => targetRef(t.source, target));
  if (targets.length > 0) config.target = targets.length === 1 ? targets[0] : targets;
  const guard = guardName(t.guard);
  if (guard !== null) config.guard = guard;
  const actions = actionNames(t.actions);
  if (actions.length > 0) config.actions = actions;
  if (t.reenter === true) config.reenter = true;
  return config;
};

const stateConfig = (node: AnyStateNode): Record<string, unknown> => {
  const config: Record<string, unknown> = {};
  if (node.type !== "atomic" && node.type !== "compound") config.type = node.type;
  if (node.type === "history") config.history = node.history;
  const initial = node.initial?.target[0];
  if (node.type === "compound" && initial !== undefined) config.initial = initial.key;
  if (node.description !== undefined) config.description = node.description;
  if (node.tags.length > 0) config.tags = [...node.tags];
  const entry = actionNames(node.entry);
  if (entry.length > 0) config.entry = entry;
  const exit = actionNames(node.exit);
  if (exit.length > 0) config.exit = exit;
  // The events an invocation and a delay raise belong to them, not to `on`.
  const owned = new Set<string>();
  if (node.invoke.length > 0) {
    config.invoke = node.invoke.map((inv) => {
      const done = `xstate.done.actor.${inv.id}`;
      const error = `xstate.error.actor.${inv.id}`;
      owned.add(done).add(error);
      // An id XState generated (its index and the state's id) is left for it to generate again.
      const invoke: Record<string, unknown> = inv.id === `${node.invoke.indexOf(inv)}.${node.id}` ? {} : { id: inv.id };
      // Inline actor logic has no name of its own: XState files it under a key it makes up
      // ("xstate.invoke.0.<state id>"), which means nothing in an editor; the invocation's id does.
      invoke.src = typeof inv.src === "string" && !inv.src.startsWith("xstate.invoke.") ? inv.src : inv.id;
      const onDone = (node.transitions.get(done) ?? []) as TransitionLike[];
      const onError = (node.transitions.get(error) ?? []) as TransitionLike[];
      if (onDone.length > 0) invoke.onDone = onDone.map(transitionConfig);
      if (onError.length > 0) invoke.onError = onError.map(transitionConfig);
      return invoke;
    });
  }
  if (node.after.length > 0) {
    const after: Record<string, unknown[]> = {};
    for (const t of node.after as Array<TransitionLike & { delay: string | number }>) {
      owned.add(t.eventType);
      (after[String(t.delay)] ??= []).push(transitionConfig(t));
    }
    config.after = after;
  }
  const on: Record<string, unknown[]> = {};
  for (const [type, ts] of node.transitions) if (!owned.has(type)) on[type] = (ts as TransitionLike[]).map(transitionConfig);
  if (Object.keys(on).length > 0) config.on = on;
  if ((node.always ?? []).length > 0) config.always = (node.always as TransitionLike[]).map(transitionConfig);
  const children = Object.entries(node.states);
  if (children.length > 0) config.states = Object.fromEntries(children.map(([key, child]) => [key, stateConfig(child)]));
  return config;
};

/**
 * The machine as a config: every state, transition (eventless ones too), guard (by name; a
 * negation as "not(name)"), delay (by name or milliseconds), invocation and named action.
 * createMachine and Stately's editor take it back; implementations (guards, actions, actors,
 * delays) stay in the code, as names here.
 */
export const machineConfig = (machine: AnyStateMachine): Record<string, unknown> => ({ id: machine.id, ...stateConfig(machine.root) });

/** The machine's config as JSON (paste into Stately's editor, or give to createMachine). */
export const machineJson = (machine: AnyStateMachine): string => JSON.stringify(machineConfig(machine), null, 2);

// --- Mermaid ---------------------------------------------------------------------------------

/** Where a transition is drawn: in the innermost block holding both ends, so Mermaid puts neither state anywhere else. */
const commonParent = (a: AnyStateNode, b: AnyStateNode): AnyStateNode => {
  for (let node: AnyStateNode | undefined = a.parent; node !== undefined; node = node.parent) {
    if (b.path.slice(0, node.path.length).join(".") === node.path.join(".")) return node;
  }
  return a.machine.root;
};

/**
 * One Mermaid state diagram: each compound state a block with its own start, its children
 * inside, each transition in the innermost block that holds both its ends, and final states
 * ending in [*]. Nested states are named by their path (running_polling) and shown by their key.
 */
export const machineMermaid = (machine: AnyStateMachine): string => {
  const lines = ["stateDiagram-v2"];
  const edges = new Map<AnyStateNode, string[]>();
  const visit = (node: AnyStateNode) => {
    for (const t of transitionsOf(node)) {
      const targets = t.target ?? [t.source];
      transitionRows(t).forEach((row, i) => {
        const where = commonParent(t.source, targets[i]!);
        edges.set(where, [...(edges.get(where) ?? []), `${row.source} --> ${row.target} : ${row.event}${row.guard ? ` [${row.guard}]` : ""}`]);
      });
    }
    for (const child of Object.values(node.states)) visit(child);
  };
  for (const child of Object.values(machine.root.states)) visit(child);
  const block = (node: AnyStateNode, indent: string) => {
    const initial = node.initial?.target[0];
    if (node.type === "compound" && initial !== undefined) lines.push(`${indent}[*] --> ${mermaidId(initial)}`);
    for (const child of Object.values(node.states)) {
      const id = mermaidId(child);
      if (child.parent !== machine.root) lines.push(`${indent}state "${child.key}" as ${id}`);
      if (Object.keys(child.states).length > 0) {
        lines.push(`${indent}state ${id} {`);
        block(child, `${indent}  `);
        lines.push(`${indent}}`);
      }
      if (child.type === "final") lines.push(`${indent}${id} --> [*]`);
    }
    for (const edge of edges.get(node) ?? []) lines.push(`${indent}${edge}`);
  };
  block(machine.root, "  ");
  return `${lines.join("\n")}\n`;
};
