// Each worker's heartbeat row: what a dashboard on any host sees of it.
import { describe, expect, it } from "vitest";
import { enqueueJobs, getWorker, listWorkerSummaries, migrate } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { PICKET_VERSION } from "../src/runtime/version.ts";
import { useTestDatabase } from "./support/db.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("the heartbeat row", () => {
  it("names the worker, its machine's state and the jobs it holds with theirs, beat after beat, and goes when it stops", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const task = defineTask({ name: "beating", handler: () => gate });
    const [a, b] = await enqueueJobs(db.pool, [{ type: "beating" }, { type: "beating" }]);
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 3, heartbeatIntervalMs: 50, workerId: "w-beat" });
    await expect.poll(async () => (await getWorker(db.pool, "w-beat"))?.running, { timeout: 5_000 }).toBe(2);
    const row = await getWorker(db.pool, "w-beat");
    expect(row).toMatchObject({ pid: process.pid, version: PICKET_VERSION, concurrency: 3, running: 2, waiting: 0, state: "running" });
    expect(row!.host.length).toBeGreaterThan(0);
    expect(row!.jobs.map((j) => [j.id, j.type, j.state]).sort()).toEqual([[a!.id, "beating", "running"], [b!.id, "beating", "running"]].sort());
    // It keeps beating: last_beat moves.
    await expect.poll(async () => (await getWorker(db.pool, "w-beat"))!.lastBeat.getTime(), { timeout: 5_000 }).toBeGreaterThan(row!.lastBeat.getTime());
    expect(row!.silentMs).toBeLessThan(5_000);
    release();
    await supervisor.stop();
    expect((await listWorkerSummaries(db.pool)).filter((w) => w.id === "w-beat")).toEqual([]);
  });

  it("forgets a worker silent for an hour (one killed outright never deletes its row)", async () => {
    await db.pool.query(
      "INSERT INTO picket.workers (id, host, pid, version, started_at, last_beat, concurrency, state) VALUES ('ghost', 'h', 1, '0', now(), now() - interval '61 minutes', 1, 'running'), ('quiet', 'h', 2, '0', now(), now() - interval '59 minutes', 1, 'running')",
    );
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [defineTask({ name: "idle", handler: async () => undefined })], heartbeatIntervalMs: 50, workerId: "w-sweeper" });
    await expect.poll(async () => (await listWorkerSummaries(db.pool)).map((w) => w.id).sort(), { timeout: 5_000 }).toEqual(["quiet", "w-sweeper"]);
    await supervisor.stop();
  });

  it("in a schema of its own: the row is written there, listed from there, and goes from there when the worker stops", async () => {
    const schema = "beat_elsewhere";
    await migrate(db.pool, { schema });
    const task = defineTask({ name: "beating-elsewhere", handler: async () => undefined });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], schema, heartbeatIntervalMs: 50, workerId: "w-elsewhere" });
    await expect.poll(async () => (await listWorkerSummaries(db.pool, { schema })).map((w) => w.id), { timeout: 5_000 }).toEqual(["w-elsewhere"]);
    expect((await listWorkerSummaries(db.pool)).map((w) => w.id)).not.toContain("w-elsewhere");
    await supervisor.stop();
    expect(await listWorkerSummaries(db.pool, { schema })).toEqual([]);
  });
});
