// A workflow that invokes another workflow as a child (childWorkflow), against a real server: the
// child started by the transition that invokes it, its end heard by its parent as XState's
// done/error event, a child stopped, ended with its parent or cancelled with it (its own children
// and tasks after it), an operator's cancel of a child heard by its parent, a stale claim that
// starts nothing, what a worker refuses, and the paths workflowPaths walks.
import type { Server } from "node:http";
import { Effect, Fiber } from "effect";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { assign, setup } from "xstate";
import { claimJobs } from "../src/db/index.ts";
import { cancelWorkflow, getWorkflow, holdForApply, sendToWorkflow, startWorkflow, workflowHistory, writeApply, type Workflow } from "../src/db/workflows.ts";
import { APPLIER_TASK, CHILD_CANCEL_TASK } from "../src/db/job-spec.ts";
import { childWorkflow, defineWorkflow, task } from "../src/workflows/definition.ts";
import { WorkflowRegistry } from "../src/workflows/applier.ts";
import { defineTask } from "../src/runtime/task.ts";
import { workflowPaths } from "../src/testing/workflow-paths.ts";
import { serveDashboard } from "../src/dashboard/server.ts";
import { createLogger } from "../src/runtime/logger.ts";
import { formatWorkflow } from "../src/cli/workflows.ts";
import { launchChromium } from "./support/browser.ts";
import { freePort } from "./support/ports.ts";
import { startWorker } from "./support/worker.ts";
import { useTestDatabase } from "./support/db.ts";
import { want } from "./support/factory.ts";

const db = useTestDatabase();

const until = async (what: string, check: () => Promise<boolean>, timeoutMs = 20_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
};
const workflow = async (id: string): Promise<Workflow> => (await getWorkflow(db.pool, id))!;
const inStatus = (id: string, status: string) => until(`workflow ${id} ${status}`, async () => (await getWorkflow(db.pool, id))!.status === status);
/** The child a parent's invocation started, once it has. */
const childOf = async (parent: string, invokeId: string): Promise<string> => {
  let child: string | undefined;
  await until(`workflow ${parent}'s child ${invokeId}`, async () => (child = (await workflow(parent)).children[invokeId]) !== undefined);
  return child!;
};
const worker = (options: Omit<Parameters<typeof startWorker>[0], "connectionString">) => startWorker({ connectionString: db.url, ...options });

