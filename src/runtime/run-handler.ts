// Runs a task's handler under the AbortSignal of the machine's `running` state: leaving the state
// aborts the handler's signal; an isolated handler's worker thread is terminated instead.
import { Worker } from "node:worker_threads";
import * as Effect from "effect/Effect";
import { storableJson } from "../db/index.ts";
import type { HandlerFailure } from "../machines/job-machine.ts";
import type { HandlerContext, Task } from "./task.ts";

const toFailure = (error: unknown): HandlerFailure => {
  // The stack goes with the failure to the logs and the row's error history.
  const stack = error instanceof Error && typeof error.stack === "string" ? { stack: error.stack } : {};
  if (typeof error === "object" && error !== null && (error as { permanent?: unknown }).permanent === true) {
    return { permanent: true, message: (error as Error).message ?? String(error), ...stack };
  }
  if (error instanceof Error) return { permanent: false, message: error.message || error.name, ...stack };
  return { permanent: false, message: typeof error === "string" ? error : JSON.stringify(error) ?? String(error) };
};

/**
 * A result PostgreSQL could not store fails the attempt with a message naming the offending path,
 * instead of failing the completion (and every completion batched with it).
 */
const storable = (result: unknown): unknown => {
  try {
    storableJson(result, "job's result");
  } catch (error) {
    throw { permanent: false, message: (error as Error).message } satisfies HandlerFailure;
  }
  return result;
};

/**
 * Runs the handler under its context's signal: resolves with its result, rejects with a
 * HandlerFailure. Leaving `running` aborts the signal: a promise handler sees it abort (all that
 * interrupting an Effect.tryPromise would do for it, at a fraction of the cost of a fiber per job);
 * a handler that returns an Effect has its fiber interrupted; an isolated handler's thread is
 * terminated.
 * `settled` is called the moment the handler's own promise settles, before its result travels
 * on: a handler that blocked the event loop past its lease deadline has finished by the time the
 * deadline is looked at, and its outcome must not be taken for a running handler's.
 */
export const runHandler = (
  task: Task,
  payload: unknown,
  ctx: HandlerContext,
  settled: () => void = () => undefined,
): Promise<unknown> => {
  // The signal is read only where it is passed on: a promise handler reads its own when it wants it.
  const running =
    task.isolate !== undefined
      ? Effect.runPromise(Effect.result(runIsolated(task, payload, ctx, settled)), { signal: ctx.signal }).then((result) => {
          if (result._tag === "Failure") throw result.failure;
          return result.success;
        })
      : (async () => {
          try {
            const returned = task.handler!(payload, ctx);
            // A handler may return an Effect: run it under the same signal, so it is interrupted too.
            return await (Effect.isEffect(returned) ? Effect.runPromise(returned as Effect.Effect<unknown, unknown>, { signal: ctx.signal }) : returned);
          } catch (error) {
            // Effect.runPromise rejects with the Effect's own failure (Effect 4 does not wrap it).
            throw toFailure(error);
          } finally {
            settled();
          }
        })();
  return running.then(storable);
};

const WORKER_SCRIPT = new URL(`./isolated-worker${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`, import.meta.url);

interface WorkerMessage {
  type: "result" | "error" | "progress";
  value?: unknown;
  permanent?: boolean;
  message?: string;
  stack?: string;
}

/** Runs the handler in a worker thread; interruption terminates the thread, busy loop or not. */
const runIsolated = (task: Task, payload: unknown, ctx: HandlerContext, settled: () => void): Effect.Effect<unknown, HandlerFailure> =>
  Effect.callback<unknown, HandlerFailure>((resume) => {
    const worker = new Worker(WORKER_SCRIPT, {
      workerData: {
        module: String(task.isolate!.module),
        exportName: task.isolate!.export ?? "default",
        payload,
        job: ctx.job,
        idempotencyKey: ctx.idempotencyKey,
      },
    });
    let done = false;
    worker.on("message", (message: WorkerMessage) => {
      if (message.type === "progress") {
        void ctx.reportProgress(message.value);
        return;
      }
      done = true;
      settled();
      const outcome =
        message.type === "result"
          ? Effect.succeed(message.value)
          : Effect.fail({ permanent: message.permanent === true, message: message.message ?? "handler failed", ...(message.stack === undefined ? {} : { stack: message.stack }) });
      // The handler is done only when its thread is gone: the job's slot is freed when the
      // handler ends, and a thread still shutting down must not count as a free slot.
      void worker.terminate().then(
        () => resume(outcome),
        () => resume(outcome),
      );
    });
    worker.on("error", (error) => {
      done = true;
      resume(Effect.fail(toFailure(error)));
    });
    worker.on("exit", (code) => {
      if (!done) resume(Effect.fail({ permanent: false, message: `isolated handler's thread exited with code ${code}` }));
    });
    // Runs on interruption only: the deadline stops the thread whatever it is doing.
    return Effect.promise(() => worker.terminate());
  });
