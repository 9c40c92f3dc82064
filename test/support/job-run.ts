// One job's run through a job runtime, as the supervisor creates it, and what a test sees of it.
import type { ClaimedJob } from "../../src/db/index.ts";
import type { JobHandle, JobOutput, JobRuntime } from "../../src/runtime/job-runtime.ts";

export interface ObservedJob {
  run: JobHandle;
  /** The job's state after each event it took. */
  states: string[];
  /** Resolves with the machine's output; rejects when the machine failed. */
  done: Promise<JobOutput>;
}

/** Creates the job's run with an observer (`onState` is called on each state); the caller starts it. */
export const observeJob = (runtime: JobRuntime, job: ClaimedJob, slotFree: boolean, onState?: (state: string, run: JobHandle) => void): ObservedJob => {
  const states: string[] = [];
  let settle!: { resolve: (output: JobOutput) => void; reject: (error: unknown) => void };
  const done = new Promise<JobOutput>((resolve, reject) => (settle = { resolve, reject }));
  const run = runtime.create(job, slotFree, {
    changed: (state) => {
      states.push(state);
      onState?.(state, run);
    },
    done: (output) => settle.resolve(output),
    failed: (error) => settle.reject(error),
  });
  return { run, states, done };
};
