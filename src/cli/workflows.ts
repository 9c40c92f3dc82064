import type { Command } from "commander";
import { isJobId } from "../db/index.ts";
import {
  cancelWorkflow,
  getWorkflow,
  listWorkflows,
  sendToWorkflow,
  WORKFLOW_STATUSES,
  workflowHistory,
  workflowJobs,
  WorkflowNotFoundError,
  type Workflow,
  type WorkflowEvent,
  type WorkflowJob,
  type WorkflowStatus,
} from "../db/workflows.ts";
import { age } from "./queues.ts";
import { byOption, operator, statementOptions, table, withDatabaseOptions, withPool, type DatabaseOptions } from "./shared.ts";

const clip = (text: string, max = 80): string => (text.length <= max ? text : `${text.slice(0, max - 1)}…`);

/**
 * XState's state value, compactly: "charging"; { payment: "charging" } as "payment.charging";
 * parallel regions joined with ", " ({ payment: "charging", shipping: "waiting" } as
 * "payment.charging, shipping.waiting"). No state yet (a start not applied): "—".
 */
export const formatState = (value: unknown): string => {
  const paths = (v: unknown, prefix: string[]): string[] => {
    if (v === null || v === undefined) return prefix.length === 0 ? [] : [prefix.join(".")];
    if (typeof v !== "object") return [[...prefix, String(v)].join(".")];
    const entries = Object.entries(v as Record<string, unknown>);
    if (entries.length === 0) return prefix.length === 0 ? [] : [prefix.join(".")];
    return entries.flatMap(([key, child]) => paths(child, [...prefix, key]));
  };
  return paths(value, []).join(", ") || "—";
};

const notFound = (id: string) => `no workflow ${id} (picket workflows list shows the newest)`;

/** The id argument, checked before anything connects. */
const workflowId = (id: string): string => {
  if (!isJobId(id)) throw new Error(`workflow id must be a positive integer, such as 12 (got ${JSON.stringify(id)}); picket workflows list shows the ids`);
  return id;
};

const limitOption = (value: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 1000) throw new Error(`--limit must be an integer from 1 to 1000 (got ${JSON.stringify(value)})`);
  return n;
};

/** One line per instance: id, name, version, status, state, tasks in flight, last change. */
export const formatWorkflows = (workflows: Workflow[], now: Date): string => {
  if (workflows.length === 0) return "(no workflows: start one with startWorkflow(db, workflow, input))\n";
  return table(
    ["id", "name", "version", "status", "state", "tasks", "updated"],
    workflows.map((w) => [w.id, w.name, w.version ?? "—", w.status, clip(formatState(w.state), 60), String(Object.keys(w.tasks).length), `${age(w.updatedAt, now)} ago`]),
  );
};

/** What an event was: a sent or timer event's type, a start's input, a task's end. */
const describeEvent = (e: WorkflowEvent): string => {
  const event = (e.event ?? {}) as Record<string, unknown>;
  if (e.kind === "start") return clip(`input ${JSON.stringify(event["input"] ?? null)}`, 60);
  if (e.kind === "task") return `job ${e.jobId ?? "?"} ${typeof event["status"] === "string" ? event["status"] : "ended"}`;
  if (e.kind === "child") return `child workflow ${String(event["workflow"])} ${typeof event["status"] === "string" ? event["status"] : "ended"}`;
  return typeof event["type"] === "string" ? clip(event["type"], 60) : clip(JSON.stringify(e.event), 60);
};

const when = (at: Date, now: Date): string => (at.getTime() > now.getTime() ? `${at.toISOString()} (in ${age(now, at)})` : `${at.toISOString()} (due)`);

