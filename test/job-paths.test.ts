// picket/testing's path vocabulary on its own: the events offered in each state and how the
// options take some away, the labels paths are named by, and the states a path passes through.
// test/model-job.test.ts walks the paths these make through the real machine.
import { describe, expect, it } from "vitest";
import { distinctStates, eventLabel, eventsIn } from "../src/testing/job-paths.ts";

const labels = (state: string, stepRecorded = false, vocabulary = {}) => eventsIn(state, stepRecorded, vocabulary).map(eventLabel);

describe("eventsIn", () => {
  it("offers a waiting job its start and everything that can end it before", () => {
    expect(labels("waitingForSlot")).toEqual(["START", "RELEASE", "DRAIN_DEADLINE", "LEASE_LOST", "LEASE_EXPIRED", "CANCEL"]);
  });

  it("offers a lapsed lease only where it can happen, and only when lapses are in the vocabulary", () => {
    expect(labels("checkingPayload")).toContain("error:payloadCheck(lapsed)");
    expect(labels("checkingPayload", false, { lapses: false })).not.toContain("error:payloadCheck(lapsed)");
    expect(labels("running")).toContain("error:handler(lapsed)");
    // A handler that recorded a step has started: it cannot be found never to have started.
    expect(labels("running", true)).not.toContain("error:handler(lapsed)");
    expect(labels("running", false, { lapses: false })).not.toContain("error:handler(lapsed)");
  });

  it("leaves out a hanging payload check's endings, and the drain's abandon of a write, when asked", () => {
    expect(labels("checkingPayload", false, { hangingPayloadCheck: false })).toEqual(["done:payloadCheck", "error:payloadCheck", "error:payloadCheck(lapsed)"]);
    expect(labels("checkingPayload")).toEqual(expect.arrayContaining(["timeout", "LEASE_LOST", "DRAIN_DEADLINE", "LEASE_EXPIRED", "CANCEL"]));
    expect(labels("completing")).toEqual(["done:write(completed)", "done:write(fenced)", "done:write(cancelled)", "error:write", "ABANDON"]);
    expect(labels("failing", false, { abandon: false })).toEqual(["done:write(pending)", "done:write(dead)", "done:write(fenced)", "done:write(cancelled)", "error:write"]);
    expect(labels("fenced")).toEqual([]);
  });
});

describe("eventLabel", () => {
  it("shortens only XState's own event names: a user's event that contains their words keeps its name", () => {
    expect(eventLabel({ type: "xstate.after.jobTimeout.job.running" })).toBe("timeout");
    expect(eventLabel({ type: "job.xstate.after.x" })).toBe("job.xstate.after.x");
    expect(eventLabel({ type: "job.xstate.done.actor.x" })).toBe("job.xstate.done.actor.x");
  });
});

describe("distinctStates", () => {
  it("names a state repeated in a row once, and one that comes back again", () => {
    expect(distinctStates(["claimed", "running", "running", "running", "completing", "running"])).toEqual(["claimed", "running", "completing", "running"]);
    expect(distinctStates([])).toEqual([]);
  });
});
