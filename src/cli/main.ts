#!/usr/bin/env node
// The `picket` command. Each subcommand lives in its own module; this file wires them up and
// turns picket's errors into a one-line message and a non-zero exit code.
import { Command, CommanderError } from "commander";
import { demoCommand } from "./demo.ts";
import { enqueueCommand } from "./enqueue.ts";
import { PICKET_VERSION } from "../runtime/version.ts";
import { cliErrorMessage } from "./error-message.ts";
import { flowsCommand } from "./flows.ts";
import { jobsCommand } from "./jobs.ts";
import { machinesCommand } from "./machines.ts";
import { dashboardCommand } from "./dashboard.ts";
import { dbCommand } from "./db.ts";
import { migrateCommand } from "./migrate.ts";
import { queuesCommand } from "./queues.ts";
import { schedulesCommand } from "./schedules.ts";
import { statsCommand } from "./stats.ts";
import { workerCommand } from "./worker.ts";
import { workflowsCommand } from "./workflows.ts";

const program = new Command()
  .name("picket")
  .description("PostgreSQL job queue and worker supervisor")
  .version(PICKET_VERSION, "-V, --version", "print picket's version")
  .showHelpAfterError("(run with --help for usage)")
  .exitOverride();

demoCommand(program);
workerCommand(program);
enqueueCommand(program);
statsCommand(program);
jobsCommand(program);
flowsCommand(program);
workflowsCommand(program);
migrateCommand(program);
machinesCommand(program);
dashboardCommand(program);
schedulesCommand(program);
queuesCommand(program);
dbCommand(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) process.exit(error.exitCode);
  process.stderr.write(`${cliErrorMessage(error)}\n`);
  process.exit(1);
}
