// The console's workflows: in a real headless Chromium (test/support/browser.ts), instances a real
// worker drives (a task, an `after` timer, a parallel state, events sent) listed with their counts by
// state; an instance's page with its statechart lit in its state (every active leaf of a parallel
// one), its history in order, its inbox with a timer's due time, and the jobs it started (each opening
// the job's page); an event sent and the instance cancelled from the page. Then the routes through
// the handler a service mounts: what each answers for a bad id, an unknown one, a finished instance,
// and which need the token.
import type { Server } from "node:http";
import { Effect, Fiber } from "effect";
import type { Browser, Page } from "playwright-core";
import { assign, setup } from "xstate";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createDashboardHandler, serveDashboard, type DashboardOptions } from "../src/dashboard/server.ts";
import { getWorkflow, sendToWorkflow, startWorkflow, workflowHistory, workflowJobs } from "../src/db/workflows.ts";
import type { JobId } from "../src/db/job-row.ts";
import { machineConfig } from "../src/machines/diagram.ts";
import { createLogger } from "../src/runtime/logger.ts";
import { defineTask } from "../src/runtime/task.ts";
import { defineWorkflow, task } from "../src/workflows/definition.ts";
import { launchChromium } from "./support/browser.ts";
import { useTestDatabase } from "./support/db.ts";
import { freePort } from "./support/ports.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();
/** An instance's events: the history in the order applied, then the inbox. */
const allEvents = async (id: string) => {
  const { history, inbox } = await workflowHistory(db.pool, id);
  return [...history, ...inbox];
};
const TOKEN = "workflows-console-token";

/** Polls `read` until it gives `want` (compared as JSON), or fails saying what it last read. */
const until = async <T>(what: string, read: () => Promise<T>, want: T, timeoutMs = 15_000): Promise<void> => {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < deadline) {
    last = await read();
    if (JSON.stringify(last) === JSON.stringify(want)) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`timed out waiting for ${what}: last ${JSON.stringify(last)}, wanted ${JSON.stringify(want)}`);
};
const stateOf = async (id: JobId) => (await getWorkflow(db.pool, id))?.state ?? null;

// An order: charged by a task, settled by a short timer, then it waits for APPROVE (or gives up
// after an hour); approved, it packs and invoices at once (a parallel state, the invoice overdue
// after a day), and is delivered when both are done.
const chargeCard = task<{ amount: number }, { receipt: string }>("wd.charge");
const order = defineWorkflow({
  name: "wd.order",
  machine: setup({
    types: {} as { context: { amount: number; receipt: string | null }; input: { amount: number } },
    actors: { chargeCard },
  }).createMachine({
    id: "order",
    context: ({ input }) => ({ amount: input.amount, receipt: null }),
    initial: "charging",
    states: {
      charging: {
        invoke: {
          id: "charge",
          src: "chargeCard",
          input: ({ context }) => ({ amount: context.amount }),
          onDone: { target: "settling", actions: assign({ receipt: ({ event }) => event.output.receipt }) },
        },
      },
      settling: { after: { 200: "awaitingApproval" } },
      awaitingApproval: { after: { 3_600_000: "expired" }, on: { APPROVE: "fulfilling", REJECT: "rejected" } },
      fulfilling: {
        type: "parallel",
        onDone: "delivered",
        states: {
          packing: { initial: "picking", states: { picking: { on: { PACKED: "packed" } }, packed: { type: "final" } } },
          invoice: {
            initial: "drafting",
            states: { drafting: { after: { 86_400_000: "overdue" }, on: { INVOICED: "sent" } }, overdue: { on: { INVOICED: "sent" } }, sent: { type: "final" } },
          },
        },
      },
      delivered: { type: "final" },
      rejected: { type: "final" },
      expired: { type: "final" },
    },
  }),
});
const charge = defineTask({ name: "wd.charge", handler: async (payload: { amount: number }) => ({ receipt: `r-${payload.amount}` }) });