/** The instance, its history (applied events in order), its inbox, and the jobs it started. */
export const formatWorkflow = (w: Workflow, events: WorkflowEvent[], jobs: WorkflowJob[], now: Date): string => {
  const history = events.filter((e) => e.appliedAt !== null);
  const inbox = events.filter((e) => e.appliedAt === null);
  const tasks = Object.entries(w.tasks);
  let out =
    `workflow ${w.id} ${JSON.stringify(w.name)}${w.key === null ? "" : ` key ${JSON.stringify(w.key)}`}: ${w.status}, state ${formatState(w.state)}\n` +
    `version ${w.version ?? "— (not yet applied by a worker)"}, fingerprint ${w.fingerprint ?? "—"}, ${w.seq} event${w.seq === 1 ? "" : "s"} applied, ` +
    `started ${age(w.createdAt, now)} ago, updated ${age(w.updatedAt, now)} ago${w.finishedAt === null ? "" : `, finished ${age(w.finishedAt, now)} ago`}\n` +
    `context: ${JSON.stringify(w.context ?? null)}\n`;
  if (w.status === "done") out += `output: ${JSON.stringify(w.output ?? null)}\n`;
  if (w.error !== null) out += `error: ${w.error}\n`;
  out += `tasks in flight: ${tasks.length === 0 ? "none" : tasks.map(([invoke, job]) => `${invoke} → job ${job}`).join(", ")}\n`;
  const children = Object.entries(w.children);
  if (children.length > 0) out += `children in flight: ${children.map(([invoke, child]) => `${invoke} → workflow ${child}`).join(", ")}\n`;
  if (w.parentId !== null) out += `a child of workflow ${w.parentId}\n`;
  out += "\nhistory:\n";
  out +=
    history.length === 0
      ? "(no event applied yet: a worker that runs this workflow applies them)\n"
      : table(
          ["seq", "applied", "kind", "event", "outcome", "note", "state after"],
          history.map((e) => [e.seq === null ? "—" : String(e.seq), e.appliedAt!.toISOString(), e.kind, describeEvent(e), e.outcome ?? "—", clip(e.note ?? "—"), formatState(e.state)]),
        );
  out += "\ninbox:\n";
  out +=
    inbox.length === 0
      ? "(empty)\n"
      : table(
          ["event", "kind", "event", "queued", "due"],
          inbox.map((e) => [e.id, e.kind, describeEvent(e), `${age(e.createdAt, now)} ago`, when(e.dueAt, now)]),
        );
  out += "\njobs:\n";
  out +=
    jobs.length === 0
      ? "(none started)\n"
      : table(
          ["job", "task", "status", "attempts", "enqueued", "finished"],
          jobs.map((j) => [j.id, j.type, j.status, String(j.attempts), `${age(j.createdAt, now)} ago`, j.finishedAt === null ? "—" : `${age(j.finishedAt, now)} ago`]),
        );
  return out;
};

const EVENT_EXAMPLE = `picket workflows send 12 '{"type":"APPROVE","note":"ok"}', or just its type: picket workflows send 12 APPROVE`;