// The child: waits for APPROVE (done, with its document as output), or CHECK, which runs a task
// whose failure it does not handle (the child fails with the task's error).
const check = task<{ doc: string }, unknown>("check-doc");
const review = defineWorkflow({
  name: "review-doc",
  machine: setup({ types: {} as { input: { doc: string }; context: { doc: string } }, actors: { check } }).createMachine({
    context: ({ input }) => ({ doc: input.doc }),
    initial: "waiting",
    states: {
      waiting: { on: { APPROVE: "approved", CHECK: "checking" } },
      checking: { invoke: { id: "check", src: "check", input: ({ context }) => ({ doc: context.doc }), onDone: "approved" } },
      approved: { type: "final" },
    },
    output: ({ context }) => ({ doc: context.doc, verdict: "approved" }),
  }),
});
// The parent: invokes the review; its output or its error, or ABANDON, end the parent.
const publish = defineWorkflow({
  name: "publish-doc",
  machine: setup({
    types: {} as { input: { doc: string }; context: { doc: string; result: unknown; error: string | null } },
    actors: { review: childWorkflow(review) },
  }).createMachine({
    context: ({ input }) => ({ doc: input.doc, result: null, error: null }),
    initial: "reviewing",
    states: {
      reviewing: {
        invoke: {
          id: "review",
          src: "review",
          input: ({ context }) => ({ doc: context.doc }),
          onDone: { target: "published", actions: assign({ result: ({ event }) => event.output }) },
          onError: { target: "withdrawn", actions: assign({ error: ({ event }) => (event.error as { message: string }).message }) },
        },
        on: { ABANDON: "abandoned", RESTART: { target: "reviewing", reenter: true } },
      },
      published: { type: "final" },
      withdrawn: { type: "final" },
      abandoned: { type: "final" },
    },
    output: ({ context }) => ({ result: context.result, error: context.error }),
  }),
});
// Two levels: a campaign that publishes a document.
const campaign = defineWorkflow({
  name: "campaign",
  machine: setup({ actors: { publish: childWorkflow(publish) } }).createMachine({
    initial: "running",
    states: { running: { invoke: { id: "publish", src: "publish", input: { doc: "c-1" }, onDone: "over", onError: "over" } }, over: { type: "final" } },
  }),
});
// Beside a child, a task whose failure it does not handle (the instance fails), and an event whose
// assign throws (the instance fails too, by another path).
const both = defineWorkflow({
  name: "review-and-check",
  machine: setup({ types: {} as { input: { doc: string }; context: { doc: string } }, actors: { review: childWorkflow(review), check } }).createMachine({
    context: ({ input }) => ({ doc: input.doc }),
    type: "parallel",
    states: {
      reviewing: {
        invoke: { id: "review", src: "review", input: ({ context }) => ({ doc: context.doc }) },
        on: {
          BOOM: {
            actions: assign(() => {
              throw new Error("the assign broke");
            }),
          },
        },
      },
      checking: { invoke: { id: "check", src: "check", input: ({ context }) => ({ doc: context.doc }) } },
    },
  }),
});
const workflows = [review, publish, campaign, both];
/** The check task: fails, or (with { hang: true } in the doc) runs until it is stopped. */
const checkTask = defineTask<{ doc: string }, unknown>({
  name: "check-doc",
  maxAttempts: 1,
  handler: async (input, ctx) => {
    if (input.doc.includes("hang")) await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
    throw new Error(`the check of ${input.doc} found a broken link`);
  },
});

