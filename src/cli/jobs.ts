import type { Command } from "commander";
import { cancelJob, getJob, jobSteps, retryDeadJob, type AdminResult } from "../db/index.ts";
import { statementOptions, withDatabaseOptions, withPool, type DatabaseOptions } from "./shared.ts";

const report = (action: string, id: string, result: AdminResult, wanted: string): void => {
  if (result.outcome === "applied") {
    process.stdout.write(`job ${id} ${action}\n`);
    return;
  }
  throw new Error(
    result.outcome === "not_found"
      ? `job ${id} does not exist`
      : result.outcome === "key_taken"
        ? `job ${id} cannot be ${action}: its key ${JSON.stringify(result.key)} is held by job ${result.heldBy}, which is ${result.heldByStatus}. ` +
          `Let that job finish (or cancel it: picket jobs cancel ${result.heldBy}), then retry this one.`
        : `job ${id} is ${result.status}; only ${wanted} jobs can be ${action}`,
  );
};

export const jobsCommand = (program: Command): void => {
  const jobs = program.command("jobs").description("act on one job");
  withDatabaseOptions(jobs.command("retry").description("run a dead job again, with fresh attempts").argument("<id>")).action(
    async (id: string, options: DatabaseOptions) =>
      report("retried", id, await withPool(options, (pool) => retryDeadJob(pool, id, statementOptions(options))), "dead"),
  );
  withDatabaseOptions(jobs.command("show").description("print a job's row and its recorded steps, as JSON").argument("<id>")).action(
    async (id: string, options: DatabaseOptions) => {
      const found = await withPool(options, async (pool) => {
        const job = await getJob(pool, id, statementOptions(options));
        return job === null ? null : { ...job, steps: await jobSteps(pool, job.id, statementOptions(options)) };
      });
      if (found === null) throw new Error(`job ${id} does not exist`);
      process.stdout.write(`${JSON.stringify(found, null, 2)}\n`);
    },
  );
  withDatabaseOptions(jobs.command("cancel").description("cancel a pending or running job (a running one's handler is interrupted)").argument("<id>")).action(
    async (id: string, options: DatabaseOptions) =>
      report("cancelled", id, await withPool(options, (pool) => cancelJob(pool, id, statementOptions(options))), "pending or processing"),
  );
};
