// @module-tag spawns: the CLI tests run picket in a child process.
// `picket workflows list|show|send|cancel` as an operator runs it against instances a real worker
// applies: what each prints, that a send reaches the instance and a cancel cancels it, every
// refusal with its message and exit code, and the same commands through PgBouncer in transaction mode.
import { hostname, userInfo } from "node:os";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { assign, setup } from "xstate";
import { getJob, openPool, type JobId } from "../src/db/index.ts";
import { getWorkflow, startWorkflow, workflowHistory, workflowJobs } from "../src/db/workflows.ts";
import { defineTask } from "../src/runtime/task.ts";
import { defineWorkflow, task } from "../src/workflows/definition.ts";
import { formatState, parseEvent } from "../src/cli/workflows.ts";
import { picket } from "./support/cli.ts";
import { fileURLToPath } from "node:url";
import { useTestDatabase } from "./support/db.ts";
import { startPgBouncer, type PgBouncer } from "./support/pgbouncer.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();
/** An instance's events: the history in the order applied, then the inbox. */
const allEvents = async (id: string) => {
  const { history, inbox } = await workflowHistory(db.pool, id);
  return [...history, ...inbox];
};
let bouncer: PgBouncer;
let bounced: pg.Pool;
beforeAll(async () => {
  bouncer = await startPgBouncer(db.url);
  bounced = await openPool({ connectionString: bouncer.url, transactionPooling: true, max: 4 });
});
afterAll(async () => {
  await bounced?.end();
  await bouncer?.stop();
});

const env = () => ({ env: { DATABASE_URL: db.url } });

/** The charge task's runs wait for the test to let them finish (or for a cancel to stop them). */
const gates = new Map<number, () => void>();
const chargeTask = defineTask<{ amount: number }, { receipt: string }>({
  name: "cli-wf.charge",
  handler: (payload, ctx) =>
    new Promise((resolve, reject) => {
      gates.set(payload.amount, () => resolve({ receipt: `r-${payload.amount}` }));
      ctx.signal.addEventListener("abort", () => reject(new Error("stopped")), { once: true });
    }),
});

// Waits for approval (an hour's timer runs out otherwise), then charges and ships in parallel.
const charge = task<{ amount: number }, { receipt: string }>("cli-wf.charge");
const approval = defineWorkflow({
  name: "cli-wf.approval",
  machine: setup({ types: {} as { context: { amount: number; receipt: string | null }; input: { amount: number } }, actors: { charge } }).createMachine({
    id: "approval",
    context: ({ input }) => ({ amount: input.amount, receipt: null }),
    initial: "review",
    states: {
      review: { initial: "waiting", states: { waiting: { after: { 3_600_000: "#approval.expired" }, on: { APPROVE: "#approval.fulfil" } } } },
      fulfil: {
        type: "parallel",
        states: {
          payment: {
            initial: "charging",
            states: {
              charging: {
                invoke: { id: "charge", src: "charge", input: ({ context }) => ({ amount: context.amount }), onDone: { target: "charged", actions: assign({ receipt: ({ event }) => event.output.receipt }) } },
              },
              charged: { type: "final" },
            },
          },
          shipping: { initial: "waiting", states: { waiting: { on: { SHIP: "shipped" } }, shipped: { type: "final" } } },
        },
        onDone: "delivered",
      },
      delivered: { type: "final" },
      expired: { type: "final" },
    },
    output: ({ context }) => ({ receipt: context.receipt }),
  }),
});

const state = async (id: JobId) => (await getWorkflow(db.pool, id))!.state;
const poll = <T>(read: () => Promise<T>) => expect.poll(read, { timeout: 20_000, interval: 50 });
const charging = { fulfil: { payment: "charging", shipping: "waiting" } };

