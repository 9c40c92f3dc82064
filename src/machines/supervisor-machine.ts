// The supervisor's lifecycle as a pure XState machine: polling until STOP, the single drain, the
// deadline. The runtime provides the poll loop (src/runtime/poll-loop.ts: claim, dispatch without
// awaiting the jobs it starts, wait), the background loops (lease renewal, sweep, retention,
// LISTEN) and the interruption of jobs.
import { assign, fromCallback, fromPromise, raise, setup } from "xstate";

export interface SupervisorInput {
  drainTimeoutMs: number;
  /** How long, after the drain deadline, releases and outcomes still being written may finish. */
  releaseGraceMs: number;
}

/** The poll in flight at STOP has ended: `held` job machines are alive (handlers and writes). */
export interface PollEndedOutput {
  held: number;
}

export interface SupervisorContext {
  drainTimeoutMs: number;
  releaseGraceMs: number;
  /** Job machines alive: handlers running and outcomes being written. Told from the drain on. */
  running: number;
  /** FORCE arrived while the last poll was ending: skip the drain's grace period once it has. */
  forceRequested: boolean;
  /** The drain deadline passed while the last poll was ending: release at once once it has. */
  deadlinePassed: boolean;
}

export type SupervisorEvent =
  /** Begin the drain; idempotent. */
  | { type: "STOP" }
  /** Skip the rest of the drain deadline: interrupt and release now (while releasing: give up the writes now). */
  | { type: "FORCE" }
  /**
   * `count` job machines are alive now. Told at the end of a turn of the event loop in which jobs
   * finished, once the drain has begun (only the drain reads it): a count, not a difference, so a
   * count told late is never subtracted twice.
   */
  | { type: "JOBS_HELD"; count: number }
  /** The drain's deadline: raised by the machine itself, drainTimeoutMs after the first STOP. */
  | { type: "DRAIN_DEADLINE" };

const notProvided = (name: string) => async (): Promise<never> => {
  throw new Error(`picket: the runtime did not provide the "${name}" actor`);
};

export const supervisorMachine = setup({
  types: {
    context: {} as SupervisorContext,
    events: {} as SupervisorEvent,
    input: {} as SupervisorInput,
  },
  actors: {
    /** Claims into free slots and waits, over and over, until stopped (it is, when `running` is left). */
    pollLoop: fromCallback<SupervisorEvent>(() => () => undefined),
    /** Resolves once the poll in flight at STOP, if any, has ended (its claims have reached their jobs). */
    pollEnded: fromPromise<PollEndedOutput, void>(notProvided("pollEnded")),
    /** Lease renewal, reclaim sweep, retention and LISTEN: each in its own error boundary. */
    background: fromCallback<SupervisorEvent>(() => () => undefined),
  },
  guards: {
    forceRequested: ({ context }) => context.forceRequested,
    deadlinePassed: ({ context }) => context.deadlinePassed,
    idle: ({ context }) => context.running === 0,
  },
  delays: {
    drainTimeout: ({ context }) => context.drainTimeoutMs,
    releaseGrace: ({ context }) => context.releaseGraceMs,
  },
  actions: {
    // Counted from the STOP, not from the end of a poll in flight: a poll that hangs on the
    // database must not push the deadline back.
    startDrainClock: raise({ type: "DRAIN_DEADLINE" }, { delay: "drainTimeout" }),
    passDeadline: assign({ deadlinePassed: true }),
    // Provided by the runtime: cancels the poll in flight (its claim's jobs are given back).
    abortPoll: () => undefined,
    requestForce: assign({ forceRequested: true }),
    countHeld: assign({ running: (_, held: number) => held }),
    // Provided by the runtime: the drain deadline reaches every running job machine.
    interruptJobs: () => undefined,
    // Provided by the runtime: every job machine still writing gives the write up.
    abandonJobs: () => undefined,
    reportDraining: () => undefined,
    // Provided by the runtime: jobs claimed ahead of a slot are released unrun.
    releaseQueued: () => undefined,
  },
}).createMachine({
  id: "supervisor",
  context: ({ input }) => ({
    drainTimeoutMs: input.drainTimeoutMs,
    releaseGraceMs: input.releaseGraceMs,
    running: 0,
    forceRequested: false,
    deadlinePassed: false,
  }),
  // The background loops live as long as the supervisor: leases must be renewed while draining.
  invoke: { src: "background" },
  on: { JOBS_HELD: { actions: { type: "countHeld", params: ({ event }) => event.count } } },
  initial: "running",
  states: {
    running: {
      invoke: { src: "pollLoop" },
      on: { STOP: { target: "endingPoll", actions: "startDrainClock" } },
    },
    // An in-flight poll is awaited, not raced (its claims must reach their machines), until the
    // drain deadline: then it is cancelled, and the jobs its claim may have taken are given back.
    endingPoll: {
      invoke: {
        src: "pollEnded",
        // It cannot fail (the runtime's loop catches every poll's failure): a failure would be a
        // bug, and leaves the machine in error (stop() rejects) rather than draining on a wrong count.
        onDone: { target: "draining", actions: { type: "countHeld", params: ({ event }) => event.output.held } },
      },
      on: {
        FORCE: { actions: "requestForce" },
        DRAIN_DEADLINE: { actions: ["passDeadline", "abortPoll"] },
      },
    },
    draining: {
      entry: ["reportDraining", "releaseQueued"],
      always: [
        { guard: "idle", target: "stopped" },
        { guard: "forceRequested", target: "releasing" },
        { guard: "deadlinePassed", target: "releasing" },
      ],
      on: { FORCE: { target: "releasing" }, DRAIN_DEADLINE: { target: "releasing" } },
    },
    // Handlers are interrupted and their jobs released; outcomes already being written may finish.
    // Bounded whatever the database does: after the grace, or at a second FORCE, every write still
    // in flight is given up (the sweep takes those jobs back after their lease), so stop() ends.
    releasing: {
      entry: "interruptJobs",
      always: { guard: "idle", target: "stopped" },
      after: { releaseGrace: { target: "abandoning" } },
      on: { FORCE: { target: "abandoning" } },
    },
    abandoning: {
      entry: "abandonJobs",
      always: { guard: "idle", target: "stopped" },
    },
    stopped: { type: "final" },
  },
});

export type SupervisorMachine = typeof supervisorMachine;
