// Several picket processes on one project-local embedded PostgreSQL (issue 16): `picket db
// start|url|stop`, and a command that finds the server another picket process runs and connects
// to it instead of being refused. Real processes, a real server, each test in a project folder
// of its own so that each has its own .picket/.
import { execFile, spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { findEmbeddedPostgres, stopEmbeddedPostgresIn } from "../src/db/embedded.ts";
import { isAlive } from "../src/db/process-alive.ts";
import { picket, type Run } from "./support/cli.ts";

const HELLO = fileURLToPath(new URL("./fixtures/hello-tasks.ts", import.meta.url));
const URL_LINE = /^postgres:\/\/postgres:[A-Za-z0-9_-]{32}@127\.0\.0\.1:\d+\/postgres\n$/;

/** The user the embedded server runs as: `postgres` when the tests run as root, else this one. */
const serverUser = async (): Promise<{ uid: number; gid: number } | Record<string, never>> => {
  if (process.getuid?.() !== 0) return {};
  const id = async (flag: string) => Number((await promisify(execFile)("id", [flag, "postgres"])).stdout.trim());
  return { uid: await id("-u"), gid: await id("-g") };
};

const folders: string[] = [];
const workers: number[] = [];

/** A project folder of its own, reachable by the postgres user as a project folder usually is. */
const project = async () => {
  const cwd = await mkdtemp(path.join(tmpdir(), "picket-dbshare-"));
  await chmod(cwd, 0o755);
  folders.push(cwd);
  const dataDir = path.join(cwd, ".picket", "pgdata");
  const run = (...args: string[]) => picket(args, { cwd, env: { DATABASE_URL: undefined } });
  const worker = () => {
    const handle = { pid: 0, output: () => "" };
    const running: Promise<Run> = picket(["worker", "--tasks", HELLO], { cwd, env: { DATABASE_URL: undefined }, onStart: (p, o) => ((handle.pid = p), (handle.output = o)) });
    // handle.pid stays 0 when the spawn failed: nothing to kill (kill(0) would signal this run's own process group).
    if (handle.pid > 0) workers.push(handle.pid);
    return { handle, running };
  };
  return { cwd, dataDir, run, worker };
};

afterEach(async () => {
  for (const pid of workers.splice(0)) if (isAlive(pid)) process.kill(pid, "SIGKILL");
  for (const cwd of folders.splice(0)) {
    await stopEmbeddedPostgresIn(path.join(cwd, ".picket", "pgdata")).catch(() => undefined);
    const found = findEmbeddedPostgres(path.join(cwd, ".picket", "pgdata"));
    if (found) process.kill(found.serverPid, "SIGKILL");
    await rm(cwd, { recursive: true, force: true });
  }
});

/** A query through the URL a command printed, from this process: the password in it works. */
const query = async (url: string, sql: string): Promise<unknown> => {
  const client = new pg.Client({ connectionString: url.trim() });
  await client.connect();
  try {
    return (await client.query(sql)).rows[0];
  } finally {
    await client.end();
  }
};

describe("picket db with nothing running", () => {
  it("db url fails, saying to run picket db start; db stop says there is nothing to stop, exit 0", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const { run, dataDir } = await project();
    expect(await run("db", "url")).toEqual({
      code: 1,
      stdout: "",
      stderr: "picket: no embedded PostgreSQL is running in .picket/pgdata: start one with `picket db start`.\n",
    });
    expect(await run("db", "stop")).toEqual({ code: 0, stdout: "", stderr: "picket: no embedded PostgreSQL is running in .picket/pgdata; nothing to stop\n" });
    expect(existsSync(dataDir)).toBe(false);
  });
});

