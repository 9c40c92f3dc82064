// A real PgBouncer in transaction mode in front of the test server, for the tests that prove
// picket works through one (DESIGN.md, invariant 12). Each call starts its own PgBouncer: its own
// temporary config folder, auth file and free loopback port; it never uses (or needs) a system
// PgBouncer service such as the one Debian's package may start on port 6432.
//
// `ignore_startup_parameters` deliberately leaves `options` out: PgBouncer then refuses a startup
// packet carrying session settings, as a production PgBouncer does, and the tests can see picket
// turn that refusal into a clear error.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, constants } from "node:fs";
import { chmod, chown, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { freePort } from "./ports.ts";

export interface PgBouncer {
  /**
   * The same database and user as the URL it fronts, through PgBouncer; the same password too, or,
   * when that URL has none (a server that trusts loopback connections), PgBouncer's own.
   */
  url: string;
  port: number;
  /** Server connections PgBouncer opens per database and user (`default_pool_size`). */
  poolSize: number;
  /** PgBouncer's own log so far (stderr), for failure messages. */
  log(): string;
  /** Stops PgBouncer (closing every connection through it) and removes its folder. Idempotent. */
  stop(): Promise<void>;
}

export interface PgBouncerOptions {
  /** `default_pool_size`: server connections per database and user; default 8. */
  poolSize?: number;
  /** `max_client_conn`; default 200. */
  maxClientConn?: number;
}

/** Where Debian's package puts the binary (not on a non-root user's PATH). */
const DEBIAN_PATH = "/usr/sbin/pgbouncer";

const executable = (file: string): boolean => {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
};

/** The PgBouncer binary: `pgbouncer` on PATH, else Debian's /usr/sbin/pgbouncer. */
export const findPgBouncer = (): string | undefined => {
  for (const dir of (process.env.PATH ?? "").split(path.delimiter).filter(Boolean)) {
    const file = path.join(dir, "pgbouncer");
    if (executable(file)) return file;
  }
  return executable(DEBIAN_PATH) ? DEBIAN_PATH : undefined;
};


/** PgBouncer refuses to run as root: as root it runs as `postgres` (as the embedded server does). */
const RUN_AS = "postgres";

const runAs = (): { name: string; uid: number; gid: number } | undefined => {
  if (process.getuid?.() !== 0) return undefined;
  try {
    return {
      name: RUN_AS,
      uid: Number(execFileSync("id", ["-u", RUN_AS], { encoding: "utf8" }).trim()),
      gid: Number(execFileSync("id", ["-g", RUN_AS], { encoding: "utf8" }).trim()),
    };
  } catch {
    throw new Error(`test/support/pgbouncer.ts: running as root, PgBouncer must run as another user, and there is no "${RUN_AS}" user (useradd ${RUN_AS}).`);
  }
};

/** A value in PgBouncer's ini or auth file: double quotes are doubled inside quotes. */
const quoted = (value: string): string => `"${value.replaceAll('"', '""')}"`;

/** A value in a libpq-style `key=value` string, as PgBouncer parses [databases] entries. */
const connValue = (value: string): string => `'${value.replaceAll("\\", "\\\\").replaceAll("'", "\\'")}'`;

const config = (target: URL, port: number, dir: string, options: Required<PgBouncerOptions>): string => {
  const database = decodeURIComponent(target.pathname.slice(1)) || "postgres";
  // PgBouncer's ini keys cannot be quoted: the test databases' names are plain identifiers.
  if (!/^[A-Za-z0-9_]+$/.test(database)) throw new Error(`test/support/pgbouncer.ts: cannot front database "${database}" (letters, digits and _ only).`);
  return [
    "[databases]",
    `${database} = host=${connValue(target.hostname.replace(/^\[(.*)\]$/, "$1") || "127.0.0.1")} port=${target.port || "5432"} dbname=${connValue(database)}`,
    "",
    "[pgbouncer]",
    "listen_addr = 127.0.0.1",
    `listen_port = ${port}`,
    // No Unix socket: nothing shared with a system PgBouncer, nothing left in /tmp.
    "unix_socket_dir =",
    "auth_type = scram-sha-256",
    `auth_file = ${path.join(dir, "userlist.txt")}`,
    "pool_mode = transaction",
    `max_client_conn = ${options.maxClientConn}`,
    `default_pool_size = ${options.poolSize}`,
    "min_pool_size = 0",
    "reserve_pool_size = 0",
    // Not `options`: a client sending session settings is refused, as in production.
    "ignore_startup_parameters = extra_float_digits",
    // A failed server login is retried after 1 s, not 15 s.
    "server_login_retry = 1",
    "server_connect_timeout = 5",
    "query_wait_timeout = 30",
    "log_connections = 0",
    "log_disconnections = 0",
    "log_pooler_errors = 1",
    "",
  ].join("\n");
};

/** Resolves once a client can authenticate and run SELECT 1 through PgBouncer; rejects if it exits first. */
const waitUntilReady = async (url: string, child: ChildProcess, log: () => string, timeoutMs: number): Promise<void> => {
  let exited: string | undefined;
  const onExit = (code: number | null, signal: NodeJS.Signals | null) => (exited = `exited (code ${code}, signal ${signal})`);
  child.once("exit", onExit);
  const deadline = Date.now() + timeoutMs;
  let lastError = "";
  try {
    for (;;) {
      if (exited !== undefined) throw new Error(`PgBouncer ${exited} during start-up. Its log:\n${log().trim()}`);
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
      client.on("error", () => undefined);
      try {
        await client.connect();
        await client.query("SELECT 1");
        return;
      } catch (error) {
        lastError = error instanceof Error ? error.message : String(error);
      } finally {
        await client.end().catch(() => undefined);
      }
      if (Date.now() > deadline) {
        throw new Error(`PgBouncer did not accept connections within ${timeoutMs} ms (last error: ${lastError}). Its log:\n${log().trim()}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    child.off("exit", onExit);
  }
};

const stopChild = async (child: ChildProcess): Promise<void> => {
  // Never started (spawn failed), or already gone.
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  // SIGINT is PgBouncer's "safe shutdown" (waits for clients); SIGTERM closes everything at once.
  child.kill("SIGTERM");
  const killed = setTimeout(() => child.kill("SIGKILL"), 5_000);
  await exited;
  clearTimeout(killed);
};

/**
 * Starts PgBouncer in transaction mode in front of `postgresUrl`'s database, on a free loopback
 * port, and waits until it accepts connections. Fails, never skips, when PgBouncer is missing.
 */
export const startPgBouncer = async (postgresUrl: string, options: PgBouncerOptions = {}): Promise<PgBouncer> => {
  const binary = findPgBouncer();
  if (binary === undefined) {
    throw new Error(
      `PgBouncer is not installed (no \`pgbouncer\` on PATH, nor ${DEBIAN_PATH}), and the PgBouncer tests do not skip. ` +
        "Install it: `apt-get install -y pgbouncer` (as root, or with sudo; `npm test` tries this itself in its pretest step), " +
        "or your platform's package (e.g. `brew install pgbouncer`).",
    );
  }
  const settings: Required<PgBouncerOptions> = { poolSize: options.poolSize ?? 8, maxClientConn: options.maxClientConn ?? 200 };
  const target = new URL(postgresUrl);
  const user = runAs();
  const dir = await mkdtemp(path.join(tmpdir(), "picket-pgbouncer-"));
  try {
    // PgBouncer uses the plain password both to check its clients (SCRAM) and to log in to the
    // server. A URL without one (DATABASE_URL on a server that trusts loopback connections) gets a
    // password of PgBouncer's own: SCRAM cannot check a client against an empty password, and such
    // a server asks PgBouncer for none. A server that does ask needs its password in the URL.
    const password = decodeURIComponent(target.password) || randomBytes(12).toString("hex");
    const userlist = path.join(dir, "userlist.txt");
    await writeFile(userlist, `${quoted(decodeURIComponent(target.username))} ${quoted(password)}\n`, { mode: 0o600 });
    if (user) {
      await chown(dir, user.uid, user.gid);
      await chown(userlist, user.uid, user.gid);
    }
    // A port found free may be taken before PgBouncer binds it: then it exits, and another is tried.
    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      const ini = path.join(dir, "pgbouncer.ini");
      await writeFile(ini, config(target, port, dir, settings));
      await chmod(ini, 0o644);
      const output: string[] = [];
      const log = () => output.join("");
      const child = spawn(binary, [...(user ? ["-u", user.name] : []), ini], { stdio: ["ignore", "pipe", "pipe"] });
      child.stdout?.on("data", (chunk: Buffer) => output.push(chunk.toString()));
      child.stderr?.on("data", (chunk: Buffer) => output.push(chunk.toString()));
      const spawnFailed = new Promise<never>((_, reject) => child.once("error", (error) => reject(new Error(`cannot run ${binary}: ${error.message}`))));
      const url = new URL(postgresUrl);
      url.hostname = "127.0.0.1";
      url.port = String(port);
      // The URL's own password is kept as written; PgBouncer's own (hex) needs no encoding.
      if (url.password === "") url.password = password;
      // A vitest worker that exits without afterAll still takes its PgBouncer down.
      const onProcessExit = () => child.kill("SIGKILL");
      process.once("exit", onProcessExit);
      try {
        await Promise.race([waitUntilReady(url.toString(), child, log, 15_000), spawnFailed]);
      } catch (error) {
        process.off("exit", onProcessExit);
        await stopChild(child);
        if (attempt < 3 && /address already in use/i.test(log())) continue;
        if (target.password !== "" || !(error instanceof Error)) throw error;
        throw new Error(
          `${error.message}\nThe URL PgBouncer fronts has no password, so PgBouncer logged in to the server with a password of its own: ` +
            "if the server asks for one, put it in the URL (DATABASE_URL), or let the server trust loopback connections.",
          { cause: error },
        );
      }
      let stopped: Promise<void> | undefined;
      return {
        url: url.toString(),
        port,
        poolSize: settings.poolSize,
        log,
        stop: () =>
          (stopped ??= (async () => {
            process.off("exit", onProcessExit);
            await stopChild(child);
            await rm(dir, { recursive: true, force: true });
          })()),
      };
    }
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
};
