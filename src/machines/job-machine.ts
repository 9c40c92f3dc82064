// The life of one claimed job, as a pure XState machine: no I/O here. The runtime provides every
// actor (the handler run and each database write) as an Effect, so leaving a state interrupts
// the Effect and aborts the AbortSignal the handler holds: "the machine left running" and "the
// handler was cancelled" are one event. Every write after the claim is fenced by the claim's
// token; a write that reports "fenced" ends the machine in `fenced`.
import { assign, fromPromise, not, setup } from "xstate";
import type { ClaimedJob, FencedResult } from "../db/index.ts";

/** Why an attempt did not finish, as recorded on the row and in the logs. */
export type JobErrorKind = "error" | "timeout" | "permanent" | "no_handler" | "invalid_payload" | "lease_expired";

export interface JobError {
  kind: JobErrorKind;
  message: string;
  /** Where the failure was thrown, when it was an Error: logged, and kept (bounded) in the row's error history. */
  stack?: string;
}

export interface JobMachineInput {
  job: ClaimedJob;
  /** A handler is registered for job.type in this worker. */
  hasHandler: boolean;
  /** The task checks payloads against a schema; without one there is nothing to check. */
  hasSchema: boolean;
  /** The task's timeout: the handler is interrupted when it runs this long. */
  timeoutMs: number;
  /** The worker had a free slot for the job when it was claimed; without one it waits for START. */
  slotFree: boolean;
}

/** How the machine ended; the supervisor counts these, the demo prints them. */
export type JobOutcome =
  | "completed" // completion written under our claim
  | "retried" // failure written: pending again after the backoff
  | "dead" // failure written: dead (attempts spent or permanent)
  | "released" // given back at the drain deadline, attempt not charged
  | "fenced" // a write (or a lease renewal) found the claim lost: nothing written by us
  | "abandoned" // the outcome could not be written (or the drain's time ran out); the sweep retries the job after its lease
  | "cancelled" // cancelled by an operator (cancelJob) while claimed: the handler was interrupted, nothing written by us
  | "refused"; // no claim token: never run, never written

export interface JobMachineContext {
  job: ClaimedJob;
  hasHandler: boolean;
  hasSchema: boolean;
  timeoutMs: number;
  slotFree: boolean;
  result: unknown;
  error: JobError | null;
  /** What we were trying to write when the claim turned out to be lost. */
  intended: JobOutcome | null;
  outcome: JobOutcome | null;
  /** The write error that left the job to the sweep. */
  writeError: string | null;
  /** The last durable step this run recorded (an inspector sees how far the handler got). */
  lastStep: string | null;
}

export type JobMachineEvent =
  /** Lease renewal (or a progress write) found the claim fenced: stop now, write nothing. */
  | { type: "LEASE_LOST" }
  /** The supervisor's drain deadline passed: stop the handler and release the job. */
  | { type: "DRAIN_DEADLINE" }
  /** A slot freed for a job claimed ahead of one: run it now. */
  | { type: "START" }
  /** The drain began before the job got a slot: give it back now, unrun. */
  | { type: "RELEASE" }
  /**
   * The claim's lease was not confirmed by the database in time (the worker's own clock, with a
   * margin below the server's deadline): stop the handler before another worker may take the job.
   */
  | { type: "LEASE_EXPIRED"; unconfirmedMs: number }
  /** The drain's time is over: give up whatever is still being written; the sweep takes the job back. */
  | { type: "ABANDON" }
  /**
   * The job was cancelled (cancelJob wrote it cancelled, under this claim): stop the handler, write
   * nothing. Sent on the cancel's notification, or when a renewal or progress write finds it.
   */
  | { type: "CANCEL" }
  /** The handler recorded a durable step's result under the claim (ctx.step). */
  | { type: "STEP_RECORDED"; name: string };

/** The input every write actor gets: the claim, and what to write. */
export interface WriteInput {
  job: ClaimedJob;
  result: unknown;
  error: JobError | null;
}

/** A handler's failure as the runtime reports it to the machine. */
export interface HandlerFailure {
  permanent: boolean;
  message: string;
  /** The thrown Error's stack, when the handler threw one. */
  stack?: string;
  /**
   * The handler (or the payload check) was never started: when it was about to be, the worker
   * could no longer prove the job's lease (its claim came back, or its worker woke, too late).
   */
  leaseLapsed?: boolean;
}

