import type { Command } from "commander";
import { migrate } from "../db/index.ts";
import { statementOptions, withDatabaseOptions, withPool, type DatabaseOptions } from "./shared.ts";

export const migrateCommand = (program: Command): void => {
  withDatabaseOptions(
    program.command("migrate").description("create or update picket's tables (safe to run any number of times, from any number of processes)"),
  ).action(async (options: DatabaseOptions) => {
    const { applied } = await withPool(options, (pool) => migrate(pool, statementOptions(options)));
    process.stdout.write(
      applied.length === 0
        ? `schema "${options.schema}" is up to date\n`
        : `applied ${applied.length} migration(s) to schema "${options.schema}": ${applied.join(", ")}\n`,
    );
  });
};
