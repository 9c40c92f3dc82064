import type { Command } from "commander";
import { migrate, openPool } from "../db/index.ts";
import { resolveDatabase } from "./database.ts";

export const migrateCommand = (program: Command): void => {
  program
    .command("migrate")
    .description("create or update picket's tables (safe to run any number of times, from any number of processes)")
    .option("--database-url <url>", "PostgreSQL connection string (default: DATABASE_URL, else the embedded server in ./.picket)")
    .option("--schema <name>", "schema for picket's tables", "picket")
    .action(async (options: { databaseUrl?: string; schema: string }) => {
      const database = await resolveDatabase(options.databaseUrl, { temporary: false });
      try {
        const pool = await openPool({ connectionString: database.url, max: 1 });
        try {
          const { applied } = await migrate(pool, { schema: options.schema });
          process.stdout.write(
            applied.length === 0
              ? `schema "${options.schema}" is up to date\n`
              : `applied ${applied.length} migration(s) to schema "${options.schema}": ${applied.join(", ")}\n`,
          );
        } finally {
          await pool.end();
        }
      } finally {
        await database.stop();
      }
    });
};