describe("the CLI's own parsing", () => {
  it("prints a state value compactly: nested as a path, parallel regions joined", () => {
    expect(formatState("charging")).toBe("charging");
    expect(formatState({ payment: "charging" })).toBe("payment.charging");
    expect(formatState(charging)).toBe("fulfil.payment.charging, fulfil.shipping.waiting");
    expect(formatState({ a: { b: {} } })).toBe("a.b");
    expect(formatState(null)).toBe("—");
  });

  it("reads an event as JSON or as a bare type", () => {
    expect(parseEvent("APPROVE")).toEqual({ type: "APPROVE" });
    expect(parseEvent(" APPROVE\n")).toEqual({ type: "APPROVE" });
    expect(parseEvent(' {"type":"SHIP","carrier":"ups"} ')).toEqual({ type: "SHIP", carrier: "ups" });
    expect(() => parseEvent('{"type":')).toThrow(/not valid JSON/);
    expect(() => parseEvent('["APPROVE"]')).toThrow(/must be a JSON object with a string "type"/);
    expect(() => parseEvent(" ")).toThrow(/the event is empty/);
  });
});

describe("picket workflows", () => {
  it("lists and shows an instance as it goes: unapplied, waiting with a timer, charging in parallel, done; a send reaches it", async () => {
    expect(await picket(["workflows", "list"], env())).toMatchObject({ code: 0, stdout: "(no workflows: start one with startWorkflow(db, workflow, input))\n" });
    const { id } = await startWorkflow(db.pool, approval, { amount: 5 }, { key: "order-7" });

    // No worker yet: its start waits in its inbox, and so does an event sent to it.
    const note = await picket(["workflows", "send", id, '{"type":"NOTE","text":"hello"}'], env());
    expect(note.code).toBe(0);
    const noteId = note.stdout.match(/^workflow \d+: event (\d+) \(NOTE\) is in its inbox; a worker that runs the workflow applies it \(picket workflows show \d+\)\n$/)?.[1];
    expect(noteId).toBeDefined();
    let list = (await picket(["workflows", "list"], env())).stdout.trimEnd().split("\n");
    expect(list[0]).toMatch(/^id\s+name\s+version\s+status\s+state\s+tasks\s+updated$/);
    expect(list[1]).toMatch(new RegExp(`^${id}\\s+cli-wf\\.approval\\s+—\\s+starting\\s+—\\s+0\\s+\\d+s ago$`));
    let show = await picket(["workflows", "show", id], env());
    expect(show.code).toBe(0);
    expect(show.stdout).toContain(`workflow ${id} "cli-wf.approval" key "order-7": starting, state —\n`);
    expect(show.stdout).toContain("\nhistory:\n(no event applied yet: a worker that runs this workflow applies them)\n");
    const inbox = show.stdout.slice(show.stdout.indexOf("\ninbox:\n"));
    expect(inbox).toMatch(/\n\d+\s+start\s+input \{"amount":5\}\s+\d+s ago\s+\S+Z \(due\)\n/);
    expect(inbox).toMatch(new RegExp(`\\n${noteId}\\s+send\\s+NOTE\\s+\\d+s ago\\s+\\S+Z \\(due\\)\\n`));

    await startWorker({ connectionString: db.url, tasks: [chargeTask], workflows: [approval] });
    await poll(async () => (await getWorkflow(db.pool, id))!.seq).toBe(2);
    show = await picket(["workflows", "show", id], env());
    const lines = show.stdout.split("\n");
    expect(lines[0]).toBe(`workflow ${id} "cli-wf.approval" key "order-7": running, state review.waiting`);
    expect(lines[1]).toMatch(new RegExp(`^version 1, fingerprint ${approval.fingerprint}, 2 events applied, started \\d+s ago, updated \\d+s ago$`));
    expect(lines[2]).toBe(`context: {"amount":5,"receipt":null}`);
    expect(lines[3]).toBe("tasks in flight: none");
    // NOTE takes no transition: its row shows the outcome and note the applier recorded.
    const noted = (await allEvents(id)).find((e) => e.id === noteId)!;
    const noteText = (noted.note ?? "—").replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    expect(show.stdout).toMatch(
      new RegExp(
        `\\nseq\\s+applied\\s+kind\\s+event\\s+outcome\\s+note\\s+state after\\n1\\s+\\S+Z\\s+start\\s+input \\{"amount":5\\}\\s+applied\\s+—\\s+review\\.waiting\\n` +
          `2\\s+\\S+Z\\s+send\\s+NOTE\\s+${noted.outcome}\\s+${noteText}\\s+review\\.waiting\\n`,
      ),
    );
    // The hour's timer waits in the inbox, due in about an hour.
    expect(show.stdout).toMatch(/\ninbox:\nevent\s+kind\s+event\s+queued\s+due\n\d+\s+timer\s+xstate\.after\.3600000\.\S+\s+\d+s ago\s+\S+Z \(in 59m \d+s\)\n/);
    expect(show.stdout).toContain("\njobs:\n(none started)\n");

    // A bare type is the event { type: "APPROVE" }: the worker applies it, and the timer goes.
    const approve = await picket(["workflows", "send", id, "APPROVE"], env());
    expect(approve.code).toBe(0);
    const approveId = approve.stdout.match(/event (\d+) \(APPROVE\)/)?.[1];
    await poll(() => state(id)).toEqual(charging);
    expect((await allEvents(id)).find((e) => e.id === approveId)).toMatchObject({ kind: "send", event: { type: "APPROVE" }, outcome: "applied", by: expect.stringContaining("@") });
    const [job] = await workflowJobs(db.pool, id);
    await poll(async () => (await getJob(db.pool, job!.id))!.status).toBe("processing");

    list = (await picket(["workflows", "list", "--name", "cli-wf.approval"], env())).stdout.trimEnd().split("\n");
    expect(list[1]).toMatch(new RegExp(`^${id}\\s+cli-wf\\.approval\\s+1\\s+running\\s+fulfil\\.payment\\.charging, fulfil\\.shipping\\.waiting\\s+1\\s+\\d+s ago$`));
    show = await picket(["workflows", "show", id], env());
    expect(show.stdout.split("\n")[0]).toBe(`workflow ${id} "cli-wf.approval" key "order-7": running, state fulfil.payment.charging, fulfil.shipping.waiting`);
    expect(show.stdout).toContain(`\ntasks in flight: charge → job ${job!.id}\n`);
    expect(show.stdout).toMatch(new RegExp(`\\n3\\s+\\S+Z\\s+send\\s+APPROVE\\s+applied\\s+—\\s+fulfil\\.payment\\.charging, fulfil\\.shipping\\.waiting\\n`));
    expect(show.stdout).toContain("\ninbox:\n(empty)\n");
    expect(show.stdout).toMatch(new RegExp(`\\njobs:\\njob\\s+task\\s+status\\s+attempts\\s+enqueued\\s+finished\\n${job!.id}\\s+cli-wf\\.charge\\s+processing\\s+1\\s+\\d+s ago\\s+—\\n`));

    // A JSON event with fields; then the task completes, and its report takes the instance to its end.
    expect((await picket(["workflows", "send", id, '{"type":"SHIP","carrier":"ups"}'], env())).code).toBe(0);
    await poll(() => state(id)).toEqual({ fulfil: { payment: "charging", shipping: "shipped" } });
    expect((await allEvents(id)).at(-1)).toMatchObject({ event: { type: "SHIP", carrier: "ups" } });
    await poll(async () => gates.has(5)).toBe(true);
    gates.get(5)!();
    await poll(async () => (await getWorkflow(db.pool, id))!.status).toBe("done");
    show = await picket(["workflows", "show", id], env());
    expect(show.stdout.split("\n")[0]).toBe(`workflow ${id} "cli-wf.approval" key "order-7": done, state delivered`);
    expect(show.stdout).toMatch(/, finished \d+s ago\n/);
    expect(show.stdout).toContain(`\ncontext: {"amount":5,"receipt":"r-5"}\noutput: {"receipt":"r-5"}\ntasks in flight: none\n`);
    expect(show.stdout).toMatch(new RegExp(`\\n5\\s+\\S+Z\\s+task\\s+job ${job!.id} completed\\s+applied\\s+—\\s+delivered\\n`));
    expect(show.stdout).toMatch(new RegExp(`\\n${job!.id}\\s+cli-wf\\.charge\\s+completed\\s+1\\s+\\d+s ago\\s+\\d+s ago\\n`));

    const json = JSON.parse((await picket(["workflows", "show", id, "--json"], env())).stdout);
    expect(json.workflow).toMatchObject({ id, status: "done", state: "delivered", output: { receipt: "r-5" }, key: "order-7" });
    expect(json.history.map((e: { seq: number }) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(json.inbox).toEqual([]);
    expect(json.jobs).toEqual([expect.objectContaining({ id: job!.id, status: "completed" })]);

    // list's filters, and its JSON.
    const other = await startWorkflow(db.pool, "cli-wf.other", null);
    expect(JSON.parse((await picket(["workflows", "list", "--json", "--status", "done"], env())).stdout)).toEqual([expect.objectContaining({ id, status: "done", state: "delivered" })]);
    expect(JSON.parse((await picket(["workflows", "list", "--json", "--name", "cli-wf.other"], env())).stdout)).toEqual([expect.objectContaining({ id: other.id, status: "starting" })]);
    const newest = (await picket(["workflows", "list", "--limit", "1"], env())).stdout.trimEnd().split("\n");
    expect(newest).toHaveLength(2);
    expect(newest[1]).toMatch(new RegExp(`^${other.id}\\s+cli-wf\\.other\\s`));
    expect((await picket(["workflows", "list", "--name", "nobody"], env())).stdout).toBe("(no workflows: start one with startWorkflow(db, workflow, input))\n");
  }, 60_000);

  it("cancels an instance and its running task, naming who asked; then refuses to send to it, and says it has finished", async () => {
    await startWorker({ connectionString: db.url, tasks: [chargeTask], workflows: [approval] });
    const { id } = await startWorkflow(db.pool, approval, { amount: 6 });
    await poll(() => state(id)).toEqual({ review: "waiting" });
    expect((await picket(["workflows", "send", id, "APPROVE"], env())).code).toBe(0);
    await poll(() => state(id)).toEqual(charging);
    const [job] = await workflowJobs(db.pool, id);
    await poll(async () => (await getJob(db.pool, job!.id))!.status).toBe("processing");

    const cancel = await picket(["workflows", "cancel", id, "--by", "alice"], env());
    expect(cancel).toMatchObject({ code: 0, stdout: `workflow ${id}: cancelled, with 1 task job in flight; workers stop those that were running\n` });
    expect(await getWorkflow(db.pool, id)).toMatchObject({ status: "cancelled", tasks: {} });
    const cancelled = (await getJob(db.pool, job!.id))!;
    expect(cancelled.status).toBe("cancelled");
    expect(cancelled.errors.at(-1)).toMatchObject({ operator: "cancel", by: "alice" });

    expect(await picket(["workflows", "cancel", id], env())).toMatchObject({ code: 0, stdout: `workflow ${id} has already finished (it is cancelled); nothing to cancel\n` });
    const refused = await picket(["workflows", "send", id, "APPROVE"], env());
    expect(refused).toMatchObject({ code: 1, stdout: "" });
    expect(refused.stderr).toBe(`picket: workflow ${id} has finished (cancelled); an event cannot change it, and none was sent.\n`);

    // The cancelled task's report arrives after the cancel: dropped, shown as the job's end.
    await poll(async () => (await allEvents(id)).some((e) => e.kind === "task" && e.outcome === "dropped")).toBe(true);
    const show = await picket(["workflows", "show", id], env());
    expect(show.stdout.split("\n")[0]).toBe(`workflow ${id} "cli-wf.approval": cancelled, state fulfil.payment.charging, fulfil.shipping.waiting`);
    expect(show.stdout).toMatch(new RegExp(`\\n—\\s+\\S+Z\\s+task\\s+job ${job!.id} cancelled\\s+dropped\\s+workflow cancelled\\s+—\\n`));
    expect(show.stdout).toMatch(new RegExp(`\\n${job!.id}\\s+cli-wf\\.charge\\s+cancelled\\s+1\\s`));

    // Without --by, the record names the OS user at this host.
    const second = await startWorkflow(db.pool, approval, { amount: 7 });
    await poll(() => state(second.id)).toEqual({ review: "waiting" });
    expect((await picket(["workflows", "send", second.id, "APPROVE"], env())).code).toBe(0);
    await poll(async () => (await workflowJobs(db.pool, second.id)).length).toBe(1);
    const [task7] = await workflowJobs(db.pool, second.id);
    expect((await picket(["workflows", "cancel", second.id], env())).stdout).toBe(`workflow ${second.id}: cancelled, with 1 task job in flight; workers stop those that were running\n`);
    expect((await getJob(db.pool, task7!.id))!.errors.at(-1)).toMatchObject({ operator: "cancel", by: `${userInfo().username}@${hostname()}` });

    // An instance no worker has touched: cancelled with no task.
    const idle = await startWorkflow(db.pool, "cli-wf.idle", null);
    expect((await picket(["workflows", "cancel", idle.id], env())).stdout).toBe(`workflow ${idle.id}: cancelled, with 0 task jobs in flight; workers stop those that were running\n`);
    expect((await getWorkflow(db.pool, idle.id))!.status).toBe("cancelled");
  }, 60_000);

  it("picket worker runs the workflows its tasks module exports: started, sent an event from the CLI, done", async () => {
    const module = fileURLToPath(new URL("./fixtures/workflow-tasks.ts", import.meta.url));
    const { id } = await startWorkflow(db.pool, "cli-module.order", null);
    let pid = 0;
    let output: () => string = () => "";
    const running = picket(["worker", "--tasks", module], { env: env().env, onStart: (p, o) => ((pid = p), (output = o)) });
    try {
      await poll(async () => (await getWorkflow(db.pool, id))!.state).toBe("waiting");
      expect((await getWorkflow(db.pool, id))!.context).toEqual({ charged: 7 });
      expect((await picket(["workflows", "send", id, "CONFIRM"], env())).code).toBe(0);
      await poll(async () => (await getWorkflow(db.pool, id))!.status).toBe("done");
    } finally {
      process.kill(pid, "SIGTERM");
    }
    expect((await running).code, output()).toBe(0);
  }, 60_000);

  it("refuses what it cannot do, saying what is wrong and what to do, with exit code 1 and nothing changed", async () => {
    const { id } = await startWorkflow(db.pool, "cli-wf.refusals", null);
    const events = async () => (await allEvents(id)).length;
    const refusal = async (args: string[], message: RegExp | string) => {
      const run = await picket(["workflows", ...args], env());
      expect(run.code, `${args.join(" ")}: ${run.stderr}`).toBe(1);
      expect(run.stdout).toBe("");
      if (typeof message === "string") expect(run.stderr).toBe(message);
      else expect(run.stderr).toMatch(message);
    };
    const notFound = (n: string) => `picket: no workflow ${n} (picket workflows list shows the newest)\n`;
    await refusal(["show", "999999"], notFound("999999"));
    await refusal(["send", "999999", "APPROVE"], notFound("999999"));
    await refusal(["cancel", "999999"], notFound("999999"));
    for (const command of [["show", "abc"], ["send", "abc", "APPROVE"], ["cancel", "12x"], ["show", "0"]]) {
      await refusal(command, /^picket: workflow id must be a positive integer, such as 12 \(got "[^"]+"\); picket workflows list shows the ids\n$/);
    }

    await refusal(["send", id, "xstate.done.actor.charge"], /^picket: event type "xstate\.done\.actor\.charge" is not one a caller may send: "xstate\.\*" events come from the workflow's tasks and timers\.\n$/);
    await refusal(["send", id, '{"type":"xstate.after.1.x"}'], /is not one a caller may send/);
    await refusal(
      ["send", id, '{"type": APPROVE}'],
      /^picket: the event is not valid JSON \(.+\): give a JSON object with a type, as in picket workflows send 12 '\{"type":"APPROVE","note":"ok"\}', or just its type: picket workflows send 12 APPROVE\n$/,
    );
    await refusal(["send", id, '{"kind":"APPROVE"}'], /^picket: the event must be a JSON object with a string "type" \(got \{"kind":"APPROVE"\}\), as in picket workflows send 12 /);
    await refusal(["send", id, ""], /^picket: the event is empty: give a JSON object with a type, as in /);
    await refusal(["send", id, '{"type":"NOTE","text":"a\\u0000b"}'], /NUL character/);
    expect(await events()).toBe(1);

    await refusal(["list", "--status", "finished"], 'picket: --status must be one of starting, running, done, failed, cancelled (got "finished")\n');
    for (const limit of ["0", "1001", "ten", "2.5"]) await refusal(["list", "--limit", limit], `picket: --limit must be an integer from 1 to 1000 (got "${limit}")\n`);
    // A missing argument is commander's usage error.
    const missing = await picket(["workflows", "send", id], env());
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/missing required argument 'event'/);
    // The instance's applier job is the workflow's, not the operator's to cancel alone.
    const { rows: [applier] } = await db.pool.query<{ id: JobId }>("SELECT id FROM picket.jobs WHERE type = 'picket.workflow' AND payload->>'workflow' = $1", [id]);
    const cancelApplier = await picket(["jobs", "cancel", applier!.id], env());
    expect(cancelApplier).toMatchObject({ code: 1, stdout: "" });
    expect(cancelApplier.stderr).toBe(
      `picket: job ${applier!.id} applies the events of workflow ${id}, which has not ended: cancelled alone, it would leave an event waiting for good; cancel the workflow (picket workflows cancel ${id})\n`,
    );
    expect((await getJob(db.pool, applier!.id))!.status).toBe("pending");
    expect((await getWorkflow(db.pool, id))!.status).toBe("starting");
  }, 60_000);

  it("lists, shows, sends and cancels through PgBouncer in transaction mode, with a worker applying through it too", async () => {
    const url = ["--database-url", bouncer.url, "--transaction-pooling"];
    await startWorker({ connectionString: bouncer.url, transactionPooling: true, listenConnectionString: db.url, tasks: [chargeTask], workflows: [approval] });
    const { id } = await startWorkflow(bounced, approval, { amount: 8 }, { preparedStatements: false, key: "bounced" });
    await poll(() => state(id)).toEqual({ review: "waiting" });

    const sent = await picket(["workflows", "send", id, "APPROVE", ...url], { env: { DATABASE_URL: undefined } });
    expect(sent).toMatchObject({ code: 0, stderr: "" });
    await poll(() => state(id)).toEqual(charging);
    const list = JSON.parse((await picket(["workflows", "list", "--json", "--name", "cli-wf.approval", ...url], { env: { DATABASE_URL: undefined } })).stdout);
    expect(list[0]).toMatchObject({ id, status: "running", state: charging });
    const show = await picket(["workflows", "show", id, ...url], { env: { DATABASE_URL: undefined } });
    expect(show.code).toBe(0);
    expect(show.stdout).toContain(`workflow ${id} "cli-wf.approval" key "bounced": running, state fulfil.payment.charging, fulfil.shipping.waiting\n`);

    const [job] = await workflowJobs(db.pool, id);
    await poll(async () => (await getJob(db.pool, job!.id))!.status).toBe("processing");
    const cancel = await picket(["workflows", "cancel", id, "--by", "bob", ...url], { env: { DATABASE_URL: undefined } });
    expect(cancel).toMatchObject({ code: 0, stdout: `workflow ${id}: cancelled, with 1 task job in flight; workers stop those that were running\n` });
    expect((await getWorkflow(db.pool, id))!.status).toBe("cancelled");
    expect((await getJob(db.pool, job!.id))!.errors.at(-1)).toMatchObject({ operator: "cancel", by: "bob" });
  }, 60_000);
});
