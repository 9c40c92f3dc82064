// A workflow is a user's XState machine run durably: defineWorkflow checks, once, that every part
// of the machine can be made durable, and names what cannot and why. What runs outside the machine
// runs as picket jobs (task("charge-card")); everything else (guards, assign, raise, always,
// parallel and nested states, delays) is XState's own pure transition, replayed from the
// persisted snapshot on whichever worker applies the next event.
import { createHash } from "node:crypto";
import { fromPromise, type AnyStateMachine, type InputFrom, type OutputFrom, type PromiseActorLogic } from "xstate";
import { InvalidConfigError } from "../db/errors.ts";
import { checkTaskName, MAX_KEY_LENGTH } from "../db/job-spec.ts";

const TASK = Symbol.for("picket.workflow.task");

/** What task() records on the actor logic: the picket task that runs the invocation, and its job options. */
export interface TaskRef {
  name: string;
  priority?: number;
  queue?: string;
  maxAttempts?: number;
}

/**
 * An invoked actor that runs as a picket job of the task `name`: its input is the job's payload,
 * its output the handler's result. The job's retries and timeout are the task's; the machine gets
 * `xstate.done.actor.<id>` when the job completes and `xstate.error.actor.<id>` when it ends dead or
 * cancelled. Outside a worker (a plain createActor) the actor rejects, saying so.
 */
export const task = <TInput = unknown, TOutput = unknown>(
  name: string,
  options: Omit<TaskRef, "name"> = {},
): PromiseActorLogic<TOutput, TInput> => {
  checkTaskName(name, "task()");
  const logic = fromPromise<TOutput, TInput>(() =>
    Promise.reject(
      new Error(
        `picket: task "${name}" runs as a picket job of a workflow; this machine was run outside picket. ` +
          `Run it with startWorkflow, walk it with picket/testing's workflowPaths, or give the actor an implementation with machine.provide().`,
      ),
    ),
  );
  Object.defineProperty(logic, TASK, { value: { ...options, name } satisfies TaskRef });
  return logic;
};

/** The task an actor logic runs, when it was made by task(). */
export const taskOf = (logic: unknown): TaskRef | undefined =>
  typeof logic === "object" && logic !== null ? ((logic as Record<symbol, TaskRef | undefined>)[TASK] ?? undefined) : undefined;

const CHILD = Symbol.for("picket.workflow.child");

/** What childWorkflow() records on the actor logic: the workflow an invocation starts. */
export interface ChildRef {
  name: string;
}

/**
 * An invoked actor that is an instance of another workflow, started by the transition that invokes
 * it (in the same statement) with the invocation's input as its input. The machine gets
 * `xstate.done.actor.<id>` with the child's output when it reaches a final state, and
 * `xstate.error.actor.<id>` when it fails or is cancelled; leaving the invoking state cancels the
 * child (and its children). Every worker that applies the parent must run the child too.
 */
export const childWorkflow = <M extends AnyStateMachine>(definition: WorkflowDefinition<M>): PromiseActorLogic<OutputFrom<M>, InputFrom<M>> => {
  if (typeof definition !== "object" || definition === null || typeof definition.fingerprint !== "string") {
    throw new InvalidConfigError("picket: childWorkflow takes a workflow made with defineWorkflow({ name, machine }).");
  }
  const logic = fromPromise<OutputFrom<M>, InputFrom<M>>(() =>
    Promise.reject(new Error(`picket: workflow "${definition.name}" runs as a child workflow under picket; this machine was run outside picket.`)),
  );
  Object.defineProperty(logic, CHILD, { value: { name: definition.name } satisfies ChildRef });
  return logic;
};

/** The child workflow an actor logic starts, when it was made by childWorkflow(). */
export const childOf = (logic: unknown): ChildRef | undefined =>
  typeof logic === "object" && logic !== null ? ((logic as Record<symbol, ChildRef | undefined>)[CHILD] ?? undefined) : undefined;

/** A persisted snapshot as a migration reads and returns it: the state value and the context. */
export interface MigratableState {
  value: unknown;
  context: unknown;
}

export interface WorkflowOptions<M extends AnyStateMachine> {
  /** 1–128 characters of letters, digits and `_ . : / -`. */
  name: string;
  /** A machine made with XState's setup(): every actor it invokes is named in setup's actors. */
  machine: M;
  /** The version instances pin; default "1". Give a changed machine a new version. */
  version?: string | number;
  /**
   * How an instance of an older version moves to this one, keyed by that version: its state value
   * and context in, this machine's out. Without one, such instances wait for a worker that runs
   * their version (they are never reinterpreted by a different machine).
   */
  migrations?: Record<string, (old: MigratableState) => MigratableState>;
  /** What a timer applied late does (see TimerPolicy); default { missed: "fire" }. */
  timers?: Partial<TimerPolicy>;
}

