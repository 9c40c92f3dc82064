// The poll loop's decisions, each on its own: when it claims again at once, when it waits, what
// wakes it, and what stop() waits for. Its polls are the test's promises and its interval a fake
// clock, so every case is exact; the real runtime runs it in test/model-supervisor.test.ts.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { PollLoop, type PollOutput } from "../src/runtime/poll-loop.ts";

/** A loop whose polls wait for the test to answer them, in order. */
const harness = () => {
  const answers: Array<{ resolve: (output: PollOutput) => void; reject: (error: unknown) => void }> = [];
  const failures: unknown[] = [];
  const loop = new PollLoop({
    intervalMs: 1_000,
    poll: () => new Promise<PollOutput>((resolve, reject) => answers.push({ resolve, reject })),
    pollFailed: (error) => void failures.push(error),
  });
  /** Answers the poll in flight, and lets the loop act on the answer. */
  const answer = async (asked: number, claimed: number) => {
    answers.at(-1)!.resolve({ asked, claimed });
    await vi.advanceTimersByTimeAsync(0);
  };
  return { loop, answer, failures, answers, polls: () => answers.length };
};

beforeEach(() => void vi.useFakeTimers());
afterEach(() => void vi.useRealTimers());

describe("the poll loop", () => {
  it("polls at start, at once again after a full batch, and after the interval after a partial one", async () => {
    const { loop, answer, polls } = harness();
    loop.wake(); // before start: nothing
    expect(polls()).toBe(0);
    loop.start();
    loop.start(); // once
    expect(polls()).toBe(1);
    await answer(3, 3);
    expect(polls()).toBe(2);
    await answer(3, 1);
    expect(polls()).toBe(2);
    await vi.advanceTimersByTimeAsync(999);
    expect(polls()).toBe(2);
    await vi.advanceTimersByTimeAsync(1);
    expect(polls()).toBe(3);
  });

  it("polls at once when woken while waiting, and right after the poll in flight when woken during it", async () => {
    const { loop, answer, polls } = harness();
    loop.start();
    await answer(2, 0);
    loop.wake();
    expect(polls()).toBe(2);
    loop.wake(); // in flight: remembered, not a second poll beside it
    expect(polls()).toBe(2);
    await answer(2, 0);
    expect(polls()).toBe(3);
    await answer(2, 0); // the wake was spent: now the interval
    expect(polls()).toBe(3);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(polls()).toBe(4);
  });

  it("claims into room made (a freed slot, a finished write) only when the last poll left work behind", async () => {
    const { loop, answer, polls } = harness();
    loop.start();
    await answer(2, 1); // not saturated: nothing is known to be waiting
    loop.roomMade();
    expect(polls()).toBe(1);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(polls()).toBe(2);
    await answer(0, 0); // no slot to offer: work may be waiting, but not claimed again at once
    expect(polls()).toBe(2);
    loop.roomMade();
    expect(polls()).toBe(3);
    loop.roomMade(); // in flight: nothing
    expect(polls()).toBe(3);
    await answer(1, 1); // full: polls again at once
    expect(polls()).toBe(4);
    await answer(0, 0);
    loop.roomMade();
    expect(polls()).toBe(5);
  });

  it("reports a failed poll and polls again after the interval, with what it knew of the work left", async () => {
    const { loop, answer, answers, failures, polls } = harness();
    loop.start();
    await answer(0, 0);
    loop.roomMade();
    expect(polls()).toBe(2);
    answers.at(-1)!.reject(new Error("claim failed"));
    await vi.advanceTimersByTimeAsync(0);
    expect(failures).toEqual([new Error("claim failed")]);
    expect(polls()).toBe(2);
    loop.roomMade(); // still saturated from the poll before
    expect(polls()).toBe(3);
    answers.at(-1)!.reject(new Error("again"));
    await vi.advanceTimersByTimeAsync(999);
    expect(polls()).toBe(3);
    await vi.advanceTimersByTimeAsync(1);
    expect(polls()).toBe(4);
  });

  it("stop() waits for the poll in flight and polls no more, even after a full batch or a wake, nor waits", async () => {
    const { loop, answer, polls } = harness();
    loop.start();
    let stopped = false;
    const stopping = loop.stop().then(() => (stopped = true));
    loop.wake();
    await vi.advanceTimersByTimeAsync(0);
    expect(stopped).toBe(false);
    await answer(5, 5);
    await stopping;
    expect(polls()).toBe(1);
    expect(vi.getTimerCount()).toBe(0);
    loop.wake();
    loop.roomMade();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(polls()).toBe(1);
    // A partial batch ending after stop() leaves no interval behind (it would hold the process).
    const partial = harness();
    partial.loop.start();
    const ended = partial.loop.stop();
    await partial.answer(5, 1);
    await ended;
    expect(vi.getTimerCount()).toBe(0);
  });

  it("stop() while waiting resolves at once and cancels the interval", async () => {
    const { loop, answer, polls } = harness();
    loop.start();
    await answer(2, 0);
    await loop.stop();
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(polls()).toBe(1);
  });
});
