// The dashboard in a real headless Chromium (Debian's, driven by playwright-core), against a real
// worker running jobs through their states: what the page shows must be what the worker and the
// table hold, and the retry button must run a dead job again. Plus the HTTP side on its own: the
// token rules, and the fetch-style handler a service mounts.
import { existsSync } from "node:fs";
import type { Server } from "node:http";
import { Effect, Fiber } from "effect";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { beat, enqueueJob, jobSteps } from "../src/db/index.ts";
import { createDashboardHandler, serveDashboard } from "../src/dashboard/server.ts";
import { jobMachine } from "../src/machines/index.ts";
import { defineTask, PermanentError } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { freePort } from "./support/ports.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

const CHROMIUM = process.env.CHROMIUM_PATH ?? (existsSync("/usr/bin/chromium") ? "/usr/bin/chromium" : "chromium");
const TOKEN = "s3cret-dashboard-token";

let browser: Browser;
beforeAll(async () => {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-dev-shm-usage"] });
}, 60_000);
afterAll(async () => {
  await browser?.close();
});

/** Serves the dashboard on a free loopback port until the test ends it. */
const dashboard = async (token?: string) => {
  const port = await freePort();
  let server: Server | undefined;
  const fiber = Effect.runFork(serveDashboard({ db: db.pool, port, host: "127.0.0.1", intervalMs: 200, ...(token ? { token } : {}) }, (s) => (server = s)));
  const url = `http://127.0.0.1:${port}/`;
  await expect.poll(() => fetch(url).then((r) => r.status, () => 0), { timeout: 10_000 }).toBe(200);
  return {
    url,
    stop: async () => {
      server?.closeAllConnections();
      await Effect.runPromise(Fiber.interrupt(fiber));
    },
  };
};