// Placeholders: the runtime (or a test) supplies every actor with machine.provide().
const notProvided = (name: string) => async (): Promise<never> => {
  throw new Error(`picket: the runtime did not provide the "${name}" actor`);
};

const writeActor = (name: string) => fromPromise<FencedResult, WriteInput>(notProvided(name));

const failureOf = (error: unknown): HandlerFailure =>
  typeof error === "object" && error !== null && "permanent" in error && "message" in error
    ? (error as HandlerFailure)
    : { permanent: false, message: error instanceof Error ? error.message : String(error), ...(error instanceof Error ? { stack: error.stack } : {}) };

/** The JobError of a failed invocation: its kind, and the failure's message (after `prefix`) and stack. */
const errorOf = (kind: JobErrorKind, error: unknown, prefix = ""): JobError => {
  const failure = failureOf(error);
  return { kind, message: prefix + failure.message, ...(failure.stack === undefined ? {} : { stack: failure.stack }) };
};

const leaseExpired = ({ context, event }: { context: JobMachineContext; event: JobMachineEvent }): JobError => ({
  kind: "lease_expired",
  message:
    `the lease was not confirmed by the database for ${Math.round((event as { unconfirmedMs?: number }).unconfirmedMs ?? 0)} ms ` +
    `(lease ${context.job.leaseMs} ms); the handler was interrupted so that no other worker runs the job at the same time`,
});

const writeInput = ({ context }: { context: JobMachineContext }): WriteInput => ({
  job: context.job,
  result: context.result,
  error: context.error,
});

// In every write state: a write still in flight when the drain's time is over is given up. The row
// keeps the claim, and the sweep takes the job back after its lease.
const giveUpWrite = {
  ABANDON: {
    target: "abandoned",
    actions: { type: "setWriteError", params: "the drain's time ran out before the write finished" },
  },
} as const;

// In every write state: a write refused because the job was cancelled meanwhile (the cancel won the
// row) ends the job as cancelled, not as a claim stolen by another worker.
const cancelledWrite = {
  guard: { type: "cancelledMeanwhile", params: ({ event }: { event: { output: FencedResult } }) => event.output },
  target: "cancelled",
} as const;

