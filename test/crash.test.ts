// @module-tag spawns: every test here runs picket (or node, npm, git) in a child process.
// Real processes and real signals: a worker SIGKILLed mid-job, and a worker drained by SIGTERM.
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { enqueueJobs } from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";

const db = useTestDatabase();
const CLI = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
const TASKS = fileURLToPath(new URL("./fixtures/crash-tasks.ts", import.meta.url));

const startWorkerProcess = (env: Record<string, string> = {}): ChildProcess & { output: string[] } => {
  const child = spawn(process.execPath, [CLI, "worker", "--tasks", TASKS], {
    env: { ...process.env, DATABASE_URL: db.url, PICKET_LOG_LEVEL: "warn", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  }) as ChildProcess & { output: string[] };
  child.output = [];
  child.stdout!.on("data", (c: Buffer) => child.output.push(c.toString()));
  child.stderr!.on("data", (c: Buffer) => child.output.push(c.toString()));
  return child;
};

const count = async (sql: string): Promise<number> => (await db.pool.query(sql)).rows[0].n;

const exited = (child: ChildProcess) =>
  new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));

describe("crashes and signals", () => {
  // Both ways a completion can be written: the rows kept (status completed), and deleted (the
  // default), where a job no longer in the table is a completed one and the side table counts runs.
  for (const mode of ["kept", "deleted"] as const) {
    it(`completes all 50 jobs of a SIGKILLed worker in a second worker, within lease + sweep interval + margin (completed rows ${mode})`, async () => {
      await db.pool.query("DROP TABLE IF EXISTS executions");
      await db.pool.query("DELETE FROM picket.jobs WHERE type = 'crashy'");
      await db.pool.query("CREATE TABLE executions (job_id bigint, worker_pid int, at timestamptz DEFAULT now())");
      await enqueueJobs(db.pool, Array.from({ length: 50 }, (_, i) => ({ type: "crashy", payload: { i } })));
      const first = startWorkerProcess({ CRASHY_MS: "60000" });
      await expect
        .poll(() => count("SELECT count(*)::int AS n FROM picket.jobs WHERE status = 'processing'"), { timeout: 20_000, interval: 50 })
        .toBe(50);
      const firstDied = exited(first);
      first.kill("SIGKILL");
      await firstDied;
      const killedAt = Date.now();

      const second = startWorkerProcess(mode === "deleted" ? { CRASH_DELETE_COMPLETED: "1" } : {});
      try {
        await expect
          .poll(
            () =>
              count(
                mode === "kept"
                  ? "SELECT count(*)::int AS n FROM picket.jobs WHERE status = 'completed'"
                  : "SELECT 50 - count(*)::int AS n FROM picket.jobs WHERE type = 'crashy'",
              ),
            { timeout: 30_000, interval: 100 },
          )
          .toBe(50);
        const recoveryMs = Date.now() - killedAt;
        // lease 1 s + sweep every 0.2 s + the handler's own 1.5 s + process start-up: 10 s is generous.
        expect(recoveryMs).toBeLessThan(10_000);
        const { rows } = await db.pool.query(
          "SELECT count(DISTINCT job_id)::int AS jobs, count(*)::int AS runs, count(DISTINCT worker_pid)::int AS pids FROM executions",
        );
        expect(rows[0]).toEqual({ jobs: 50, runs: 50, pids: 1 });
        // The lost attempt was charged by the sweep: each job took two attempts.
        if (mode === "kept") expect(await count("SELECT count(*)::int AS n FROM picket.jobs WHERE attempts = 2 AND errors->0->>'message' LIKE 'lease expired%'")).toBe(50);
      } finally {
        const secondExited = exited(second);
        second.kill("SIGTERM");
        expect(await secondExited).toEqual({ code: 0, signal: null });
      }
    }, 60_000);
  }

  it("drains on SIGTERM: the running job finishes, then the process exits 0", async () => {
    await db.pool.query("CREATE TABLE IF NOT EXISTS executions (job_id bigint, worker_pid int, at timestamptz DEFAULT now())");
    const [job] = await enqueueJobs(db.pool, [{ type: "crashy", payload: { drain: true } }]);
    const worker = startWorkerProcess({ CRASHY_MS: "1500" });
    await expect
      .poll(async () => (await db.pool.query("SELECT status FROM picket.jobs WHERE id = $1", [job!.id])).rows[0].status, { timeout: 20_000, interval: 50 })
      .toBe("processing");
    const done = exited(worker);
    worker.kill("SIGTERM");
    expect(await done).toEqual({ code: 0, signal: null });
    expect((await db.pool.query("SELECT status FROM picket.jobs WHERE id = $1", [job!.id])).rows[0].status).toBe("completed");
    expect(worker.output.join("")).toContain("SIGTERM received, draining");
  }, 60_000);

  it("on a second signal, interrupts and releases the running job without charging it, then exits 0", async () => {
    const [job] = await enqueueJobs(db.pool, [{ type: "crashy", payload: { forced: true } }]);
    const worker = startWorkerProcess({ CRASHY_MS: "60000" });
    await expect
      .poll(async () => (await db.pool.query("SELECT status FROM picket.jobs WHERE id = $1", [job!.id])).rows[0].status, { timeout: 20_000, interval: 50 })
      .toBe("processing");
    const done = exited(worker);
    worker.kill("SIGTERM");
    await new Promise((r) => setTimeout(r, 300));
    worker.kill("SIGINT");
    expect(await done).toEqual({ code: 0, signal: null });
    expect((await db.pool.query("SELECT status, attempts FROM picket.jobs WHERE id = $1", [job!.id])).rows[0]).toEqual({ status: "pending", attempts: 0 });
  }, 60_000);
});
