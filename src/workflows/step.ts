// One event applied to a workflow's persisted snapshot, as a pure function: XState's own transition
// gives the next snapshot and the actions it asks for, and this module turns the actions into what
// the database must do in the same statement (tasks to enqueue and to cancel, timers to set and to
// cancel). Nothing here touches the database, so the testing kit walks a machine with it too.
import { randomUUID } from "node:crypto";
import { createActor, initialTransition, transition, type AnyMachineSnapshot, type AnyStateMachine } from "xstate";
import type { ChildRef, WorkflowDefinition, TaskRef } from "./definition.ts";

/** A task invocation the transition starts: the job to enqueue. */
export interface TaskStart {
  invokeId: string;
  task: TaskRef;
  input: unknown;
}

/** A child workflow the transition starts: the instance to create. */
export interface ChildStart {
  invokeId: string;
  workflow: ChildRef;
  input: unknown;
}

/** A delayed event the transition schedules. */
export interface TimerStart {
  sendId: string;
  event: { type: string };
  delayMs: number;
}

export type WorkflowStatus = "starting" | "running" | "done" | "failed" | "cancelled";

export interface Step {
  /** The persisted snapshot to store (JSON-safe). */
  snapshot: unknown;
  value: unknown;
  status: "running" | "done" | "failed";
  output?: unknown;
  error?: string;
  startTasks: TaskStart[];
  startChildren: ChildStart[];
  /** Invocation ids the transition stopped (tasks' and child workflows'). */
  stopTasks: string[];
  startTimers: TimerStart[];
  cancelTimers: string[];
  logs: unknown[];
  /** No transition took the event (none enabled in the state, or their guards said no), and the instance runs on. */
  unchanged: boolean;
}

/** The longest delay a timer may have: 100 years, in milliseconds. */
export const MAX_DELAY_MS = 100 * 365.25 * 86_400_000;

/** A transition asked for something a workflow cannot do durably (found at run time, e.g. in enqueueActions). */
export class WorkflowRefusal extends Error {
  override readonly name = "WorkflowRefusal";
}

interface ActionLike {
  type: string;
  params?: Record<string, unknown> | null;
}

