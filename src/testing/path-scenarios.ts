// What checkTask makes of each generated path of the job machine: the scenario it runs (which
// fault, after which of the handler's steps, which outcome write), why a path is skipped for a
// given handler, and the path's faults in words for a failure message. Pure functions of a path,
// kept apart from the walk that runs them against a database.
import type { JobOutcome } from "../machines/job-machine.ts";
import { distinctStates, type JobPath } from "./job-paths.ts";

export type Natural = "succeed" | "fail" | "permanent";
/** A fault that takes the machine out of running; "crash" is a lost lease whose worker never runs again. */
export type RunningFault = "timeout" | "leaseLost" | "crash" | "drain" | "leaseExpired" | "cancel";
export type WriteFault = "apply" | "fenced" | "cancelled" | "error";

export interface Scenario {
  name: string;
  invalid: boolean;
  natural: Natural | null;
  stepInPath: boolean;
  fault: RunningFault | null;
  /** The fault comes once this many steps are recorded (0: before the handler's own code). */
  afterStep: number;
  write: WriteFault;
  lastAttempt: boolean;
  states: string[];
  outcome: JobOutcome;
}

const RUNNING_FAULTS: Record<string, RunningFault> = {
  "xstate.after.jobTimeout.job.running": "timeout",
  LEASE_LOST: "leaseLost",
  DRAIN_DEADLINE: "drain",
  LEASE_EXPIRED: "leaseExpired",
  CANCEL: "cancel",
};

/** The outcome a path ends with: its final state, or for `done` the status its write applied. */
export const outcomeOf = (path: Pick<JobPath, "states" | "events">): JobOutcome => {
  const final = path.states.at(-1)!;
  if (final !== "done") return final as JobOutcome;
  const writing = path.states.at(-2);
  if (writing === "completing") return "completed";
  if (writing === "releasing") return "released";
  const status = (path.events.at(-1)?.output as { status?: string } | undefined)?.status;
  return status === "pending" ? "retried" : "dead";
};

/** What a path does, read from its events: the handler's end, the fault in running, the write's. */
export const scenarioOf = (path: Pick<JobPath, "states" | "events">): Omit<Scenario, "name" | "afterStep"> => {
  const s: Omit<Scenario, "name" | "afterStep"> = {
    invalid: false,
    natural: null,
    stepInPath: false,
    fault: null,
    write: "apply",
    lastAttempt: false,
    states: distinctStates(path.states),
    outcome: outcomeOf(path),
  };
  path.events.forEach((event, i) => {
    const output = event.output as { outcome?: string; status?: string } | undefined;
    if (event.type === "xstate.error.actor.payloadCheck") s.invalid = true;
    if (event.type === "STEP_RECORDED") s.stepInPath = true;
    if (event.type === "xstate.done.actor.handler") s.natural = "succeed";
    if (event.type === "xstate.error.actor.handler") s.natural = (event.error as { permanent: boolean }).permanent ? "permanent" : "fail";
    const fault = path.states[i] === "running" ? RUNNING_FAULTS[event.type] : undefined;
    if (fault !== undefined) s.fault = fault;
    if (event.type === "xstate.error.actor.write") s.write = "error";
    if (event.type === "xstate.done.actor.write") {
      if (output?.outcome === "fenced") s.write = "fenced";
      if (output?.outcome === "cancelled") s.write = "cancelled";
      if (output?.status === "dead" && path.states.includes("failing")) s.lastAttempt = true;
    }
  });
  return s;
};

const naturalText: Record<Natural, string> = { succeed: "completes", fail: "fails", permanent: "fails permanently" };

export const where = (afterStep: number): string => (afterStep === 0 ? "at the handler's start" : `after step ${afterStep}`);

/** The scenarios a path gives for a handler that ends `natural` after `steps` steps, or why it gives none. */
export const scenariosFor = (path: JobPath, baseline: { natural: Natural; steps: number }): Scenario[] | string => {
  const s = scenarioOf(path);
  if (s.invalid) return [{ ...s, name: path.name, afterStep: 0 }];
  if (s.natural !== null && s.natural !== baseline.natural) return `the handler ${naturalText[baseline.natural]} with this payload`;
  if (s.stepInPath && baseline.steps === 0) return "the handler records no step (ctx.step)";
  if (s.natural !== null && !s.stepInPath && baseline.steps > 0) return "the handler records a step before it ends";
  if (s.fault === null) return [{ ...s, name: path.name, afterStep: baseline.steps }];
  // A fault on a path with a step recorded comes after each of the handler's steps in turn.
  const points = s.stepInPath ? Array.from({ length: baseline.steps }, (_, i) => i + 1) : [0];
  return points.flatMap((k) =>
    s.fault === "leaseLost"
      ? [
          { ...s, name: `${path.name} [${where(k)}; the handler goes on]`, afterStep: k },
          { ...s, fault: "crash" as const, name: `${path.name} [crash ${where(k)}: the worker is gone]`, afterStep: k },
        ]
      : [{ ...s, name: `${path.name} [${where(k)}]`, afterStep: k }],
  );
};

const faultWords: Record<RunningFault, (at: string) => string> = {
  timeout: (at) => `the job timed out ${at}`,
  leaseLost: (at) => `the worker lost its lease ${at} (another worker took the job over) and the handler went on`,
  crash: (at) => `the worker crashed ${at} (another worker took the job over)`,
  drain: (at) => `the drain deadline passed ${at} (the job was released)`,
  leaseExpired: (at) => `the worker could not confirm its lease ${at}`,
  cancel: (at) => `the job was cancelled ${at}`,
};
const writeWords: Record<Exclude<WriteFault, "apply">, string> = {
  fenced: "its outcome write found another worker holding the job",
  cancelled: "its outcome write found the job cancelled",
  error: "its outcome write failed",
};
const endedWords: Record<Natural, string> = { succeed: "completed", fail: "failed", permanent: "failed permanently" };

/**
 * A path's faults in words, for a newcomer reading a failure: "the worker crashed after step 1 (…)".
 * Only a path whose job completed is described (the idempotency check's), so its handler either
 * ended on its own or met a fault.
 */
export const describeFaults = (s: Scenario): string => {
  const first = s.invalid
    ? "the task's schema refused the payload"
    : s.fault !== null
      ? faultWords[s.fault](where(s.afterStep))
      : `the handler ${endedWords[s.natural ?? "succeed"]}${s.lastAttempt ? " on its last attempt" : ""}`;
  if (s.write !== "apply") return `${first}, then ${writeWords[s.write]}`;
  return s.fault === null && s.natural === "succeed" ? "no fault (the handler completed and its outcome was written)" : first;
};

/**
 * Whether the handler's signal had aborted when the machine left running, from the states it went
 * through and the signal at each (null: it never left running).
 */
export const abortedOnLeavingRunning = (seen: ReadonlyArray<{ state: string; aborted: boolean }>): boolean | null => {
  const left = seen.findIndex((entry, i) => i > 0 && seen[i - 1]!.state === "running" && entry.state !== "running");
  return left === -1 ? null : seen[left]!.aborted;
};
