// A handler that finished past its timeout without being interrupted. The timeout is a timer: it
// fires only when the event loop runs. Synchronous code (a tight loop, a big JSON.parse, sync
// crypto) holds the loop, so when it returns its promise settles before the timer gets a turn and
// the machine takes the result: the job is recorded completed though it ran past its timeout.
// That cannot be undone from this thread; it is said, once per attempt, with what to do.
import type { ClaimedJob } from "../db/index.ts";
import { isAborted, type SignalSource } from "./signal-source.ts";
import type { Logger } from "./logger.ts";
import type { Task } from "./task.ts";

/**
 * Called when the handler settles: warns when it ran for at least its timeout and its signal had
 * not been aborted (the timeout never got to fire). Isolated handlers run in a thread that is
 * terminated at the deadline, so they cannot overrun this way.
 */
export const reportOverrun = (task: Task, job: ClaimedJob, startedAt: number, now: number, abort: SignalSource, logger: () => Logger): void => {
  const ranMs = now - startedAt;
  if (task.isolate !== undefined || ranMs < task.timeoutMs || isAborted(abort)) return;
  logger().warn(
    { ran_ms: Math.round(ranMs), timeout_ms: task.timeoutMs },
    `the handler of task "${task.name}" ran ${Math.round(ranMs)} ms, past its timeout of ${task.timeoutMs} ms, and its result was kept: ` +
      `it blocked the event loop, and synchronous code cannot be interrupted (the timeout only fires when the loop runs). ` +
      `Run CPU-bound handlers with isolate (a worker thread that is terminated at the timeout), or yield (await) between chunks of work.`,
  );
};
