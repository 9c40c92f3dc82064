// Runs a task's handler as an Effect. Interrupting the Effect (the job machine left `running`)
// aborts the handler's AbortSignal; an isolated handler's worker thread is terminated instead.
import { Worker } from "node:worker_threads";
import { Effect } from "effect";
import { storableJson } from "../db/index.ts";
import type { HandlerFailure } from "../machines/job-machine.ts";
import type { HandlerContext, Task } from "./task.ts";

const toFailure = (error: unknown): HandlerFailure => {
  if (typeof error === "object" && error !== null && (error as { permanent?: unknown }).permanent === true) {
    return { permanent: true, message: (error as Error).message ?? String(error) };
  }
  if (error instanceof Error) return { permanent: false, message: error.message || error.name };
  return { permanent: false, message: typeof error === "string" ? error : JSON.stringify(error) ?? String(error) };
};

/**
 * A result PostgreSQL could not store fails the attempt with a message naming the offending path,
 * instead of failing the completion (and every completion batched with it).
 */
const storable = (result: unknown): Effect.Effect<unknown, HandlerFailure> =>
  Effect.try({ try: () => (storableJson(result, "job's result"), result), catch: (error) => ({ permanent: false, message: (error as Error).message }) });

/**
 * The handler's Effect: succeeds with its result, fails with a HandlerFailure. `settled` is called
 * the moment the handler's own promise settles, before its result travels through Effect and the
 * machine: a handler that blocked the event loop past its lease deadline has finished by the time
 * the deadline is looked at, and its outcome must not be taken for a running handler's.
 */
export const runHandler = (
  task: Task,
  payload: unknown,
  ctx: Omit<HandlerContext, "signal">,
  settled: () => void = () => undefined,
): Effect.Effect<unknown, HandlerFailure> =>
  (task.isolate !== undefined
    ? runIsolated(task, payload, ctx, settled)
    : Effect.tryPromise({
        try: (signal) => {
          const running = (async () => {
            const returned = task.handler!(payload, { ...ctx, signal });
            // A handler may return an Effect: run it under the same signal, so it is interrupted too.
            return Effect.isEffect(returned) ? Effect.runPromise(returned as Effect.Effect<unknown, unknown>, { signal }) : returned;
          })();
          running.then(settled, settled);
          return running;
        },
        // Effect.runPromise rejects with the Effect's own failure (Effect 4 does not wrap it).
        catch: toFailure,
      })
  ).pipe(Effect.flatMap(storable));

const WORKER_SCRIPT = new URL(`./isolated-worker${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`, import.meta.url);

interface WorkerMessage {
  type: "result" | "error" | "progress";
  value?: unknown;
  permanent?: boolean;
  message?: string;
}

/** Runs the handler in a worker thread; interruption terminates the thread, busy loop or not. */
const runIsolated = (task: Task, payload: unknown, ctx: Omit<HandlerContext, "signal">, settled: () => void): Effect.Effect<unknown, HandlerFailure> =>
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
          : Effect.fail({ permanent: message.permanent === true, message: message.message ?? "handler failed" });
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
