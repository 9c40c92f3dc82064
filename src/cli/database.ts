import path from "node:path";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { InvalidConfigError, PicketError, startEmbeddedPostgres } from "../db/index.ts";
import { findEmbeddedPostgres, type RunningEmbeddedPostgres } from "../db/embedded.ts";
import { isAlive } from "../db/process-alive.ts";

export interface ResolvedDatabase {
  url: string;
  /** Where the URL came from, for the first log line. */
  source: "option" | "DATABASE_URL" | "embedded";
  /** The embedded server's data folder. */
  dataDir?: string;
  /**
   * The embedded server in ./.picket/pgdata was already running (`picket db start`, or another
   * picket process that started it for itself): this process only connects to it, and stop()
   * leaves it running.
   */
  shared?: RunningEmbeddedPostgres;
  stop(): Promise<void>;
}

/**
 * The project-local folder the embedded server keeps its data in between runs: ./.picket/pgdata
 * of the working folder at the time of the call, not of the module's loading.
 */
export const localDataDir = (): string => path.resolve(".picket", "pgdata");

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
  if (embedded.temporary) {
    const server = await startEmbeddedPostgres({});
    return { url: server.url, source: "embedded", dataDir: server.dataDir, stop: server.stop };
  }
  const running = sharedServer();
  if (running) return running;
  return withStartLock(async () => {
    // Another process may have started it while this one waited for the lock.
    const started = sharedServer();
    if (started) return started;
    const server = await startEmbeddedPostgres({ dataDir: localDataDir() });
    return { url: server.url, source: "embedded", dataDir: server.dataDir, stop: server.stop };
  });
};

/**
 * Runs fn while holding .picket/start.lock, so that two picket processes started at once do not
 * both run initdb or postgres on one data folder: the second waits, then finds the first's
 * server. A lock whose process is gone (killed mid-start) is taken over.
 */
export const withStartLock = async <T>(fn: () => Promise<T>): Promise<T> => {
  const lock = path.join(path.dirname(localDataDir()), "start.lock");
  // .picket is private when picket makes it (as root, the postgres user must pass through it to
  // the data folder; the data folder itself is private either way).
  await mkdir(path.dirname(lock), { recursive: true, mode: process.getuid?.() === 0 ? 0o755 : 0o700 });
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      await writeFile(lock, String(process.pid), { flag: "wx" });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const holder = Number(await readFile(lock, "utf8").catch(() => ""));
      // An empty file is one being written this instant: wait for its pid.
      if (holder > 0 && !isAlive(holder) && (await removeStaleLock(lock, holder))) continue;
      if (Date.now() > deadline) {
        throw new PicketError(`picket: picket process ${holder} has been starting the embedded PostgreSQL for 2 minutes (${lock}); stop it, or remove the file if it is gone.`);
      } else await new Promise((r) => setTimeout(r, 100));
    }
  }
  try {
    return await fn();
  } finally {
    await rm(lock, { force: true });
  }
};

/**
 * Removes the lock of `holder`, a process that is gone, unless another caller has taken it over
 * since this one read it: the lock is read again and removed under a second lock file (the
 * breaker), so that of several callers that read the dead pid, one removes the lock and the
 * others, finding it taken over, wait for its new holder. Without it, a caller that read the dead
 * pid late removed the lock the first had just written, and both went in. Returns whether the
 * caller should try to take the lock at once; false: wait and look again.
 */
const removeStaleLock = async (lock: string, holder: number): Promise<boolean> => {
  const breaker = `${lock}.break`;
  try {
    await writeFile(breaker, String(process.pid), { flag: "wx" });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    // Held for the time of one read and one removal; one whose process is gone is left over.
    const breaking = Number(await readFile(breaker, "utf8").catch(() => ""));
    if (breaking > 0 && !isAlive(breaking)) await rm(breaker, { force: true });
    return false;
  }
  try {
    if (Number(await readFile(lock, "utf8").catch(() => "")) === holder) await rm(lock, { force: true });
    return true;
  } finally {
    await rm(breaker, { force: true });
  }
};

/** The server running in ./.picket/pgdata when someone still answers for it (an orphan is not: the next start replaces it). */
export const answeredForServer = (): RunningEmbeddedPostgres | undefined => {
  const found = findEmbeddedPostgres(localDataDir());
  return found?.ownerAlive ? found : undefined;
};

/**
 * The server already running in ./.picket/pgdata, to connect to: a kept one (`picket db start`)
 * or one whose starting process still runs. An orphan (its process was SIGKILLed) is not shared:
 * nobody would stop it, so the next start stops it and starts one of its own.
 */
const sharedServer = (): ResolvedDatabase | undefined => {
  const running = answeredForServer();
  if (running === undefined) return undefined;
  return { url: running.url, source: "embedded", dataDir: running.dataDir, shared: running, stop: async () => undefined };
};

/** One line saying which embedded server a command uses, its URL (with the password) and when it stops. */
export const describeEmbedded = (database: ResolvedDatabase, who: string): string | undefined => {
  if (database.source !== "embedded") return undefined;
  const shared = database.shared;
  if (shared === undefined) {
    return (
      `no DATABASE_URL: started the embedded PostgreSQL in .picket/pgdata for this ${who} at ${database.url}; ` +
      `other picket commands here use it while this ${who} runs, and it stops when this ${who} ends (\`picket db start\` keeps one running)`
    );
  }
  return shared.kept
    ? `no DATABASE_URL: using the embedded PostgreSQL started by \`picket db start\` at ${database.url} (it runs until \`picket db stop\`)`
    : `no DATABASE_URL: using the embedded PostgreSQL of picket process ${shared.ownerPid} at ${database.url}; it stops when that process ends (\`picket db start\` keeps one running)`;
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
