import path from "node:path";
import { InvalidConfigError, startEmbeddedPostgres } from "../db/index.ts";

export interface ResolvedDatabase {
  url: string;
  /** Where the URL came from, for the first log line. */
  source: "option" | "DATABASE_URL" | "embedded";
  /** The embedded server's data folder. */
  dataDir?: string;
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
  const given = givenDatabaseUrl(option);
  if (given) return { ...given, stop: async () => undefined };
  const server = await startEmbeddedPostgres(embedded.temporary ? {} : { dataDir: LOCAL_DATA_DIR });
  return { url: server.url, source: "embedded", dataDir: server.dataDir, stop: server.stop };
};

/**
 * The URL the user gave (--database-url, else DATABASE_URL), or undefined when they gave none.
 * An empty one is refused rather than read as "none": `DATABASE_URL=` in a .env file or a CI
 * secret that did not expand would otherwise quietly run against a fresh embedded server, and
 * jobs would go somewhere nobody looks.
 */
export const givenDatabaseUrl = (option: string | undefined): { url: string; source: "option" | "DATABASE_URL" } | undefined => {
  if (option !== undefined) {
    if (option.trim() === "") throw new InvalidConfigError("picket: --database-url is empty: give a PostgreSQL connection string, or leave the option out.");
    return { url: option, source: "option" };
  }
  const env = process.env.DATABASE_URL;
  if (env === undefined) return undefined;
  if (env.trim() === "") {
    throw new InvalidConfigError(
      "picket: DATABASE_URL is set but empty: set it to a PostgreSQL connection string, or unset it (`unset DATABASE_URL`) to use the embedded server.",
    );
  }
  return { url: env, source: "DATABASE_URL" };
};
