// The dashboard in a real headless Chromium (Debian's, driven by playwright-core), against a real
// worker running jobs through their states: what the page shows must be what the worker and the
// table hold, and the retry button must run a dead job again. Plus the HTTP side on its own: the
// token rules, and the fetch-style handler a service mounts.
import type { Server } from "node:http";
import { Effect, Fiber } from "effect";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { beat, enqueueJob, jobSteps } from "../src/db/index.ts";
import { createDashboardHandler, serveDashboard } from "../src/dashboard/server.ts";
import { jobMachine } from "../src/machines/index.ts";
import { defineTask, PermanentError } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { freePort } from "./support/ports.ts";
import { startWorker } from "./support/worker.ts";
import { launchChromium } from "./support/browser.ts";

const db = useTestDatabase();

const TOKEN = "s3cret-dashboard-token";

let browser: Browser;
beforeAll(async () => {
  browser = await launchChromium();
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
    // Limited across the cluster: the queue panel shows what is in use of each limit.
    const gated = defineTask({ name: "gated", clusterConcurrency: 3, rateLimit: { max: 20, windowMs: 60_000 }, handler: () => gate.then(() => "opened") });
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
      // The worker's row; its page: the supervisor machine lit in a running state, the jobs it holds.
      const worker = page.locator('[data-testid="worker"][data-worker-id="w-dash"]');
      await worker.waitFor({ timeout: 10_000 });
      await expect.poll(() => worker.locator('[data-col="running"]').textContent(), { timeout: 5_000 }).toBe("2");
      await worker.locator("a[data-worker]").click();
      const workerPage = page.locator("#worker-body");
      await expect.poll(() => workerPage.locator('[data-machine="supervisor"]').getAttribute("data-lit"), { timeout: 5_000 }).toBe("running");
      // The worker's page took the focus from the link that opened it.
      await expect.poll(() => page.evaluate(() => document.activeElement?.closest("#worker-panel") !== null), { timeout: 5_000 }).toBe(true);
      const job = workerPage.locator(`[data-testid="worker-job"][data-job-id="${held.id}"]`);
      await job.waitFor({ timeout: 5_000 });
      await expect.poll(() => job.locator('[data-col="state"]').textContent(), { timeout: 5_000 }).toBe("running");
      // The held job's own page: its machine, every state drawn, lit in running.
      await job.locator("a.job").click();
      const machine = page.locator('[data-testid="job-machine"]');
      await expect.poll(() => machine.locator(".state.lit").getAttribute("data-state"), { timeout: 5_000 }).toBe("running");
      expect(await machine.locator(".state").count()).toBe(Object.keys(jobMachine.root.states).length);
      // The queue by task, from the table.
      await expect.poll(() => page.locator('[data-task="gated"] [data-col="processing"]').textContent(), { timeout: 5_000 }).toBe("1");
      await expect.poll(() => page.locator('[data-task="gated"] [data-col="limits"]').textContent(), { timeout: 5_000 }).toBe("1 of 3 running · 1 of 20 started in 60 s");
      expect(await page.locator('[data-task="doomed"] [data-col="limits"]').textContent()).toBe("—");
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
      // Each action asks first; keeping things as they are (Escape) does nothing.
      await deadRow.locator("button").click();
      await expect.poll(() => page.locator("#confirm-text").textContent(), { timeout: 5_000 }).toBe(`Retry job ${dead.id}? It runs again with a fresh set of attempts; its history is kept.`);
      await page.keyboard.press("Escape");
      await expect.poll(() => page.locator("#confirm").evaluate((d) => (d as HTMLDialogElement).open)).toBe(false);
      expect(await page.locator("#action").textContent()).toBe("");
      await deadRow.locator("button").click();
      await page.locator("#confirm-go").click();
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toMatch(/^this action \(retry\) needs the dashboard's token, and none was sent/);
      expect(await row(db.pool, dead.id)).toMatchObject({ status: "dead", attempts: 1 });
      await page.fill("#token", TOKEN);
      await page.fill("#by", "Ana");
      await page.locator("#by").dispatchEvent("change");
      await deadRow.locator("button").click();
      // The confirming button has the focus: Enter confirms.
      await page.keyboard.press("Enter");
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe(`job ${dead.id} will run again, with fresh attempts`);
      // Run again by the worker: the retry, then a second attempt, failed again, in the row's history.
      await expect.poll(async () => (await row(db.pool, dead.id)).errors.length, { timeout: 10_000 }).toBe(3);
      // A job's history: status, attempts, each error with its stack, numbered across the retry, which has its own line.
      await page.locator(`a.job[data-open="${dead.id}"]`).first().click();
      const detail = page.locator('[data-testid="detail"]');
      await expect.poll(() => page.locator("#detail-id").textContent(), { timeout: 5_000 }).toBe(dead.id);
      await expect.poll(() => detail.textContent(), { timeout: 5_000 }).toMatch(/PermanentError: the card was declined/);
      expect(await detail.textContent()).toMatch(/attempts1 of \d+ since the last retry, 2 in all/);
      const stamp = "\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z";
      expect(await detail.locator('[data-testid="history-attempt"]').allTextContents()).toEqual([
        expect.stringMatching(new RegExp(`^attempt 1 on w-dash · ${stamp}$`)),
        expect.stringMatching(new RegExp(`^attempt 2 on w-dash · ${stamp}$`)),
      ]);
      // Its timeline, in order: enqueued, the first attempt's end, the retry, the second's, dead.
      expect((await detail.locator('[data-testid="timeline"] li').allTextContents()).map((line) => line.replace(new RegExp(`^${stamp} `), ""))).toEqual([
        "enqueued",
        "attempt 1 ended on w-dash: permanent: the card was declined",
        "retried by dashboard: Ana",
        "attempt 2 ended on w-dash: permanent: the card was declined",
        "dead",
      ]);
      expect(await detail.locator('[data-testid="history-operator"]').allTextContents()).toEqual([expect.stringMatching(new RegExp(`^retried by dashboard: Ana · ${stamp}$`))]);
      // Dead again: its page offers retry and delete, nothing else.
      expect(await page.locator('[data-testid="detail-actions"] button').allTextContents()).toEqual(["retry", "delete"]);
      if (process.env.PICKET_SCREENSHOTS === "1") await page.screenshot({ path: "docs/dashboard.png", fullPage: true });
      // A running job's history shows its recorded step; its cancel button stops it.
      await expect.poll(async () => (await jobSteps(db.pool, stepped.id)).length, { timeout: 5_000 }).toBe(1);
      await page.locator(`a.job[data-open="${stepped.id}"]`).first().click();
      await expect.poll(() => page.locator('[data-testid="step"]').textContent(), { timeout: 5_000 }).toMatch(/fetched.*attempt 1.*\{"rows":3\}/s);
      await expect.poll(() => page.locator('[data-testid="timeline"] li').last().textContent(), { timeout: 5_000 }).toMatch(/ attempt 1 running on w-dash \(its machine: running\)$/);
      await page.locator(`#detail-body button[data-action="cancel"][data-id="${stepped.id}"]`).click();
      await page.locator("#confirm-go").click();
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe(`job ${stepped.id} is cancelled (if it was running, its handler is being stopped)`);
      await expect.poll(async () => (await row(db.pool, stepped.id)).status, { timeout: 5_000 }).toBe("cancelled");
      await expect.poll(() => workerPage.locator(`[data-testid="worker-job"][data-job-id="${stepped.id}"]`).count(), { timeout: 5_000 }).toBe(0);
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

describe("the console's actions in a browser", () => {
  it("shows a job's payload and key, pauses and resumes a queue and a task for two workers, each action confirmed and answered in words", async () => {
    const ran: string[] = [];
    const mail = defineTask({ name: "console-mail", handler: async (_p, { job }) => void ran.push(job.id) });
    const report = defineTask({ name: "console-report", handler: async (_p, { job }) => void ran.push(job.id) });
    const workers = await Promise.all(
      ["w-console-1", "w-console-2"].map((workerId) => startWorker({ connectionString: db.url, tasks: [mail, report], heartbeatIntervalMs: 100, workerId, pollIntervalMs: 60_000 })),
    );
    const served = await dashboard(TOKEN);
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const confirm = async (question: RegExp) => {
      await expect.poll(() => page.locator("#confirm-text").textContent(), { timeout: 5_000 }).toMatch(question);
      await page.locator("#confirm-go").click();
    };
    try {
      await page.goto(served.url);
      await page.fill("#token", TOKEN);
      await page.locator("#token").dispatchEvent("change");
      // A job's page shows its payload and its key.
      const keyed = await enqueueJob(db.pool, { type: "console-unrun", key: "invoice-7", payload: { invoice: 7, lines: ["a"] }, runAt: new Date(Date.now() + 3_600_000) });
      await page.evaluate((id) => (window as unknown as { openJob: (id: string) => Promise<void> }).openJob(id), keyed.id);
      const detail = page.locator('[data-testid="detail"]');
      await detail.waitFor({ timeout: 5_000 });
      expect(await detail.locator("tr", { hasText: /^key/ }).textContent()).toBe("keyinvoice-7");
      expect(JSON.parse((await page.locator('[data-testid="payload"]').textContent())!)).toEqual({ invoice: 7, lines: ["a"] });
      expect(await page.locator('[data-testid="detail-actions"] button').allTextContents()).toEqual(["run now", "cancel"]);
      // Run now, then cancel, then delete: each confirmed, each answered, the page's buttons following the job's status.
      const actions = page.locator('[data-testid="detail-actions"]');
      await actions.locator('[data-action="run-now"]').click();
      await confirm(new RegExp(`^Run job ${keyed.id} now\\? It becomes due at once, ahead of its run time\\.$`));
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe(`job ${keyed.id} is due now: the next free worker takes it`);
      expect((await db.pool.query("SELECT run_at <= now() AS due FROM picket.jobs WHERE id = $1", [keyed.id])).rows[0].due).toBe(true);
      await actions.locator('[data-action="cancel"]').click();
      await confirm(/^Cancel job \d+\?/);
      await expect.poll(() => actions.locator("button").allTextContents(), { timeout: 5_000 }).toEqual(["delete"]);
      await actions.locator('[data-action="delete"]').click();
      await confirm(/and its recorded steps\? This cannot be undone\.$/);
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe(`job ${keyed.id} is deleted, with its recorded steps`);
      expect(await row(db.pool, keyed.id)).toBeUndefined();

      // A queue with a job in it, paused from its row.
      const first = await enqueueJob(db.pool, { type: "console-mail", queue: "outbox" });
      await expect.poll(() => ran, { timeout: 10_000 }).toContain(first.id);
      const held = await enqueueJob(db.pool, { type: "console-mail", queue: "outbox", runAt: new Date(Date.now() + 3_600_000) });
      const queueRow = page.locator('[data-queue="outbox"]');
      await queueRow.waitFor({ timeout: 10_000 });
      await queueRow.locator("button[data-pause]").click();
      await confirm(/^Pause queue outbox\? No worker claims its jobs until it is resumed; running jobs finish\.$/);
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe("queue outbox paused: no worker claims its jobs until it is resumed (running jobs finish)");
      await expect.poll(() => queueRow.locator('[data-col="state"]').textContent(), { timeout: 5_000 }).toBe("paused by dashboard");
      // Its head: the job it runs next, held while the queue is paused.
      expect(await queueRow.locator('[data-col="head"]').textContent()).toBe(`${held.id} console-mail`);
      // Due now, while paused: neither worker takes it; a job of another task, enqueued after, runs.
      await db.pool.query("UPDATE picket.jobs SET run_at = now() WHERE id = $1", [held.id]);
      const marker = await enqueueJob(db.pool, { type: "console-report" });
      await expect.poll(() => ran, { timeout: 10_000 }).toContain(marker.id);
      expect((await row(db.pool, held.id)).status).toBe("pending");

      // The task paused from its row in the queue-by-task table.
      const taskRow = page.locator('[data-task="console-report"]');
      await taskRow.locator("button[data-pause]").click();
      await confirm(/^Pause task console-report\?/);
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe("task console-report paused: no worker claims its jobs until it is resumed (running jobs finish)");
      const waiting = await enqueueJob(db.pool, { type: "console-report" });

      // Resumed: the workers are woken and run what waited, though no poll is due for a minute.
      await queueRow.locator("button[data-resume]").click();
      await confirm(/^Resume queue outbox\?/);
      await expect.poll(() => ran, { timeout: 10_000 }).toContain(held.id);
      expect(ran).not.toContain(waiting.id);
      await expect.poll(() => taskRow.locator("button[data-resume]").count(), { timeout: 5_000 }).toBe(1);
      await taskRow.locator("button[data-resume]").click();
      await confirm(/^Resume task console-report\?/);
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe("task console-report resumed: workers claim its jobs again");
      await expect.poll(() => ran, { timeout: 10_000 }).toContain(waiting.id);
    } finally {
      await page.close();
      await served.stop();
      for (const { supervisor } of workers) await supervisor.stop();
    }
  });

  it("browses a state's jobs by filter, page after page, and opens one by its id, all from the keyboard", async () => {
    // 60 dead jobs of one task, one of them with a needle in its error; a dead job of another task.
    await db.pool.query(`
      INSERT INTO picket.jobs (type, status, finished_at, last_error, key)
      SELECT 'browsed', 'dead', now() - g * interval '1 second', CASE WHEN g = 7 THEN 'the needle-7 broke' ELSE 'plain failure' END, 'key-' || g
      FROM generate_series(1, 60) AS g`);
    const other = await enqueueJob(db.pool, { type: "browsed-other", payload: { n: 1 } });
    await db.pool.query("UPDATE picket.jobs SET status = 'dead', finished_at = now() WHERE id = $1", [other.id]);
    const served = await dashboard();
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    try {
      await page.goto(served.url);
      const rows = page.locator('[data-testid="browse-row"]');
      // The dead tab, from the keyboard as a tab list goes: Tab reaches the selected tab only, the
      // arrows move (wrapping), and Tab goes on to the filter; a task typed and Enter pressed.
      await page.focus('[data-browse="ready"]');
      expect(await page.locator('#browse-tabs [tabindex="0"]').evaluateAll((tabs) => tabs.map((t) => t.getAttribute("data-browse")))).toEqual(["ready"]);
      for (const key of ["ArrowLeft", "ArrowLeft", "ArrowLeft"]) await page.keyboard.press(key);
      await expect.poll(() => page.locator('[data-browse="dead"]').getAttribute("aria-selected")).toBe("true");
      expect(await page.evaluate(() => document.activeElement?.getAttribute("data-browse"))).toBe("dead");
      await page.keyboard.press("Home");
      await expect.poll(() => page.evaluate(() => document.activeElement?.getAttribute("data-browse"))).toBe("ready");
      await page.keyboard.press("ArrowRight");
      await page.keyboard.press("End");
      await page.keyboard.press("ArrowLeft");
      await page.keyboard.press("ArrowLeft");
      await expect.poll(() => page.locator('[data-browse="dead"]').getAttribute("aria-selected")).toBe("true");
      await page.keyboard.press("Tab");
      expect(await page.evaluate(() => document.activeElement?.getAttribute("name"))).toBe("task");
      await page.keyboard.type("browsed");
      await page.keyboard.press("Enter");
      // The filtered list (the dead tab's own, unfiltered, may show for a moment before it).
      const tasksShown = () => rows.evaluateAll((trs) => trs.map((tr) => tr.children[1]!.textContent));
      await expect.poll(tasksShown, { timeout: 5_000 }).toEqual(Array.from({ length: 50 }, () => "browsed"));
      // Newest first: the job that died a second ago heads the list.
      expect(await rows.first().locator("td").nth(3).textContent()).toBe("key-1");
      await page.locator("#browse-more").click();
      await expect.poll(() => rows.count(), { timeout: 5_000 }).toBe(60);
      expect(await page.locator('[data-testid="browse-end"]').textContent()).toBe("end of the list");
      expect(new Set(await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-job-id")))).size).toBe(60);
      // Text in the error, any case.
      await page.fill('#browse-form input[name="text"]', "NEEDLE-7");
      await page.keyboard.press("Enter");
      await expect.poll(() => rows.count(), { timeout: 5_000 }).toBe(1);
      expect(await rows.first().textContent()).toContain("the needle-7 broke");
      // A job link takes the focus and opens its job with Enter.
      await rows.first().locator("a.job").focus();
      await page.keyboard.press("Enter");
      await expect.poll(() => page.locator('[data-testid="detail"]').textContent(), { timeout: 5_000 }).toContain("key-7");
      // The job's page took the focus: the next Tab is its close button, and Enter closes it.
      await expect.poll(() => page.evaluate(() => document.activeElement?.closest("#detail") !== null)).toBe(true);
      await page.keyboard.press("Tab");
      expect(await page.evaluate(() => document.activeElement?.id)).toBe("detail-close");
      await page.keyboard.press("Enter");
      await expect.poll(() => page.locator("#detail").count()).toBe(0);
      // An id typed in the search box opens that job, whatever the filters.
      await page.fill('#browse-form input[name="text"]', other.id);
      await page.keyboard.press("Enter");
      await expect.poll(() => page.locator("#detail-id").textContent(), { timeout: 5_000 }).toBe(other.id);
      // Closed, it stays closed when the list is read again (another tab), the id still typed.
      await page.locator("#detail-close").click();
      await page.locator('#browse-tabs [data-browse="scheduled"]').click();
      await expect.poll(() => page.locator('#browse-tabs [aria-selected="true"]').getAttribute("data-browse")).toBe("scheduled");
      await page.locator('#browse-tabs [data-browse="ready"]').click();
      await page.locator("#browse-results").waitFor();
      expect(await page.locator("#detail").count()).toBe(0);
      expect(new URL(page.url()).hash).toBe("");
      // A filter the browser refuses is said, not a blank list.
      await page.fill('#browse-form input[name="text"]', "x".repeat(201));
      await page.keyboard.press("Enter");
      await expect.poll(() => page.locator('[data-testid="browse-error"]').textContent(), { timeout: 5_000 }).toMatch(/^picket: browse filter text must be text of at most 200 characters/);
    } finally {
      await page.close();
      await served.stop();
    }
  });

  it("runs a bulk action over the filter shown, after confirming its count, and keeps things as they are when told to", async () => {
    await db.pool.query(`
      INSERT INTO picket.jobs (type, status, queue, run_at) SELECT 'bulked', 'pending', CASE WHEN g <= 30 THEN 'bulk-q' ELSE 'bulk-other' END, now() + interval '1 hour'
      FROM generate_series(1, 35) AS g`);
    await db.pool.query(`INSERT INTO picket.jobs (type, status, finished_at) SELECT 'bulk-dead', 'dead', now() FROM generate_series(1, 3)`);
    const served = await dashboard(TOKEN);
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const count = async (sql: string) => (await db.pool.query(sql)).rows[0].n as number;
    try {
      await page.goto(served.url);
      await page.fill("#token", TOKEN);
      await page.locator("#token").dispatchEvent("change");
      await page.locator('[data-browse="scheduled"]').click();
      await page.fill('#browse-form input[name="queue"]', "bulk-q");
      await page.keyboard.press("Enter");
      await expect
        .poll(() => page.locator('[data-testid="browse-row"]').evaluateAll((trs) => trs.map((tr) => tr.children[2]!.textContent)), { timeout: 5_000 })
        .toEqual(Array.from({ length: 30 }, () => "bulk-q"));
      await page.locator('[data-bulk="cancel"]').click();
      await expect.poll(() => page.locator("#confirm-text").textContent(), { timeout: 5_000 }).toBe(
        "Cancel 30 scheduled jobs in queue bulk-q? Pending ones never run; running ones are told to stop. At most that many are changed, in batches.",
      );
      expect(await page.locator("#confirm-go").textContent()).toBe("cancel 30");
      await page.locator("#confirm-go").click();
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe("30 jobs cancelled (1 batch)");
      expect(await count("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'bulked' AND status = 'cancelled' AND queue = 'bulk-q'")).toBe(30);
      expect(await count("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'bulked' AND status = 'pending'")).toBe(5);
      await expect.poll(() => page.locator('[data-testid="browse-empty"]').count(), { timeout: 5_000 }).toBe(1);
      // Asked, then kept as they are: nothing changes.
      await page.locator('[data-browse="dead"]').click();
      await page.fill('#browse-form input[name="queue"]', "");
      await page.fill('#browse-form input[name="task"]', "bulk-dead");
      await page.keyboard.press("Enter");
      await page.locator('[data-bulk="retry"]').click();
      await expect.poll(() => page.locator("#confirm-text").textContent(), { timeout: 5_000 }).toMatch(/^Retry 3 dead jobs of task bulk-dead\?/);
      await page.keyboard.press("Escape");
      expect(await count("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'bulk-dead' AND status = 'dead'")).toBe(3);
    } finally {
      await page.close();
      await served.stop();
    }
  });

  it("lists a hundred workers holding 10,000 jobs, first rendered within a generous bound, each worker's page on demand", async () => {
    // 100 workers' heartbeats, each sampling 100 held jobs; the 10,000 jobs processing in the table.
    await db.pool.query(`
      INSERT INTO picket.jobs (type, status, claim_token, locked_by, locked_at, lock_until, attempts)
      SELECT 'held-many', 'processing', gen_random_uuid(), 'w-many-' || (g % 100), now(), now() + interval '1 hour', 1 FROM generate_series(0, 9999) AS g`);
    const { rows: held } = await db.pool.query("SELECT id, locked_by FROM picket.jobs WHERE type = 'held-many' ORDER BY id");
    for (let w = 0; w < 100; w++) {
      const id = `w-many-${w}`;
      const jobs = held.filter((row) => row.locked_by === id).map((row) => ({ id: row.id, type: "held-many", state: "running" }));
      await beat(db.pool, { id, host: `host-${w % 10}`, pid: 1000 + w, version: "test", startedAt: new Date(), concurrency: 100, state: "running", jobs, running: jobs.length, waiting: 0, tasks: ["held-many"], completedPerSecond: {} });
    }
    const served = await dashboard();
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      const snapshot = await (await fetch(`${served.url}api/snapshot`)).json();
      // The live snapshot carries the workers' rows, not the 10,000 jobs they sampled.
      expect(snapshot.workers.filter((w: { id: string }) => w.id.startsWith("w-many-")).length).toBe(100);
      expect(snapshot.workers.every((w: object) => !("jobs" in w))).toBe(true);
      await page.goto(served.url);
      await expect.poll(() => page.locator('[data-testid="worker"][data-worker-id^="w-many-"]').count(), { timeout: 10_000 }).toBe(100);
      const firstRender = await page.evaluate(() => performance.getEntriesByName("picket-first-render")[0]?.startTime ?? null);
      // The issue asks for 300 ms; measured on an idle machine in docs/benchmarks.md. Here, a bound a loaded CI machine keeps.
      expect(firstRender).not.toBeNull();
      expect(firstRender!).toBeLessThan(5_000);
      process.stdout.write(`dashboard first render with 100 workers and 10,000 held jobs: ${Math.round(firstRender!)} ms\n`);
      // A worker's page: its jobs from the table (attempt, how long held), their machines from its heartbeat.
      await page.locator('[data-worker-id="w-many-7"] a[data-worker]').click();
      await expect.poll(() => page.locator('[data-testid="worker-job"]').count(), { timeout: 5_000 }).toBe(100);
      expect(await page.locator('[data-testid="worker-job"] [data-col="state"]').first().textContent()).toBe("running");
    } finally {
      await page.close();
      await served.stop();
      await db.pool.query("DELETE FROM picket.workers WHERE id LIKE 'w-many-%'");
      await db.pool.query("DELETE FROM picket.jobs WHERE type = 'held-many'");
    }
  });

  it("draws the hour and the day the database kept, with time axes, at the page's first load", async () => {
    await db.pool.query(`
      INSERT INTO picket.job_stats (minute, type, completed, failed, dead, started, pickup_ms)
      SELECT date_trunc('minute', now()) - g * interval '1 minute', 'charted', 10 + g, g % 3, 0, 10, 250 FROM generate_series(0, 50) AS g`);
    await db.pool.query(`
      INSERT INTO picket.job_depth (minute, type, ready, scheduled, retrying, processing)
      SELECT date_trunc('minute', now()) - g * interval '1 minute', 'charted', g, 0, 0, 0 FROM generate_series(0, 50) AS g`);
    const served = await dashboard();
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      await page.goto(served.url);
      for (const chart of ["completed", "failed", "pickup", "ready"]) {
        const plot = page.locator(`[data-chart="${chart}"]`);
        await plot.locator("canvas").waitFor({ timeout: 10_000 });
        // A time axis below, a value axis beside, and the task in the legend.
        expect(await plot.locator(".u-axis").count(), chart).toBeGreaterThanOrEqual(2);
        expect(await plot.locator(".u-legend").textContent(), chart).toContain("charted");
      }
      const title = async () => page.locator('[data-chart="completed"] .u-title').textContent();
      expect(await title()).toBe("jobs completed");
      await page.locator('[data-range="day"]').click();
      await expect.poll(() => page.locator('[data-range="day"]').getAttribute("aria-selected")).toBe("true");
      await page.locator('[data-chart="completed"] canvas').waitFor({ timeout: 10_000 });
      const response = await fetch(`${served.url}api/history?range=week`);
      expect(response.status).toBe(400);
      expect((await response.json()).error).toBe('range is "hour" or "day" (got "week")');
      const script = await fetch(`${served.url}assets/uplot.js`);
      expect(script.headers.get("content-type")).toMatch(/^text\/javascript/);
      expect((await script.text()).length).toBeGreaterThan(10_000);
    } finally {
      await page.close();
      await served.stop();
      await db.pool.query("DELETE FROM picket.job_stats WHERE type = 'charted'");
      await db.pool.query("DELETE FROM picket.job_depth WHERE type = 'charted'");
    }
  });

  it("fits a phone's width, a laptop's and a wide screen's without sideways scrolling", async () => {
    const busy = defineTask({ name: "layout-task-with-a-rather-long-name", handler: () => new Promise<never>(() => undefined) });
    await enqueueJob(db.pool, { type: "layout-task-with-a-rather-long-name", queue: "layout-queue" });
    await enqueueJob(db.pool, { type: "layout-waiting", runAt: new Date(Date.now() + 3_600_000) });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [busy], heartbeatIntervalMs: 100, workerId: "w-layout", drainTimeoutMs: 100 });
    const served = await dashboard(TOKEN);
    try {
      for (const width of [420, 1024, 1600]) {
        const page = await browser.newPage({ viewport: { width, height: 900 } });
        try {
          await page.goto(served.url);
          await page.locator('[data-testid="worker"][data-worker-id="w-layout"]').waitFor({ timeout: 10_000 });
          await page.locator('[data-testid="worker"][data-worker-id="w-layout"] a[data-worker]').click();
          await page.locator('[data-testid="worker-job"]').waitFor({ timeout: 10_000 });
          await page.locator('[data-queue="layout-queue"]').waitFor({ timeout: 10_000 });
          // The page itself never scrolls sideways; a wide table scrolls inside its own panel.
          expect(await page.evaluate(() => document.documentElement.scrollWidth), `${width}px`).toBeLessThanOrEqual(width);
          if (process.env.PICKET_SCREENSHOTS === "1") await page.screenshot({ path: `docs/dashboard-${width}.png`, fullPage: true });
        } finally {
          await page.close();
        }
      }
    } finally {
      await served.stop();
      await supervisor.force();
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