const collect = (definition: WorkflowDefinition, snapshot: AnyMachineSnapshot, actions: ActionLike[], taken: boolean, childrenBefore: readonly string[]): Step => {
  const machine = definition.machine;
  const step: Step = { snapshot: null, value: snapshot.value, status: "running", startTasks: [], startChildren: [], stopTasks: [], startTimers: [], cancelTimers: [], logs: [], unchanged: false };
  for (const action of actions) {
    const params = action.params ?? {};
    switch (action.type) {
      case "xstate.raise": {
        // Raises without a delay were taken within the transition; a delayed one is a timer. One
        // without an id cannot be cancelled, and is a timer of its own (as XState's scheduler keys it).
        if (params.delay !== undefined) {
          const delay = params.delay as number;
          // (Number.isFinite is false for what is no number: a string is refused too.)
          if (!Number.isFinite(delay) || delay < 0 || delay > MAX_DELAY_MS) {
            throw new WorkflowRefusal(`delays ${String((params.event as { type?: string })?.type)} by ${String(delay)} ms: a delay is a number of milliseconds from 0 to ${MAX_DELAY_MS} (100 years).`);
          }
          const sendId = params.id === undefined ? `${(params.event as { type: string }).type}#${randomUUID()}` : String(params.id);
          step.startTimers = step.startTimers.filter((t) => t.sendId !== sendId);
          step.startTimers.push({ sendId, event: params.event as { type: string }, delayMs: delay });
        }
        break;
      }
      case "xstate.cancel": {
        const sendId = String(params.sendId);
        const pending = step.startTimers.length;
        step.startTimers = step.startTimers.filter((t) => t.sendId !== sendId);
        if (step.startTimers.length === pending) step.cancelTimers.push(sendId);
        break;
      }
      case "xstate.spawnChild": {
        const src = params.src;
        const invokeId = String(params.id);
        const child = typeof src === "string" ? definition.children.get(src) : undefined;
        if (child !== undefined) {
          step.startChildren.push({ invokeId, workflow: child, input: params.input });
          break;
        }
        const ref = typeof src === "string" ? definition.tasks.get(src) : undefined;
        if (ref === undefined) throw new WorkflowRefusal(`spawns "${String(src)}", which is not a task() or a childWorkflow(): only those can be made durable.`);
        step.startTasks.push({ invokeId, task: ref, input: params.input });
        break;
      }
      case "xstate.stopChild": {
        const ref = (params as { actorRef?: { id?: string }; id?: string }).actorRef ?? params;
        const invokeId = String((ref as { id?: string }).id);
        const pending = step.startTasks.length + step.startChildren.length;
        step.startTasks = step.startTasks.filter((t) => t.invokeId !== invokeId);
        step.startChildren = step.startChildren.filter((c) => c.invokeId !== invokeId);
        if (step.startTasks.length + step.startChildren.length === pending) step.stopTasks.push(invokeId);
        break;
      }
      case "xstate.log":
        step.logs.push((params as { value?: unknown }).value ?? params);
        break;
      case "xstate.emit":
      case "xstate.assign":
        break;
      default:
        throw new WorkflowRefusal(`runs the action "${action.type}", a side effect that is not durable: run it as a task.`);
    }
  }
  // A child that came with no spawnChild action was spawned inside assign (spawn()): XState starts it
  // on a deferred call the pure transition never makes, so no job would ever run it.
  for (const id of Object.keys(snapshot.children ?? {})) {
    if (!childrenBefore.includes(id) && !step.startTasks.some((t) => t.invokeId === id) && !step.startChildren.some((c) => c.invokeId === id)) {
      throw new WorkflowRefusal(`spawns "${id}" inside assign (spawn()), which a workflow cannot make durable: invoke the task, or use the spawnChild action.`);
    }
  }
  if (snapshot.status === "done") {
    step.status = "done";
    step.output = snapshot.output;
  } else if (snapshot.status === "error") {
    step.status = "failed";
    const error = snapshot.error;
    // A task's error event no transition handled carries { message }; a throw inside the machine, an Error.
    const message = (error as { message?: unknown } | null)?.message;
    step.error = typeof message === "string" ? message : (JSON.stringify(error) ?? String(error));
  }
  step.snapshot = JSON.parse(JSON.stringify(machine.getPersistedSnapshot(snapshot)));
  step.unchanged = !taken && step.status === "running";
  return step;
};

/** The first step: the machine's initial state for `input`. */
export const startStep = (definition: WorkflowDefinition, input: unknown): Step => {
  const [snapshot, actions] = initialTransition(definition.machine as AnyStateMachine, input as never);
  return collect(definition, snapshot as AnyMachineSnapshot, actions as ActionLike[], true, []);
};

/** A stored snapshot as a live one again (its children restored by their names in setup()). */
export const restore = (definition: WorkflowDefinition, persisted: unknown): AnyMachineSnapshot =>
  createActor(definition.machine as AnyStateMachine, { snapshot: persisted as never }).getSnapshot() as AnyMachineSnapshot;

/** One event applied to a stored snapshot. */
export const eventStep = (definition: WorkflowDefinition, persisted: unknown, event: { type: string }): Step => {
  const restored = restore(definition, persisted);
  // Whether a transition takes the event (guards evaluated), asked before it is applied.
  const taken = restored.can(event as never);
  const [snapshot, actions] = transition(definition.machine as AnyStateMachine, restored as never, event as never);
  return collect(definition, snapshot as AnyMachineSnapshot, actions as ActionLike[], taken, Object.keys(restored.children ?? {}));
};

/** A migration's result as this machine's persisted snapshot, keeping the tasks in flight. */
export const migrateSnapshot = (definition: WorkflowDefinition, from: string, persisted: Record<string, unknown>): unknown => {
  const migrate = definition.migrations[from]!;
  const mapped = migrate({ value: persisted.value, context: persisted.context });
  const resolved = (definition.machine as AnyStateMachine).resolveState({ value: mapped.value as never, context: mapped.context as never });
  const next = JSON.parse(JSON.stringify(definition.machine.getPersistedSnapshot(resolved))) as Record<string, unknown>;
  next.children = persisted.children ?? {};
  return next;
};