describe("picket db start", () => {
  it("starts a migrated server that outlives it; a worker, enqueue and stats share it at once; db stop stops it", { tags: ["spawns"], timeout: 180_000 }, async () => {
    const { run, worker, dataDir } = await project();
    const started = await run("db", "start");
    expect(started.code).toBe(0);
    expect(started.stdout).toMatch(URL_LINE);
    expect(started.stderr).toMatch(/started the embedded PostgreSQL in .*\.picket\/pgdata \(schema "picket" migrated\)/);
    const url = started.stdout.trim();
    // The command has exited; the server still answers, with the printed password, migrated.
    expect(await query(url, "SELECT to_regclass('picket.jobs')::text AS jobs")).toEqual({ jobs: "picket.jobs" });

    const again = await run("db", "start");
    expect(again).toMatchObject({ code: 0, stdout: `${url}\n` });
    expect(again.stderr).toContain("already running (started by `picket db start`)");
    expect(await run("db", "url")).toEqual({ code: 0, stdout: `${url}\n`, stderr: "" });

    const { handle, running } = worker();
    await expect.poll(() => handle.output(), { timeout: 60_000, interval: 100 }).toContain("worker started");
    expect(handle.output()).toContain(`using the embedded PostgreSQL started by \`picket db start\` at ${url}`);
    // While the worker runs: enqueue and stats connect to the same server.
    const enqueued = await run("enqueue", "hello", '{"name":"shared"}');
    expect(enqueued.code).toBe(0);
    expect(enqueued.stderr).toContain(`using the embedded PostgreSQL started by \`picket db start\` at ${url}`);
    const completed = async () => {
      const stats = await run("stats", "--json");
      expect(stats.code).toBe(0);
      return JSON.parse(stats.stdout).counts;
    };
    await expect.poll(completed, { timeout: 30_000, interval: 200 }).toContainEqual({ type: "hello", state: "completed", count: 1 });

    process.kill(handle.pid, "SIGTERM");
    expect((await running).code).toBe(0);
    // A server `db start` started is not the worker's to stop.
    expect(await query(url, "SELECT count(*)::int AS n FROM picket.jobs")).toEqual({ n: 1 });

    const serverPid = findEmbeddedPostgres(dataDir)!.serverPid;
    expect(await run("db", "stop")).toEqual({
      code: 0,
      stdout: "",
      stderr: `picket: stopped the embedded PostgreSQL in .picket/pgdata (process ${serverPid}); its data is kept\n`,
    });
    // db stop returned once the server had exited, not when it was asked to.
    expect(isAlive(serverPid)).toBe(false);
    expect((await run("db", "url")).code).toBe(1);
    // Its data is kept: the next start has the job.
    const restarted = await run("db", "start");
    expect(await query(restarted.stdout, "SELECT count(*)::int AS n FROM picket.jobs")).toEqual({ n: 1 });
  });

  it("db stop under a running worker says so, and db start brings the server back on its port, where the worker goes on", { tags: ["spawns"], timeout: 180_000 }, async () => {
    const { run, worker } = await project();
    const url = (await run("db", "start")).stdout.trim();
    const { handle, running } = worker();
    await expect.poll(() => handle.output(), { timeout: 60_000, interval: 100 }).toContain("worker started");
    const stopped = await run("db", "stop");
    expect(stopped.code).toBe(0);
    expect(stopped.stderr).toContain("1 live worker(s) were using it: they keep retrying");
    // Without the port kept, the worker would retry the old address forever and this job would wait.
    const restarted = await run("db", "start");
    expect(restarted).toMatchObject({ code: 0, stdout: `${url}\n` });
    expect((await run("enqueue", "hello", '{"name":"again"}')).code).toBe(0);
    const counts = async () => JSON.parse((await run("stats", "--json")).stdout).counts;
    await expect.poll(counts, { timeout: 60_000, interval: 300 }).toContainEqual({ type: "hello", state: "completed", count: 1 });
    process.kill(handle.pid, "SIGTERM");
    expect((await running).code).toBe(0);
  });

  it("recovers from a server killed with SIGKILL: the files it left do not wedge the next start", { tags: ["spawns"], timeout: 120_000 }, async () => {
    const { run, dataDir } = await project();
    expect((await run("db", "start")).code).toBe(0);
    const killed = findEmbeddedPostgres(dataDir)!;
    process.kill(killed.serverPid, "SIGKILL");
    await expect.poll(() => isAlive(killed.serverPid), { timeout: 30_000, interval: 50 }).toBe(false);
    // What a killed server leaves: picket's owner file and PostgreSQL's own lock file.
    expect(existsSync(path.join(dataDir, "picket-owner.json"))).toBe(true);
    expect(existsSync(path.join(dataDir, "postmaster.pid"))).toBe(true);
    expect((await run("db", "url")).code).toBe(1);
    // And a start lock left by a picket process killed while it started the server.
    const gone = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
    await new Promise((resolve) => gone.once("exit", resolve));
    writeFileSync(path.join(dataDir, "..", "start.lock"), String(gone.pid));

    const restarted = await run("db", "start");
    expect(restarted.code).toBe(0);
    expect(restarted.stderr).toContain("started the embedded PostgreSQL");
    expect(existsSync(path.join(dataDir, "..", "start.lock"))).toBe(false);
    expect(await query(restarted.stdout, "SELECT 1 AS one")).toEqual({ one: 1 });
  });

  it("a leftover lock file and owner file naming a pid now used by another process do not wedge the next start", { tags: ["spawns"], timeout: 120_000 }, async () => {
    const { run, dataDir } = await project();
    expect((await run("db", "start")).code).toBe(0);
    const first = findEmbeddedPostgres(dataDir)!;
    process.kill(first.serverPid, "SIGKILL");
    await expect.poll(() => isAlive(first.serverPid), { timeout: 30_000, interval: 50 }).toBe(false);
    // The pid was given to another process since: one alive and not a postgres, of the server's
    // own user (PostgreSQL reads a pid it may not signal as gone, so only that case blocks it).
    const other = spawn("sleep", ["300"], { stdio: "ignore", ...(await serverUser()) });
    try {
      writeFileSync(path.join(dataDir, "picket-owner.json"), JSON.stringify({ ownerPid: other.pid, serverPid: other.pid, port: first.port, kept: true }));
      writeFileSync(path.join(dataDir, "postmaster.pid"), `${other.pid}\n${dataDir}\n`);
      expect(await run("db", "url")).toMatchObject({ code: 1 });

      const restarted = await run("db", "start");
      expect(restarted.code).toBe(0);
      expect(await query(restarted.stdout, "SELECT 1 AS one")).toEqual({ one: 1 });
    } finally {
      other.kill("SIGKILL");
    }
  });
});

