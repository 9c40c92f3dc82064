// The console's flows in a real headless Chromium (test/support/browser.ts): the list of flows, a
// flow's graph with each job in its status (a 100-way fan-out drawn as its first jobs and a count of
// the rest), a job opened from the graph with its statechart lit while it runs, and the flow cancelled
// from its page (confirmed, answered, every job cancelled, the running one's handler stopped).
import type { Server } from "node:http";
import { Effect, Fiber } from "effect";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { enqueueFlow, getFlow } from "../src/db/index.ts";
import { serveDashboard } from "../src/dashboard/server.ts";
import { defineTask } from "../src/runtime/task.ts";
import { launchChromium } from "./support/browser.ts";
import { useTestDatabase } from "./support/db.ts";
import { freePort } from "./support/ports.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();
const TOKEN = "flows-console-token";

let browser: Browser;
beforeAll(async () => {
  browser = await launchChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
});

describe("flows in the console", () => {
  it("lists flows, draws one's graph with each job's status, opens a running job's machine, and cancels the flow", async () => {
    const stopped: string[] = [];
    const quick = defineTask({ name: "fc.quick", handler: async () => "done" });
    const slow = defineTask({
      name: "fc.slow",
      handler: (_p, ctx) =>
        new Promise((_resolve, reject) => ctx.signal.addEventListener("abort", () => (stopped.push(ctx.job.id), reject(new Error("stopped"))))),
    });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [quick, slow], heartbeatIntervalMs: 100 });
    const { flow, jobs } = await enqueueFlow(db.pool, {
      name: "photo-album",
      jobs: [
        { name: "upload", type: "fc.quick" },
        ...Array.from({ length: 100 }, (_, i) => ({ name: `resize-${i}`, type: "fc.quick", dependsOn: ["upload"] })),
        { name: "render", type: "fc.slow", dependsOn: Array.from({ length: 100 }, (_, i) => `resize-${i}`) },
        { name: "email", type: "fc.quick", dependsOn: ["render"] },
      ],
    });
    // The album waits on its slow render.
    await expect.poll(async () => (await db.pool.query("SELECT status FROM picket.jobs WHERE id = $1", [jobs["render"]!.id])).rows[0].status, { timeout: 20_000 }).toBe("processing");

    const port = await freePort();
    let server: Server | undefined;
    const fiber = Effect.runFork(serveDashboard({ db: db.pool, port, host: "127.0.0.1", intervalMs: 200, token: TOKEN }, (s) => (server = s)));
    const url = `http://127.0.0.1:${port}/`;
    await expect.poll(() => fetch(url).then((r) => r.status, () => 0), { timeout: 10_000 }).toBe(200);
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      await page.goto(url);
      await page.fill("#token", TOKEN);
      await page.locator("#token").dispatchEvent("change");
      const listed = page.locator(`[data-testid="flows"] tr[data-flow-id="${flow.id}"]`);
      await listed.waitFor({ timeout: 10_000 });
      expect((await listed.locator("td").allTextContents()).slice(0, 4)).toEqual([flow.id, "photo-album", "running", "103"]);

      // Its graph: a column per depth; the fan-out's column shows its first jobs and counts the rest.
      await listed.locator("a").click();
      const graph = page.locator('[data-testid="flow-graph"]');
      await graph.waitFor({ timeout: 5_000 });
      expect(await page.locator('[data-testid="flow-summary"]').textContent()).toMatch(/^photo-album: running, 103 jobs — 2 live, 0 dead, 0 cancelled/);
      expect(await graph.locator(`[data-job="${jobs["upload"]!.id}"]`).getAttribute("data-status")).toBe("completed");
      expect(await graph.locator(`[data-job="${jobs["render"]!.id}"]`).getAttribute("data-status")).toBe("processing");
      expect(await graph.locator(`[data-job="${jobs["email"]!.id}"]`).getAttribute("data-status")).toBe("waiting");
      expect(await graph.locator("g.node.st-completed").count()).toBe(12);
      expect(await graph.locator("g.node.more text").allTextContents()).toEqual(["+89 more", "89 completed"]);
      if (process.env.PICKET_SCREENSHOTS === "1") await page.locator("#flow-panel").screenshot({ path: "docs/dashboard-flow.png" });

      // A job opened from the graph: the running render, its machine lit in its state.
      await graph.locator(`[data-job="${jobs["render"]!.id}"]`).click();
      await page.locator('[data-testid="job-machine"]').waitFor({ timeout: 5_000 });
      expect(await page.locator('[data-testid="job-machine"] .chart').getAttribute("data-lit")).toMatch(/^running/);
      expect(await page.locator('[data-testid="job-flow"]').textContent()).toBe(`${flow.id} as render`);

      // Cancelled from its page: asked first, answered, the render's handler stopped, the email cancelled with it.
      await page.locator('[data-action="cancel-flow"]').click();
      await expect.poll(() => page.locator("#confirm-text").textContent(), { timeout: 5_000 }).toMatch(new RegExp(`^Cancel flow ${flow.id}\\? Every live job of it is cancelled`));
      await page.locator("#confirm-go").click();
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe(`flow ${flow.id}: cancelled 2 jobs and what depended on them`);
      await expect.poll(() => stopped, { timeout: 10_000 }).toEqual([jobs["render"]!.id]);
      expect(await getFlow(db.pool, flow.id)).toMatchObject({ status: "cancelled", live: 0, cancelled: 2 });
      await expect.poll(() => graph.locator(`[data-job="${jobs["email"]!.id}"]`).getAttribute("data-status"), { timeout: 5_000 }).toBe("cancelled");
      await expect.poll(() => listed.locator("td").nth(2).textContent(), { timeout: 10_000 }).toBe("cancelled");
    } finally {
      await page.close();
      server?.closeAllConnections();
      await Effect.runPromise(Fiber.interrupt(fiber));
      await supervisor.stop();
    }
  }, 90_000);
});
