// `picket db start|url|stop` and the way every command finds its database (src/cli/db.ts,
// src/cli/database.ts), run in this process: test/db-share.test.ts runs the same commands as a
// user does, in child processes, which the mutation run cannot reach. Each test works in a project
// folder of its own (this process changes into it), with a real embedded server.
import { spawn } from "node:child_process";
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { Command } from "commander";
import pg from "pg";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { dbCommand } from "../src/cli/db.ts";
import { describeEmbedded, givenDatabaseUrl, localDataDir, resolveDatabase, withStartLock, type ResolvedDatabase } from "../src/cli/database.ts";
import { findEmbeddedPostgres, startEmbeddedPostgres, stopEmbeddedPostgresIn } from "../src/db/embedded.ts";
import { beat } from "../src/db/workers.ts";
import { isAlive } from "../src/db/process-alive.ts";

// readFile passes through, so that a test can hold one caller's read of the lock back (below).
vi.mock("node:fs/promises", async (original) => {
  const actual = await original<typeof import("node:fs/promises")>();
  return { ...actual, readFile: vi.fn(actual.readFile) };
});

const URL_LINE = /^postgres:\/\/postgres:[A-Za-z0-9_-]{32}@127\.0\.0\.1:(\d+)\/postgres\n$/;
const cleanups: (() => Promise<void>)[] = [];
/** A path in the project folder the test runs from. */
const project = (...parts: string[]): string => path.join(process.cwd(), ...parts);

beforeEach(async () => {
  // A project folder the postgres user can reach (as root the server runs as postgres).
  const cwd = await mkdtemp(path.join(tmpdir(), "picket-dbcommand-"));
  await chmod(cwd, 0o755);
  // The folder a command runs from, as process.cwd() reports it (vitest's worker threads,
  // which the mutation run uses, cannot chdir).
  vi.spyOn(process, "cwd").mockReturnValue(cwd);
  cleanups.push(async () => {
    await stopEmbeddedPostgresIn(path.join(cwd, ".picket", "pgdata")).catch(() => undefined);
    await rm(cwd, { recursive: true, force: true });
  });
});

