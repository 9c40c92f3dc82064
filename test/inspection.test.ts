// An inspector attached to a supervisor sees one tree: the supervisor's actor at its root and an
// actor per job under it, whose snapshots follow the job's states; payloads and results only when
// logPayloads is on. The inspector here is @statelyai/inspect's own, with an adapter that keeps
// what it would send to the Stately visualizer.
import { createInspector } from "@statelyai/inspect";
import { describe, expect, it } from "vitest";
import { enqueueJobs } from "../src/db/index.ts";
import { createActor, createMachine, setup } from "xstate";
import { parentFor, REDACTED } from "../src/runtime/inspection.ts";
import { defineTask } from "../src/runtime/task.ts";
import { defineWorkflow } from "../src/workflows/definition.ts";
import { getWorkflow, sendToWorkflow, startWorkflow } from "../src/db/workflows.ts";
import { useTestDatabase } from "./support/db.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

interface Sent {
  type: string;
  name?: string;
  sessionId: string;
  parentId?: string;
  snapshot?: { value?: unknown; status?: string; context?: { job?: { payload?: unknown }; result?: unknown }; input?: unknown; output?: unknown };
  event?: { type: string; input?: unknown; output?: unknown };
}

const SECRET = "s3cret-card-number";

const inspectedRun = async (logPayloads: boolean) => {
  const sent: Sent[] = [];
  const inspector = createInspector({ send: (event) => void sent.push(event as Sent), start: () => undefined, stop: () => undefined });
  const type = `inspected-${logPayloads}`;
  const task = defineTask({ name: type, handler: async (payload: { card: string }) => ({ charged: payload.card }) });
  await enqueueJobs(db.pool, [{ type, payload: { card: SECRET } }, { type, payload: { card: SECRET } }]);
  const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], inspect: inspector.inspect, logPayloads });
  await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(2);
  await supervisor.stop();
  // @statelyai/inspect hands events on when the event loop is idle.
  await new Promise((resolve) => setTimeout(resolve, 200));
  return sent;
};

describe("an inspector attached to a supervisor", () => {
  it("sees one supervisor actor with the jobs' actors under it, their snapshots following the job's states, and no payload", async () => {
    const sent = await inspectedRun(false);
    const actors = sent.filter((e) => e.type === "@xstate.actor");
    const supervisors = actors.filter((e) => e.name === "supervisor");
    expect(supervisors).toHaveLength(1);
    const root = supervisors[0]!.sessionId;
    expect(supervisors[0]!.parentId).toBeUndefined();
    const jobs = actors.filter((e) => e.name === "job");
    expect(jobs).toHaveLength(2);
    for (const job of jobs) {
      expect(job.parentId, "each job's actor is a child of the supervisor's").toBe(root);
      const states = sent.filter((e) => e.type === "@xstate.snapshot" && e.sessionId === job.sessionId).map((e) => e.snapshot!.value);
      expect(states.filter((s, i) => s !== states[i - 1])).toEqual(["running", "completing", "done"]);
    }
    const everything = JSON.stringify(sent);
    expect(everything).not.toContain(SECRET);
    expect(everything).toContain(REDACTED);
  });

  it("hands a callback inspector no payload or result anywhere: not in events, snapshots, inputs, outputs, action params, nor in what an actor reference answers later", async () => {
    const seen: unknown[] = [];
    const type = "inspected-callback";
    const task = defineTask({ name: type, handler: async (payload: { card: string }) => ({ charged: payload.card }) });
    await enqueueJobs(db.pool, [{ type, payload: { card: SECRET } }]);
    const { supervisor, outcomes } = await startWorker({
      connectionString: db.url,
      tasks: [task],
      inspect: (event) => void seen.push(event),
    });
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(1);
    await supervisor.stop();
    // What each actor reference answers when read later, as @statelyai/inspect reads it.
    type Ref = { getSnapshot(): unknown };
    for (const event of [...seen]) {
      const { actorRef, sourceRef } = event as { actorRef: Ref; sourceRef?: Ref };
      seen.push(actorRef.getSnapshot(), sourceRef?.getSnapshot());
    }
    // Everything reachable from what the inspector was handed, cycles cut.
    const reachable = new WeakSet<object>();
    const text = JSON.stringify(seen, (_key, value: unknown) => {
      if (typeof value !== "object" || value === null) return value;
      if (reachable.has(value)) return undefined;
      reachable.add(value);
      return value;
    });
    expect(text).toContain(REDACTED);
    expect(text).toContain("xstate.done.actor.handler");
    expect(text).not.toContain(SECRET);
  });

  it("shows payloads and results when logPayloads is on", async () => {
    const sent = await inspectedRun(true);
    const done = sent.find((e) => e.type === "@xstate.snapshot" && e.snapshot?.value === "done");
    expect(done?.snapshot?.context).toMatchObject({ job: { payload: { card: SECRET } }, result: { charged: SECRET } });
    expect(JSON.stringify(sent)).not.toContain(REDACTED);
  });

  it("a job's actor that fails does not fail the supervisor's actor it runs under", () => {
    const seen: string[] = [];
    const supervisor = createActor(createMachine({ id: "supervisor", initial: "running", states: { running: {} } }), {
      inspect: (event) => void seen.push(`${event.type} ${event.actorRef.sessionId}`),
    });
    supervisor.start();
    const failing = setup({ actions: { fail: () => { throw new Error("an action threw"); } } }).createMachine({ id: "job", initial: "running", states: { running: { on: { GO: { actions: "fail" } } } } });
    const job = createActor(failing, { parent: parentFor(supervisor) });
    const errors: unknown[] = [];
    job.subscribe({ error: (error) => void errors.push(error) });
    job.start();
    job.send({ type: "GO" });
    expect(errors).toHaveLength(1);
    expect(supervisor.getSnapshot().status).toBe("active");
    // Still one tree: the job's actor is the supervisor's child, in its system, seen by its inspector.
    expect((job as unknown as { _parent: { sessionId: string } })._parent.sessionId).toBe(supervisor.sessionId);
    expect(seen).toContain(`@xstate.actor ${job.sessionId}`);
  });
});