describe("a workflow invokes another as a child", () => {
  it("the transition that invokes it starts the child; the child's output ends the invocation as xstate.done.actor", async () => {
    await worker({ tasks: [checkTask], workflows });
    const { id } = await startWorkflow(db.pool, publish, { doc: "d-1" });
    const child = await childOf(id, "review");
    await inStatus(child, "running");
    expect(await workflow(child)).toMatchObject({ name: "review-doc", parentId: id, state: "waiting", context: { doc: "d-1" } });
    await sendToWorkflow(db.pool, child, { type: "APPROVE" });
    await inStatus(id, "done");
    expect(await workflow(id)).toMatchObject({ state: "published", output: { result: { doc: "d-1", verdict: "approved" }, error: null } });
    expect((await workflow(id)).children).toEqual({});
    expect(await workflow(child)).toMatchObject({ status: "done", output: { doc: "d-1", verdict: "approved" } });
    const { history } = await workflowHistory(db.pool, id);
    expect(history.map((e) => [e.kind, e.outcome, e.state])).toEqual([["start", "applied", "reviewing"], ["child", "applied", "published"]]);
  });

  it("a child that fails ends the invocation as xstate.error.actor, with the child's error", async () => {
    await worker({ tasks: [checkTask], workflows });
    const { id } = await startWorkflow(db.pool, publish, { doc: "d-2" });
    const child = await childOf(id, "review");
    await sendToWorkflow(db.pool, child, { type: "CHECK" });
    await inStatus(id, "done");
    // The child's error is its task's (as the job recorded it); the parent gets it as the error event's message.
    expect(await workflow(child)).toMatchObject({ status: "failed", error: "error: the check of d-2 found a broken link" });
    expect(await workflow(id)).toMatchObject({ state: "withdrawn", output: { result: null, error: "error: the check of d-2 found a broken link" } });
  });

  it("a parent that leaves the invoking state cancels the child and the child's task in flight; the child's end reaches the parent as a late result", async () => {
    const { outcomes } = await worker({ tasks: [checkTask], workflows });
    const { id } = await startWorkflow(db.pool, publish, { doc: "hang-3" });
    const child = await childOf(id, "review");
    await sendToWorkflow(db.pool, child, { type: "CHECK" });
    await until("the check running", async () => (await db.pool.query("SELECT 1 FROM picket.jobs WHERE workflow_id = $1 AND status = 'processing'", [child])).rowCount === 1);
    await sendToWorkflow(db.pool, id, { type: "ABANDON" });
    await inStatus(child, "cancelled");
    expect(await workflow(id)).toMatchObject({ status: "done", state: "abandoned" });
    expect((await workflow(id)).children).toEqual({});
    const cancel = async (of: string) => (await workflowHistory(db.pool, of)).history.find((e) => e.kind === "cancel");
    expect(await cancel(child)).toMatchObject({ by: `workflow ${id}` });
    await until("the check stopped", async () => outcomes.some((o) => o.type === "check-doc"));
    expect((await db.pool.query("SELECT status FROM picket.jobs WHERE workflow_id = $1", [child])).rows).toEqual([{ status: "cancelled" }]);
    // The parent had ended (abandoned) when its child was cancelled: it is not told.
    const { history: parentHistory, inbox } = await workflowHistory(db.pool, id);
    expect([parentHistory.map((e) => [e.kind, e.outcome]), inbox]).toEqual([[["start", "applied"], ["send", "applied"]], []]);
  });

  it("a late end of a stopped child is dropped, though the same invocation id runs a new child", async () => {
    await worker({ tasks: [checkTask], workflows });
    const { id } = await startWorkflow(db.pool, publish, { doc: "d-8" });
    const first = await childOf(id, "review");
    await inStatus(first, "running");
    await sendToWorkflow(db.pool, id, { type: "RESTART" });
    await until("a second child", async () => ![undefined, first].includes((await workflow(id)).children.review));
    const second = (await workflow(id)).children.review!;
    // The first, stopped, is cancelled; its end reaches the parent, which drops it.
    await inStatus(first, "cancelled");
    await until("the first's end applied", async () => (await workflowHistory(db.pool, id)).history.some((e) => e.kind === "child"));
    expect((await workflowHistory(db.pool, id)).history.find((e) => e.kind === "child")).toMatchObject({
      outcome: "dropped",
      note: `late result: child workflow ${first} (cancelled) answered an invocation the workflow had already stopped`,
    });
    expect(await workflow(id)).toMatchObject({ status: "running", state: "reviewing", children: { review: second } });
    await sendToWorkflow(db.pool, second, { type: "APPROVE" });
    await inStatus(id, "done");
    expect((await workflow(id)).state).toBe("published");
  });

  it("an instance that fails cancels its children: a task's failure it does not handle, or its machine throwing", async () => {
    await worker({ tasks: [checkTask], workflows });
    for (const [doc, fail] of [["d-9", null], ["hang-10", { type: "BOOM" }]] as const) {
      const { id } = await startWorkflow(db.pool, both, { doc });
      const child = await childOf(id, "review");
      if (fail !== null) {
        await inStatus(child, "running");
        await sendToWorkflow(db.pool, id, fail);
      }
      await inStatus(id, "failed");
      expect((await workflow(id)).error).toBe(fail === null ? "error: the check of d-9 found a broken link" : "the assign broke");
      await inStatus(child, "cancelled");
      expect((await workflowHistory(db.pool, child)).history.find((e) => e.kind === "cancel")).toMatchObject({ by: `workflow ${id}` });
    }
  });

  it("cancelling a workflow cancels its children, and theirs, each recorded as cancelled by its parent", async () => {
    await worker({ tasks: [checkTask], workflows });
    const { id } = await startWorkflow(db.pool, campaign, null);
    const middle = await childOf(id, "publish");
    const leaf = await childOf(middle, "review");
    expect(await cancelWorkflow(db.pool, id, { by: "ops" })).toMatchObject({ outcome: "cancelled" });
    await inStatus(leaf, "cancelled");
    expect(await workflow(middle)).toMatchObject({ status: "cancelled" });
    const cancel = async (of: string) => (await workflowHistory(db.pool, of)).history.find((e) => e.kind === "cancel");
    expect(await cancel(id)).toMatchObject({ by: "ops" });
    expect(await cancel(middle)).toMatchObject({ by: `workflow ${id}` });
    expect(await cancel(leaf)).toMatchObject({ by: `workflow ${middle}` });
    // A cancelled instance has nothing in flight.
    expect([(await workflow(id)).children, (await workflow(middle)).children]).toEqual([{}, {}]);
  });

  it("an operator's cancel of a child reaches its parent as xstate.error.actor", async () => {
    await worker({ tasks: [checkTask], workflows });
    const { id } = await startWorkflow(db.pool, publish, { doc: "d-5" });
    const child = await childOf(id, "review");
    await cancelWorkflow(db.pool, child, { by: "ops" });
    await inStatus(id, "done");
    expect(await workflow(id)).toMatchObject({ state: "withdrawn", output: { error: "the child workflow was cancelled" } });
  });

  it("a stale claim starts no child: the apply's fence refuses it whole", async () => {
    const { id } = await startWorkflow(db.pool, publish, { doc: "d-6" });
    const [job] = await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })]);
    const hold = await holdForApply(db.pool, id, { id: job!.id, token: job!.claimToken });
    if (hold.outcome !== "held") throw new Error(`not held: ${hold.outcome}`);
    const apply = (token: string) =>
      writeApply(db.pool, {
        workflowId: id, seq: 0, eventId: hold.row.eventId!, claim: { id: job!.id, token }, snapshot: { value: "reviewing" }, state: "reviewing", status: "running",
        version: "1", fingerprint: "f", outcome: "applied", note: null, startTasks: [], stopTasks: [], startTimers: [], cancelTimers: [],
        startChildren: [{ invokeId: "review", name: "review-doc", input: { doc: "d-6" } }], stopChildren: [],
      });
    // Instances, events and jobs in all: a fenced apply adds none of them.
    const rows = async () =>
      (await db.pool.query("SELECT (SELECT count(*) FROM picket.workflows)::int AS w, (SELECT count(*) FROM picket.workflow_events)::int AS e, (SELECT count(*) FROM picket.jobs)::int AS j")).rows[0];
    const before = await rows();
    expect(await apply("00000000-0000-4000-8000-000000000000")).toMatchObject({ outcome: "fenced" });
    expect(await rows()).toEqual(before);
    expect(await apply(job!.claimToken)).toMatchObject({ outcome: "applied" });
    expect((await rows()).w).toBe(before.w + 1);
    const child = (await workflow(id)).children.review!;
    expect(await workflow(child)).toMatchObject({ name: "review-doc", parentId: id, status: "starting" });
    // Its start waits in its inbox, with a job to apply it.
    expect((await workflowHistory(db.pool, child)).inbox.map((e) => [e.kind, e.event])).toEqual([["start", { input: { doc: "d-6" } }]]);
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = $1 AND payload->>'workflow' = $2", [APPLIER_TASK, child])).rows[0].n).toBe(1);
  });

  it("a cancel of a parent waiting for its apply that starts a child cancels that child too", async () => {
    const { id } = await startWorkflow(db.pool, publish, { doc: "d-11" });
    const [job] = await claimJobs(db.pool, "worker-a", [want(APPLIER_TASK, { limit: 1 })]);
    const claim = { id: job!.id, token: job!.claimToken };
    const hold = await holdForApply(db.pool, id, claim);
    if (hold.outcome !== "held") throw new Error(`not held: ${hold.outcome}`);
    const client = await db.pool.connect();
    try {
      // The apply that starts the child, not yet committed; the cancel waits for its row lock.
      await client.query("BEGIN");
      await writeApply(client, {
        workflowId: id, seq: 0, eventId: hold.row.eventId!, claim, snapshot: { value: "reviewing" }, state: "reviewing", status: "running",
        version: "1", fingerprint: "f", outcome: "applied", note: null, startTasks: [], stopTasks: [], startTimers: [], cancelTimers: [],
        startChildren: [{ invokeId: "review", name: "review-doc", input: { doc: "d-11" } }], stopChildren: [],
      });
      const cancelled = cancelWorkflow(db.pool, id, { by: "ops" });
      await until("the cancel waiting", async () => (await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")).rowCount! > 0);
      await client.query("COMMIT");
      expect(await cancelled).toMatchObject({ outcome: "cancelled" });
    } finally {
      client.release();
    }
    // The child the apply started is cancelled with its parent.
    const { rows } = await db.pool.query("SELECT w.id::text, (SELECT count(*)::int FROM picket.jobs AS j WHERE j.type = $2 AND j.payload->>'workflow' = w.id::text) AS cancels FROM picket.workflows AS w WHERE w.parent_id = $1", [id, CHILD_CANCEL_TASK]);
    expect(rows).toEqual([{ id: expect.any(String), cancels: 1 }]);
  });

  it("a child's end reaches its parent whatever statement ends it (an older worker's apply, say), and only while the parent is live", async () => {
    await worker({ tasks: [checkTask], workflows });
    const { id } = await startWorkflow(db.pool, publish, { doc: "d-12" });
    const child = await childOf(id, "review");
    await inStatus(child, "running");
    // Ended by a plain UPDATE: no picket statement of this version wrote it.
    await db.pool.query(`UPDATE picket.workflows SET status = 'done', output = '{"doc":"d-12","verdict":"by hand"}', finished_at = now() WHERE id = $1`, [child]);
    await inStatus(id, "done");
    expect(await workflow(id)).toMatchObject({ state: "published", output: { result: { doc: "d-12", verdict: "by hand" } } });
    // Its parent ended, another update of the child tells no one.
    const events = async () => (await db.pool.query("SELECT count(*)::int AS n FROM picket.workflow_events WHERE workflow_id = $1", [id])).rows[0].n;
    const told = await events();
    await db.pool.query("UPDATE picket.workflows SET status = 'running' WHERE id = $1", [child]);
    await db.pool.query("UPDATE picket.workflows SET status = 'cancelled' WHERE id = $1", [child]);
    expect(await events()).toBe(told);
  });

  it("a parent that stays in its state when the child ends forgets the child, and does not cancel it", async () => {
    const watcher = defineWorkflow({
      name: "watcher",
      machine: setup({ types: {} as { context: { seen: unknown } }, actors: { review: childWorkflow(review) } }).createMachine({
        context: { seen: null },
        initial: "watching",
        states: {
          watching: { invoke: { id: "review", src: "review", input: { doc: "d-13" }, onDone: { actions: assign({ seen: ({ event }) => event.output }) } }, on: { FINISH: "over" } },
          over: { type: "final" },
        },
      }),
    });
    await worker({ tasks: [checkTask], workflows: [...workflows, watcher] });
    const { id } = await startWorkflow(db.pool, watcher, null);
    const child = await childOf(id, "review");
    await inStatus(child, "running");
    await sendToWorkflow(db.pool, child, { type: "APPROVE" });
    await until("the end seen", async () => (await workflow(id)).context !== null && ((await workflow(id)).context as { seen: unknown }).seen !== null);
    expect(await workflow(id)).toMatchObject({ status: "running", state: "watching", children: {} });
    expect((await workflow(id)).children).toEqual({});
    // Its end is known: no job was made to cancel it.
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = $1 AND payload->>'workflow' = $2", [CHILD_CANCEL_TASK, child])).rows[0].n).toBe(0);
    // A child ends once: a later update of the ended child (by hand) tells the live parent nothing.
    await db.pool.query("UPDATE picket.workflows SET status = 'cancelled' WHERE id = $1", [child]);
    await sendToWorkflow(db.pool, id, { type: "FINISH" });
    await inStatus(id, "done");
    expect((await workflowHistory(db.pool, id)).history.map((e) => e.kind)).toEqual(["start", "child", "send"]);
  });

  it("a worker refuses a parent without its child; workflowPaths walks a child's end, failure and cancel", () => {
    expect(() => new WorkflowRegistry([publish])).toThrow(
      'picket: workflow "publish-doc" invokes the child workflow "review-doc", which is not among this worker\'s workflows: give it too (createSupervisor({ workflows })), as every worker that applies workflow events must run every workflow.',
    );
    const report = workflowPaths(publish, { input: { doc: "d" }, outputs: { "review-doc": (input: { doc: string }) => ({ doc: input.doc }) } });
    expect(report.finals.map((f) => [f.path, f.output])).toEqual([
      [["start", "review succeeded"], { result: { doc: "d" }, error: null }],
      [["start", "review failed"], { result: null, error: "failed" }],
      [["start", "review cancelled"], { result: null, error: "cancelled" }],
    ]);
  });
});

