// Runs one job's machine along the path derived from its definition (src/machines/derive-path.ts):
// the machine's own guards, actions, delays and promise actors, called in the order XState calls
// them, without XState's interpreter. The moment the job takes a transition off the path (an
// error, a timeout, a lost lease, the drain, a fenced write), or whenever an inspector is attached,
// a real XState actor takes over: restored in the state the job is in, with the context it has,
// and sent the event that leaves the path, so XState decides from there; what the path had
// started in that state (its invocation, its timer) is cancelled as the actor leaves it.
//
// test/conformance.test.ts drives this runner and XState's interpreter side by side.
import { createActor, type AnyActorRef, type AnyStateMachine, type Actor, type InspectionEvent } from "xstate";
import type { Inspector } from "./inspection.ts";
import type { DerivedPath, MachineEvent, PathAction, PathBranch, PathState } from "../machines/derive-path.ts";
import type { SignalSource } from "./signal-source.ts";

type Context = Record<string, unknown>;
export type RunStatus = "active" | "done" | "error" | "stopped";

export interface RunObserver<Output = unknown> {
  /** The job's state after an event was taken (one macrostep, as XState's `next`). */
  changed?: (state: string) => void;
  /** The machine reached a final state; its output, as the machine's `output` maps it. */
  done: (output: Output) => void;
  failed: (error: unknown) => void;
}

/** With either, the job runs as an XState actor from its start, so that an inspector sees all of it. */
export interface RunOptions {
  /** The actor the job's actor runs under (the supervisor's): its system's inspector sees the job. */
  parent?: AnyActorRef;
  /** An inspector for the job's own actor (a job run on its own, without a parent). */
  inspect?: Inspector;
}

const INIT: MachineEvent = { type: "xstate.init" };

/**
 * The arguments the path gives a promise actor, as XState gives them ({ input, signal }), with the
 * signal made only when first read: most invocations (a no-op handler, a completion sent in its
 * batch) never read it, and an AbortController per invocation was two per job.
 */
class InvocationArgs implements SignalSource {
  readonly input: unknown;
  private controller: AbortController | undefined;
  private left = false;

  constructor(input: unknown) {
    this.input = input;
  }

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.left) this.controller.abort();
    }
    return this.controller.signal;
  }

  get aborted(): boolean {
    return this.left;
  }

  abort(): void {
    this.left = true;
    this.controller?.abort();
  }
}

export class JobRun<Output = unknown> {
  private node: PathState;
  private ctx: Context;
  private runStatus: RunStatus = "active";
  private runOutput: unknown;
  /** The XState actor that took over, once the job left the path. */
  private taken: Actor<AnyStateMachine> | undefined;
  // What the current state has in flight: its invocation (aborted when the state is left) and its
  // delay's timer. A generation tells an invocation of a state already left from the current one.
  private generation = 0;
  private invocation: InvocationArgs | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private started = false;
  /** Events sent before start(): taken once it has run, in order, as an XState actor's mailbox does. */
  private early: MachineEvent[] | undefined;

  private readonly path: DerivedPath;
  /** Needed only until the start (an actor that runs the job from its start takes it). */
  private input: unknown;
  private readonly observer: RunObserver<Output>;
  private readonly options: RunOptions;

  constructor(path: DerivedPath, input: unknown, observer: RunObserver<Output>, options: RunOptions) {
    this.path = path;
    this.input = input;
    this.observer = observer;
    this.options = options;
    this.node = path.initial;
    this.ctx = undefined as unknown as Context;
  }

  get state(): string {
    return this.taken ? String(this.taken.getSnapshot().value) : this.node.key;
  }

  get status(): RunStatus {
    return this.taken ? this.taken.getSnapshot().status : this.runStatus;
  }

  get output(): unknown {
    return this.taken ? this.taken.getSnapshot().output : this.runOutput;
  }

  get context(): Context {
    return this.taken ? this.taken.getSnapshot().context : this.ctx;
  }

  /** The XState actor running the job, once it left the path (or from its start, with an inspector). */
  get actor(): Actor<AnyStateMachine> | undefined {
    return this.taken;
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    const early = this.early;
    this.early = undefined;
    if (this.options.parent || this.options.inspect) this.takeOver(undefined);
    else {
      try {
        this.ctx = this.path.context(this.input);
        // The initial state's eventless transitions decide before anything has run: a branch off
        // the path lets XState run the job from its start.
        const branch = this.choose(this.node.always, INIT);
        if (branch === undefined || !isOnPath(branch.target)) this.takeOver(undefined);
        else this.take(branch, INIT);
      } catch (error) {
        this.fail(error);
      }
    }
    this.input = undefined;
    if (early) for (const event of early) this.send(event);
  }

