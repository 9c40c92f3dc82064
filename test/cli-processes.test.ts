// @module-tag spawns: every test here runs picket (or node, npm, git) in a child process.
// `picket worker --processes N` as a user runs it: a parent process and its workers, real signals.
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { enqueueJobs } from "../src/db/index.ts";
import { picket } from "./support/cli.ts";
import { useTestDatabase } from "./support/db.ts";
import { freePort } from "./support/ports.ts";

const db = useTestDatabase();
const HELLO = fileURLToPath(new URL("./fixtures/hello-tasks.ts", import.meta.url));
const SPIN = fileURLToPath(new URL("./fixtures/blocking-tasks.ts", import.meta.url));

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe("worker --processes", () => {
  /** Starts `worker --processes 2` in a process group of its own, as a terminal would. */
  const start = (...extra: string[]) => {
    const handle = { parent: 0, output: () => "" };
    const running = picket(["worker", "--tasks", HELLO, "--processes", "2", ...extra], { env: { DATABASE_URL: db.url }, detached: true, onStart: (p, o) => ((handle.parent = p), (handle.output = o)) });
    const count = (text: string) => handle.output().split(text).length - 1;
    const childPid = (slot: number, nth = 0) => Number([...handle.output().matchAll(new RegExp(`worker process ${slot} starting \\(pid (\\d+)\\)`, "g"))][nth]?.[1]);
    return { handle, running, count, childPid };
  };

  it("runs two workers, starts a new one for one SIGKILLed, reports their health as one, and drains both on one Ctrl-C", async () => {
    const port = await freePort();
    const health = async () => {
      const response = await fetch(`http://127.0.0.1:${port}/health`).catch(() => null);
      return response === null ? { status: 0, body: null } : { status: response.status, body: await response.json() };
    };
    const { handle, running, count, childPid } = start("--health-port", String(port));
    const output = () => handle.output();
    const completed = async () => Number((await db.pool.query("SELECT count(*) FROM picket.jobs WHERE type = 'hello' AND status = 'completed'")).rows[0].count);
    await expect.poll(() => count('"msg":"worker started"'), { timeout: 30_000, interval: 100 }).toBe(2);
    const [first, second] = [childPid(1), childPid(2)];
    const parent = handle.parent;
    expect(new Set([parent, first, second]).size).toBe(3);
    await enqueueJobs(db.pool, Array.from({ length: 20 }, () => ({ type: "hello" })));
    await expect.poll(completed, { timeout: 10_000 }).toBe(20);
    await expect.poll(health, { timeout: 10_000 }).toMatchObject({ status: 200, body: { healthy: true, ready: true, checks: { processes: { ok: true }, database: { ok: true } } } });

    process.kill(first, "SIGKILL");
    // Replaced a second later: meanwhile /health says which process is missing.
    await expect.poll(health, { timeout: 5_000, interval: 50 }).toMatchObject({ status: 503, body: { healthy: false, checks: { processes: { ok: false, reason: expect.stringMatching(/^process 1: (exited|not running \(starting or being replaced\))$/) } } } });
    await expect.poll(() => output(), { timeout: 10_000 }).toContain(`worker process 1 (pid ${first}) died (SIGKILL); starting a new one`);
    await expect.poll(() => count('"msg":"worker started"'), { timeout: 30_000, interval: 100 }).toBe(3);
    const replacement = childPid(1, 1);
    expect(alive(replacement)).toBe(true);
    await expect.poll(health, { timeout: 10_000 }).toMatchObject({ status: 200, body: { healthy: true } });
    await enqueueJobs(db.pool, Array.from({ length: 20 }, () => ({ type: "hello" })));
    await expect.poll(completed, { timeout: 10_000 }).toBe(40);

    // Ctrl-C while jobs run: SIGINT to the terminal's process group. Only the parent is in it; it
    // passes the signal on once, so each child drains (its jobs finish) rather than being forced
    // by a second signal (its jobs interrupted).
    const naps = await enqueueJobs(db.pool, Array.from({ length: 4 }, () => ({ type: "nap", payload: { ms: 1_500 } })));
    const napping = async () => Number((await db.pool.query("SELECT count(*) FROM picket.jobs WHERE type = 'nap' AND status = 'processing'")).rows[0].count);
    await expect.poll(napping, { timeout: 10_000 }).toBe(4);
    const stoppedAt = Date.now();
    process.kill(-parent, "SIGINT");
    const run = await running;
    expect(run.code).toBe(0);
    expect(Date.now() - stoppedAt).toBeLessThan(15_000);
    const napped = await db.pool.query("SELECT status, result FROM picket.jobs WHERE id = ANY ($1)", [naps.map((j) => j.id)]);
    expect(napped.rows).toEqual(Array(4).fill({ status: "completed", result: "rested" }));
    expect(count('"msg":"worker stopped"')).toBe(2);
    expect(run.stderr).not.toContain("received again");
    expect([first, second, replacement].filter(alive)).toEqual([]);
  }, 90_000);

  it("stops, exit code 1, when a worker fails before it started (a restart would only fail again)", async () => {
    const run = await picket(["worker", "--tasks", path.join(tmpdir(), "picket-no-such-tasks.ts"), "--processes", "2"], { env: { DATABASE_URL: db.url } });
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/worker process [12] exited before it started \(code 1\); stopping the others/);
  }, 60_000);

  it("kills a worker whose handler never yields once its drain deadline has passed, says which, and exits 1 (two SIGTERMs)", async () => {
    const handle = { parent: 0, output: () => "" };
    const running = picket(["worker", "--tasks", SPIN, "--processes", "2", "--concurrency", "1", "--drain-timeout", "500"], {
      env: { DATABASE_URL: db.url },
      detached: true,
      onStart: (p, o) => ((handle.parent = p), (handle.output = o)),
    });
    const started = () => handle.output().split('"msg":"worker started"').length - 1;
    await db.pool.query("DELETE FROM picket.jobs WHERE type = 'spin'");
    await expect.poll(started, { timeout: 30_000, interval: 100 }).toBe(2);
    const children = [1, 2].map((slot) => Number(new RegExp(`worker process ${slot} starting \\(pid (\\d+)\\)`).exec(handle.output())?.[1]));
    await enqueueJobs(db.pool, [{ type: "spin" }, { type: "spin" }]);
    const spinning = async () => Number((await db.pool.query("SELECT count(*) FROM picket.jobs WHERE type = 'spin' AND status = 'processing'")).rows[0].count);
    await expect.poll(spinning, { timeout: 10_000 }).toBe(2);
    const stoppedAt = performance.now();
    process.kill(handle.parent, "SIGTERM");
    await new Promise((resolve) => setTimeout(resolve, 200));
    process.kill(handle.parent, "SIGTERM");
    const run = await running;
    expect(run.code).toBe(1);
    // Killed 5 s after the second stop (the first stop's 0.5 s drain and 5 s grace end later).
    expect(performance.now() - stoppedAt).toBeLessThan(20_000);
    expect(run.stdout).toMatch(/worker process [12] \(pid \d+\) was still running 5000 ms after the second stop; killed it \(SIGKILL\)/);
    await expect.poll(() => children.filter(alive), { timeout: 5_000 }).toEqual([]);
  }, 60_000);

  it("drains its workers when the parent is SIGKILLed", async () => {
    const { handle, running, count, childPid } = start();
    await expect.poll(() => count('"msg":"worker started"'), { timeout: 30_000, interval: 100 }).toBe(2);
    const children = [childPid(1), childPid(2)];
    process.kill(handle.parent, "SIGKILL");
    await running;
    await expect.poll(() => children.filter(alive), { timeout: 15_000 }).toEqual([]);
  }, 60_000);
});
