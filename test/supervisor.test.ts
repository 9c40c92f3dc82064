import { describe, expect, it } from "vitest";
import { enqueueJobs } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("supervisor", () => {
  it("runs jobs to completion and records results", async () => {
    const task = defineTask({ name: "smoke", handler: async (p: { n: number }) => ({ doubled: p.n * 2 }) });
    const jobs = await enqueueJobs(db.pool, Array.from({ length: 20 }, (_, n) => ({ type: "smoke", payload: { n } })));
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(20);
    await supervisor.stop();
    expect(outcomes.every((o) => o.outcome === "completed")).toBe(true);
    expect(await row(db.pool, jobs[3]!.id)).toMatchObject({ status: "completed", result: { doubled: 6 } });
  });
});
