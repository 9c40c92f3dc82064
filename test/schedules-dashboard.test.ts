// The dashboard shows schedules: in the snapshot its page reads, and as a table in a real Chromium.
import { existsSync } from "node:fs";
import type { Server } from "node:http";
import { Effect, Fiber } from "effect";
import { chromium } from "playwright-core";
import { describe, expect, it } from "vitest";
import { upsertSchedule } from "../src/db/index.ts";
import { createDashboardHandler, serveDashboard } from "../src/dashboard/server.ts";
import { useTestDatabase } from "./support/db.ts";
import { freePort } from "./support/ports.ts";

const db = useTestDatabase();
const CHROMIUM = process.env.CHROMIUM_PATH ?? (existsSync("/usr/bin/chromium") ? "/usr/bin/chromium" : "chromium");

describe("schedules on the dashboard", () => {
  it("lists each schedule with its next run, in the snapshot and on the page", async () => {
    await upsertSchedule(db.pool, { name: "hourly-report", task: "report", cron: "0 * * * *", timezone: "Europe/Paris", missed: "skip" });
    await db.pool.query("UPDATE picket.schedules SET last_tick = '2030-01-01T00:00:00Z'");
    const { handler, dispose } = createDashboardHandler({ db: db.pool });
    let stopServer = async () => undefined;
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-dev-shm-usage"] });
    try {
      const snapshot = await (await handler(new Request("http://service.local/api/snapshot"))).json();
      expect(snapshot.schedules).toMatchObject([
        { name: "hourly-report", task: "report", cron: "0 * * * *", timezone: "Europe/Paris", missed: "skip", nextRun: "2030-01-01T01:00:00.000Z" },
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
    } finally {
      await browser.close();
      await stopServer();
      await dispose();
    }
  }, 60_000);
});