describe("a workflow instance in the inspector", () => {
  const approval = defineWorkflow({
    name: "inspected-approval",
    machine: setup({ types: {} as { context: { card: string }; input: { card: string } } }).createMachine({
      id: "approval",
      context: ({ input }) => ({ card: input.card }),
      initial: "waiting",
      states: { waiting: { on: { APPROVE: "approved" } }, approved: { type: "final" } },
    }),
  });

  const inspectedWorkflow = async (logPayloads: boolean) => {
    const sent: Sent[] = [];
    const inspector = createInspector({ send: (event) => void sent.push(event as Sent), start: () => undefined, stop: () => undefined });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [], workflows: [approval], inspect: inspector.inspect, logPayloads });
    const { id } = await startWorkflow(db.pool, approval, { card: SECRET });
    await expect.poll(async () => (await getWorkflow(db.pool, id))!.state, { timeout: 10_000 }).toBe("waiting");
    await sendToWorkflow(db.pool, id, { type: "APPROVE", note: SECRET });
    await expect.poll(async () => (await getWorkflow(db.pool, id))!.status, { timeout: 10_000 }).toBe("done");
    await supervisor.stop();
    await new Promise((resolve) => setTimeout(resolve, 200));
    return { sent: sent.filter((e) => e.sessionId === `picket-workflow-${id}`), id };
  };

  it("is an actor named after it, defined by the user's machine, with an event and a snapshot per event applied; no context or event data", async () => {
    const { sent, id } = await inspectedWorkflow(false);
    const actors = sent.filter((e) => e.type === "@xstate.actor");
    expect(actors.map((e) => e.name)).toEqual([`inspected-approval #${id}`]);
    expect(JSON.parse((actors[0] as unknown as { definition: string }).definition)).toMatchObject({ id: "approval", initial: "waiting" });
    expect(sent.filter((e) => e.type === "@xstate.event").map((e) => e.event!.type)).toEqual(["xstate.init", "APPROVE"]);
    expect(sent.filter((e) => e.type === "@xstate.snapshot").map((e) => [e.snapshot!.value, e.snapshot!.status])).toEqual([["waiting", "active"], ["approved", "done"]]);
    const everything = JSON.stringify(sent);
    expect(everything).not.toContain(SECRET);
    expect(everything).toContain(REDACTED);
  });

  it("shows the context and the events' data with logPayloads", async () => {
    const { sent } = await inspectedWorkflow(true);
    expect(sent.filter((e) => e.type === "@xstate.snapshot").map((e) => e.snapshot!.context)).toEqual([{ card: SECRET }, { card: SECRET }]);
    expect(sent.filter((e) => e.type === "@xstate.event").at(-1)!.event).toEqual({ type: "APPROVE", note: SECRET });
  });
});
