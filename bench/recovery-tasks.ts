// The recovery scenario's worker module: a task whose jobs hold until a gate file appears, with
// picket's default lease, and the worker's default sweep interval.
import { existsSync } from "node:fs";
import { defineTask } from "../src/runtime/task.ts";

const gate = process.env.RECOVERY_GATE ?? "/nonexistent";

export const tasks = [
  defineTask({
    name: "held",
    handler: async (_payload: unknown, { signal }) => {
      while (!existsSync(gate)) {
        if (signal.aborted) throw new Error("interrupted");
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  }),
];

export const options = { concurrency: 100, logPayloads: false };
