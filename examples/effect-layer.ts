// picket in an Effect program: the worker is a Layer, started with the program's scope and
// drained when it closes (NodeRuntime.runMain closes it on SIGINT/SIGTERM).
// Run: npm run example:effect   (uses DATABASE_URL, or starts an embedded PostgreSQL)
import { Effect } from "effect";
import { createQueue, defineTask, openPool, PicketWorker, startEmbeddedPostgres, workerLayer } from "../src/index.ts";

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const connectionString = process.env.DATABASE_URL ?? embedded!.url;

const resize = defineTask({
  name: "resize-image",
  // A handler may return an Effect; leaving `running` (timeout, lost lease, drain) interrupts it.
  handler: (payload: { url: string }) => Effect.succeed({ resized: payload.url }).pipe(Effect.delay("50 millis")),
});

const program = Effect.gen(function* () {
  const worker = yield* PicketWorker;
  const pool = yield* Effect.promise(() => openPool({ connectionString }));
  const finished = Effect.callback<void>((resume) => {
    worker.onJobFinished(() => resume(Effect.void));
  });
  yield* Effect.promise(() => createQueue({ pool, tasks: [resize] }).enqueue(resize, { url: "https://example.com/a.png" }));
  yield* finished;
  yield* Effect.promise(() => pool.end());
  yield* Effect.log("job done; closing the layer drains the worker");
});

// Providing the layer scopes the worker to the program: started before, drained after.
await Effect.runPromise(program.pipe(Effect.provide(workerLayer({ connectionString, tasks: [resize], migrate: true }))));
await embedded?.stop();
console.log("done");