describe("a child workflow as an operator sees it", () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await launchChromium();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
  });

  it("the CLI and the console name a parent's children in flight and a child's parent, and show its end in the parent's history", async () => {
    await worker({ tasks: [checkTask], workflows });
    const { id } = await startWorkflow(db.pool, publish, { doc: "d-7" });
    const child = await childOf(id, "review");
    await inStatus(child, "running");
    const shown = async (of: string) => {
      const { history, inbox } = await workflowHistory(db.pool, of);
      return formatWorkflow((await getWorkflow(db.pool, of))!, [...history, ...inbox], [], new Date());
    };
    expect(await shown(id)).toContain(`\nchildren in flight: review → workflow ${child}\n`);
    expect(await shown(child)).toContain(`\na child of workflow ${id}\n`);

    const port = await freePort();
    let server: Server | undefined;
    const fiber = Effect.runFork(serveDashboard({ db: db.pool, port, host: "127.0.0.1", intervalMs: 200, logger: createLogger({ level: "silent" }) }, (s) => (server = s)));
    const url = `http://127.0.0.1:${port}/`;
    await expect.poll(() => fetch(url).then((r) => r.status, () => 0), { timeout: 10_000 }).toBe(200);
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      await page.goto(url);
      await page.evaluate((workflowId) => (window as unknown as { openWorkflow: (id: string) => void }).openWorkflow(workflowId), id);
      const family = page.locator('[data-testid="workflow-family"]');
      await expect.poll(() => family.textContent(), { timeout: 10_000 }).toBe(`children in flight: review → ${child}`);
      // The child's link opens the child, which names its parent.
      await family.locator(`a[data-workflow="${child}"]`).click();
      await expect.poll(() => page.locator("#workflow-id").textContent(), { timeout: 5_000 }).toBe(child);
      await expect.poll(() => family.textContent(), { timeout: 5_000 }).toBe(`a child of workflow ${id}`);
      // Approved, the child ends; the parent's history shows its end, linked.
      await sendToWorkflow(db.pool, child, { type: "APPROVE" });
      await inStatus(id, "done");
      await family.locator(`a[data-workflow="${id}"]`).click();
      await expect.poll(() => page.locator("#workflow-id").textContent(), { timeout: 5_000 }).toBe(id);
      const end = page.locator('[data-testid="workflow-history"] tbody tr[data-kind="child"]');
      await expect.poll(() => end.locator('[data-col="event"]').textContent(), { timeout: 5_000 }).toBe(`child workflow ${child} done {"doc":"d-7","verdict":"approved"}`);
      expect(await page.locator('[data-testid="workflow-family"]').count()).toBe(0);
    } finally {
      await page.close();
      server?.closeAllConnections();
      await Effect.runPromise(Fiber.interrupt(fiber));
    }
  }, 90_000);
});