/** The event argument: a JSON object with a type, or a bare type (APPROVE as { "type": "APPROVE" }). */
export const parseEvent = (text: string): { type: string } & Record<string, unknown> => {
  const trimmed = text.trim();
  if (trimmed === "") throw new Error(`the event is empty: give a JSON object with a type, as in ${EVENT_EXAMPLE}`);
  if (!/^[{["]/.test(trimmed)) return { type: trimmed };
  let event: unknown;
  try {
    event = JSON.parse(trimmed);
  } catch (error) {
    throw new Error(`the event is not valid JSON (${(error as Error).message}): give a JSON object with a type, as in ${EVENT_EXAMPLE}`);
  }
  if (typeof event !== "object" || event === null || Array.isArray(event) || typeof (event as { type?: unknown }).type !== "string") {
    throw new Error(`the event must be a JSON object with a string "type" (got ${clip(JSON.stringify(event))}), as in ${EVENT_EXAMPLE}`);
  }
  return event as { type: string } & Record<string, unknown>;
};

export const workflowsCommand = (program: Command): void => {
  const workflows = program.command("workflows").description("workflows (XState machines run durably): list instances, show one's history, send one an event, cancel one");
  withDatabaseOptions(
    workflows
      .command("list")
      .description("the newest instances, with their status and state")
      .option("--name <name>", "only instances of this workflow")
      .option("--status <status>", `only instances in this status (${WORKFLOW_STATUSES.join(", ")})`)
      .option("--limit <n>", "how many (1 to 1000)", limitOption, 20)
      .option("--json", "print JSON"),
  ).action(async (options: DatabaseOptions & { name?: string; status?: string; limit: number; json?: boolean }) => {
    if (options.status !== undefined && !WORKFLOW_STATUSES.includes(options.status as WorkflowStatus)) {
      throw new Error(`--status must be one of ${WORKFLOW_STATUSES.join(", ")} (got ${JSON.stringify(options.status)})`);
    }
    const filter = {
      limit: options.limit,
      ...(options.name === undefined ? {} : { name: options.name }),
      ...(options.status === undefined ? {} : { status: options.status as WorkflowStatus }),
    };
    const [found, now] = await withPool(options, async (pool) => {
      const [found, { rows }] = await Promise.all([listWorkflows(pool, filter, statementOptions(options)), pool.query<{ now: Date }>("SELECT now()")]);
      return [found, rows[0]!.now] as const;
    });
    process.stdout.write(options.json ? `${JSON.stringify(found, null, 2)}\n` : formatWorkflows(found, now));
  });
  withDatabaseOptions(
    workflows
      .command("show")
      .description("one instance: its status, state and context, the events it applied (its history), those in its inbox, and the jobs it started")
      .argument("<id>")
      .option("--json", "print JSON"),
  ).action(async (id: string, options: DatabaseOptions & { json?: boolean }) => {
    workflowId(id);
    const shown = await withPool(options, async (pool) => {
      const statements = statementOptions(options);
      const workflow = await getWorkflow(pool, id, statements);
      if (workflow === null) return null;
      const [{ history, inbox }, jobs, { rows }] = await Promise.all([workflowHistory(pool, id, statements), workflowJobs(pool, id, statements), pool.query<{ now: Date }>("SELECT now()")]);
      return { workflow, events: [...history, ...inbox], history, inbox, jobs, now: rows[0]!.now };
    });
    if (shown === null) throw new Error(notFound(id));
    const { workflow, events, history, inbox, jobs, now } = shown;
    process.stdout.write(
      options.json
        ? `${JSON.stringify({ workflow, history, inbox, jobs }, null, 2)}\n`
        : formatWorkflow(workflow, events, jobs, now),
    );
  });
  withDatabaseOptions(
    workflows
      .command("send")
      .description(`send an instance an event, a JSON object with a type or just the type ('{"type":"APPROVE","note":"ok"}' or APPROVE); a worker that runs the workflow applies it`)
      .argument("<id>")
      .argument("<event>", `the event: '{"type":"APPROVE"}', or APPROVE`)
      .option(...byOption),
  ).action(async (id: string, text: string, options: DatabaseOptions & { by?: string }) => {
    workflowId(id);
    const event = parseEvent(text);
    const { eventId } = await withPool(options, (pool) =>
      sendToWorkflow(pool, id, event, { ...statementOptions(options), by: operator(options.by) }).catch((error: unknown) => {
        throw error instanceof WorkflowNotFoundError ? new Error(notFound(id)) : error;
      }),
    );
    process.stdout.write(`workflow ${id}: event ${eventId} (${event.type}) is in its inbox; a worker that runs the workflow applies it (picket workflows show ${id})\n`);
  });
  withDatabaseOptions(
    workflows
      .command("cancel")
      .description("cancel a live instance: nothing more is applied, its inbox is dropped, and its tasks in flight are cancelled (their workers stop those running)")
      .argument("<id>")
      .option(...byOption),
  ).action(async (id: string, options: DatabaseOptions & { by?: string }) => {
    workflowId(id);
    const result = await withPool(options, (pool) => cancelWorkflow(pool, id, { ...statementOptions(options), by: operator(options.by) }));
    if (result.outcome === "not_found") throw new Error(notFound(id));
    process.stdout.write(
      result.outcome === "finished"
        ? `workflow ${id} has already finished (it is ${result.status}); nothing to cancel\n`
        : `workflow ${id}: cancelled, with ${result.tasks} task job${result.tasks === 1 ? "" : "s"} in flight; workers stop those that were running\n`,
    );
  });
};
