import type { Command } from "commander";
import { cancelJob, deleteFinishedJob, getJob, jobSteps, listJobs, retryDeadJob, runJobNow, type AdminResult, type Job, type JobStatus } from "../db/index.ts";
import { byOption, integerOption, operator, statementOptions, withDatabaseOptions, withPool, type DatabaseOptions } from "./shared.ts";

/** A job not found may have completed: a worker deletes completed jobs unless it keeps them. */
const missing = (id: string) =>
  `job ${id} does not exist (never enqueued, or completed: workers delete completed jobs unless keepCompleted; or removed by retention)`;

/** Why an admin action did nothing, in words (the action as a past participle: "cancelled"). */
const refusal = (action: string, id: string, result: Exclude<AdminResult, { outcome: "applied" }>, wanted: string): string => {
  switch (result.outcome) {
    case "not_found":
      return missing(id);
    case "key_taken":
      return (
        `job ${id} cannot be ${action}: its key ${JSON.stringify(result.key)} is held by job ${result.heldBy}, which is ${result.heldByStatus}. ` +
        `Let that job finish (or cancel it: picket jobs cancel ${result.heldBy}), then retry this one.`
      );
    case "in_flow":
      return `job ${id} is part of flow ${result.flowId}: a flow's jobs are deleted with their flow (by retention once it has finished), not alone`;
    case "applies_workflow":
      return (
        `job ${id} applies the events of workflow ${result.workflowId}, which has not ended: ${action} alone, it would leave an event waiting for good; ` +
        (action === "deleted" ? `retry it (picket jobs retry ${id}), or cancel the workflow` : `cancel the workflow`) +
        ` (picket workflows cancel ${result.workflowId})`
      );
    case "wrong_status":
      return `job ${id} is ${result.status}; only ${wanted} jobs can be ${action}`;
  }
};

const report = (action: string, id: string, result: AdminResult, wanted: string): void => {
  if (result.outcome !== "applied") throw new Error(refusal(action, id, result, wanted));
  process.stdout.write(`job ${id} ${action}\n`);
};

export const jobsCommand = (program: Command): void => {
  const jobs = program.command("jobs").description("list jobs, or act on one");
  withDatabaseOptions(
    jobs
      .command("list")
      .description("the newest jobs, one line each (picket jobs show <id> for one in full)")
      .option("--status <status>", "only jobs with this status: pending, processing, completed, dead or cancelled")
      .option("--task <name>", "only jobs of this task")
      .option("--limit <n>", "at most this many (default 20, at most 1000)", integerOption("--limit", 1), 20)
      .option("--json", "print JSON"),
  ).action(async (options: DatabaseOptions & { status?: JobStatus; task?: string; limit: number; json?: boolean }) => {
    const found = await withPool(options, (pool) =>
      listJobs(pool, { limit: options.limit, ...(options.status ? { status: options.status } : {}), ...(options.task ? { type: options.task } : {}) }, statementOptions(options)),
    );
    process.stdout.write(options.json ? `${JSON.stringify(found, null, 2)}\n` : formatJobList(found));
  });
  withDatabaseOptions(jobs.command("retry").description("run a dead job again, with fresh attempts (its history records the retry)").argument("<id>").option(...byOption)).action(
    async (id: string, options: DatabaseOptions & { by?: string }) =>
      report("retried", id, await withPool(options, (pool) => retryDeadJob(pool, id, { ...statementOptions(options), by: operator(options.by) })), "dead"),
  );
  withDatabaseOptions(jobs.command("show").description("print a job's row and its recorded steps, as JSON").argument("<id>")).action(
    async (id: string, options: DatabaseOptions) => {
      const found = await withPool(options, async (pool) => {
        const job = await getJob(pool, id, statementOptions(options));
        return job === null ? null : { ...job, steps: await jobSteps(pool, job.id, statementOptions(options)) };
      });
      if (found === null) throw new Error(missing(id));
      process.stdout.write(`${JSON.stringify(found, null, 2)}\n`);
    },
  );
  withDatabaseOptions(
    jobs.command("cancel").description("cancel a pending or running job (a running one's handler is interrupted; its history records the cancel)").argument("<id>").option(...byOption),
  ).action(
    async (id: string, options: DatabaseOptions & { by?: string }) =>
      report("cancelled", id, await withPool(options, (pool) => cancelJob(pool, id, { ...statementOptions(options), by: operator(options.by) })), "pending or processing"),
  );
  withDatabaseOptions(jobs.command("run-now").description("make a pending job due at once (a delayed one, or one waiting out a retry's backoff); its history records it").argument("<id>").option(...byOption)).action(
    async (id: string, options: DatabaseOptions & { by?: string }) =>
      report("made due now", id, await withPool(options, (pool) => runJobNow(pool, id, { ...statementOptions(options), by: operator(options.by) })), "pending"),
  );
  withDatabaseOptions(jobs.command("delete").description("delete a finished job (completed, dead or cancelled) with its recorded steps").argument("<id>")).action(
    async (id: string, options: DatabaseOptions) =>
      report("deleted", id, await withPool(options, (pool) => deleteFinishedJob(pool, id, statementOptions(options))), "completed, dead or cancelled"),
  );
};

/** One line per job: id, task, status, attempts, when it runs (or ran), and its last error. */
export const formatJobList = (jobs: Job[]): string => {
  if (jobs.length === 0) return "(no jobs)\n";
  const header = ["id", "task", "status", "attempts", "run at", "last error"];
  const rows = jobs.map((j) => [j.id, j.type, j.status, j.maxAttempts === null ? String(j.attempts) : `${j.attempts}/${j.maxAttempts}`, new Date(j.runAt).toISOString(), (j.lastError ?? "").split("\n")[0]!.slice(0, 80)]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  return `${[header, ...rows].map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n")}\n`;
};
