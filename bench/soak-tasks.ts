// The soak's tasks module (bench/soak.ts): jobs that sleep the payload's ms, as I/O-bound work does.
// From "picket" (this package by its own name: the built dist/), as a user's tasks module imports it.
import { defineTask } from "picket";

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