export const jobMachine = setup({
  types: {
    context: {} as JobMachineContext,
    events: {} as JobMachineEvent,
    input: {} as JobMachineInput,
    output: {} as { outcome: JobOutcome; error: JobError | null; intended: JobOutcome | null; writeError: string | null },
  },
  actors: {
    /** Checks the payload against the task's schema (rejects with a message when it does not fit). */
    validatePayload: fromPromise<void, { job: ClaimedJob }>(notProvided("validatePayload")),
    /** Runs the user's handler; resolves with its result, rejects with a HandlerFailure. */
    runHandler: fromPromise<unknown, { job: ClaimedJob }>(notProvided("runHandler")),
    writeCompletion: writeActor("writeCompletion"),
    writeFailure: writeActor("writeFailure"),
    writeDeadLetter: writeActor("writeDeadLetter"),
    writeRelease: writeActor("writeRelease"),
  },
  guards: {
    hasToken: ({ context }) => typeof context.job.claimToken === "string" && context.job.claimToken.length > 0,
    hasHandler: ({ context }) => context.hasHandler,
    hasSchema: ({ context }) => context.hasSchema,
    slotFree: ({ context }) => context.slotFree,
    isPermanent: (_, failure: HandlerFailure) => failure.permanent,
    leaseLapsed: (_, failure: HandlerFailure) => failure.leaseLapsed === true,
    applied: (_, result: FencedResult) => result.outcome === "applied",
    cancelledMeanwhile: (_, result: FencedResult) => result.outcome === "cancelled",
    wentDead: (_, result: FencedResult) => result.outcome === "applied" && result.status === "dead",
  },
  delays: {
    jobTimeout: ({ context }) => context.timeoutMs,
  },
  actions: {
    setResult: assign({ result: (_, result: unknown) => result }),
    setError: assign({ error: (_, error: JobError) => error }),
    setOutcome: assign({ outcome: (_, outcome: JobOutcome) => outcome }),
    setIntended: assign({ intended: (_, intended: JobOutcome) => intended }),
    setLastStep: assign({ lastStep: (_, name: string) => name }),
    setWriteError: assign({ writeError: (_, error: unknown) => (error instanceof Error ? error.message : String(error)) }),
    // Logging and metrics are the runtime's; the machine only names the moments.
    reportOutcome: () => undefined,
    reportFenced: () => undefined,
    reportAbandoned: () => undefined,
    reportRefused: () => undefined,
    reportCancelled: () => undefined,
  },
}).createMachine({
  id: "job",
  context: ({ input }) => ({
    job: input.job,
    hasHandler: input.hasHandler,
    hasSchema: input.hasSchema,
    timeoutMs: input.timeoutMs,
    slotFree: input.slotFree,
    result: undefined,
    error: null,
    intended: null,
    outcome: null,
    writeError: null,
    lastStep: null,
  }),
  initial: "claimed",
  states: {
    claimed: {
      always: [
        // A claim without a token could only be written unfenced: refuse it, never run it.
        { guard: not("hasToken"), target: "refused" },
        {
          guard: not("hasHandler"),
          target: "deadLettering",
          actions: {
            type: "setError",
            params: ({ context }) => ({ kind: "no_handler", message: `no handler is registered for task "${context.job.type}" in this worker` }),
          },
        },
        // Claimed ahead of a free slot (the worker's local buffer): wait for one.
        { guard: not("slotFree"), target: "waitingForSlot" },
        // No schema, nothing to check: one actor fewer per job on the hot path.
        { guard: not("hasSchema"), target: "running" },
        { target: "checkingPayload" },
      ],
    },
    waitingForSlot: {
      on: {
        START: [{ guard: not("hasSchema"), target: "running" }, { target: "checkingPayload" }],
        // Nothing ran: a deploy gives the job back at once, the attempt not charged.
        RELEASE: { target: "releasing" },
        DRAIN_DEADLINE: { target: "releasing" },
        LEASE_LOST: { target: "fenced" },
        CANCEL: { target: "cancelled" },
        // Nothing ran: give the job back, its attempt not charged.
        LEASE_EXPIRED: { target: "releasing" },
      },
    },
    checkingPayload: {
      // A validator is user code too: bounded by the same timeout, lease and drain as the handler.
      after: {
        jobTimeout: {
          target: "failing",
          actions: {
            type: "setError",
            params: ({ context }) => ({ kind: "timeout", message: `payload check timed out after ${context.timeoutMs} ms` }),
          },
        },
      },
      on: {
        LEASE_LOST: { target: "fenced", actions: { type: "setIntended", params: "completed" as JobOutcome } },
        CANCEL: { target: "cancelled" },
        DRAIN_DEADLINE: { target: "releasing" },
        LEASE_EXPIRED: { target: "failing", actions: { type: "setError", params: leaseExpired } },
      },
      invoke: {
        id: "payloadCheck",
        src: "validatePayload",
        input: ({ context }) => ({ job: context.job }),
        onDone: { target: "running" },
        onError: [
          // No user code ran: the job goes back, uncharged.
          { guard: { type: "leaseLapsed", params: ({ event }) => failureOf(event.error) }, target: "releasing" },
          {
            target: "deadLettering",
            actions: {
              type: "setError",
              params: ({ event }) => errorOf("invalid_payload", event.error, "payload does not match the task's schema: "),
            },
          },
        ],
      },
    },
    running: {
      invoke: {
        id: "handler",
        src: "runHandler",
        input: ({ context }) => ({ job: context.job }),
        onDone: {
          target: "completing",
          actions: { type: "setResult", params: ({ event }: { event: { output: unknown } }) => event.output },
        },
        onError: [
          // The handler never started: the job goes back, uncharged.
          { guard: { type: "leaseLapsed", params: ({ event }) => failureOf(event.error) }, target: "releasing" },
          {
            guard: { type: "isPermanent", params: ({ event }) => failureOf(event.error) },
            target: "deadLettering",
            actions: { type: "setError", params: ({ event }) => errorOf("permanent", event.error) },
          },
          {
            target: "failing",
            actions: { type: "setError", params: ({ event }) => errorOf("error", event.error) },
          },
        ],
      },
      after: {
        jobTimeout: {
          target: "failing",
          actions: {
            type: "setError",
            params: ({ context }) => ({ kind: "timeout", message: `timed out after ${context.timeoutMs} ms; the handler was interrupted` }),
          },
        },
      },
      on: {
        LEASE_LOST: {
          target: "fenced",
          actions: { type: "setIntended", params: "completed" as JobOutcome },
        },
        // Leaving `running` interrupts the handler; the row is already cancelled.
        CANCEL: { target: "cancelled" },
        STEP_RECORDED: { actions: { type: "setLastStep", params: ({ event }) => event.name } },
        DRAIN_DEADLINE: { target: "releasing" },
        // The attempt did not finish: charged and retried after the backoff, like a crash the sweep finds.
        LEASE_EXPIRED: { target: "failing", actions: { type: "setError", params: leaseExpired } },
      },
    },
    completing: {
      entry: { type: "setIntended", params: "completed" as JobOutcome },
      on: giveUpWrite,
      invoke: {
        id: "write",
        src: "writeCompletion",
        input: writeInput,
        onDone: [
          { guard: { type: "applied", params: ({ event }) => event.output }, target: "done", actions: { type: "setOutcome", params: "completed" as JobOutcome } },
          cancelledWrite,
          { target: "fenced" },
        ],
        onError: { target: "abandoned", actions: { type: "setWriteError", params: ({ event }: { event: { error: unknown } }) => event.error } },
      },
    },
    failing: {
      entry: { type: "setIntended", params: "retried" as JobOutcome },
      on: giveUpWrite,
      invoke: {
        id: "write",
        src: "writeFailure",
        input: writeInput,
        onDone: [
          { guard: { type: "wentDead", params: ({ event }) => event.output }, target: "done", actions: { type: "setOutcome", params: "dead" as JobOutcome } },
          { guard: { type: "applied", params: ({ event }) => event.output }, target: "done", actions: { type: "setOutcome", params: "retried" as JobOutcome } },
          cancelledWrite,
          { target: "fenced" },
        ],
        onError: { target: "abandoned", actions: { type: "setWriteError", params: ({ event }: { event: { error: unknown } }) => event.error } },
      },
    },
    deadLettering: {
      entry: { type: "setIntended", params: "dead" as JobOutcome },
      on: giveUpWrite,
      invoke: {
        id: "write",
        src: "writeDeadLetter",
        input: writeInput,
        onDone: [
          { guard: { type: "applied", params: ({ event }) => event.output }, target: "done", actions: { type: "setOutcome", params: "dead" as JobOutcome } },
          cancelledWrite,
          { target: "fenced" },
        ],
        onError: { target: "abandoned", actions: { type: "setWriteError", params: ({ event }: { event: { error: unknown } }) => event.error } },
      },
    },
    releasing: {
      entry: { type: "setIntended", params: "released" as JobOutcome },
      on: giveUpWrite,
      invoke: {
        id: "write",
        src: "writeRelease",
        input: writeInput,
        onDone: [
          { guard: { type: "applied", params: ({ event }) => event.output }, target: "done", actions: { type: "setOutcome", params: "released" as JobOutcome } },
          cancelledWrite,
          { target: "fenced" },
        ],
        onError: { target: "abandoned", actions: { type: "setWriteError", params: ({ event }: { event: { error: unknown } }) => event.error } },
      },
    },
    fenced: {
      type: "final",
      entry: [{ type: "setOutcome", params: "fenced" as JobOutcome }, "reportFenced"],
    },
    abandoned: {
      type: "final",
      entry: [{ type: "setOutcome", params: "abandoned" as JobOutcome }, "reportAbandoned"],
    },
    // An operator cancelled the job under our claim; the cancel was the row's last write.
    cancelled: {
      type: "final",
      entry: [{ type: "setOutcome", params: "cancelled" as JobOutcome }, "reportCancelled"],
    },
    refused: {
      type: "final",
      entry: [{ type: "setOutcome", params: "refused" as JobOutcome }, "reportRefused"],
    },
    // Completed, retried, dead or released: the outcome was written.
    done: { type: "final", entry: "reportOutcome" },
  },
  output: ({ context }) => ({ outcome: context.outcome!, error: context.error, intended: context.intended, writeError: context.writeError }),
});

export type JobMachine = typeof jobMachine;
