// What checkTask makes of the job machine's generated paths, checked without a database: each
// path's scenario (the handler's end, the fault in running, the write's fault), why a path is
// skipped for a handler, the faults in words, and whether the signal had aborted on leaving running.
import { describe, expect, it } from "vitest";
import { generateJobPaths, type JobPath } from "../src/testing/job-paths.ts";
import { abortedOnLeavingRunning, describeFaults, outcomeOf, scenarioOf, scenariosFor, type Scenario } from "../src/testing/path-scenarios.ts";

const paths = generateJobPaths(
  [{ name: "t", input: { job: { id: "1", type: "t", payload: {}, attempts: 1, maxAttempts: 3, createdAt: new Date(0), claimToken: "token", leaseMs: 1000, readyMs: 0 }, hasHandler: true, hasSchema: true, timeoutMs: 100, slotFree: true } }],
  { lapses: false, abandon: false, hangingPayloadCheck: false },
);
const path = (events: string): JobPath => {
  const found = paths.find((p) => p.name === `t: ${events}`);
  if (found === undefined) throw new Error(`no path "t: ${events}"`);
  return found;
};

describe("a path's scenario", () => {
  it("is a clean run when the handler completes and its write applies", () => {
    expect(scenarioOf(path("done:payloadCheck > done:handler > done:write(completed) => done"))).toEqual({
      invalid: false,
      natural: "succeed",
      stepInPath: false,
      fault: null,
      write: "apply",
      lastAttempt: false,
      states: ["checkingPayload", "running", "completing", "done"],
      outcome: "completed",
    });
  });

  it("reads the handler's end: failed, failed permanently (dead on any attempt), and a failure on the last attempt", () => {
    expect(scenarioOf(path("done:payloadCheck > error:handler(permanent) > done:write(dead) => done"))).toMatchObject({ natural: "permanent", fault: null, lastAttempt: false, outcome: "dead" });
    expect(scenarioOf(path("done:payloadCheck > error:handler > done:write(pending) => done"))).toMatchObject({ natural: "fail", lastAttempt: false, outcome: "retried" });
    expect(scenarioOf(path("done:payloadCheck > error:handler > done:write(dead) => done"))).toMatchObject({ natural: "fail", lastAttempt: true, outcome: "dead" });
  });

  it("reads each fault in running, and the write's fault after it", () => {
    const faults = {
      "done:payloadCheck > timeout > done:write(pending) => done": { fault: "timeout", write: "apply", outcome: "retried" },
      "done:payloadCheck > LEASE_LOST => fenced": { fault: "leaseLost", write: "apply", outcome: "fenced" },
      "done:payloadCheck > DRAIN_DEADLINE > done:write(fenced) => fenced": { fault: "drain", write: "fenced", outcome: "fenced" },
      "done:payloadCheck > LEASE_EXPIRED > done:write(cancelled) => cancelled": { fault: "leaseExpired", write: "cancelled", outcome: "cancelled" },
      "done:payloadCheck > CANCEL => cancelled": { fault: "cancel", write: "apply", outcome: "cancelled" },
      "done:payloadCheck > STEP_RECORDED > timeout > error:write => abandoned": { fault: "timeout", write: "error", stepInPath: true, outcome: "abandoned" },
      "done:payloadCheck > DRAIN_DEADLINE > done:write(pending) => done": { fault: "drain", outcome: "released" },
    };
    for (const [events, expected] of Object.entries(faults)) expect(scenarioOf(path(events)), events).toMatchObject({ natural: null, lastAttempt: false, ...expected });
    // A timeout on the last attempt goes through failing to dead: the last attempt is read from the write.
    expect(scenarioOf(path("done:payloadCheck > timeout > done:write(dead) => done"))).toMatchObject({ fault: "timeout", lastAttempt: true, outcome: "dead" });
    // A fenced write with no fault before it.
    expect(scenarioOf(path("done:payloadCheck > done:handler > done:write(fenced) => fenced"))).toMatchObject({ natural: "succeed", fault: null, write: "fenced" });
  });

  it("takes a fault's event only in running: the same event elsewhere is no fault", () => {
    const cancelled = path("done:payloadCheck > CANCEL => cancelled");
    const states = cancelled.states.map((state) => (state === "running" ? "claimed" : state));
    expect(scenarioOf({ states, events: cancelled.events }).fault).toBeNull();
  });

  it("reads a refused payload", () => {
    expect(scenarioOf(path("error:payloadCheck > done:write(dead) => done"))).toMatchObject({ invalid: true, natural: null, fault: null, outcome: "dead" });
  });

  it("names the outcome of a done path by the state it wrote from, and by the write's status", () => {
    expect(outcomeOf({ states: ["running", "completing", "done"], events: [] })).toBe("completed");
    expect(outcomeOf({ states: ["running", "releasing", "done"], events: [] })).toBe("released");
    // A failing write's status says retried or dead; a path without a write event ends dead.
    expect(outcomeOf({ states: ["failing", "done"], events: [] })).toBe("dead");
    expect(outcomeOf({ states: ["running", "fenced"], events: [] })).toBe("fenced");
  });
});

