// The worker's one lease timer and its event-loop watch, on a fake clock: when a check runs is the
// whole of what they do, so it is asserted to the millisecond.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { leaseMarginMs, LeaseWatch, localDeadline } from "../src/runtime/lease-watch.ts";
import { watchEventLoop } from "../src/runtime/stall-watch.ts";

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "performance"] });
});
afterEach(() => {
  vi.useRealTimers();
});

/** A LeaseWatch whose check records when it ran and returns the next deadlines it is given, in turn. */
const recording = (...nexts: number[]) => {
  const ranAt: number[] = [];
  const watch = new LeaseWatch(() => {
    ranAt.push(performance.now());
    return nexts.shift() ?? Infinity;
  });
  return { watch, ranAt };
};

describe("the local lease deadline", () => {
  it("is the lease from the moment the confirming statement was sent, less a fifth of it", () => {
    expect(leaseMarginMs(30_000)).toBe(6_000);
    expect(localDeadline(1_000, 30_000)).toBe(25_000);
  });
});

describe("LeaseWatch", () => {
  it("runs its check at the deadline it was given, not before", () => {
    const start = performance.now();
    const { watch, ranAt } = recording();
    watch.schedule(start + 500);
    vi.advanceTimersByTime(499);
    expect(ranAt).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(ranAt).toEqual([start + 500]);
  });

  it("keeps the earliest deadline: a later one does not push the check back, an earlier one brings it forward", () => {
    const start = performance.now();
    const { watch, ranAt } = recording();
    watch.schedule(start + 500);
    watch.schedule(start + 900);
    watch.schedule(start + 200);
    vi.advanceTimersByTime(1_000);
    // One check, at the earliest; the earlier timers were replaced, not left to fire as well.
    expect(ranAt).toEqual([start + 200]);
  });

  it("re-arms at the next deadline the check returns, and stops when it returns none", () => {
    const start = performance.now();
    const { watch, ranAt } = recording(start + 300, start + 700);
    watch.schedule(start + 100);
    vi.advanceTimersByTime(2_000);
    expect(ranAt).toEqual([start + 100, start + 300, start + 700]);
  });

  it("after a check ran, takes a deadline later than the one it ran at", () => {
    const start = performance.now();
    const { watch, ranAt } = recording();
    watch.schedule(start + 100);
    vi.advanceTimersByTime(100);
    watch.schedule(start + 400);
    vi.advanceTimersByTime(1_000);
    expect(ranAt).toEqual([start + 100, start + 400]);
  });

  it("runs nothing once stopped, and after stop takes any deadline afresh", () => {
    const start = performance.now();
    const { watch, ranAt } = recording();
    watch.schedule(start + 100);
    watch.stop();
    vi.advanceTimersByTime(500);
    expect(ranAt).toEqual([]);
    watch.schedule(start + 800);
    vi.advanceTimersByTime(1_000);
    expect(ranAt).toEqual([start + 800]);
  });
});

// Real timers here: a blocked loop is one whose clock moved on while no timer could run, which a
// fake clock does not model; the bounds leave room for a loaded machine's late timers.
describe("watchEventLoop", () => {
  beforeEach(() => {
    vi.useRealTimers();
  });
  const block = (ms: number) => {
    const until = performance.now() + ms;
    while (performance.now() < until);
  };
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it("reports how late its tick fired when the loop was blocked", async () => {
    const stalls: number[] = [];
    const stop = watchEventLoop(500, 50, (ms) => stalls.push(ms));
    // The tick due 500 ms in runs when the block ends, 500 ms late.
    block(1_000);
    await sleep(100);
    stop();
    expect(stalls[0]).toBeGreaterThanOrEqual(490);
    expect(stalls[0]).toBeLessThan(1_200);
  });

  it("says nothing of a loop that keeps time", async () => {
    const stalls: number[] = [];
    const stop = watchEventLoop(20, 400, (ms) => stalls.push(ms));
    await sleep(800);
    stop();
    expect(stalls).toEqual([]);
  });

  it("stops watching when told to", async () => {
    const stalls: number[] = [];
    const stop = watchEventLoop(20, 50, (ms) => stalls.push(ms));
    stop();
    block(300);
    await sleep(100);
    expect(stalls).toEqual([]);
  });
});
