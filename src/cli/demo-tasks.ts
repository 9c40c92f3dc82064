// The demo's workload: one task per behaviour a newcomer should see.
import { defineTask, PermanentError } from "../runtime/task.ts";

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(new Error("interrupted"));
    }, { once: true });
  });

export const demoTasks = [
  defineTask({
    name: "fast",
    handler: async (payload: { n: number }, { signal }) => {
      await sleep(20 + ((payload.n * 37) % 60), signal);
      return { n: payload.n };
    },
  }),
  defineTask({
    name: "slow",
    timeoutMs: 30_000,
    handler: async (_payload: unknown, { signal, reportProgress }) => {
      for (let step = 1; step <= 10; step++) {
        await sleep(250, signal);
        await reportProgress({ percent: step * 10 });
      }
      return "report built";
    },
  }),
  defineTask({
    name: "flaky",
    backoff: { baseMs: 300, maxMs: 2_000 },
    handler: async (_payload: unknown, { job, signal }) => {
      await sleep(30, signal);
      if (job.attempt < 3) throw new Error(`upstream returned 503 (attempt ${job.attempt})`);
      return "succeeded on attempt 3";
    },
  }),
  defineTask({
    name: "timeout",
    timeoutMs: 800,
    backoff: { baseMs: 300, maxMs: 1_000 },
    handler: async (_payload: unknown, { signal }) => {
      await sleep(60_000, signal); // far longer than its timeout: cancelled each time
    },
  }),
  defineTask({
    name: "poison",
    handler: async (payload: { customer: number }) => {
      throw new PermanentError(`customer ${payload.customer} does not exist`);
    },
  }),
];

/** Jobs to enqueue: [task, payload, maxAttempts]. */
export const demoWorkload = (): Array<{ type: string; payload: unknown; maxAttempts?: number }> => [
  ...Array.from({ length: 40 }, (_, n) => ({ type: "fast", payload: { n } })),
  ...Array.from({ length: 3 }, (_, n) => ({ type: "slow", payload: { report: n } })),
  ...Array.from({ length: 5 }, (_, n) => ({ type: "flaky", payload: { call: n }, maxAttempts: 5 })),
  { type: "timeout", payload: {}, maxAttempts: 2 },
  { type: "poison", payload: { customer: 7 }, maxAttempts: 5 },
];
