// A PostgreSQL server of a test file's own, for the faults an operator causes to a whole server:
// paused with SIGSTOP, stopped and started again. The suite's shared server must never see those
// (other files run on it at the same time).
import { execFile } from "node:child_process";
import { chmod, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { promisify } from "node:util";
import { afterAll, beforeAll } from "vitest";
import { migrate, startEmbeddedPostgres, type EmbeddedPostgres } from "../../src/db/index.ts";

const run = promisify(execFile);

export interface OwnServer {
  url: string;
  /** A pool for the test's own reads and writes (not the worker's). */
  pool: pg.Pool;
  /** SIGSTOP to the postmaster and every backend: connections stay open, nothing answers. */
  pause(): Promise<void>;
  resume(): Promise<void>;
  /** Stops the server (fast shutdown: connections are closed); start() brings it back on the same port and data. */
  stop(): Promise<void>;
  start(): Promise<void>;
}

/** Starts a migrated server for this file in beforeAll and removes it in afterAll. */
export const useOwnServer = (): OwnServer => {
  let server: EmbeddedPostgres | undefined;
  let dataDir = "";
  let port = 0;
  let paused = false;
  const handle = {} as OwnServer;
  const settings = { fsync: "off", synchronous_commit: "off", full_page_writes: "off" };
  // The postmaster and every process it started (each backend leads a process group of its own,
  // so a signal to the postmaster's group would miss them).
  const signalAll = async (signal: NodeJS.Signals) => {
    const postmaster = Number((await readFile(path.join(server!.dataDir, "postmaster.pid"), "utf8")).split("\n")[0]);
    const { stdout } = await run("ps", ["-o", "pid=", "--ppid", String(postmaster)]);
    for (const pid of [postmaster, ...stdout.split("\n").filter((l) => l.trim() !== "").map(Number)]) process.kill(pid, signal);
  };
  handle.pause = async () => {
    await signalAll("SIGSTOP");
    paused = true;
  };
  handle.resume = async () => {
    await signalAll("SIGCONT");
    paused = false;
  };
  handle.stop = async () => {
    await server?.stop();
    server = undefined;
  };
  handle.start = async () => {
    server = await startEmbeddedPostgres({ dataDir, port, settings });
  };
  beforeAll(async () => {
    const folder = await mkdtemp(path.join(tmpdir(), "picket-own-"));
    // As root the server runs as postgres, which must reach its data folder.
    await chmod(folder, 0o755);
    dataDir = path.join(folder, "data");
    server = await startEmbeddedPostgres({ dataDir, settings });
    port = server.port;
    handle.url = server.url;
    handle.pool = new pg.Pool({ connectionString: server.url, max: 5 });
    handle.pool.on("error", () => undefined);
    await migrate(handle.pool);
  });
  afterAll(async () => {
    if (paused) await handle.resume();
    await handle.pool?.end();
    await server?.stop();
    await rm(path.dirname(dataDir), { recursive: true, force: true });
  });
  return handle;
};
