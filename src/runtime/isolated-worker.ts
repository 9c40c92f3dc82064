// The worker-thread side of an isolated task: imports the task's module, runs its handler once,
// and posts the outcome back. The main thread terminates this thread at the deadline.
import { parentPort, workerData } from "node:worker_threads";

interface Data {
  module: string;
  exportName: string;
  payload: unknown;
  job: unknown;
  idempotencyKey: string;
}

const data = workerData as Data;
const port = parentPort!;

try {
  const mod = (await import(data.module)) as Record<string, unknown>;
  const handler = mod[data.exportName];
  if (typeof handler !== "function") {
    throw Object.assign(new Error(`module ${data.module} has no function export "${data.exportName}"`), { permanent: true });
  }
  const value = await handler(data.payload, {
    job: data.job,
    idempotencyKey: data.idempotencyKey,
    stepKey: (step: string) => `${data.idempotencyKey}:${step}`,
    // A step's record is written under the claim by the worker's own connections, which a thread does not have.
    step: async () => {
      throw new Error("picket: ctx.step is not available to isolated handlers; record the step's result in your own store keyed by ctx.stepKey(name).");
    },
    dependencies: async () => {
      throw new Error("picket: ctx.dependencies is not available to isolated handlers; read them in a task that is not isolated and pass them on.");
    },
    enqueueChildren: async () => {
      throw new Error("picket: ctx.enqueueChildren is not available to isolated handlers: children are added under the claim, by the worker's own connections.");
    },
    reportProgress: async (progress: unknown) => port.postMessage({ type: "progress", value: progress }),
    signal: new AbortController().signal,
  });
  port.postMessage({ type: "result", value });
} catch (error) {
  port.postMessage({
    type: "error",
    permanent: (error as { permanent?: unknown })?.permanent === true,
    message: error instanceof Error ? error.message : String(error),
    stack: error instanceof Error ? error.stack : undefined,
  });
}
