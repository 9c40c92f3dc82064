// The job machine's paths, generated from the machine itself (xstate/graph): every simple path
// from the claim to a final state, for the events the runtime can send in each state. picket's
// own model test (test/model-job.test.ts) walks all of them with a scripted handler; checkTask
// walks the ones a user's task can meet with the user's real handler.
import { getSimplePaths } from "xstate/graph";
import { jobMachine, type JobMachineInput } from "../machines/job-machine.ts";

/** An event as the runtime sends it to the job machine. */
export type PathEvent = { type: string; [key: string]: unknown };

/** What the runtime reports when user code was about to start on a lease it could not prove. */
export const lapsed = { permanent: false, leaseLapsed: true, message: "the lease could not be proven" };

export const leaseExpired: PathEvent = { type: "LEASE_EXPIRED", unconfirmedMs: 1234 };

/** Which events the generated paths may use beyond a user's task's own (all of them by default). */
export interface PathVocabulary {
  /** The lease found unprovable before user code starts (the runtime's own check). */
  lapses?: boolean;
  /** The drain gives up an outcome write that cannot get its row (ABANDON). */
  abandon?: boolean;
  /** A payload check that never settles, ended by a timeout, a lost lease, the drain or a cancel. */
  hangingPayloadCheck?: boolean;
}

const writeOutcomes = (statuses: string[], vocabulary: PathVocabulary): PathEvent[] => [
  ...statuses.map((status) => ({ type: "xstate.done.actor.write", output: { id: "1", outcome: "applied", status } })),
  { type: "xstate.done.actor.write", output: { id: "1", outcome: "fenced" } },
  { type: "xstate.done.actor.write", output: { id: "1", outcome: "cancelled" } },
  { type: "xstate.error.actor.write", error: new Error("write failed") },
  ...(vocabulary.abandon === false ? [] : [{ type: "ABANDON" }]),
];

/**
 * The events the machine can receive in each state, as the runtime would produce them. A handler
 * that has recorded a step has started: it cannot then be found never to have started (lapsed).
 */
export const eventsIn = (state: string, stepRecorded: boolean, vocabulary: PathVocabulary = {}): PathEvent[] => {
  const lapses = vocabulary.lapses !== false;
  switch (state) {
    case "waitingForSlot":
      return [{ type: "START" }, { type: "RELEASE" }, { type: "DRAIN_DEADLINE" }, { type: "LEASE_LOST" }, leaseExpired, { type: "CANCEL" }];
    case "checkingPayload":
      return [
        { type: "xstate.done.actor.payloadCheck", output: undefined },
        { type: "xstate.error.actor.payloadCheck", error: new Error("Expected a string") },
        ...(lapses ? [{ type: "xstate.error.actor.payloadCheck", error: lapsed }] : []),
        ...(vocabulary.hangingPayloadCheck === false
          ? []
          : [{ type: "xstate.after.jobTimeout.job.checkingPayload" }, { type: "LEASE_LOST" }, { type: "DRAIN_DEADLINE" }, leaseExpired, { type: "CANCEL" }]),
      ];
    case "running":
      return [
        { type: "STEP_RECORDED", name: "one" },
        { type: "xstate.done.actor.handler", output: "result" },
        { type: "xstate.error.actor.handler", error: { permanent: true, message: "permanent" } },
        { type: "xstate.error.actor.handler", error: { permanent: false, message: "boom" } },
        ...(stepRecorded || !lapses ? [] : [{ type: "xstate.error.actor.handler", error: lapsed }]),
        { type: "xstate.after.jobTimeout.job.running" },
        { type: "LEASE_LOST" },
        { type: "DRAIN_DEADLINE" },
        leaseExpired,
        { type: "CANCEL" },
      ];
    case "completing":
      return writeOutcomes(["completed"], vocabulary);
    case "failing":
      return writeOutcomes(["pending", "dead"], vocabulary);
    case "deadLettering":
      return writeOutcomes(["dead"], vocabulary);
    case "releasing":
      return writeOutcomes(["pending"], vocabulary);
    default:
      return [];
  }
};

/** One event as a path's name shows it: "done:handler", "error:handler(permanent)", "timeout", "done:write(fenced)". */
export const eventLabel = (event: PathEvent): string => {
  const error = event.error as { permanent?: boolean; leaseLapsed?: boolean } | undefined;
  const output = event.output as { status?: string; outcome?: string } | undefined;
  return (
    event.type.replace(/^xstate\.(done|error)\.actor\./, "$1:").replace(/^xstate\.after\..*/, "timeout") +
    (error?.permanent ? "(permanent)" : "") +
    (error?.leaseLapsed ? "(lapsed)" : "") +
    (output && typeof output === "object" ? `(${output.status ?? output.outcome})` : "")
  );
};

export interface JobPath {
  /** "<input name>: <event> > <event> … => <final state>" */
  name: string;
  input: JobMachineInput;
  /** The events that take the path, in order (the initial one left out). */
  events: PathEvent[];
  /** The machine's state before each event and after the last (a recorded step stays in running). */
  states: string[];
}

/** Every simple path of the job machine from each input to a final state. */
export const generateJobPaths = (inputs: ReadonlyArray<{ name: string; input: JobMachineInput }>, vocabulary: PathVocabulary = {}): JobPath[] =>
  inputs.flatMap(({ name, input }) =>
    getSimplePaths(jobMachine, {
      input,
      events: (snapshot) => eventsIn(String(snapshot.value), snapshot.context.lastStep !== null, vocabulary) as never,
      toState: (snapshot) => snapshot.status === "done",
    }).map((path) => {
      const events = path.steps.slice(1).map((s) => s.event as PathEvent);
      return {
        name: `${name}: ${events.map(eventLabel).join(" > ") || "(always)"} => ${String(path.state.value)}`,
        input,
        events,
        states: path.steps.map((s) => String(s.state.value)),
      };
    }),
  );

/** A path's states with a repeated state (a step recorded in running) named once. */
export const distinctStates = (states: readonly string[]): string[] => states.filter((state, i) => state !== states[i - 1]);
