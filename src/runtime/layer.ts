// The supervisor as an Effect service: acquired (started) with its Layer and drained when the
// Layer's scope closes, so an Effect program's shutdown drains the worker.
import * as Context from "effect/Context";
import * as Effect from "effect/Effect";
import * as Layer from "effect/Layer";
import type { SupervisorOptions } from "./config.ts";
import { createSupervisor, type Supervisor } from "./supervisor.ts";

export class PicketWorker extends Context.Service<PicketWorker, Supervisor>()("picket/Worker") {}

export const workerLayer = (options: SupervisorOptions): Layer.Layer<PicketWorker, unknown> =>
  Layer.effect(
    PicketWorker,
    Effect.acquireRelease(
      // The Layer fails with start()'s own error (a bad DATABASE_URL, a missing database), whose
      // message says what to do, rather than Effect's generic wrapper around it.
      Effect.tryPromise({
        try: async () => {
          const supervisor = createSupervisor(options);
          await supervisor.start();
          return supervisor;
        },
        catch: (error) => error,
      }),
      (supervisor) => Effect.promise(() => supervisor.stop()),
    ),
  );