/**
 * What a timer applied more than `graceMs` after it was due does (no worker was up, the database
 * was away, or its applier job waited in a busy queue: lateness is measured when it is applied).
 * "fire": it fires, once, late. "skip": it is consumed without reaching the machine and recorded in
 * the history as missed, as a schedule's missed tick is skipped; the instance stays in its state until
 * another event takes it out (a state whose only way out is the timer then waits for ever:
 * workflowPaths walks the skipped timers too and reports such states).
 */
export interface TimerPolicy {
  missed: "fire" | "skip";
  /** How late a timer may be applied and still fire under "skip", in milliseconds; default 60,000. */
  graceMs: number;
}

/** The default grace: a minute, well past a worker's poll and a busy queue's usual wait. */
export const TIMER_GRACE_MS = 60_000;

export interface WorkflowDefinition<M extends AnyStateMachine = AnyStateMachine> {
  readonly name: string;
  readonly version: string;
  readonly machine: M;
  /** sha-256 of the machine's definition (states, transitions, invocations, action names). */
  readonly fingerprint: string;
  readonly migrations: Readonly<Record<string, (old: MigratableState) => MigratableState>>;
  /** The tasks the machine's invocations run, by actor name in setup(). */
  readonly tasks: ReadonlyMap<string, TaskRef>;
  /** The child workflows its invocations start, by actor name in setup(). */
  readonly children: ReadonlyMap<string, ChildRef>;
  /** What a late timer does: read by the worker that applies it (not in the fingerprint: changing it needs no new version). */
  readonly timers: Readonly<TimerPolicy>;
}

// XState's own actions that are pure or that picket makes durable. Everything else is a side effect
// that would run again on every replay, or reaches an actor a workflow does not have.
const DURABLE_ACTIONS = new Set([
  "xstate.assign",
  "xstate.raise",
  "xstate.cancel",
  "xstate.log",
  "xstate.stopChild",
  "xstate.spawnChild",
  "xstate.enqueueActions",
  "xstate.emit",
]);

const refuse = (name: string, message: string): never => {
  throw new InvalidConfigError(`picket: workflow "${name}": ${message}`);
};

interface NodeLike {
  id: string;
  states: Record<string, NodeLike>;
  invoke: Array<{ id: string; src: unknown }>;
  entry: unknown[];
  exit: unknown[];
  transitions: Map<string, Array<{ actions: unknown[] }>>;
  always?: Array<{ actions: unknown[] }>;
}

/** Why an actor logic cannot be a workflow's invocation. */
const whyNotDurable = (logic: unknown): string => {
  const config = (logic as { config?: unknown }).config;
  if (typeof logic === "object" && logic !== null && "root" in logic) {
    return "a child machine runs in memory and is lost on a crash: make it a workflow of its own (defineWorkflow) and invoke it as childWorkflow(thatWorkflow)";
  }
  if (typeof config === "function" && "transition" in (logic as object) && "start" in (logic as object)) {
    return "a fromPromise, fromCallback or fromObservable actor runs in memory and is lost on a crash: declare it with task(\"name\") so that it runs as a picket job";
  }
  return "only actors made with task() or childWorkflow() can be made durable";
};

const actionType = (action: unknown, implementations: Record<string, unknown>): { type: string; builtIn: boolean } => {
  if (typeof action === "string") {
    const implementation = implementations[action];
    return { type: action, builtIn: typeof implementation === "function" && DURABLE_ACTIONS.has((implementation as { type?: string }).type ?? "") };
  }
  if (typeof action === "function") {
    const type = (action as { type?: string }).type ?? "";
    return { type: type || "an inline function", builtIn: DURABLE_ACTIONS.has(type) };
  }
  if (typeof action === "object" && action !== null && typeof (action as { type?: unknown }).type === "string") {
    return actionType((action as { type: string }).type, implementations);
  }
  return { type: String(action), builtIn: false };
};

/**
 * Makes a durable workflow of a machine. Refuses, naming the state and the reason, what cannot be
 * made durable: an invoked actor not made with task() (callbacks, promises, observables and child
 * machines run in memory), an actor given inline rather than named in setup() (its snapshot could
 * not be restored), and actions that are side effects (a function, sendTo, sendParent): a replay
 * would run them again. Use a task for effects and log() for logging.
 */
