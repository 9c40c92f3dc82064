// The dashboard shows schedules: in the snapshot its page reads, and as a table in a real Chromium.
import type { Server } from "node:http";
import { Effect, Fiber } from "effect";
import { describe, expect, it } from "vitest";
import { upsertSchedule } from "../src/db/index.ts";
import { createDashboardHandler, serveDashboard } from "../src/dashboard/server.ts";
import { useTestDatabase } from "./support/db.ts";
import { freePort } from "./support/ports.ts";
import { launchChromium } from "./support/browser.ts";

const db = useTestDatabase();

describe("schedules on the dashboard", () => {
  it("lists each schedule with its next run, in the snapshot and on the page", async () => {
    await upsertSchedule(db.pool, { name: "hourly-report", task: "report", cron: "0 * * * *", timezone: "Europe/Paris", missed: "skip" });
    await db.pool.query("UPDATE picket.schedules SET last_tick = '2030-01-01T00:00:00Z'");
    const { handler, dispose } = createDashboardHandler({ db: db.pool });
    let stopServer = async () => undefined;
    const browser = await launchChromium();
    try {
      const snapshot = await (await handler(new Request("http://service.local/api/snapshot"))).json();
      expect(snapshot.schedules).toMatchObject([
        {
          name: "hourly-report", task: "report", cron: "0 * * * *", timezone: "Europe/Paris", missed: "skip", nextRun: "2030-01-01T01:00:00.000Z",
          nextRuns: ["2030-01-01T01:00:00.000Z", "2030-01-01T02:00:00.000Z", "2030-01-01T03:00:00.000Z"],
        },
      ]);
      // The page as the browser draws it from the snapshots it is sent.
      const port = await freePort();
      let server: Server | undefined;
      const fiber = Effect.runFork(serveDashboard({ db: db.pool, port, host: "127.0.0.1", intervalMs: 200 }, (s) => (server = s)));
      stopServer = async () => {
        server?.closeAllConnections();
        await Effect.runPromise(Fiber.interrupt(fiber));
      };
      const url = `http://127.0.0.1:${port}/`;
      await expect.poll(() => fetch(url).then((r) => r.status, () => 0), { timeout: 10_000 }).toBe(200);
      const page = await browser.newPage();
      await page.goto(url);
      const row = page.locator('[data-testid="schedule-row"][data-schedule="hourly-report"]');
      await expect.poll(() => row.textContent(), { timeout: 10_000 }).toMatch(/hourly-report\s*report\s*0 \* \* \* \* Europe\/Paris\s*skip/);
      expect(await row.locator('[data-col="next"]').textContent()).toBe(await page.evaluate(() => new Date("2030-01-01T01:00:00.000Z").toLocaleString()));
      expect(await row.locator('[data-col="then"]').textContent()).toBe(await page.evaluate(() => ["2030-01-01T02:00:00.000Z", "2030-01-01T03:00:00.000Z"].map((t) => new Date(t).toLocaleString()).join(", ")));
    } finally {
      await browser.close();
      await stopServer();
      await dispose();
    }
  }, 60_000);

  it("pauses, resumes and triggers a schedule from its row, each confirmed, and shows the job its last tick made", async () => {
    await upsertSchedule(db.pool, { name: "console-nightly", task: "console-nightly-task", cron: "0 3 * * *" });
    // Its last tick fired a job, which died.
    const tick = "2026-01-02T03:00:00.000Z";
    await db.pool.query("UPDATE picket.schedules SET last_tick = $1 WHERE name = 'console-nightly'", [tick]);
    const { rows } = await db.pool.query(
      "INSERT INTO picket.jobs (type, status, key, finished_at) VALUES ('console-nightly-task', 'dead', $1, now()) RETURNING id",
      [`schedule:console-nightly:${tick}`],
    );
    const token = "schedules-token";
    const port = await freePort();
    let server: Server | undefined;
    const fiber = Effect.runFork(serveDashboard({ db: db.pool, port, host: "127.0.0.1", intervalMs: 200, token }, (s) => (server = s)));
    const browser = await launchChromium();
    try {
      const url = `http://127.0.0.1:${port}/`;
      await expect.poll(() => fetch(url).then((r) => r.status, () => 0), { timeout: 10_000 }).toBe(200);
      const page = await browser.newPage();
      await page.goto(url);
      await page.fill("#token", token);
      await page.locator("#token").dispatchEvent("change");
      const row = page.locator('[data-testid="schedule-row"][data-schedule="console-nightly"]');
      await expect.poll(() => row.locator('[data-col="job"]').textContent(), { timeout: 10_000 }).toBe(`${rows[0].id} dead`);
      const confirm = async (question: RegExp) => {
        await expect.poll(() => page.locator("#confirm-text").textContent(), { timeout: 5_000 }).toMatch(question);
        await page.locator("#confirm-go").click();
      };
      await row.locator('[data-schedule-action="pause"]').click();
      await confirm(/^Pause schedule console-nightly\?/);
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe("schedule console-nightly paused: it fires no tick until resumed");
      await expect.poll(() => row.locator('[data-col="state"]').textContent(), { timeout: 5_000 }).toBe("paused by dashboard");
      await row.locator('[data-schedule-action="trigger"]').click();
      await confirm(/^Trigger schedule console-nightly now\?/);
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toMatch(/^schedule console-nightly triggered: job \d+ made now, as a tick would make it$/);
      expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'console-nightly-task' AND status = 'pending'")).rows[0].n).toBe(1);
      await row.locator('[data-schedule-action="resume"]').click();
      await confirm(/^Resume schedule console-nightly\?/);
      await expect.poll(() => row.locator('[data-col="state"]').textContent(), { timeout: 5_000 }).toBe("running");
    } finally {
      await browser.close();
      server?.closeAllConnections();
      await Effect.runPromise(Fiber.interrupt(fiber));
    }
  }, 60_000);
});