  send(event: MachineEvent): void {
    if (!this.started) return void (this.early ??= []).push(event);
    if (this.taken) return void this.taken.send(event);
    if (this.runStatus !== "active") return;
    try {
      const branches = this.node.on.get(event.type);
      const branch = branches && this.choose(branches, event);
      // An event the state does not take is dropped, as XState drops it; an unhandled error is XState's to report.
      if (branch === undefined) {
        if (event.type.startsWith("xstate.error.")) this.takeOver(event);
      } else if (!isOnPath(branch.target)) this.takeOver(event);
      else this.take(branch, event);
    } catch (error) {
      // A guard or an action threw: the machine fails, as XState's would.
      this.fail(error);
    }
  }

  private choose(branches: PathBranch[], event: MachineEvent): PathBranch | undefined {
    for (const branch of branches) if (branch.guard(this.ctx, event)) return branch;
    return undefined;
  }

  /**
   * One transition along the path, in XState's order: the transition's actions and the target's
   * entry actions (custom ones run as they come), then what the state left had started is
   * cancelled, then the target starts its own.
   */
  private take(branch: PathBranch, event: MachineEvent): void {
    const target = branch.target as PathState | undefined;
    this.act(branch.actions, event);
    if (target !== undefined) {
      this.act(target.entry, event);
      this.leaveState();
      this.node = target;
      if (target.final) {
        this.runStatus = "done";
        this.runOutput = this.path.output(this.ctx, { type: `xstate.done.state.${this.path.machine.id}` });
      } else this.enter(target, event);
    }
    this.observer.changed?.(this.node.key);
    if (this.runStatus === "done") this.observer.done(this.runOutput as Output);
  }

  private act(actions: PathAction[], event: MachineEvent): void {
    for (const action of actions) this.ctx = action(this.ctx, event);
  }

  /** Starts the state's invocation and delay, as XState does once its entry actions have run. */
  private enter(state: PathState, event: MachineEvent): void {
    const generation = this.generation;
    if (state.delay) {
      const { eventType } = state.delay;
      // Leaving the state clears the timer, so a timer that fires belongs to the current state.
      this.timer = setTimeout(() => this.send({ type: eventType }), state.delay.ms(this.ctx, event));
    }
    const invocation = state.invocation;
    if (invocation) {
      const args = (this.invocation = new InvocationArgs(invocation.input(this.ctx, event)));
      let promise: PromiseLike<unknown>;
      try {
        promise = invocation.run(args);
      } catch (error) {
        promise = Promise.reject(error);
      }
      // A settled invocation has nothing left to abort when its state is left, as in XState.
      const settled = (event: MachineEvent) => {
        if (generation !== this.generation) return;
        this.invocation = undefined;
        this.send(event);
      };
      Promise.resolve(promise).then(
        (output) => settled({ type: invocation.doneType, output }),
        (error: unknown) => settled({ type: invocation.errorType, error }),
      );
    }
  }

  /** Leaving a state cancels what it started: the invocation is aborted, its timer is cleared. */
  private leaveState(): void {
    this.generation++;
    this.invocation?.abort();
    this.invocation = undefined;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /**
   * XState takes the job over: from its start (nothing has run yet), or restored in the current
   * state with the current context and sent the event that leaves the path.
   */
  private takeOver(event: MachineEvent | undefined): void {
    const machine = this.path.machine;
    const { parent, inspect } = this.options;
    let actor: Actor<AnyStateMachine>;
    if (event === undefined) actor = createActor(machine, { input: this.input, ...(parent ? { parent } : inspect ? { inspect } : {}) });
    else {
      // The event takes a transition out of the current state (that is why the path hands over),
      // so the actor's first microstep leaves it: what the path started there is cancelled then,
      // after that step's custom actions and before the next state starts anything, as XState
      // orders them.
      const watch = (e: InspectionEvent) => {
        if (e.type === "@xstate.microstep" && e.actorRef === actor) this.leaveState();
      };
      actor = createActor(machine, { snapshot: machine.resolveState({ value: this.node.key, context: this.ctx }), inspect: watch });
    }
    this.taken = actor;
    actor.subscribe({
      next: (snapshot) => {
        if (snapshot.status === "active") this.observer.changed?.(String(snapshot.value));
      },
      complete: () => {
        this.observer.changed?.(String(actor.getSnapshot().value));
        this.observer.done(actor.getSnapshot().output as Output);
      },
      // The path's own work ended at the actor's first microstep: nothing of it is left to cancel.
      error: (error) => this.observer.failed(error),
    });
    actor.start();
    if (event !== undefined) actor.send(event);
  }

  private fail(error: unknown): void {
    this.leaveState();
    this.runStatus = "error";
    this.observer.failed(error);
  }
}

const isOnPath = (target: PathBranch["target"]): boolean => target === undefined || !("offPath" in target);

/** Creates (does not start) the run of one job along the path. */
export const runAlongPath = <Output>(path: DerivedPath, input: unknown, observer: RunObserver<Output>, options: RunOptions = {}): JobRun<Output> =>
  new JobRun(path, input, observer, options);
