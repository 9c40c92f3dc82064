// The tasks module of bench/workers.ts: a no-op task, and with --mixed (BENCH_MIXED=1) a task the
// database limits across workers as well (clusterConcurrency: its jobs go through the slow claim,
// as serial queues' do).
import { defineTask } from "../src/runtime/task.ts";

export const tasks = [
  defineTask({ name: "noop", handler: async () => undefined }),
  ...(process.env.BENCH_MIXED === "1" ? [defineTask({ name: "limited", clusterConcurrency: 20, handler: async () => undefined })] : []),
];
