// Isolated tasks (worker threads): every way a thread can end reaches the job machine as the
// right outcome — a result, a failure to retry, a permanent failure, a thread that exits without
// answering — and progress crosses the thread boundary to the row.
import { describe, expect, it } from "vitest";
import { enqueueJob } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();
const module = new URL("./fixtures/isolated-tasks.ts", import.meta.url);
const isolated = (name: string, exportName?: string) =>
  defineTask({ name, isolate: exportName === undefined ? { module } : { module, export: exportName } });

describe("isolated tasks", () => {
  it("runs the module's default export, reports progress from the thread, and records results", async () => {
    const doubled = isolated("iso-default");
    const progress = isolated("iso-progress", "progress");
    const a = await enqueueJob(db.pool, { type: "iso-default", payload: { n: 21 } });
    const b = await enqueueJob(db.pool, { type: "iso-progress" });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [doubled, progress] });
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(2);
    expect(await row(db.pool, a.id)).toMatchObject({ status: "completed", result: { doubled: 42 } });
    expect(await row(db.pool, b.id)).toMatchObject({ status: "completed", result: "reported", progress: { step: `picket:picket:${b.id}:one` } });
  });

  it("retries a thrown error, dead-letters a permanent one or a missing export, and fails a thread that exits or crashes without answering", async () => {
    const tasks = [
      isolated("iso-fails", "fails"),
      isolated("iso-permanent", "permanent"),
      isolated("iso-exits", "exits"),
      isolated("iso-crashes", "crashes"),
      isolated("iso-missing", "notAFunction"),
    ];
    const fails = await enqueueJob(db.pool, { type: "iso-fails", maxAttempts: 2 });
    const permanent = await enqueueJob(db.pool, { type: "iso-permanent", maxAttempts: 2 });
    const exits = await enqueueJob(db.pool, { type: "iso-exits", maxAttempts: 2 });
    const crashes = await enqueueJob(db.pool, { type: "iso-crashes", maxAttempts: 2 });
    const missing = await enqueueJob(db.pool, { type: "iso-missing", maxAttempts: 2 });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks });
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(5);
    const outcome = (id: string) => outcomes.find((o) => o.id === id);
    expect(outcome(fails.id)).toMatchObject({ outcome: "retried", error: "error: isolated boom" });
    expect(outcome(permanent.id)).toMatchObject({ outcome: "dead", error: "permanent: isolated: cannot ever work" });
    expect(outcome(exits.id)).toMatchObject({ outcome: "retried", error: "error: isolated handler's thread exited with code 3" });
    expect(outcome(crashes.id)).toMatchObject({ outcome: "retried", error: "error: thread crashed" });
    expect(outcome(missing.id)).toMatchObject({ outcome: "dead", error: expect.stringContaining('has no function export "notAFunction"') });
    expect(await row(db.pool, fails.id)).toMatchObject({ status: "pending", attempts: 1, last_error: expect.stringContaining("isolated boom") });
    // The stack crosses from the thread: it names the module that threw.
    expect((await row(db.pool, fails.id)).errors[0].stack).toMatch(/^Error: isolated boom\n[\s\S]*isolated-tasks\.ts/);
    expect(await row(db.pool, permanent.id)).toMatchObject({ status: "dead", attempts: 1 });
  });
});

describe("what a handler throws, as recorded", () => {
  it("records a thrown string, a thrown object, an Error without a message, and an Effect's failure", async () => {
    const { Effect } = await import("effect");
    const { PermanentError } = await import("../src/runtime/task.ts");
    const cases: Array<[string, () => unknown, string, string]> = [
      ["throw-string", () => Promise.reject("plain words"), "retried", "error: plain words"],
      ["throw-object", () => Promise.reject({ code: 7 }), "retried", 'error: {"code":7}'],
      ["throw-undefined", () => Promise.reject(undefined), "retried", "error: undefined"],
      ["throw-nameless", () => Promise.reject(new TypeError("")), "retried", "error: TypeError"],
      ["effect-permanent", () => Effect.fail(new PermanentError("effect says never")), "dead", "permanent: effect says never"],
      ["effect-plain", () => Effect.fail(new Error("effect failed")), "retried", "error: effect failed"],
      ["effect-die", () => Effect.die(new Error("effect died")), "retried", "error: effect died"],
    ];
    const tasks = cases.map(([name, handler]) => defineTask({ name, handler: handler as never }));
    const jobs = await Promise.all(cases.map(([name]) => enqueueJob(db.pool, { type: name, maxAttempts: 2 })));
    const { outcomes } = await startWorker({ connectionString: db.url, tasks });
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(cases.length);
    cases.forEach(([name, , outcome, error], i) => {
      expect({ name, ...outcomes.find((o) => o.id === jobs[i]!.id) }).toMatchObject({ name, outcome, error });
    });
  });
});