afterEach(async () => {
  vi.restoreAllMocks();
  vi.unstubAllEnvs();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Runs `picket db ...` in this process: what it wrote to stdout and stderr, or what it threw. */
const db = async (...args: string[]): Promise<{ stdout: string; stderr: string; error?: Error }> => {
  const stdout: string[] = [];
  const stderr: string[] = [];
  vi.spyOn(process.stdout, "write").mockImplementation((chunk) => (stdout.push(String(chunk)), true));
  // Node writes a process warning (once per process, in one chunk) whenever it is raised, which may
  // fall inside a command (pg's deprecation of a query sent while another waits did, once, in CI):
  // it is not the command's output, so it goes to the real stderr, not into what the test compares.
  const write = process.stderr.write.bind(process.stderr);
  vi.spyOn(process.stderr, "write").mockImplementation((chunk) =>
    /^\(node:\d+\) /.test(String(chunk)) ? write(chunk) : (stderr.push(String(chunk)), true),
  );
  const program = new Command().exitOverride();
  dbCommand(program);
  let error: Error | undefined;
  try {
    await program.parseAsync(["db", ...args], { from: "user" });
  } catch (thrown) {
    error = thrown as Error;
  } finally {
    vi.mocked(process.stdout.write).mockRestore();
    vi.mocked(process.stderr.write).mockRestore();
  }
  return { stdout: stdout.join(""), stderr: stderr.join(""), ...(error ? { error } : {}) };
};

const portOf = (stdout: string): number => Number(URL_LINE.exec(stdout)?.[1]);

const query = async (url: string, sql: string): Promise<unknown[]> => {
  const client = new pg.Client({ connectionString: url.trim() });
  await client.connect();
  try {
    return (await client.query(sql)).rows;
  } finally {
    await client.end();
  }
};

/** A process that is not this one and runs until the test ends (`sleep`, not Node). */
const otherLiveProcess = (): number => {
  const child = spawn("sleep", ["60"], { stdio: "ignore" });
  cleanups.push(async () => void child.kill("SIGKILL"));
  return child.pid!;
};

/** A pid no process has any longer. */
const deadPid = async (): Promise<number> => {
  const child = spawn("true", { stdio: "ignore" });
  await new Promise((resolve) => child.once("exit", resolve));
  return child.pid!;
};

describe("the database URL a command was given", () => {
  it("is --database-url first, then DATABASE_URL, and none when neither is set", () => {
    vi.stubEnv("DATABASE_URL", "postgres://env/db");
    expect(givenDatabaseUrl("postgres://option/db")).toEqual({ url: "postgres://option/db", source: "option" });
    expect(givenDatabaseUrl(undefined)).toEqual({ url: "postgres://env/db", source: "DATABASE_URL" });
    vi.stubEnv("DATABASE_URL", undefined);
    expect(givenDatabaseUrl(undefined)).toBeUndefined();
  });

  it("is refused when empty or blank, saying which one and what to do, rather than read as none", () => {
    expect(() => givenDatabaseUrl(" ")).toThrow("picket: --database-url is empty: give a PostgreSQL connection string, or leave the option out.");
    vi.stubEnv("DATABASE_URL", "  ");
    expect(() => givenDatabaseUrl(undefined)).toThrow(/^picket: DATABASE_URL is set but empty: .*`unset DATABASE_URL`/);
    // The option still wins over an empty DATABASE_URL.
    expect(givenDatabaseUrl("postgres://option/db")?.source).toBe("option");
  });
});

describe("resolveDatabase", () => {
  it("uses the URL given, and its stop() stops nothing", async () => {
    const resolved = await resolveDatabase("postgres://given/db", { temporary: false });
    expect(resolved).toMatchObject({ url: "postgres://given/db", source: "option" });
    await expect(resolved.stop()).resolves.toBeUndefined();
    expect(describeEmbedded(resolved, "worker")).toBeUndefined();
    expect(existsSync(project(".picket"))).toBe(false);
  });

  it("starts a temporary server outside the project for the demo, which its stop() stops", async () => {
    vi.stubEnv("DATABASE_URL", undefined);
    const resolved = await resolveDatabase(undefined, { temporary: true });
    cleanups.push(() => resolved.stop());
    expect(resolved.source).toBe("embedded");
    expect(resolved.dataDir).toBeDefined();
    expect(resolved.dataDir!.startsWith(process.cwd())).toBe(false);
    expect(existsSync(project(".picket"))).toBe(false);
    expect(await query(resolved.url, "SELECT 1 AS one")).toEqual([{ one: 1 }]);
    await resolved.stop();
    expect(findEmbeddedPostgres(resolved.dataDir!)).toBeUndefined();
  }, 120_000);

  it("starts the project's server in ./.picket/pgdata, which the next command shares and does not stop", async () => {
    vi.stubEnv("DATABASE_URL", undefined);
    const first = await resolveDatabase(undefined, { temporary: false });
    cleanups.push(() => first.stop());
    expect(first.source).toBe("embedded");
    expect(first.shared).toBeUndefined();
    expect(first.dataDir).toBe(path.join(process.cwd(), ".picket", "pgdata"));
    expect(localDataDir()).toBe(first.dataDir);
    expect(existsSync(project(".picket", "start.lock"))).toBe(false);
    expect(describeEmbedded(first, "worker")).toBe(
      `no DATABASE_URL: started the embedded PostgreSQL in .picket/pgdata for this worker at ${first.url}; ` +
        "other picket commands here use it while this worker runs, and it stops when this worker ends (`picket db start` keeps one running)",
    );

    const second: ResolvedDatabase = await resolveDatabase(undefined, { temporary: false });
    expect(second).toMatchObject({ url: first.url, source: "embedded", dataDir: first.dataDir });
    expect(second.shared).toMatchObject({ ownerPid: process.pid, kept: false });
    expect(describeEmbedded(second, "dashboard")).toBe(
      `no DATABASE_URL: using the embedded PostgreSQL of picket process ${process.pid} at ${first.url}; it stops when that process ends (\`picket db start\` keeps one running)`,
    );
    await second.stop();
    expect(await query(first.url, "SELECT 1 AS one")).toEqual([{ one: 1 }]);
    await first.stop();
    expect(findEmbeddedPostgres(first.dataDir!)).toBeUndefined();
  }, 120_000);
});

describe("the start lock", () => {
  const lock = () => project(".picket", "start.lock");

  it("makes .picket private (passable by the postgres user as root), holds the lock file with its pid while fn runs, and removes it after, also when fn throws", async () => {
    let during = "";
    expect(await withStartLock(async () => ((during = readFileSync(lock(), "utf8")), 42))).toBe(42);
    expect(during).toBe(String(process.pid));
    expect(statSync(project(".picket")).mode & 0o777).toBe(process.getuid?.() === 0 ? 0o755 : 0o700);
    expect(existsSync(lock())).toBe(false);
    await expect(withStartLock(async () => Promise.reject(new Error("initdb failed")))).rejects.toThrow("initdb failed");
    expect(existsSync(lock())).toBe(false);
  });

  it("lets one caller in at a time: the other starts when the first has finished", async () => {
    const events: string[] = [];
    const hold = (name: string) =>
      withStartLock(async () => {
        events.push(`${name} in`);
        await new Promise((r) => setTimeout(r, 300));
        events.push(`${name} out`);
      });
    await Promise.all([hold("a"), hold("b")]);
    // Either may win the race; the other goes in only once the first is out.
    const first = events[0]!.split(" ")[0];
    const second = first === "a" ? "b" : "a";
    expect(events).toEqual([`${first} in`, `${first} out`, `${second} in`, `${second} out`]);
  });

  it("takes over a lock whose process is gone, and waits on one being written (empty) until it is released", async () => {
    await mkdir(project(".picket"));
    await writeFile(lock(), String(await deadPid()));
    expect(await withStartLock(async () => "taken over")).toBe("taken over");

    await writeFile(lock(), "");
    let released = false;
    setTimeout(() => {
      released = true;
      void rm(lock());
    }, 400);
    expect(await withStartLock(async () => released)).toBe(true);
  });

  it("several callers that find the lock of a process that is gone take it over and go in one at a time", async () => {
    await mkdir(project(".picket"));
    await writeFile(lock(), String(await deadPid()));
    let inside = 0;
    let most = 0;
    const hold = () =>
      withStartLock(async () => {
        most = Math.max(most, ++inside);
        await new Promise((r) => setTimeout(r, 20));
        inside--;
        return true;
      });
    expect(await Promise.all(Array.from({ length: 6 }, hold))).toEqual(Array(6).fill(true));
    expect(most).toBe(1);
    expect(existsSync(lock())).toBe(false);
  });

  it("a caller that read the pid of a process that is gone does not remove the lock another caller has taken over since", async () => {
    await mkdir(project(".picket"));
    const dead = await deadPid();
    await writeFile(lock(), String(dead));
    // The first caller to read the lock reads the dead pid, and acts on it only 300 ms later: by
    // then the other has removed that lock and holds its own.
    const { readFile } = await import("node:fs/promises");
    const actual = (await vi.importActual<typeof import("node:fs/promises")>("node:fs/promises")).readFile;
    vi.mocked(readFile).mockImplementationOnce((async (...args: Parameters<typeof actual>) => {
      const content = await actual(...args);
      await new Promise((r) => setTimeout(r, 300));
      return content;
    }) as typeof readFile);
    let inside = 0;
    let most = 0;
    const hold = () =>
      withStartLock(async () => {
        most = Math.max(most, ++inside);
        await new Promise((r) => setTimeout(r, 600));
        inside--;
      });
    await Promise.all([hold(), hold()]);
    expect(most).toBe(1);
    expect(existsSync(lock())).toBe(false);
    expect(existsSync(`${lock()}.break`)).toBe(false);
  });

  it("a breaker left by a process that is gone does not wedge the takeover", async () => {
    await mkdir(project(".picket"));
    await writeFile(lock(), String(await deadPid()));
    await writeFile(`${lock()}.break`, String(await deadPid()));
    expect(await withStartLock(async () => "taken over")).toBe("taken over");
    expect(existsSync(`${lock()}.break`)).toBe(false);
  });

  it("a lock file removed by hand while its holder runs (as the give-up message says to) does not turn the holder's result into an error", async () => {
    expect(await withStartLock(async () => (await rm(lock()), "started"))).toBe("started");
  });

  it("gives up after 2 minutes on a lock a live process holds, naming it and the file", async () => {
    await mkdir(project(".picket"));
    const holder = otherLiveProcess();
    await writeFile(lock(), String(holder));
    const now = Date.now();
    // The deadline is read at the first call; every later one is just past it.
    vi.spyOn(Date, "now").mockReturnValueOnce(now).mockReturnValueOnce(now + 119_000).mockReturnValue(now + 120_001);
    const ran = vi.fn();
    await expect(withStartLock(ran)).rejects.toThrow(
      `picket: picket process ${holder} has been starting the embedded PostgreSQL for 2 minutes (${path.resolve(lock())}); stop it, or remove the file if it is gone.`,
    );
    expect(ran).not.toHaveBeenCalled();
    expect(readFileSync(lock(), "utf8")).toBe(String(holder));
  });
});

describe("picket db", () => {
  it("url fails and stop says there is nothing to stop when no server runs", async () => {
    const url = await db("url");
    expect(url.error?.message).toBe("picket: no embedded PostgreSQL is running in .picket/pgdata: start one with `picket db start`.");
    expect(url.stdout).toBe("");
    const stop = await db("stop");
    expect(stop).toEqual({ stdout: "", stderr: "picket: no embedded PostgreSQL is running in .picket/pgdata; nothing to stop\n" });
  });

  it("start starts a migrated server that url names; a second start finds it; stop stops it; the next start takes its port again", async () => {
    vi.stubEnv("DATABASE_URL", undefined);
    const start = await db("start");
    expect(start.error).toBeUndefined();
    expect(start.stdout).toMatch(URL_LINE);
    const dataDir = path.join(process.cwd(), ".picket", "pgdata");
    expect(start.stderr).toBe(
      `picket: started the embedded PostgreSQL in ${dataDir} (schema "picket" migrated); every picket command here uses it until \`picket db stop\`\n`,
    );
    const port = portOf(start.stdout);
    expect(readFileSync(project(".picket", "last-port"), "utf8")).toBe(`${port}\n`);
    expect(await query(start.stdout, "SELECT count(*)::int AS n FROM picket.jobs")).toEqual([{ n: 0 }]);
    expect(findEmbeddedPostgres(dataDir)).toMatchObject({ kept: true, port });

    expect(await db("url")).toEqual({ stdout: start.stdout, stderr: "" });
    vi.stubEnv("DATABASE_URL", "postgres://elsewhere/db");
    expect(await db("start")).toEqual({
      stdout: start.stdout,
      stderr: "picket: the embedded PostgreSQL in .picket/pgdata is already running (started by `picket db start`)\n",
    });

    const serverPid = findEmbeddedPostgres(dataDir)!.serverPid;
    expect(await db("stop")).toEqual({
      stdout: "",
      stderr: `picket: stopped the embedded PostgreSQL in .picket/pgdata (process ${serverPid}); its data is kept\n`,
    });
    expect(isAlive(serverPid)).toBe(false);
    expect(findEmbeddedPostgres(dataDir)).toBeUndefined();

    const again = await db("start");
    expect(again.stdout).toBe(start.stdout);
    expect(again.stderr.split("\n")[1]).toBe("picket: DATABASE_URL is set: picket commands use it, not this server, until you unset it");
  }, 180_000);

  it("start migrates the --schema given, on the --port given, and not on a last port that is taken or unreadable", async () => {
    const taken: Server = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise((resolve) => taken.close(() => resolve())));
    const takenPort = (taken.address() as { port: number }).port;
    await mkdir(project(".picket"));
    await writeFile(project(".picket", "last-port"), `${takenPort}\n`);

    const start = await db("start", "--schema", "jobs_here");
    expect(start.error).toBeUndefined();
    expect(portOf(start.stdout)).not.toBe(takenPort);
    expect(start.stderr).toContain('(schema "jobs_here" migrated)');
    expect(await query(start.stdout, "SELECT count(*)::int AS n FROM jobs_here.jobs")).toEqual([{ n: 0 }]);
    expect(await query(start.stdout, "SELECT to_regclass('picket.jobs') AS t")).toEqual([{ t: null }]);
    await db("stop");

    writeFileSync(project(".picket", "last-port"), "not a port\n");
    const free = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, "127.0.0.1", () => {
        const { port } = probe.address() as { port: number };
        probe.close(() => resolve(port));
      });
    });
    const onPort = await db("start", "--port", String(free));
    expect(portOf(onPort.stdout)).toBe(free);
    expect(readFileSync(project(".picket", "last-port"), "utf8")).toBe(`${free}\n`);
  }, 180_000);

  it("stop says how many live workers were using the server, and which port brings it back", async () => {
    const start = await db("start");
    const port = portOf(start.stdout);
    const pool = new pg.Pool({ connectionString: start.stdout.trim() });
    for (const id of ["w1", "w2"]) {
      await beat(pool, {
        id, host: "here", pid: 1, version: "test", startedAt: new Date(), concurrency: 1, state: "running",
        jobs: [], running: 0, waiting: 0, tasks: ["t"], completedPerSecond: {},
      });
    }
    await pool.end();
    const stop = await db("stop");
    expect(stop.stderr.split("\n")[1]).toBe(
      `picket: 2 live worker(s) were using it: they keep retrying (and log connection errors) until \`picket db start\` brings it back on port ${port}, or until you stop them`,
    );
  }, 180_000);

  it("stop refuses a server another live picket process started for itself, naming it, and leaves it running", async () => {
    vi.stubEnv("DATABASE_URL", undefined);
    const own = await resolveDatabase(undefined, { temporary: false });
    cleanups.push(() => own.stop());
    const ownerFile = path.join(own.dataDir!, "picket-owner.json");
    const owner = JSON.parse(readFileSync(ownerFile, "utf8")) as { ownerPid: number };
    const other = otherLiveProcess();
    writeFileSync(ownerFile, JSON.stringify({ ...owner, ownerPid: other }));

    const stop = await db("stop");
    expect(stop.error?.message).toBe(
      `picket: the embedded PostgreSQL in .picket/pgdata was started by picket process ${other} for itself and stops when it ends: stop that process (kill -TERM ${other}).`,
    );
    expect(findEmbeddedPostgres(own.dataDir!)).toMatchObject({ ownerPid: other, ownerAlive: true });
    // db start and db url name it too, as one another process answers for.
    const start = await db("start");
    expect(start.stderr).toBe(`picket: the embedded PostgreSQL in .picket/pgdata is already running (started by picket process ${other}, and stopped when it ends)\n`);
    expect(start.stdout).toBe(`${own.url}\n`);
    writeFileSync(ownerFile, JSON.stringify(owner));
    // This process's own server (not kept) is stopped by db stop.
    expect((await db("stop")).stderr).toMatch(/^picket: stopped the embedded PostgreSQL in \.picket\/pgdata/);
  }, 180_000);
});