export const defineWorkflow = <M extends AnyStateMachine>(options: WorkflowOptions<M>): WorkflowDefinition<M> => {
  if (typeof options !== "object" || options === null) throw new InvalidConfigError("picket: defineWorkflow takes { name, machine, version?, migrations?, timers? }.");
  const name = checkTaskName(options.name, "workflow");
  const machine = options.machine;
  if (typeof machine !== "object" || machine === null || !("root" in machine) || typeof machine.getPersistedSnapshot !== "function") {
    refuse(name, "machine must be an XState machine, made with setup({ ... }).createMachine({ ... }).");
  }
  const version = String(options.version ?? "1");
  if (version.length === 0 || version.length > MAX_KEY_LENGTH) refuse(name, `version must be 1–${MAX_KEY_LENGTH} characters.`);
  const migrations = options.migrations ?? {};
  if (typeof migrations !== "object" || Object.values(migrations).some((m) => typeof m !== "function")) {
    refuse(name, "migrations must map each older version to a function of { value, context }.");
  }
  if (Object.hasOwn(migrations, version)) refuse(name, `a migration from version ${version} to itself makes no sense: remove it.`);
  const timers = timerPolicy(name, options.timers);
  const implementations = {
    actors: (machine.implementations?.actors ?? {}) as Record<string, unknown>,
    actions: (machine.implementations?.actions ?? {}) as Record<string, unknown>,
  };
  const tasks = new Map<string, TaskRef>();
  const visit = (node: NodeLike) => {
    for (const invocation of node.invoke) {
      const src = String(invocation.src);
      // XState names an inline actor itself (xstate.invoke.…); only a name from setup() restores.
      if (!Object.hasOwn(implementations.actors, src)) {
        refuse(name, `state "${node.id}" invokes an actor given inline: name it in setup({ actors: { ... } }) and invoke it by that name, so that its snapshot can be restored.`);
      }
      const logic = implementations.actors[src];
      if (taskOf(logic) === undefined && childOf(logic) === undefined) refuse(name, `state "${node.id}" invokes "${src}": ${whyNotDurable(logic)}.`);
    }
    const actions = [
      ...node.entry.map((a) => ["entry", a] as const),
      ...node.exit.map((a) => ["exit", a] as const),
      ...[...node.transitions.values()].flat().flatMap((t) => t.actions.map((a) => ["a transition", a] as const)),
      ...(node.always ?? []).flatMap((t) => t.actions.map((a) => ["an always transition", a] as const)),
    ];
    for (const [where, action] of actions) {
      const { type, builtIn } = actionType(action, implementations.actions);
      if (!builtIn) {
        refuse(
          name,
          `${where} of state "${node.id}" runs ${type === "an inline function" ? type : `the action "${type}"`}, a side effect that is not durable ` +
            `(it would run again whenever the event is applied again after a crash, or not at all). Run effects as tasks (invoke task("name")), log with log(), and change context with assign().`,
        );
      }
    }
    for (const child of Object.values(node.states)) visit(child);
  };
  visit(machine.root as unknown as NodeLike);
  // Every task and child workflow named in setup(): invoked, or spawned by the spawnChild action.
  const children = new Map<string, ChildRef>();
  for (const [src, logic] of Object.entries(implementations.actors)) {
    const ref = taskOf(logic);
    if (ref !== undefined) tasks.set(src, ref);
    const child = childOf(logic);
    if (child !== undefined) children.set(src, child);
  }
  const fingerprint = createHash("sha256").update(JSON.stringify(machine.root.definition)).digest("hex").slice(0, 16);
  return Object.freeze({ name, version, machine, fingerprint, migrations: Object.freeze({ ...migrations }), tasks, children, timers });
};

const timerPolicy = (name: string, given: Partial<TimerPolicy> | undefined): Readonly<TimerPolicy> => {
  if (given !== undefined && (typeof given !== "object" || given === null || Array.isArray(given))) refuse(name, `timers must be { missed: "fire" | "skip", graceMs? }.`);
  const unknown = Object.keys(given ?? {}).filter((key) => key !== "missed" && key !== "graceMs");
  if (unknown.length > 0) refuse(name, `timers takes missed and graceMs; ${unknown.map((key) => JSON.stringify(key)).join(", ")} is not one of them.`);
  const missed = given?.missed ?? "fire";
  if (missed !== "fire" && missed !== "skip") refuse(name, `timers.missed must be "fire" (a late timer fires, late) or "skip" (it is recorded as missed); got ${JSON.stringify(missed)}.`);
  const graceMs = given?.graceMs ?? TIMER_GRACE_MS;
  if (typeof graceMs !== "number" || !Number.isFinite(graceMs) || graceMs < 0) {
    refuse(name, `timers.graceMs must be a number of milliseconds, 0 or more (how late a timer may be applied and still fire); got ${String(graceMs)}.`);
  }
  if (missed === "fire" && given?.graceMs !== undefined) {
    refuse(name, `timers.graceMs is the grace of missed: "skip"; with missed: "fire" a late timer fires however late it is. Set missed: "skip", or remove graceMs.`);
  }
  return Object.freeze({ missed, graceMs });
};