describe("workflows in the console", () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await launchChromium();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
  });

  /** The text of each cell of each row of a table, by the cells' data-col. */
  const rows = (page: Page, table: string, cols: string[]) =>
    page.locator(`[data-testid="${table}"] tbody tr`).evaluateAll((trs, names) => trs.map((tr) => names.map((n) => tr.querySelector(`[data-col="${n}"]`)?.textContent?.trim() ?? null)), cols);

  it("lists instances by state, draws one's statechart lit with its history, inbox and jobs, sends it events and cancels it", async () => {
    await startWorker({ connectionString: db.url, tasks: [charge], workflows: [order] });
    const a = await startWorkflow(db.pool, order, { amount: 5 });
    const b = await startWorkflow(db.pool, order, { amount: 7 }, { key: "order-7" });
    await until("both orders awaiting approval", async () => [await stateOf(a.id), await stateOf(b.id)], ["awaitingApproval", "awaitingApproval"]);
    const [chargeJob] = await workflowJobs(db.pool, a.id);
    expect(chargeJob).toMatchObject({ type: "wd.charge", status: "completed" });

    const port = await freePort();
    let server: Server | undefined;
    const fiber = Effect.runFork(serveDashboard({ db: db.pool, port, host: "127.0.0.1", intervalMs: 200, token: TOKEN, logger: createLogger({ level: "silent" }) }, (s) => (server = s)));
    const url = `http://127.0.0.1:${port}/`;
    await expect.poll(() => fetch(url).then((r) => r.status, () => 0), { timeout: 10_000 }).toBe(200);
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      await page.goto(url);
      await page.fill("#token", TOKEN);
      await page.locator("#token").dispatchEvent("change");

      // The panel: both counted in their state, each listed with its status and state.
      const counted = page.locator('[data-testid="workflow-counts"] tr[data-name="wd.order"][data-status="running"]');
      await counted.waitFor({ timeout: 10_000 });
      expect(await counted.getAttribute("data-state")).toBe("awaitingApproval");
      expect(await counted.locator("td").allTextContents()).toEqual(["wd.order", "running", "awaitingApproval", "2"]);
      const listed = page.locator(`[data-testid="workflows"] tr[data-workflow-id="${a.id}"]`);
      expect((await listed.locator("td").allTextContents()).slice(0, 5)).toEqual([a.id, "wd.order", "", "running", "awaitingApproval"]);
      expect((await page.locator(`[data-testid="workflows"] tr[data-workflow-id="${b.id}"] td`).allTextContents()).slice(0, 5)).toEqual([
        b.id,
        "wd.order",
        "order-7",
        "running",
        "awaitingApproval",
      ]);
      // Newest first.
      expect(await page.locator('[data-testid="workflows"] tbody tr').evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-workflow-id")))).toEqual([b.id, a.id]);

      // Its page: the statechart with every leaf drawn and the current one lit.
      await listed.locator("a[data-workflow]").click();
      const chart = page.locator('[data-testid="workflow-machine"] [data-machine="workflow"]');
      await chart.waitFor({ timeout: 5_000 });
      expect(await page.locator('[data-testid="workflow-summary"] [data-testid="workflow-status"]').textContent()).toBe("running");
      expect(await chart.locator(".state").count()).toBe(11);
      const lit = chart.locator(".state.lit");
      expect(await lit.count()).toBe(1);
      expect(await lit.getAttribute("data-state")).toBe("awaitingApproval");
      expect(await lit.locator("text").textContent()).toBe("awaitingApproval");
      expect(JSON.parse((await page.locator('[data-testid="workflow-context"]').textContent())!)).toEqual({ amount: 5, receipt: "r-5" });
      // Its history in the order applied: the start, the task's result, the timer; the hour's timer waits.
      expect(await rows(page, "workflow-history", ["kind", "event", "outcome", "state"])).toEqual([
        ["start", 'start input {"amount":5}', "applied", "charging"],
        ["task", `task job ${chargeJob!.id} completed {"receipt":"r-5"}`, "applied", "settling"],
        ["timer", "after 200 ms", "applied", "awaitingApproval"],
      ]);
      expect(await rows(page, "workflow-inbox", ["kind", "event"])).toEqual([["timer", "after 1 h"]]);
      expect(await page.locator('[data-testid="workflow-inbox"] [data-col="due"]').textContent()).toMatch(/\(in (59|60) min\)$/);
      // The job it started, linked to the job's page.
      const jobLink = page.locator(`[data-testid="workflow-jobs"] tr[data-job-id="${chargeJob!.id}"] a.job`);
      expect(await page.locator(`[data-testid="workflow-jobs"] tr[data-job-id="${chargeJob!.id}"] td`).allTextContents()).toEqual(
        expect.arrayContaining([chargeJob!.id, "wd.charge", "completed", "1"]),
      );
      await jobLink.click();
      await expect.poll(() => page.locator("#detail-id").textContent(), { timeout: 5_000 }).toBe(chargeJob!.id);
      expect(JSON.parse((await page.locator('[data-testid="payload"]').textContent())!)).toEqual({ amount: 5 });
      await page.locator("#detail-close").click();

      // An event sent from the page: asked first, answered, applied; the parallel state lights both its regions.
      expect(await page.locator('[data-testid="workflow-send"] button.chip').allTextContents()).toEqual(["APPROVE", "REJECT"]);
      await page.fill("#workflow-event", "APPROVE");
      await page.locator('[data-action="send-event"]').click();
      await expect.poll(() => page.locator("#confirm-text").textContent(), { timeout: 5_000 }).toMatch(new RegExp(`^Send \\{"type":"APPROVE"\\} to workflow ${a.id}\\? `));
      await page.locator("#confirm-go").click();
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toMatch(new RegExp(`^APPROVE sent to workflow ${a.id} \\(event \\d+\\): a worker that runs it applies it next$`));
      // (In the order the machine's recorded config, jsonb, keeps its keys: not the order written.)
      const litStates = () => lit.evaluateAll((gs) => gs.map((g) => g.getAttribute("data-state")).sort());
      await expect.poll(litStates, { timeout: 10_000 }).toEqual(["fulfilling.invoice.drafting", "fulfilling.packing.picking"]);
      expect((await lit.locator("text:not(.path)").allTextContents()).sort()).toEqual(["drafting", "picking"]);
      expect((await chart.getAttribute("data-lit"))!.split(" ").sort()).toEqual(["fulfilling.invoice.drafting", "fulfilling.packing.picking"]);
      // The hour's timer went with the state that set it; the day's one waits now.
      await expect.poll(() => rows(page, "workflow-inbox", ["kind", "event"]), { timeout: 5_000 }).toEqual([["timer", "after 24 h"]]);
      // The next one by its suggestion: one region moves on, the other stays.
      await page.locator('[data-testid="workflow-send"] button.chip[data-event="PACKED"]').click();
      expect(await page.inputValue("#workflow-event")).toBe("PACKED");
      await page.locator('[data-action="send-event"]').click();
      await page.locator("#confirm-go").click();
      await expect.poll(litStates, { timeout: 10_000 }).toEqual(["fulfilling.invoice.drafting", "fulfilling.packing.packed"]);
      // An event no state takes is recorded as dropped, and says why.
      await sendToWorkflow(db.pool, a.id, { type: "NUDGE", from: "support" });
      await expect.poll(() => rows(page, "workflow-history", ["kind", "event", "outcome", "note", "state"]), { timeout: 10_000 }).toEqual([
        ["start", 'start input {"amount":5}', "applied", "", "charging"],
        ["task", `task job ${chargeJob!.id} completed {"receipt":"r-5"}`, "applied", "", "settling"],
        ["timer", "after 200 ms", "applied", "", "awaitingApproval"],
        // Sent from the page: the history names who sent them.
        ["send", "APPROVE", "applied", "by dashboard", "fulfilling.invoice.drafting, fulfilling.packing.picking"],
        ["send", "PACKED", "applied", "by dashboard", "fulfilling.invoice.drafting, fulfilling.packing.packed"],
        ["send", 'NUDGE {"from":"support"}', "dropped", "no transition took the event", "fulfilling.invoice.drafting, fulfilling.packing.packed"],
      ]);
      if (process.env.PICKET_SCREENSHOTS === "1") {
        await page.locator("#workflow-panel").screenshot({ path: "docs/dashboard-workflow.png", style: "#action { display: none !important; }" });
      }

      // Cancelled from its page: asked, answered, its timer dropped, no action offered any more.
      await page.locator('[data-action="cancel-workflow"]').click();
      await expect.poll(() => page.locator("#confirm-text").textContent(), { timeout: 5_000 }).toMatch(new RegExp(`^Cancel workflow ${a.id}\\? Nothing more is applied to it`));
      await page.locator("#confirm-go").click();
      await expect.poll(() => page.locator("#action").textContent(), { timeout: 5_000 }).toBe(`workflow ${a.id} cancelled: nothing more is applied, its inbox is dropped`);
      expect((await getWorkflow(db.pool, a.id))!.status).toBe("cancelled");
      await expect.poll(() => page.locator('[data-testid="workflow-status"]').textContent(), { timeout: 5_000 }).toBe("cancelled");
      expect(await page.locator('[data-action="cancel-workflow"], [data-testid="workflow-send"]').count()).toBe(0);
      // The cancel is the last entry, after the timer it dropped, and names who asked.
      await expect.poll(() => page.locator('[data-testid="workflow-history"] tbody tr').evaluateAll((trs) => trs.slice(-2).map((tr) => [tr.getAttribute("data-kind"), tr.getAttribute("data-outcome")])), {
        timeout: 5_000,
      }).toEqual([["timer", "dropped"], ["cancel", "applied"]]);
      expect(await page.locator('[data-testid="workflow-history"] tbody tr').last().textContent()).toContain("by dashboard");
      expect(await page.locator('[data-testid="workflow-inbox-empty"]').count()).toBe(1);
      // The list follows; a count picks the instances listed.
      await expect.poll(() => listed.locator("td").nth(3).textContent(), { timeout: 10_000 }).toBe("cancelled");
      await page.locator('[data-testid="workflow-counts"] tr[data-name="wd.order"][data-status="running"] a').click();
      await expect.poll(() => page.locator('[data-testid="workflows"] tbody tr').evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-workflow-id"))), { timeout: 5_000 }).toEqual([b.id]);
    } finally {
      await page.close();
      server?.closeAllConnections();
      await Effect.runPromise(Fiber.interrupt(fiber));
    }
  }, 90_000);

  it("an instance's page is named in the address: a reload and a second tab open it, following it live; back closes a job opened on it", async () => {
    await startWorker({ connectionString: db.url, tasks: [charge], workflows: [order] });
    const { id } = await startWorkflow(db.pool, order, { amount: 11 });
    await until("the order awaiting approval", () => stateOf(id), "awaitingApproval");
    const [chargeJob] = await workflowJobs(db.pool, id);
    const port = await freePort();
    let server: Server | undefined;
    const fiber = Effect.runFork(serveDashboard({ db: db.pool, port, host: "127.0.0.1", intervalMs: 200, token: TOKEN, logger: createLogger({ level: "silent" }) }, (s) => (server = s)));
    const url = `http://127.0.0.1:${port}/`;
    await expect.poll(() => fetch(url).then((r) => r.status, () => 0), { timeout: 10_000 }).toBe(200);
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const second = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const litIn = (p: Page) => () => p.locator('[data-testid="workflow-machine"] .state.lit').evaluateAll((gs) => gs.map((g) => g.getAttribute("data-state")).sort());
    try {
      await page.goto(url);
      await page.locator(`[data-testid="workflows"] tr[data-workflow-id="${id}"] a[data-workflow]`).click();
      await expect.poll(litIn(page), { timeout: 10_000 }).toEqual(["awaitingApproval"]);
      expect(new URL(page.url()).hash).toBe(`#workflow-${id}`);

      // Reloaded, and opened from its address in a second tab: the same instance, lit in its state.
      await page.reload();
      await expect.poll(() => page.locator("#workflow-id").textContent(), { timeout: 10_000 }).toBe(id);
      await expect.poll(litIn(page), { timeout: 10_000 }).toEqual(["awaitingApproval"]);
      await second.goto(`${url}#workflow-${id}`);
      await expect.poll(litIn(second), { timeout: 10_000 }).toEqual(["awaitingApproval"]);
      // Both follow it: an event sent elsewhere lights its next states in each.
      await sendToWorkflow(db.pool, id, { type: "APPROVE" });
      for (const p of [page, second]) await expect.poll(litIn(p), { timeout: 15_000 }).toEqual(["fulfilling.invoice.drafting", "fulfilling.packing.picking"]);

      // A job opened on it is named next; back shows the workflow again, the job's page closed.
      await page.locator(`[data-testid="workflow-jobs"] tr[data-job-id="${chargeJob!.id}"] a.job`).click();
      await expect.poll(() => page.locator("#detail-id").textContent(), { timeout: 5_000 }).toBe(chargeJob!.id);
      expect(new URL(page.url()).hash).toBe(`#job-${chargeJob!.id}`);
      await page.goBack();
      await expect.poll(() => page.locator("#detail-id").count(), { timeout: 5_000 }).toBe(0);
      expect(new URL(page.url()).hash).toBe(`#workflow-${id}`);
      expect(await page.locator("#workflow-id").textContent()).toBe(id);
      // Opened again and closed: the address names the workflow still open, which a reload shows.
      await page.locator(`[data-testid="workflow-jobs"] tr[data-job-id="${chargeJob!.id}"] a.job`).click();
      await page.locator("#detail-close").click();
      expect(new URL(page.url()).hash).toBe(`#workflow-${id}`);
      await page.reload();
      await expect.poll(() => page.locator("#workflow-id").textContent(), { timeout: 10_000 }).toBe(id);

      // An address cut short when pasted ("%zz" is no escape) opens nothing, and the page works.
      // (A page of its own: from the same page it would be a move within the document, no load.)
      await second.goto("about:blank");
      await second.goto(`${url}#worker-w%zz`);
      await second.locator('[data-testid="workflows"]').waitFor({ timeout: 10_000 });
      expect(await second.locator("#worker-id").count()).toBe(0);

      // Closed, it is named no more: a reload opens nothing.
      await page.locator("#workflow-close").click();
      expect(new URL(page.url()).hash).toBe("");
      await page.reload();
      await page.locator('[data-testid="workflows"]').waitFor({ timeout: 10_000 });
      expect(await page.locator("#workflow-panel").count()).toBe(0);
    } finally {
      await page.close();
      await second.close();
      server?.closeAllConnections();
      await Effect.runPromise(Fiber.interrupt(fiber));
    }
  }, 90_000);
});

