// An assertion on how a flow ended (or stands), with a failure message that lists each of its jobs:
// its name, task, status, attempts and last error, and what it waited for.
import { AssertionError } from "node:assert";
import { InvalidConfigError } from "../db/errors.ts";
import { flowGraph, type Flow, type FlowEdge, type FlowStatus } from "../db/flows.ts";
import type { Job, JobId, JobStatus } from "../db/job-row.ts";
import type { Queryable } from "../db/queryable.ts";

export interface ExpectFlowOptions {
  /** The flow's status; default "completed". */
  status?: FlowStatus;
  /** Statuses of jobs by their name in the flow, those named only. */
  jobs?: Record<string, JobStatus>;
  /** picket's schema; default "picket". */
  schema?: string;
}

/**
 * Asserts a flow's status (default: completed) and, when given, its jobs' statuses by name; returns
 * the flow, its jobs by name and its edges. Throws an AssertionError that lists every job of the
 * flow with its status, attempts, last error and what it waited for.
 */
export const expectFlow = async (
  db: Queryable,
  id: JobId,
  options: ExpectFlowOptions = {},
): Promise<{ flow: Flow; jobs: Record<string, Job>; edges: FlowEdge[] }> => {
  if (typeof id !== "string" && typeof id !== "number") {
    throw new InvalidConfigError(`picket/testing: expectFlow needs the flow's id: expectFlow(db, flow.id) (got ${String(id)}).`);
  }
  const graph = await flowGraph(db, id, options.schema === undefined ? {} : { schema: options.schema });
  if (graph === null) throw new AssertionError({ message: `expected flow ${id}; there is no such flow.`, actual: null, expected: id, operator: "expectFlow" });
  const jobs = Object.fromEntries(graph.jobs.map((job) => [job.flowNode!, job]));
  const want = options.status ?? "completed";
  const wrongJobs = Object.entries(options.jobs ?? {}).filter(([name, status]) => jobs[name]?.status !== status);
  if (graph.flow.status === want && wrongJobs.length === 0) return { flow: graph.flow, jobs, edges: graph.edges };
  const names = new Map(graph.jobs.map((job) => [job.id, job.flowNode ?? job.id]));
  const waitsFor = (job: Job) => graph.edges.filter((e) => e.dependent === job.id).map((e) => names.get(e.dependency));
  const lines = [
    `expected flow ${id} "${graph.flow.name}" ${want}${wrongJobs.length > 0 ? `, with ${wrongJobs.map(([name, status]) => `${name} ${status}`).join(", ")}` : ""}; it is ${graph.flow.status}.`,
    ...wrongJobs.filter(([name]) => jobs[name] === undefined).map(([name]) => `No job is named "${name}" in it.`),
    `Its jobs (${graph.jobs.length}):`,
    ...graph.jobs.slice(0, 50).map(
      (job) =>
        `  ${job.flowNode} (#${job.id} ${job.type}) ${job.status}, ${job.attempts} attempt${job.attempts === 1 ? "" : "s"}` +
        (waitsFor(job).length > 0 ? `, after ${waitsFor(job).join(", ")}` : "") +
        (job.lastError ? `: ${job.lastError}` : ""),
    ),
    ...(graph.jobs.length > 50 ? [`  … and ${graph.jobs.length - 50} more`] : []),
  ];
  throw new AssertionError({ message: lines.join("\n"), actual: graph.flow.status, expected: want, operator: "expectFlow" });
};
