import type { Command } from "commander";
import { cancelFlow, FLOW_STATUSES, flowGraph, listFlows, type Flow, type FlowEdge, type FlowStatus, type Job } from "../db/index.ts";
import { age } from "./queues.ts";
import { byOption, operator, statementOptions, table, withDatabaseOptions, withPool, type DatabaseOptions } from "./shared.ts";

/** One line per flow: its id, name, status, jobs (live / dead / cancelled of total), age. */
export const formatFlows = (flows: Flow[], now: Date): string => {
  if (flows.length === 0) return "(no flows: enqueue one with enqueueFlow(db, { name, jobs }))\n";
  return table(
    ["id", "name", "status", "jobs", "live", "dead", "cancelled", "started", "finished"],
    flows.map((f) => [
      f.id,
      f.name,
      f.status,
      String(f.total),
      String(f.live),
      String(f.dead),
      String(f.cancelled),
      `${age(f.createdAt, now)} ago`,
      f.finishedAt === null ? "—" : `${age(f.finishedAt, now)} ago`,
    ]),
  );
};

/** A flow's jobs in id order, each with its status and what it waits for (by name, and how each edge resolved). */
export const formatFlow = (flow: Flow, jobs: Job[], edges: FlowEdge[]): string => {
  const names = new Map(jobs.map((j) => [j.id, j.flowNode ?? j.id]));
  const waitsFor = new Map<string, string[]>();
  for (const e of edges) {
    const policy = e.onFailure === "fail" ? "" : ` (${e.onFailure})`;
    const state = e.resolved === null ? "" : ` ${e.resolved}`;
    waitsFor.set(e.dependent, [...(waitsFor.get(e.dependent) ?? []), `${names.get(e.dependency) ?? e.dependency}${policy}${state}`]);
  }
  const head =
    `flow ${flow.id} ${JSON.stringify(flow.name)}${flow.key === null ? "" : ` key ${JSON.stringify(flow.key)}`}: ${flow.status}, ` +
    `${flow.total} jobs (${flow.live} live, ${flow.dead} dead, ${flow.cancelled} cancelled)\n`;
  return (
    head +
    table(
      ["job", "name", "task", "status", "attempts", "waits for", "last error"],
      jobs.map((j) => [j.id, j.flowNode ?? "", j.type, j.status, String(j.attempts), (waitsFor.get(j.id) ?? []).join(", ") || "—", (j.lastError ?? "").slice(0, 80)]),
    )
  );
};

export const flowsCommand = (program: Command): void => {
  const flows = program.command("flows").description("flows (jobs that wait for other jobs): list them, show one's graph, cancel one");
  withDatabaseOptions(
    flows
      .command("list")
      .description("the newest flows, with their status and their jobs' counts")
      .option("--status <status>", `only flows in this status (${FLOW_STATUSES.join(", ")})`)
      .option("--limit <n>", "how many (1 to 1000)", "20")
      .option("--json", "print JSON"),
  ).action(async (options: DatabaseOptions & { status?: string; limit: string; json?: boolean }) => {
    if (options.status !== undefined && !FLOW_STATUSES.includes(options.status as FlowStatus)) {
      throw new Error(`--status must be one of ${FLOW_STATUSES.join(", ")} (got ${JSON.stringify(options.status)})`);
    }
    const limit = Number(options.limit);
    const [found, now] = await withPool(options, async (pool) => {
      const filter = { limit, ...(options.status === undefined ? {} : { status: options.status as FlowStatus }) };
      const [found, { rows }] = await Promise.all([listFlows(pool, filter, statementOptions(options)), pool.query<{ now: Date }>("SELECT now()")]);
      return [found, rows[0]!.now] as const;
    });
    process.stdout.write(options.json ? `${JSON.stringify(found, null, 2)}\n` : formatFlows(found, now));
  });
  withDatabaseOptions(flows.command("show").description("one flow: its jobs, each with its status and what it waits for").argument("<id>").option("--json", "print JSON")).action(
    async (id: string, options: DatabaseOptions & { json?: boolean }) => {
      const graph = await withPool(options, (pool) => flowGraph(pool, id, statementOptions(options)));
      if (graph === null) throw new Error(`no flow ${id} (picket flows list shows the newest)`);
      process.stdout.write(options.json ? `${JSON.stringify(graph, null, 2)}\n` : formatFlow(graph.flow, graph.jobs, graph.edges));
    },
  );
  withDatabaseOptions(
    flows
      .command("cancel")
      .description("cancel every live job of a flow, running ones included (their workers stop them); what depends on them is cancelled too")
      .argument("<id>")
      .option(...byOption),
  ).action(async (id: string, options: DatabaseOptions & { by?: string }) => {
    const cancelled = await withPool(options, async (pool) => {
      const graph = await flowGraph(pool, id, statementOptions(options));
      if (graph === null) throw new Error(`no flow ${id} (picket flows list shows the newest)`);
      return { flow: graph.flow, jobs: await cancelFlow(pool, id, { ...statementOptions(options), by: operator(options.by) }) };
    });
    process.stdout.write(
      cancelled.jobs.length === 0
        ? `flow ${id} has no live job to cancel (it is ${cancelled.flow.status})\n`
        : `flow ${id}: cancelled ${cancelled.jobs.length} job${cancelled.jobs.length === 1 ? "" : "s"} and what depended on them; workers stop those that were running\n`,
    );
  });
};