describe("the dashboard in a browser", () => {
  it("shows the live worker, its machine and each running job's machine lit in its state; retries a dead job; shows a job's history", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const gated = defineTask({ name: "gated", handler: () => gate.then(() => "opened") });
    const doomed = defineTask({
      name: "doomed",
      handler: async () => {
        const declined = new PermanentError("the card was declined");
        // The stack as a reader of docs/dashboard.png would see it: paths from the project's root,
        // not this machine's folders.
        declined.stack = declined.stack?.replaceAll(`${process.cwd()}/`, "");
        throw declined;
      },
    });
    // Records a durable step, then runs until it is cancelled.
    const stepping = defineTask({
      name: "stepping",
      handler: async (_p, { step, signal }) => {
        await step("fetched", () => ({ rows: 3 }));
        await new Promise((_resolve, reject) => signal.addEventListener("abort", () => reject(new Error("stopped")), { once: true }));
      },
    });
    const held = await enqueueJob(db.pool, { type: "gated" });
    const stepped = await enqueueJob(db.pool, { type: "stepping" });
    const dead = await enqueueJob(db.pool, { type: "doomed" });
    await enqueueJob(db.pool, { type: "nobody-runs-this" });
    await enqueueJob(db.pool, { type: "nobody-runs-this", runAt: new Date(Date.now() + 3_600_000) });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [gated, doomed, stepping], heartbeatIntervalMs: 100, workerId: "w-dash" });
    await expect.poll(async () => (await row(db.pool, dead.id)).status, { timeout: 5_000 }).toBe("dead");
    const served = await dashboard(TOKEN);
    const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
    try {
      await page.goto(served.url);
      // The worker, its supervisor machine lit in a running state, and the held job lit in running.
      const worker = page.locator('[data-testid="worker"][data-worker-id="w-dash"]');
      await worker.waitFor({ timeout: 10_000 });
      await expect.poll(() => worker.locator('[data-machine="supervisor"]').getAttribute("data-lit"), { timeout: 5_000 }).toBe("running");
      const job = worker.locator(`[data-testid="job"][data-job-id="${held.id}"]`);
      await job.waitFor({ timeout: 5_000 });
      expect(await job.locator(".state.lit").getAttribute("data-state")).toBe("running");
      expect(await job.locator(".state").count()).toBe(Object.keys(jobMachine.root.states).length); // every state is drawn
      // The queue by task, from the table.
      await expect.poll(() => page.locator('[data-task="gated"] [data-col="processing"]').textContent(), { timeout: 5_000 }).toBe("1");
      // Ready and scheduled apart: a delayed job does not make the task look stuck.
      expect(await page.locator('[data-task="nobody-runs-this"] [data-col="ready"]').textContent()).toBe("1");
      expect(await page.locator('[data-task="nobody-runs-this"] [data-col="scheduled"]').textContent()).toBe("1");
      expect(await page.locator('[data-task="nobody-runs-this"] [data-col="retrying"]').textContent()).toBe("0");
      // No live worker has a handler for it: said above the table.
      expect(await page.locator('[data-testid="unhandled"]').textContent()).toBe("no live worker has a handler for: nobody-runs-this (2 pending)");
      // The dead job, its error and stack; retry refused without the token, done with it.
      const deadRow = page.locator(`[data-testid="retry-row"][data-job-id="${dead.id}"]`);
      await deadRow.waitFor({ timeout: 5_000 });
      expect(await deadRow.textContent()).toContain("permanent: the card was declined");
      await deadRow.locator("button").click();
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toMatch(/needs the dashboard's token/);
      expect(await row(db.pool, dead.id)).toMatchObject({ status: "dead", attempts: 1 });
      await page.fill("#token", TOKEN);
      await deadRow.locator("button").click();
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe(`retry job ${dead.id}: applied`);
      // Run again by the worker: the retry, then a second attempt, failed again, in the row's history.
      await expect.poll(async () => (await row(db.pool, dead.id)).errors.length, { timeout: 10_000 }).toBe(3);
      // A job's history: status, attempts, each error with its stack, numbered across the retry, which has its own line.
      await page.locator(`a.job[data-open="${dead.id}"]`).first().click();
      const detail = page.locator('[data-testid="detail"]');
      await detail.waitFor({ timeout: 5_000 });
      expect(await detail.textContent()).toMatch(/PermanentError: the card was declined/);
      expect(await detail.textContent()).toMatch(/attempts1 of \d+ since the last retry, 2 in all/);
      const stamp = "\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z";
      expect(await detail.locator('[data-testid="history-attempt"]').allTextContents()).toEqual([
        expect.stringMatching(new RegExp(`^attempt 1 · ${stamp}$`)),
        expect.stringMatching(new RegExp(`^attempt 2 · ${stamp}$`)),
      ]);
      expect(await detail.locator('[data-testid="history-operator"]').allTextContents()).toEqual([expect.stringMatching(new RegExp(`^retried by dashboard · ${stamp}$`))]);
      if (process.env.PICKET_SCREENSHOTS === "1") await page.screenshot({ path: "docs/dashboard.png", fullPage: true });
      // A running job's history shows its recorded step; its cancel button stops it.
      await expect.poll(async () => (await jobSteps(db.pool, stepped.id)).length, { timeout: 5_000 }).toBe(1);
      await page.locator(`a.job[data-open="${stepped.id}"]`).first().click();
      await expect.poll(() => page.locator('[data-testid="step"]').textContent(), { timeout: 5_000 }).toMatch(/fetched.*attempt 1.*\{"rows":3\}/s);
      await page.locator(`#detail-body button[data-action="cancel"][data-id="${stepped.id}"]`).click();
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe(`cancel job ${stepped.id}: applied`);
      await expect.poll(async () => (await row(db.pool, stepped.id)).status, { timeout: 5_000 }).toBe("cancelled");
      await expect.poll(() => worker.locator(`[data-testid="job"][data-job-id="${stepped.id}"]`).count(), { timeout: 5_000 }).toBe(0);
      // The held job finishes: it leaves the worker's list.
      release();
      await expect.poll(() => job.count(), { timeout: 5_000 }).toBe(0);
    } finally {
      release();
      await page.close();
      await served.stop();
      await supervisor.stop();
    }
  });
});

describe("the dashboard's live stream in a browser", () => {
  it("fills every panel again after each reload, and for a second page open beside the first", async () => {
    const idle = defineTask({ name: "reloaded", handler: async () => undefined });
    await enqueueJob(db.pool, { type: "reloaded", runAt: new Date(Date.now() + 3_600_000) });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [idle], heartbeatIntervalMs: 100, workerId: "w-reload" });
    const served = await dashboard();
    const first = await browser.newPage();
    const second = await browser.newPage();
    /** The page shows the worker and the queue, and says it is live. */
    const showsAll = async (page: typeof first) => {
      await page.locator('[data-testid="worker"][data-worker-id="w-reload"]').waitFor({ timeout: 10_000 });
      await expect.poll(() => page.locator('[data-task="reloaded"] [data-col="scheduled"]').textContent(), { timeout: 10_000 }).toBe("1");
      await expect.poll(() => page.locator("#status").textContent(), { timeout: 10_000 }).toMatch(/^live · /);
    };
    try {
      await first.goto(served.url);
      await showsAll(first);
      // A reload opens a new stream while the old one may not be closed yet: it was the first
      // stream's generator, shared by every request, so the page after a reload stayed empty.
      for (let reload = 0; reload < 3; reload++) {
        await first.reload();
        await showsAll(first);
      }
      await second.goto(served.url);
      await showsAll(second);
      // Both stay live: the later snapshots reach each of them.
      const stamp = await first.locator("#status").textContent();
      await expect.poll(() => first.locator("#status").textContent(), { timeout: 10_000 }).not.toBe(stamp);
      const stampSecond = await second.locator("#status").textContent();
      await expect.poll(() => second.locator("#status").textContent(), { timeout: 10_000 }).not.toBe(stampSecond);
    } finally {
      await first.close();
      await second.close();
      await served.stop();
      await supervisor.stop();
    }
  });
});

