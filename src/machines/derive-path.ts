// The job machine's common path, read out of its XState definition once per supervisor, so that
// the runtime can run it without XState's interpreter (whose macrostep costs microseconds, and a
// job takes three) and still run exactly what the machine says. Nothing here names a state of the
// job machine: the path is every state on a way from the initial state to the goal state that
// takes only "success" edges (eventless transitions, the state's own invocation finishing, and the
// events named as on the path). Every transition of those states is described, wherever it leads:
// the runner follows the ones that stay on the path and hands the job to XState for the others.
//
// Guards, actions, delays, inputs and actor logic are the machine's own implementations, called
// the way XState calls them ({ context, event }, params). A machine that uses a shape this reader
// does not know (nested states, a built-in action other than assign, actor logic other than a
// promise) is refused with a MachineShapeError rather than run differently than XState would.
import { assign, not, type AnyStateMachine } from "xstate";

/** The machine no longer has a shape the derived path can run exactly as XState would. */
export class MachineShapeError extends Error {
  override readonly name = "MachineShapeError";
  constructor(machineId: string, what: string) {
    super(
      `picket: the "${machineId}" machine has a shape the derived path cannot run exactly as XState would (${what}). ` +
        `Keep the job machine flat, with assign and named custom actions, promise actors and at most one invocation and one delay per state, or extend src/machines/derive-path.ts and its conformance test.`,
    );
  }
}

// Everything a machine's implementations receive here; XState also passes `self` and `system`,
// which no implementation on the path may use (none of the job machine's does).
type Context = Record<string, unknown>;
export interface MachineEvent {
  type: string;
  [key: string]: unknown;
}
interface Args {
  context: Context;
  event: MachineEvent;
}
type Guard = (context: Context, event: MachineEvent) => boolean;

/**
 * One action as the runner executes it: it takes the run's context and returns it (an assign
 * writes into it; a custom action is run for its effect).
 */
export type PathAction = (context: Context, event: MachineEvent) => Context;

export interface PathBranch {
  guard: Guard;
  actions: PathAction[];
  /** The state entered: a state of the path, or the key of one off it (the runner hands over to XState). */
  target: PathState | { offPath: string } | undefined;
}

export interface PathInvocation {
  id: string;
  src: string;
  input: (context: Context, event: MachineEvent) => unknown;
  /** The promise actor's creator, called as XState calls it. */
  run: (args: { readonly input: unknown; readonly signal: AbortSignal }) => PromiseLike<unknown>;
  doneType: string;
  errorType: string;
}

export interface PathDelay {
  eventType: string;
  ms: (context: Context, event: MachineEvent) => number;
}

export interface PathState {
  key: string;
  final: boolean;
  entry: PathAction[];
  /** Eventless transitions, in order: only the initial state may have them (checked). */
  always: PathBranch[];
  invocation: PathInvocation | undefined;
  delay: PathDelay | undefined;
  /** Every event this state takes, including its invocation's and delay's, with its branches in order. */
  on: Map<string, PathBranch[]>;
}

export interface DerivedPath {
  machine: AnyStateMachine;
  initial: PathState;
  states: Map<string, PathState>;
  context: (input: unknown) => Context;
  output: (context: Context, event: MachineEvent) => unknown;
}

export interface PathOptions {
  /** The final state the path leads to. */
  goal: string;
  /** Events sent from outside that keep a job on the path (the job machine: START). */
  events: readonly string[];
}

// Recognised by identity: XState's own `not` and `assign`, whose internals carry these.
const NOT_CHECK = (not(() => true) as unknown as { check: unknown }).check;
const ASSIGN_TYPE = (assign({}) as unknown as { type: string }).type;

interface RawTransition {
  target?: Array<{ key: string; parent?: unknown }>;
  guard?: unknown;
  actions: unknown[];
  reenter?: boolean;
  eventType: string;
}
interface RawNode {
  key: string;
  type: string;
  states: Record<string, RawNode>;
  entry: unknown[];
  exit: unknown[];
  always?: RawTransition[];
  invoke: Array<{ id: string; src: unknown; input?: unknown }>;
  after: Array<RawTransition & { delay: unknown }>;
  transitions: Map<string, RawTransition[]>;
}

/**
 * Promise actor logic, told by what it does: resolving makes it done, and its creator is the
 * function the runner calls. Other logic (callbacks, observables, machines) has a `config` too,
 * so the shape alone does not tell; logic that throws on the probe is not a promise either.
 */
