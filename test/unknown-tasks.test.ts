// Unknown task names are not silent: createQueue refuses a name it does not know, the CLI refuses
// (or, with --allow-unknown, enqueues) a task no live worker handles, and stats and the dashboard
// show pending jobs that no live worker has a handler for, by the workers' heartbeats.
import { describe, expect, it } from "vitest";
import { beat, dashboardSnapshot, enqueueJobs, handlerCoverage, InvalidJobError, queueStats, type WorkerBeat } from "../src/db/index.ts";
import { formatStats } from "../src/cli/stats.ts";
import { createQueue } from "../src/runtime/queue.ts";
import { defineTask } from "../src/runtime/task.ts";
import { picket } from "./support/cli.ts";
import { useTestDatabase } from "./support/db.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

const worker = (id: string, tasks: string[]): WorkerBeat => ({
  id,
  host: "test",
  pid: 1,
  version: "0",
  startedAt: new Date(),
  concurrency: 1,
  state: "running.polling",
  jobs: [],
  running: 0,
  waiting: 0,
  tasks,
  completedPerSecond: {},
});

const count = async (type: string) => (await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = $1", [type])).rows[0].n;

describe("createQueue", () => {
  it("refuses a task name it does not know, writing nothing; allowUnknown lets it through", async () => {
    const known = defineTask({ name: "uq-known", handler: async () => undefined });
    const queue = createQueue({ pool: db.pool, tasks: [known] });
    await expect(queue.enqueue("uq-knwon", {})).rejects.toThrow(InvalidJobError);
    await expect(queue.enqueue("uq-knwon", {})).rejects.toThrow(/task "uq-knwon" is not one of this queue's tasks \(uq-known\); nothing was enqueued/);
    await expect(queue.enqueueMany([{ task: "uq-known", payload: {} }, { task: "uq-other", payload: {} }])).rejects.toThrow(/"uq-other"/);
    expect(await count("uq-known")).toBe(0);
    expect(await queue.enqueue("uq-known", {})).toMatchObject({ type: "uq-known" });
    expect(await createQueue({ pool: db.pool, tasks: [known], allowUnknown: true }).enqueue("uq-elsewhere", {})).toMatchObject({ type: "uq-elsewhere" });
  });
});

describe("handler coverage", () => {
  it("counts pending jobs that no live worker handles; a silent worker does not count", async () => {
    const schema = "cover_a";
    await db.pool.query(`CREATE SCHEMA ${schema}`);
    const { migrate } = await import("../src/db/index.ts");
    await migrate(db.pool, { schema });
    await enqueueJobs(db.pool, [{ type: "a" }, { type: "b" }, { type: "b" }, { type: "c" }], { schema });
    expect(await handlerCoverage(db.pool, { schema })).toEqual({
      liveWorkers: 0,
      handled: [],
      unhandled: [
        { type: "a", count: 1 },
        { type: "b", count: 2 },
        { type: "c", count: 1 },
      ],
    });
    await beat(db.pool, worker("w1", ["a"]), { schema });
    await beat(db.pool, worker("w2", ["a", "c"]), { schema });
    // A worker silent for a minute (killed, say) handles nothing.
    await beat(db.pool, worker("gone", ["b"]), { schema });
    await db.pool.query(`UPDATE ${schema}.workers SET last_beat = now() - interval '60 seconds' WHERE id = 'gone'`);
    const coverage = await handlerCoverage(db.pool, { schema });
    expect(coverage).toEqual({ liveWorkers: 2, handled: ["a", "c"], unhandled: [{ type: "b", count: 2 }] });
    const stats = await queueStats(db.pool, { schema });
    expect(stats.handlers).toEqual(coverage);
    expect(formatStats(stats)).toContain("pending jobs no live worker has a handler for: b (2); start a worker with these tasks");
    expect((await dashboardSnapshot(db.pool, { schema })).handlers).toEqual(coverage);
    // A worker id reused by a process with other tasks (a fixed workerId across a deploy) says so at its next beat.
    await beat(db.pool, worker("w2", ["b"]), { schema });
    expect((await handlerCoverage(db.pool, { schema })).handled).toEqual(["a", "b"]);
  });

  it("a running supervisor's heartbeat names its tasks", async () => {
    const task = defineTask({ name: "uq-beating", handler: async () => undefined });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], heartbeatIntervalMs: 50 });
    await expect.poll(async () => (await handlerCoverage(db.pool)).handled, { timeout: 5_000 }).toContain("uq-beating");
    await supervisor.stop();
  });
});

describe("picket enqueue", () => {
  it("refuses a task no live worker handles, enqueues it with --allow-unknown, and warns when no worker is live", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const schema = "cover_cli";
    const env = { env: { DATABASE_URL: db.url } };
    expect((await picket(["migrate", "--schema", schema], env)).code).toBe(0);
    const lonely = await picket(["enqueue", "uq-cli", "{}", "--schema", schema], env);
    expect(lonely.code).toBe(0);
    expect(lonely.stderr).toBe(`picket: warning: no worker is live (no heartbeat in the last 30 s), so task "uq-cli" could not be checked; enqueueing it.\n`);
    await beat(db.pool, worker("w-cli", ["uq-cli", "other"]), { schema });
    const typo = await picket(["enqueue", "uq-clj", "{}", "--schema", schema], env);
    expect(typo.code).toBe(1);
    expect(typo.stderr).toContain(`no live worker has a handler for task "uq-clj" (the 1 live worker(s) run: other, uq-cli); nothing was enqueued.`);
    expect(typo.stderr).toContain("--allow-unknown");
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM ${schema}.jobs WHERE type = 'uq-clj'`)).rows[0].n).toBe(0);
    const known = await picket(["enqueue", "uq-cli", "{}", "--schema", schema], env);
    expect(known).toMatchObject({ code: 0, stderr: "" });
    const forced = await picket(["enqueue", "uq-clj", "{}", "--schema", schema, "--allow-unknown"], env);
    expect(forced).toMatchObject({ code: 0, stderr: "" });
    expect(JSON.parse(forced.stdout)).toMatchObject({ type: "uq-clj", status: "pending" });
  });
});