describe("the workflow routes", () => {
  const disposals: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const dispose of disposals.splice(0)) await dispose();
  });
  const mounted = (options: Partial<DashboardOptions> = {}) => {
    const { handler, dispose } = createDashboardHandler({ db: db.pool, intervalMs: 50, logger: createLogger({ level: "silent" }), ...options });
    disposals.push(dispose);
    return async (path: string, init: RequestInit = {}) => {
      const response = await handler(new Request(`http://dash.test${path}`, init));
      return { status: response.status, body: await response.json() };
    };
  };
  const post = (body?: string, token = TOKEN): RequestInit => ({ method: "POST", headers: { authorization: `Bearer ${token}` }, ...(body === undefined ? {} : { body }) });

  it("list the newest instances without their data, with counts by status and state; a status that is none is 400", async () => {
    const first = await startWorkflow(db.pool, "wr.list", { secret: "s1" });
    const second = await startWorkflow(db.pool, "wr.list", { secret: "s2" });
    const request = mounted();
    const all = await request("/api/workflows?name=wr.list");
    expect(all.status).toBe(200);
    expect(all.body.workflows.map((w: { id: string }) => w.id)).toEqual([second.id, first.id]);
    expect(all.body.workflows[0]).toMatchObject({ name: "wr.list", status: "starting", state: null });
    for (const hidden of ["context", "output", "tasks"]) expect(all.body.workflows[0], hidden).not.toHaveProperty(hidden);
    expect(all.body.counts.filter((c: { name: string }) => c.name === "wr.list")).toEqual([{ name: "wr.list", status: "starting", state: null, count: 2 }]);
    expect((await request("/api/workflows?name=wr.list&status=running")).body.workflows).toEqual([]);
    expect((await request(`/api/workflows?name=wr.list&before=${second.id}`)).body.workflows.map((w: { id: string }) => w.id)).toEqual([first.id]);
    const bad = await request("/api/workflows?status=sleeping");
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/^picket: workflow status must be one of starting, running, done, failed, cancelled; got "sleeping"/);
  });

  it("an instance: 400 for an id that is none, 404 for an unknown one; its machine once a worker recorded it, its context, events and jobs in full", async () => {
    const request = mounted();
    for (const id of ["abc", "0", "1.5", "99999999999999999999"]) {
      const bad = await request(`/api/workflows/${id}`);
      expect(bad.status, id).toBe(400);
      expect(bad.body, id).toEqual({ error: `workflow id must be a positive integer (got ${JSON.stringify(id)})` });
    }
    expect(await request("/api/workflows/987654")).toEqual({ status: 404, body: { error: "no workflow 987654" } });

    const { id } = await startWorkflow(db.pool, order, { amount: 9 });
    const waiting = await request(`/api/workflows/${id}`);
    expect(waiting.status).toBe(200);
    expect(waiting.body).toMatchObject({ workflow: { id, status: "starting", fingerprint: null }, machine: null, history: [], historyTotal: 0, inboxTotal: 1, jobs: [] });
    expect(waiting.body.inbox).toMatchObject([{ kind: "start", event: { input: { amount: 9 } }, appliedAt: null }]);

    await startWorker({ connectionString: db.url, tasks: [charge], workflows: [order] });
    await until("the order awaiting approval", () => stateOf(id), "awaitingApproval");
    const found = await request(`/api/workflows/${id}`);
    expect(found.body.machine).toEqual(machineConfig(order.machine));
    expect(found.body.workflow).toMatchObject({ status: "running", state: "awaitingApproval", context: { amount: 9, receipt: "r-9" }, fingerprint: order.fingerprint });
    expect(found.body.history.map((e: { kind: string; state: unknown }) => [e.kind, e.state])).toEqual([["start", "charging"], ["task", "settling"], ["timer", "awaitingApproval"]]);
    expect(found.body.history[1].event).toEqual({ status: "completed", result: { receipt: "r-9" }, error: null });
    expect(found.body.inbox.map((e: { kind: string }) => e.kind)).toEqual(["timer"]);
    expect(found.body.jobs).toMatchObject([{ type: "wd.charge", status: "completed" }]);
  });

  it("the history shows the newest events and the inbox whatever their number", async () => {
    const { id } = await startWorkflow(db.pool, "wr.busy", null);
    // 600 events applied, written as the applier would have, and its start still waiting.
    await db.pool.query(
      `INSERT INTO picket.workflow_events (workflow_id, kind, event, applied_at, seq, outcome, state)
       SELECT $1, 'send', jsonb_build_object('type', 'E' || n), now() - (600 - n) * interval '1 second', n, 'applied', '"s"' FROM generate_series(1, 600) AS n`,
      [id],
    );
    const request = mounted();
    const page = (await request(`/api/workflows/${id}`)).body;
    expect(page.historyTotal).toBe(600);
    expect(page.history).toHaveLength(500);
    expect(page.history[0].event).toEqual({ type: "E101" });
    expect(page.history.at(-1).event).toEqual({ type: "E600" });
    expect(page.inboxTotal).toBe(1);
    expect(page.inbox).toMatchObject([{ kind: "start" }]);
  });

  it("cancel and send need the token, say which id is wrong or unknown, and answer a finished instance with 409", async () => {
    const { id } = await startWorkflow(db.pool, "wr.actions", null);
    const request = mounted({ token: TOKEN });
    for (const [path, what] of [[`/api/workflows/${id}/cancel`, "cancel workflow"], [`/api/workflows/${id}/send`, "send to workflow"]] as const) {
      const none = await request(path, { method: "POST", body: '{"type":"GO"}' });
      expect(none.status, path).toBe(401);
      expect(none.body, path).toEqual({
        error: `this action (${what}) needs the dashboard's token, and none was sent: type it in the token field at the top of the page (or send Authorization: Bearer <token>)`,
      });
      const wrong = await request(path, post('{"type":"GO"}', "not-it"));
      expect(wrong.status, path).toBe(401);
      expect(wrong.body.error, path).toMatch(/^the token sent is not this dashboard's token/);
      expect(await request(path.replace(id, "abc"), post('{"type":"GO"}'))).toEqual({ status: 400, body: { error: 'workflow id must be a positive integer (got "abc")' } });
      expect(await request(path.replace(id, "987654"), post('{"type":"GO"}'))).toEqual({ status: 404, body: { error: "no workflow 987654" } });
    }
    // A dashboard without a token takes no action; one behind a Host list refuses another Host first.
    const tokenless = await mounted()(`/api/workflows/${id}/send`, post('{"type":"GO"}'));
    expect(tokenless.status).toBe(403);
    expect(tokenless.body.error).toMatch(/^write actions are off/);
    const elsewhere = await mounted({ token: TOKEN, allowedHosts: ["dash.example"] })(`/api/workflows/${id}/cancel`, post());
    expect(elsewhere.status).toBe(403);
    expect(elsewhere.body.error).toMatch(/^this dashboard does not answer for the host "dash.test"/);
    // Reads behind the token when the dashboard says so.
    const reads = mounted({ token: TOKEN, tokenForReads: true });
    expect((await reads("/api/workflows")).status).toBe(401);
    expect((await reads(`/api/workflows/${id}`)).status).toBe(401);
    expect((await reads(`/api/workflows/${id}`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);

    // An event that is no event, or one a caller may not send: 400, in picket's words; nothing sent.
    expect(await request(`/api/workflows/${id}/send`, post("APPROVE"))).toEqual({ status: 400, body: { error: 'send the event as the request\'s body, JSON such as {"type":"APPROVE"} (got "APPROVE")' } });
    expect((await request(`/api/workflows/${id}/send`, post())).status).toBe(400);
    const internal = await request(`/api/workflows/${id}/send`, post('{"type":"xstate.done.actor.charge"}'));
    expect(internal.status).toBe(400);
    expect(internal.body.error).toMatch(/"xstate\.\*" events come from the workflow's tasks and timers/);
    expect((await request(`/api/workflows/${id}/send`, post('["GO"]'))).status).toBe(400);
    expect((await allEvents(id)).map((e) => e.kind)).toEqual(["start"]);

    const sent = await request(`/api/workflows/${id}/send`, post('{"type":"GO","by":"ana"}'));
    expect(sent.status).toBe(200);
    expect(sent.body).toEqual({ outcome: "applied", eventId: expect.stringMatching(/^\d+$/), message: expect.stringMatching(new RegExp(`^GO sent to workflow ${id} \\(event \\d+\\)`)) });
    expect((await allEvents(id)).map((e) => [e.kind, e.event, e.by])).toEqual([["start", { input: null }, null], ["send", { type: "GO", by: "ana" }, "dashboard"]]);

    const cancelled = await request(`/api/workflows/${id}/cancel`, { ...post(), headers: { authorization: `Bearer ${TOKEN}`, "x-picket-by": "Ana" } });
    expect(cancelled).toEqual({ status: 200, body: { outcome: "applied", status: "cancelled", tasks: 0, message: `workflow ${id} cancelled: nothing more is applied, its inbox is dropped` } });
    expect((await getWorkflow(db.pool, id))!.status).toBe("cancelled");
    // The cancel is the history's last entry, naming who asked.
    expect((await allEvents(id)).at(-1)).toMatchObject({ kind: "cancel", outcome: "applied", by: "dashboard: Ana" });
    expect(await request(`/api/workflows/${id}/cancel`, post())).toEqual({
      status: 409,
      body: { outcome: "finished", status: "cancelled", tasks: 0, message: `workflow ${id} has already finished (cancelled): nothing was done` },
    });
    expect(await request(`/api/workflows/${id}/send`, post('{"type":"GO"}'))).toEqual({
      status: 409,
      body: { outcome: "finished", status: "cancelled", message: `workflow ${id} has finished (cancelled): an event cannot change it, and GO was not sent` },
    });
  });
});
