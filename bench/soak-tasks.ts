// The soak's tasks module (bench/soak.ts): jobs that sleep the payload's ms, as I/O-bound work does.
import { defineTask } from "../src/runtime/task.ts";

export const tasks = [
  defineTask({
    name: "soak",
    handler: (payload: { ms: number }, { signal }) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(resolve, payload.ms);
        signal.addEventListener("abort", () => (clearTimeout(timer), reject(new Error("interrupted"))), { once: true });
      }),
  }),
];