describe("a server a worker started for itself", { tags: ["spawns"] }, () => {
  it("is used by picket stats while the worker runs (no longer refused), and stops with the worker", async () => {
    const { run, worker, dataDir } = await project();
    const { handle, running } = worker();
    await expect.poll(() => handle.output(), { timeout: 60_000, interval: 100 }).toContain("worker started");
    const server = findEmbeddedPostgres(dataDir)!;
    expect(handle.output()).toContain(`started the embedded PostgreSQL in .picket/pgdata for this worker at ${server.url}`);
    expect(server).toMatchObject({ kept: false, ownerPid: handle.pid });

    const stats = await run("stats", "--json");
    expect(stats.code).toBe(0);
    expect(JSON.parse(stats.stdout)).toHaveProperty("counts");
    expect(stats.stderr).toBe(
      `picket: no DATABASE_URL: using the embedded PostgreSQL of picket process ${handle.pid} at ${server.url}; it stops when that process ends (\`picket db start\` keeps one running)\n`,
    );
    expect(await run("db", "url")).toEqual({ code: 0, stdout: `${server.url}\n`, stderr: "" });
    // Not db stop's to stop: the worker's jobs would lose their database.
    const refused = await run("db", "stop");
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`was started by picket process ${handle.pid} for itself and stops when it ends`);
    expect(isAlive(server.serverPid)).toBe(true);
    const again = await run("db", "start");
    expect(again).toMatchObject({ code: 0, stdout: `${server.url}\n` });
    expect(again.stderr).toContain(`already running (started by picket process ${handle.pid}, and stopped when it ends)`);

    process.kill(handle.pid, "SIGTERM");
    expect((await running).code).toBe(0);
    expect(isAlive(server.serverPid)).toBe(false);
    expect(await run("db", "url")).toMatchObject({ code: 1 });
  }, 180_000);

  it("whose worker was SIGKILLed is an orphan: the next command stops it and starts one of its own, which it stops", async () => {
    const { run, worker, dataDir } = await project();
    const { handle, running } = worker();
    await expect.poll(() => handle.output(), { timeout: 60_000, interval: 100 }).toContain("worker started");
    const orphan = findEmbeddedPostgres(dataDir)!;
    process.kill(handle.pid, "SIGKILL");
    await running;
    // The server runs on (its own process group), with nobody left to stop it.
    expect(isAlive(orphan.serverPid)).toBe(true);
    expect(findEmbeddedPostgres(dataDir)).toMatchObject({ serverPid: orphan.serverPid, ownerAlive: false });
    const stats = await run("stats");
    expect(stats.code).toBe(0);
    expect(stats.stderr).toContain("started the embedded PostgreSQL in .picket/pgdata for this command");
    expect(isAlive(orphan.serverPid)).toBe(false);
    expect(findEmbeddedPostgres(dataDir)).toBeUndefined();
  }, 120_000);

  it("two workers started at the same instant in a new project: one starts the server, the other waits and uses it", async () => {
    const { worker, dataDir } = await project();
    const first = worker();
    const second = worker();
    for (const w of [first, second]) await expect.poll(() => w.handle.output(), { timeout: 90_000, interval: 100 }).toContain("worker started");
    const server = findEmbeddedPostgres(dataDir)!;
    const [owner, user] = server.ownerPid === first.handle.pid ? [first, second] : [second, first];
    expect(owner.handle.output()).toContain("for this worker at postgres://");
    expect(user.handle.output()).toContain(`using the embedded PostgreSQL of picket process ${owner.handle.pid} at ${server.url}`);
    // The one that only connected leaves the server running; its owner stops it.
    process.kill(user.handle.pid, "SIGTERM");
    expect((await user.running).code).toBe(0);
    expect(isAlive(server.serverPid)).toBe(true);
    process.kill(owner.handle.pid, "SIGTERM");
    expect((await owner.running).code).toBe(0);
    expect(isAlive(server.serverPid)).toBe(false);
    expect(existsSync(path.join(dataDir, "..", "start.lock"))).toBe(false);
  }, 180_000);
});