describe("the shared server, found rather than started", () => {
  it("is used at once while another process holds the start lock, and found under the lock when it started meanwhile", async () => {
    vi.stubEnv("DATABASE_URL", undefined);
    await mkdir(project(".picket"), { mode: 0o755 });
    // Another live picket process is starting a server: it holds the lock.
    writeFileSync(project(".picket", "start.lock"), String(otherLiveProcess()));
    const resolving = resolveDatabase(undefined, { temporary: false });
    const settled = await Promise.race([resolving.then(() => "resolved"), new Promise((r) => setTimeout(r, 1_000, "waiting"))]);
    expect(settled).toBe("waiting");
    // ...and its server comes up before it lets the lock go: the waiting command finds that server.
    const server = await startEmbeddedPostgres({ dataDir: localDataDir(), keep: true });
    cleanups.push(() => server.stop());
    await rm(project(".picket", "start.lock"));
    expect((await resolving).url).toBe(server.url);
    // With the server up, a command uses it without the lock, even while someone holds it.
    writeFileSync(project(".picket", "start.lock"), String(otherLiveProcess()));
    const started = Date.now();
    const found = await resolveDatabase(undefined, { temporary: false });
    expect(found.url).toBe(server.url);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(describeEmbedded(found, "worker")).toBe(
      `no DATABASE_URL: using the embedded PostgreSQL started by \`picket db start\` at ${server.url} (it runs until \`picket db stop\`)`,
    );
  }, 120_000);
});