describe("the dashboard's HTTP side", () => {
  it("refuses write actions without a token configured, or with a wrong one, and writes nothing", async () => {
    const job = await enqueueJob(db.pool, { type: "not-run" });
    const open = await dashboard();
    const guarded = await dashboard(TOKEN);
    try {
      const cancel = (base: string, token?: string) =>
        fetch(`${base}api/jobs/${job.id}/cancel`, { method: "POST", headers: token ? { authorization: `Bearer ${token}` } : {} });
      const off = await cancel(open.url, TOKEN);
      expect(off.status).toBe(403);
      expect((await off.json()).error).toMatch(/write actions are off/);
      expect((await cancel(guarded.url)).status).toBe(401);
      expect((await cancel(guarded.url, "wrong")).status).toBe(401);
      expect((await row(db.pool, job.id)).status).toBe("pending");
      const done = await cancel(guarded.url, TOKEN);
      expect(done.status).toBe(200);
      expect(await done.json()).toMatchObject({ outcome: "applied" });
      expect((await row(db.pool, job.id)).status).toBe("cancelled");
      // An action the row's state does not allow is a conflict, not a success.
      expect((await cancel(guarded.url, TOKEN)).status).toBe(409);
      expect((await fetch(`${guarded.url}api/jobs/999999`)).status).toBe(404);
    } finally {
      await open.stop();
      await guarded.stop();
    }
  });

  it("mounts in a service as a fetch-style handler", async () => {
    await enqueueJob(db.pool, { type: "mounted" });
    const { handler, dispose } = createDashboardHandler({ db: db.pool });
    try {
      const page = await handler(new Request("http://service.local/"));
      expect(page.headers.get("content-type")).toMatch(/^text\/html/);
      // A retrying job (pending, with an error), a recently dead one, and one dead long ago.
      const retrying = await enqueueJob(db.pool, { type: "mounted-retrying" });
      await db.pool.query("UPDATE picket.jobs SET last_error = 'error: boom', attempts = 1 WHERE id = $1", [retrying.id]);
      const recent = await enqueueJob(db.pool, { type: "mounted-done" });
      const old = await enqueueJob(db.pool, { type: "mounted-done" });
      await db.pool.query("UPDATE picket.jobs SET status = 'dead', finished_at = now() WHERE id = $1", [recent.id]);
      await db.pool.query("UPDATE picket.jobs SET status = 'dead', finished_at = now() - interval '1 minute' WHERE id = $1", [old.id]);
      // Completions (deleted rows, or kept ones: counted once either way) come from the workers'
      // reported rates: a live worker's counts, one silent for a minute's does not.
      const beatOf = (id: string, rate: number) => ({
        id, host: "test", pid: 1, version: "0", startedAt: new Date(), concurrency: 1, state: "running.polling",
        jobs: [], running: 0, waiting: 0, tasks: ["mounted-done"], completedPerSecond: { "mounted-done": rate },
      });
      await beat(db.pool, beatOf("mounted-live", 0.4));
      await beat(db.pool, beatOf("mounted-silent", 100));
      await db.pool.query("UPDATE picket.workers SET last_beat = now() - interval '1 minute' WHERE id = 'mounted-silent'");
      const done = await enqueueJob(db.pool, { type: "mounted-done" });
      await db.pool.query("UPDATE picket.jobs SET status = 'completed', finished_at = now() WHERE id = $1", [done.id]);
      const snapshot = await (await handler(new Request("http://service.local/api/snapshot"))).json();
      await db.pool.query("DELETE FROM picket.workers WHERE id IN ('mounted-live', 'mounted-silent')");
      expect(snapshot.depth).toContainEqual({ type: "mounted", state: "ready", count: 1 });
      expect(snapshot.retrying.map((j: { id: string }) => j.id)).toEqual([retrying.id]);
      // Jobs of this file's other tests may have finished within the window too.
      expect(snapshot.finished.filter((f: { type: string }) => f.type === "mounted-done")).toEqual([
        { type: "mounted-done", status: "completed", count: 2 },
        { type: "mounted-done", status: "dead", count: 1 },
      ]);
      const machines = await (await handler(new Request("http://service.local/api/machines"))).json();
      expect(Object.keys(machines)).toEqual(["job", "supervisor"]);
    } finally {
      await dispose();
    }
  });
});
