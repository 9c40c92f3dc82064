// The supervisor's lifecycle as a pure XState machine: polling, the single drain, the deadline.
// The runtime provides the poll (claim + dispatch, never awaiting the jobs it starts), the
// background loops (lease renewal, sweep, retention, LISTEN) and the interruption of jobs.
import { assign, fromCallback, fromPromise, not, raise, setup } from "xstate";

export interface SupervisorInput {
  pollIntervalMs: number;
  drainTimeoutMs: number;
  /** How long, after the drain deadline, releases and outcomes still being written may finish. */
  releaseGraceMs: number;
}

/** What one poll did: `asked` slots offered to the claim, `claimed` jobs started. */
export interface PollOutput {
  asked: number;
  claimed: number;
}

export interface SupervisorContext {
  pollIntervalMs: number;
  drainTimeoutMs: number;
  releaseGraceMs: number;
  /** Job machines started and not yet finished (a finished handler's write may be in flight). */
  running: number;
  /** STOP arrived while a poll was in flight: drain once the poll has finished. */
  stopRequested: boolean;
  /** FORCE arrived while a poll was in flight: skip the drain's grace period once it has finished. */
  forceRequested: boolean;
  /** The drain deadline passed while a poll was in flight: release at once once it has ended. */
  deadlinePassed: boolean;
  /** The last poll filled every slot it offered (or had none): more work may be waiting. */
  saturated: boolean;
  /**
   * A NOTIFY arrived while a poll was in flight: its claim may have read the table before the new
   * job was committed, so the next poll starts as soon as this one ends.
   */
  woken: boolean;
}

export type SupervisorEvent =
  /** Begin the drain; idempotent. */
  | { type: "STOP" }
  /** Skip the rest of the drain deadline: interrupt and release now (while releasing: give up the writes now). */
  | { type: "FORCE" }
  /** Poll now: a NOTIFY arrived. */
  | { type: "WAKE" }
  /** A job's handler ended (its outcome may still be being written): its slot is free. */
  | { type: "SLOT_FREED" }
  /**
   * Job machines reached their final state: `count` of them since the last such event. Told once
   * per turn of the event loop, not per job: a macrostep of this machine per job was a tenth of a
   * busy worker's CPU.
   */
  | { type: "JOBS_FINISHED"; count: number }
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
    /** Claims what fits the free slots and starts a job machine per job, without awaiting them. */
    poll: fromPromise<PollOutput, void>(notProvided("poll")),
    /** Lease renewal, reclaim sweep, retention and LISTEN: each in its own error boundary. */
    background: fromCallback<SupervisorEvent>(() => () => undefined),
  },
  guards: {
    stopRequested: ({ context }) => context.stopRequested,
    forceRequested: ({ context }) => context.forceRequested,
    deadlinePassed: ({ context }) => context.deadlinePassed,
    idle: ({ context }) => context.running === 0,
    saturated: ({ context }) => context.saturated,
    woken: ({ context }) => context.woken,
    // Every slot offered was filled: more is probably waiting. (With no free slot to offer, the
    // next poll waits for a slot to free or a job to finish instead, or it would spin.)
    pollFull: (_, output: PollOutput) => output.asked > 0 && output.claimed === output.asked,
  },
  delays: {
    pollInterval: ({ context }) => context.pollIntervalMs,
    drainTimeout: ({ context }) => context.drainTimeoutMs,
    releaseGrace: ({ context }) => context.releaseGraceMs,
  },
  actions: {
    requestStop: assign({ stopRequested: true }),
    // Counted from the STOP, not from the end of a poll in flight: a poll that hangs on the
    // database must not push the deadline back.
    startDrainClock: raise({ type: "DRAIN_DEADLINE" }, { delay: "drainTimeout" }),
    passDeadline: assign({ deadlinePassed: true }),
    // Provided by the runtime: cancels the poll in flight (its claim's jobs are given back).
    abortPoll: () => undefined,
    requestForce: assign({ forceRequested: true }),
    noteWake: assign({ woken: true }),
    clearWake: assign({ woken: false }),
    recordPoll: assign({
      running: ({ context }, output: PollOutput) => context.running + output.claimed,
      saturated: (_, output: PollOutput) => output.asked === 0 || output.claimed === output.asked,
    }),
    countFinished: assign({ running: ({ context, event }) => Math.max(0, context.running - (event.type === "JOBS_FINISHED" ? event.count : 0)) }),
    // Provided by the runtime: the drain deadline reaches every running job machine.
    interruptJobs: () => undefined,
    // Provided by the runtime: every job machine still writing gives the write up.
    abandonJobs: () => undefined,
    reportPollError: () => undefined,
    reportDraining: () => undefined,
    // Provided by the runtime: jobs claimed ahead of a slot are released unrun.
    releaseQueued: () => undefined,
  },
}).createMachine({
  id: "supervisor",
  context: ({ input }) => ({
    pollIntervalMs: input.pollIntervalMs,
    drainTimeoutMs: input.drainTimeoutMs,
    releaseGraceMs: input.releaseGraceMs,
    running: 0,
    stopRequested: false,
    forceRequested: false,
    deadlinePassed: false,
    saturated: false,
    woken: false,
  }),
  // The background loops live as long as the supervisor: leases must be renewed while draining.
  invoke: { src: "background" },
  on: { JOBS_FINISHED: { actions: "countFinished" } },
  initial: "running",
  states: {
    running: {
      initial: "polling",
      states: {
        polling: {
          entry: "clearWake",
          invoke: {
            src: "poll",
            onDone: [
              { guard: "stopRequested", target: "#supervisor.draining", actions: { type: "recordPoll", params: ({ event }) => event.output } },
              // A NOTIFY during the poll: the job it announced may not have been visible to it.
              { guard: "woken", target: "polling", reenter: true, actions: { type: "recordPoll", params: ({ event }) => event.output } },
              // A full batch means more is waiting: claim again at once.
              {
                guard: { type: "pollFull", params: ({ event }) => event.output },
                target: "polling",
                reenter: true,
                actions: { type: "recordPoll", params: ({ event }) => event.output },
              },
              { target: "waiting", actions: { type: "recordPoll", params: ({ event }) => event.output } },
            ],
            onError: [
              { guard: "stopRequested", target: "#supervisor.draining", actions: "reportPollError" },
              { target: "waiting", actions: "reportPollError" },
            ],
          },
          // An in-flight poll is awaited, not raced (its claims must reach their machines), until
          // the drain deadline: then it is cancelled, and the jobs its claim may have taken are
          // given back.
          on: {
            STOP: { guard: not("stopRequested"), actions: ["requestStop", "startDrainClock"] },
            FORCE: { actions: "requestForce" },
            DRAIN_DEADLINE: { actions: ["passDeadline", "abortPoll"] },
            WAKE: { actions: "noteWake" },
          },
        },
        waiting: {
          after: { pollInterval: { target: "polling" } },
          on: {
            WAKE: { target: "polling" },
            STOP: { target: "#supervisor.draining", actions: "startDrainClock" },
            // A slot freed while work was left behind: claim into it now, not at the next tick.
            SLOT_FREED: { guard: "saturated", target: "polling" },
            // So did a finished write, when writes in flight were what held the claim back.
            JOBS_FINISHED: [
              { guard: "saturated", target: "polling", actions: "countFinished" },
              { actions: "countFinished" },
            ],
          },
        },
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
