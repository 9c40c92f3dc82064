import path from "node:path";
import { startEmbeddedPostgres } from "../db/index.ts";

export interface ResolvedDatabase {
  url: string;
  /** Where the URL came from, for the first log line. */
  source: "option" | "DATABASE_URL" | "embedded";
  stop(): Promise<void>;
}

/** The project-local folder the embedded server keeps its data in between runs. */
export const LOCAL_DATA_DIR = path.resolve(".picket", "pgdata");

/**
 * --database-url, else DATABASE_URL, else the embedded PostgreSQL: in a temporary folder
 * (`temporary`, the demo) or in ./.picket/pgdata, kept between runs.
 */
export const resolveDatabase = async (
  option: string | undefined,
  embedded: { temporary: boolean },
): Promise<ResolvedDatabase> => {
  if (option) return { url: option, source: "option", stop: async () => undefined };
  if (process.env.DATABASE_URL) return { url: process.env.DATABASE_URL, source: "DATABASE_URL", stop: async () => undefined };
  const server = await startEmbeddedPostgres(embedded.temporary ? {} : { dataDir: LOCAL_DATA_DIR });
  return { url: server.url, source: "embedded", stop: server.stop };
};
