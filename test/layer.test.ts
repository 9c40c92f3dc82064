// The Effect side of embedding: the worker as a Layer (started with it, drained when its scope
// closes) and the queue client in a schema of its own, without task definitions.
import { Effect } from "effect";
import { describe, expect, it } from "vitest";
import { getJob, migrate } from "../src/db/index.ts";
import { PicketWorker, workerLayer } from "../src/runtime/layer.ts";
import { createQueue } from "../src/runtime/queue.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { captureLogs } from "./support/worker.ts";

const db = useTestDatabase();

describe("embedding through Effect", () => {
  it("starts the worker with its Layer and drains it when the scope closes", async () => {
    const logs = captureLogs();
    const task = defineTask({ name: "layer-task", handler: async (payload: { n: number }) => payload.n + 1 });
    const queue = createQueue({ pool: db.pool, tasks: [task] });
    const program = Effect.gen(function* () {
      const worker = yield* PicketWorker;
      const job = yield* Effect.promise(() => queue.enqueue(task, { n: 41 }));
      yield* Effect.promise(() => expect.poll(async () => (await getJob(db.pool, job.id))?.status, { timeout: 5_000 }).toBe("completed"));
      return { worker, job };
    });
    const { worker, job } = await Effect.runPromise(program.pipe(Effect.provide(workerLayer({ connectionString: db.url, tasks: [task], logger: logs.logger, pollIntervalMs: 50, keepCompleted: true }))));
    expect(await getJob(db.pool, job.id)).toMatchObject({ status: "completed", result: 42 });
    expect(worker.stats()).toMatchObject({ draining: true, running: 0 });
    expect(logs.lines.filter((l) => l.msg === "worker stopped")).toHaveLength(1);
  });

  it("fails the Layer with the start-up error", async () => {
    const task = defineTask({ name: "layer-bad", handler: async () => undefined });
    const url = new URL(db.url);
    url.pathname = "/no_such_database_here";
    // Caught by hand: `rejects.toThrow(regex)` also passes for a promise rejected with undefined.
    const error = await Effect.runPromise(Effect.void.pipe(Effect.provide(workerLayer({ connectionString: url.toString(), tasks: [task] })))).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(/picket: cannot connect to PostgreSQL at .*no_such_database_here.*create it, or fix the name in DATABASE_URL/);
  });

  it("enqueues into the queue's own schema, with or without task definitions", async () => {
    await migrate(db.pool, { schema: "queue_other" });
    const queue = createQueue({ pool: db.pool, schema: "queue_other" });
    const job = await queue.enqueue("anything", { a: 1 });
    const [more] = await queue.enqueueMany([{ task: "anything", payload: { a: 2 } }]);
    const { rows } = await db.pool.query("SELECT id, payload FROM queue_other.jobs ORDER BY id");
    expect(rows).toEqual([
      { id: job.id, payload: { a: 1 } },
      { id: more!.id, payload: { a: 2 } },
    ]);
  });
});