describe("a pid left in a file", () => {
  it("reads as gone when it is 0 or below: kill(0) would reach this very process group, kill(-n) another group", () => {
    for (const pid of [0, -1, -process.pid, Number.NaN, 1.5]) expect(isAlive(pid)).toBe(false);
    expect(isAlive(process.pid)).toBe(true);
  });

  it("reads as gone when its process is a zombie nobody reaps (as a server whose parent exited can be in a container)", async () => {
    // `sleep 30` takes over the shell's process and never waits for the shell's child: it stays a
    // zombie. The child outlives the exec by 2 s: a child that ended before it (`sleep 0` on a
    // loaded machine) was reaped by the shell itself, and no zombie was left to see.
    const parent = spawn("sh", ["-c", "sleep 2 & echo $!; exec sleep 30"], { stdio: ["ignore", "pipe", "ignore"] });
    try {
      const pid = Number(await new Promise<string>((resolve) => parent.stdout.once("data", (c: Buffer) => resolve(c.toString()))));
      await expect.poll(() => readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]![0], { timeout: 20_000, interval: 20 }).toBe("Z");
      expect(() => process.kill(pid, 0)).not.toThrow();
      expect(isAlive(pid)).toBe(false);
      expect(isAlive(parent.pid!)).toBe(true);
    } finally {
      parent.kill("SIGKILL");
    }
  });
});