const isPromiseLogic = (logic: unknown): boolean => {
  const l = logic as { config?: unknown; transition: (snapshot: unknown, event: unknown, scope: unknown) => { status?: string } };
  let resolves = false;
  try {
    resolves = l.transition({ status: "active", output: undefined, error: undefined, input: undefined }, { type: "xstate.promise.resolve", data: undefined }, {}).status === "done";
  } catch {
    // not promise logic
  }
  return resolves && typeof l.config === "function";
};

export const derivePath = (machine: AnyStateMachine, options: PathOptions): DerivedPath => {
  const refuse = (what: string): never => {
    throw new MachineShapeError(machine.id, what);
  };
  const impl = machine.implementations as unknown as {
    guards: Record<string, unknown>;
    actions: Record<string, unknown>;
    actors: Record<string, unknown>;
    delays: Record<string, unknown>;
  };
  const root = machine.root as unknown as RawNode & { output?: unknown };
  const config = machine.config as { context?: unknown; output?: unknown };
  if (root.type !== "compound") refuse(`the root is a ${root.type} state`);
  if (root.transitions.size > 0 || root.entry.length > 0 || root.exit.length > 0 || root.invoke.length > 0 || (root.always?.length ?? 0) > 0) refuse("the root has transitions, actions or invocations");
  const nodes = new Map(Object.entries(root.states));
  for (const [key, node] of nodes) {
    if (node.type !== "atomic" && node.type !== "final") refuse(`state "${key}" is a ${node.type} state (only atomic and final states are run)`);
    if (node.invoke.length > 1) refuse(`state "${key}" invokes more than one actor`);
    if (node.after.length > 1) refuse(`state "${key}" has more than one delayed transition`);
    // The only exit action allowed is the cancel of the state's own delay, which the runner does on
    // leaving. (Without a delay, any exit action is refused: an action's missing sendId would
    // otherwise match the missing delay, and the runner would skip the action.)
    const delayId = node.after[0]?.eventType;
    if (node.exit.some((a) => delayId === undefined || (a as { sendId?: unknown }).sendId !== delayId)) refuse(`state "${key}" has exit actions`);
  }

  const resolveParams = (params: unknown, args: Args): unknown => (typeof params === "function" ? params(args) : params);

  // XState keeps a named guard or action as its name or as { type, params }, an inline one as the
  // function itself.
  const reference = (x: unknown): { type: string; params?: unknown } | undefined =>
    typeof x === "function" ? undefined : typeof x === "string" ? { type: x } : (x as { type: string; params?: unknown });

  const guardOf = (guard: unknown, where: string): Guard => {
    if (guard === undefined) return () => true;
    const named = reference(guard);
    if (named !== undefined) {
      const implementation = impl.guards[named.type];
      if (typeof implementation !== "function") return refuse(`guard "${named.type}" in ${where} is not implemented`);
      if ("check" in implementation) return guardOf(implementation, where);
      return (context, event) => Boolean(implementation({ context, event }, resolveParams(named.params, { context, event })));
    }
    const inline = guard as ((args: Args) => unknown) & { check?: unknown; guards?: unknown[] };
    if (inline.check === undefined) return (context, event) => Boolean(inline({ context, event }));
    if (inline.check !== NOT_CHECK) return refuse(`a higher-order guard other than not() in ${where}`);
    const inner = guardOf(inline.guards![0], where);
    return (context, event) => !inner(context, event);
  };

  const actionOf = (action: unknown, where: string): PathAction => {
    const named = reference(action);
    const body = named === undefined ? action : impl.actions[named.type];
    if (typeof body !== "function") return refuse(`action "${named?.type}" in ${where} is not implemented`);
    const params = named?.params;
    const builtin = body as unknown as { type?: string; assignment?: unknown; resolve?: unknown };
    if (builtin.type === ASSIGN_TYPE) {
      const assignment = builtin.assignment;
      // Every assigned value is computed from the context as it was, as XState computes them, and
      // then written into it: the run's context is its own (made per run by `context`), and a copy
      // per assign was the largest share of a job's garbage on the path.
      const entries = typeof assignment === "function" ? undefined : Object.entries(assignment as Record<string, unknown>);
      return (context, event) => {
        const args = { context, event };
        const p = resolveParams(params, args);
        if (entries === undefined) return Object.assign(context, (assignment as (args: Args, params: unknown) => Context)(args, p));
        const update: Context = {};
        for (const [key, value] of entries) update[key] = typeof value === "function" ? value(args, p) : value;
        return Object.assign(context, update);
      };
    }
    if (builtin.resolve !== undefined) return refuse(`built-in action "${builtin.type}" in ${where}`);
    const run = body as (args: Args, params: unknown) => void;
    return (context, event) => {
      run({ context, event }, resolveParams(params, { context, event }));
      return context;
    };
  };

  const states = new Map<string, PathState>();
  const branchesOf = (transitions: RawTransition[], where: string): Array<PathBranch & { key: string | undefined }> =>
    transitions.map((t) => {
      if ((t.target?.length ?? 0) > 1) refuse(`a transition in ${where} has several targets`);
      if (t.reenter === true) refuse(`a re-entering transition in ${where}`);
      return {
        key: t.target?.[0]!.key,
        guard: guardOf(t.guard, where),
        actions: t.actions.map((a) => actionOf(a, where)),
        target: undefined,
      };
    });

  // The success edges of a state: where a job goes when nothing goes wrong.
  const successors = (node: RawNode): string[] => {
    const keys = new Set<string>();
    const add = (ts: RawTransition[] | undefined) =>
      ts?.forEach((t) => {
        if (t.target !== undefined) keys.add(t.target[0]!.key);
      });
    add(node.always);
    for (const inv of node.invoke) add(node.transitions.get(`xstate.done.actor.${inv.id}`));
    for (const type of options.events) add(node.transitions.get(type));
    return [...keys];
  };
  const initialKey = (root as unknown as { initial: { target: Array<{ key: string }> } }).initial.target[0]!.key;
  if (!nodes.has(options.goal)) refuse(`no state "${options.goal}"`);
  const forward = new Set<string>([initialKey]);
  for (const key of forward) for (const next of successors(nodes.get(key)!)) forward.add(next);
  const reaches = new Set<string>([options.goal]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const key of forward)
      if (!reaches.has(key) && successors(nodes.get(key)!).some((next) => reaches.has(next))) {
        reaches.add(key);
        grew = true;
      }
  }
  const onPath = [...forward].filter((key) => reaches.has(key));
  if (!onPath.includes(initialKey)) refuse(`the initial state does not lead to "${options.goal}"`);

  const pending: Array<PathBranch & { key: string | undefined }> = [];
  for (const key of onPath) {
    const node = nodes.get(key)!;
    const where = `state "${key}"`;
    if (key !== initialKey && (node.always?.length ?? 0) > 0) refuse(`${where} has eventless transitions (only the initial state may)`);
    if (key === initialKey && node.entry.length > 0) refuse(`the initial state has entry actions`);
    const delayed = node.after[0];
    // `after` is scheduled by a raise of its event in the entry actions: the delay below replaces it.
    const schedulesDelay = (a: unknown) => delayed !== undefined && (a as { id?: unknown }).id === delayed.eventType;
    const entry = node.entry.filter((a) => !schedulesDelay(a)).map((a) => actionOf(a, where));
    const inv = node.invoke[0];
    let invocation: PathInvocation | undefined;
    if (inv) {
      const logic = impl.actors[String(inv.src)] as { config?: unknown } | undefined;
      if (logic === undefined) refuse(`${where} invokes an actor not named in the machine's setup()`);
      if (!isPromiseLogic(logic)) refuse(`${where} invokes "${String(inv.src)}", which is not a promise actor`);
      const input = inv.input;
      invocation = {
        id: inv.id,
        src: String(inv.src),
        input: (context, event) => (typeof input === "function" ? input({ context, event }) : input),
        run: logic!.config as PathInvocation["run"],
        doneType: `xstate.done.actor.${inv.id}`,
        errorType: `xstate.error.actor.${inv.id}`,
      };
    }
    let delay: PathDelay | undefined;
    if (delayed) {
      const d = delayed.delay;
      const named = typeof d === "string" ? impl.delays[d] : d;
      if (typeof named !== "number" && typeof named !== "function") refuse(`delay "${String(d)}" in ${where} is not implemented`);
      delay = { eventType: delayed.eventType, ms: (context, event) => (typeof named === "function" ? named({ context, event }) : (named as number)) };
    }
    const on = new Map<string, PathBranch[]>();
    for (const [type, ts] of node.transitions) {
      const branches = branchesOf(ts, where);
      pending.push(...branches);
      on.set(type, branches);
    }
    const always = branchesOf(node.always ?? [], where);
    pending.push(...always);
    states.set(key, { key, final: node.type === "final", entry, always, invocation, delay, on });
  }
  for (const branch of pending) branch.target = branch.key === undefined ? undefined : (states.get(branch.key) ?? { offPath: branch.key });

  const context = config.context;
  const output = root.output;
  return {
    machine,
    initial: states.get(initialKey)!,
    states,
    // A run's context is its own, and its assigns write into it: a context function must make a
    // fresh object per run (the job machine's does), a static context is copied.
    context: (input) => (typeof context === "function" ? context({ input }) : { ...(context as Context) }),
    output: (ctx, event) => (typeof output === "function" ? output({ context: ctx, event }) : output),
  };
};