describe("the scenarios of a path for a handler", () => {
  const names = (s: Scenario[] | string) => (typeof s === "string" ? s : s.map((x) => [x.name.replace(/^t: [^[]*/, ""), x.fault, x.afterStep]));

  it("runs a clean path once, judged after the handler's steps", () => {
    expect(names(scenariosFor(path("done:payloadCheck > STEP_RECORDED > done:handler > done:write(completed) => done"), { natural: "succeed", steps: 2 }))).toEqual([["", null, 2]]);
    expect(names(scenariosFor(path("done:payloadCheck > done:handler > done:write(completed) => done"), { natural: "succeed", steps: 0 }))).toEqual([["", null, 0]]);
  });

  it("puts a fault after each recorded step in turn, and a lost lease twice: the handler going on, and the worker gone", () => {
    expect(names(scenariosFor(path("done:payloadCheck > STEP_RECORDED > timeout > done:write(pending) => done"), { natural: "succeed", steps: 2 }))).toEqual([
      ["[after step 1]", "timeout", 1],
      ["[after step 2]", "timeout", 2],
    ]);
    expect(names(scenariosFor(path("done:payloadCheck > LEASE_LOST => fenced"), { natural: "succeed", steps: 0 }))).toEqual([
      ["[at the handler's start; the handler goes on]", "leaseLost", 0],
      ["[crash at the handler's start: the worker is gone]", "crash", 0],
    ]);
    expect(names(scenariosFor(path("done:payloadCheck > STEP_RECORDED > LEASE_LOST => fenced"), { natural: "succeed", steps: 1 }))).toEqual([
      ["[after step 1; the handler goes on]", "leaseLost", 1],
      ["[crash after step 1: the worker is gone]", "crash", 1],
    ]);
  });

  it("takes a refused payload at the handler's start whatever the handler does", () => {
    const refused = scenariosFor(path("error:payloadCheck > done:write(dead) => done"), { natural: "fail", steps: 3 });
    expect(names(refused)).toEqual([["", null, 0]]);
  });

  it("skips a path the handler cannot take, saying why", () => {
    expect(scenariosFor(path("done:payloadCheck > error:handler > done:write(pending) => done"), { natural: "succeed", steps: 0 })).toBe("the handler completes with this payload");
    expect(scenariosFor(path("done:payloadCheck > done:handler > done:write(completed) => done"), { natural: "fail", steps: 0 })).toBe("the handler fails with this payload");
    expect(scenariosFor(path("done:payloadCheck > done:handler > done:write(completed) => done"), { natural: "permanent", steps: 0 })).toBe("the handler fails permanently with this payload");
    expect(scenariosFor(path("done:payloadCheck > STEP_RECORDED > timeout > done:write(pending) => done"), { natural: "succeed", steps: 0 })).toBe("the handler records no step (ctx.step)");
    expect(scenariosFor(path("done:payloadCheck > done:handler > done:write(completed) => done"), { natural: "succeed", steps: 1 })).toBe("the handler records a step before it ends");
    // A fault before any step is taken whatever the handler records.
    expect(names(scenariosFor(path("done:payloadCheck > timeout > done:write(pending) => done"), { natural: "succeed", steps: 1 }))).toEqual([["[at the handler's start]", "timeout", 0]]);
  });
});

describe("a path's faults in words", () => {
  const scenario = (s: Partial<Scenario>): Scenario => ({
    name: "p", invalid: false, natural: null, stepInPath: false, fault: null, afterStep: 0, write: "apply", lastAttempt: false, states: [], outcome: "completed", ...s,
  });

  it("says there was no fault for a clean path, and what the handler did otherwise", () => {
    expect(describeFaults(scenario({ natural: "succeed" }))).toBe("no fault (the handler completed and its outcome was written)");
    expect(describeFaults(scenario({ natural: "fail" }))).toBe("the handler failed");
    expect(describeFaults(scenario({ natural: "permanent", lastAttempt: true }))).toBe("the handler failed permanently on its last attempt");
    expect(describeFaults(scenario({ natural: "succeed", write: "error" }))).toBe("the handler completed, then its outcome write failed");
    expect(describeFaults(scenario({ natural: "succeed", write: "cancelled" }))).toBe("the handler completed, then its outcome write found the job cancelled");
  });

  it("names each fault and where it came", () => {
    expect(describeFaults(scenario({ fault: "timeout", afterStep: 0 }))).toBe("the job timed out at the handler's start");
    expect(describeFaults(scenario({ fault: "leaseLost", afterStep: 2 }))).toBe("the worker lost its lease after step 2 (another worker took the job over) and the handler went on");
    expect(describeFaults(scenario({ fault: "crash", afterStep: 1 }))).toBe("the worker crashed after step 1 (another worker took the job over)");
    expect(describeFaults(scenario({ fault: "drain", afterStep: 1, write: "fenced" }))).toBe("the drain deadline passed after step 1 (the job was released), then its outcome write found another worker holding the job");
    expect(describeFaults(scenario({ fault: "leaseExpired", afterStep: 0 }))).toBe("the worker could not confirm its lease at the handler's start");
    expect(describeFaults(scenario({ fault: "cancel", afterStep: 3 }))).toBe("the job was cancelled after step 3");
    // A fault on a handler that also ended is described by the fault.
    expect(describeFaults(scenario({ fault: "timeout", natural: "succeed" }))).toBe("the job timed out at the handler's start");
  });

  it("names a refused payload", () => {
    expect(describeFaults(scenario({ invalid: true }))).toBe("the task's schema refused the payload");
    expect(describeFaults(scenario({ invalid: true, write: "error" }))).toBe("the task's schema refused the payload, then its outcome write failed");
  });
});

describe("whether the signal had aborted when the machine left running", () => {
  const seen = (...entries: Array<[string, boolean]>) => entries.map(([state, aborted]) => ({ state, aborted }));

  it("is the signal as the first state after running found it", () => {
    expect(abortedOnLeavingRunning(seen(["claimed", false], ["running", false], ["running", false], ["failing", true], ["done", true]))).toBe(true);
    expect(abortedOnLeavingRunning(seen(["claimed", false], ["running", false], ["fenced", false], ["done", true]))).toBe(false);
  });

  it("is null when the machine never left running, or never ran", () => {
    expect(abortedOnLeavingRunning(seen(["claimed", false], ["running", false]))).toBeNull();
    expect(abortedOnLeavingRunning(seen(["claimed", true], ["checkingPayload", true], ["failing", true]))).toBeNull();
    expect(abortedOnLeavingRunning([])).toBeNull();
  });
});