describe("picket db, beyond start and stop", () => {
  it("says in its help what each command does and what each option is for", () => {
    const program = new Command();
    dbCommand(program);
    const command = program.commands.find((c) => c.name() === "db")!;
    expect(command.description()).toBe("the embedded PostgreSQL in ./.picket/pgdata, as a server every picket command run here shares");
    const start = command.commands.find((c) => c.name() === "start")!;
    expect(start.description()).toBe("start the embedded PostgreSQL in the background (it runs until `picket db stop`), migrate it, print its URL");
    expect(start.options.map((o) => [o.flags, o.description, o.defaultValue])).toEqual([
      ["--schema <name>", "schema of picket's tables to create or update", "picket"],
      ["--port <port>", "port to listen on (default: a free one)", undefined],
    ]);
    expect(command.commands.find((c) => c.name() === "url")!.description()).toBe("print the running embedded PostgreSQL's URL (with its password), for psql or DATABASE_URL");
    expect(command.commands.find((c) => c.name() === "stop")!.description()).toBe(
      "stop the embedded PostgreSQL that `picket db start` started (fast shutdown: sessions are ended, data kept)",
    );
  });

  it("start refuses a --port that is not a port, naming the option", async () => {
    const start = await db("start", "--port", "99999");
    expect(start.error?.message).toMatch(/--port must be a port number from 1 to 65535 \(got "99999"\)/);
    expect(existsSync(project(".picket"))).toBe(false);
  });

  it("start passes over a last port out of range; stop stops a kept server whoever started it", async () => {
    await mkdir(project(".picket"), { mode: 0o755 });
    await writeFile(project(".picket", "last-port"), "65536\n");
    const start = await db("start");
    expect(start.error).toBeUndefined();
    expect(portOf(start.stdout)).toBeGreaterThan(0);
    expect(portOf(start.stdout)).toBeLessThan(65_536);
    // `picket db start` ran in another process, which is still alive: the server is kept, so db stop stops it.
    const ownerFile = project(".picket", "pgdata", "picket-owner.json");
    const owner = JSON.parse(readFileSync(ownerFile, "utf8")) as { ownerPid: number; kept?: boolean };
    expect(owner.kept).toBe(true);
    writeFileSync(ownerFile, JSON.stringify({ ...owner, ownerPid: otherLiveProcess() }));
    expect((await db("stop")).stderr).toMatch(/^picket: stopped the embedded PostgreSQL in \.picket\/pgdata/);
    expect(findEmbeddedPostgres(localDataDir())).toBeUndefined();
  }, 180_000);
});
