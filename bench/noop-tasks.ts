// The tasks module the process benchmark's workers load: one task whose handler does nothing.
import { defineTask } from "../src/runtime/task.ts";

export const tasks = [defineTask({ name: "noop", handler: async () => undefined })];
