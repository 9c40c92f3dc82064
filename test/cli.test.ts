// @module-tag spawns: every test here runs picket (or node, npm, git) in a child process.
// The `picket` command as a user runs it: real processes, real exit codes, real output.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { jobMachine, machineJson, machineMermaid, supervisorMachine } from "../src/index.ts";
import { recordStep } from "../src/db/index.ts";
import { picket, type Run } from "./support/cli.ts";
import { claimed } from "./support/factory.ts";
import { useTestDatabase } from "./support/db.ts";
import { freePort } from "./support/ports.ts";

const db = useTestDatabase();
const HELLO = fileURLToPath(new URL("./fixtures/hello-tasks.ts", import.meta.url));

const withDb = { env: { DATABASE_URL: undefined } };

describe("picket CLI", () => {
  it("demo runs on the embedded PostgreSQL to its summary when no DATABASE_URL is set", async () => {
    const run = await picket(["demo"], withDb);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("starting an embedded PostgreSQL");
    expect(run.stdout).toMatch(/all 50 jobs finished in/);
    expect(run.stdout).toMatch(/fast\s+40\s+40\s+0\s+40/);
    expect(run.stdout).toMatch(/flaky\s+5\s+5\s+0\s+15/);
    expect(run.stdout).toMatch(/dead: job \d+ \(timeout\): timeout: timed out after 800 ms/);
    expect(run.stdout).toMatch(/dead: job \d+ \(poison\): permanent: customer 7 does not exist/);
  }, 120_000);

  it("worker on the embedded PostgreSQL (project-local data) exits 0 on SIGTERM after draining", async () => {
    const cwd = await mkdtemp(path.join(tmpdir(), "picket-cli-"));
    await chmod(cwd, 0o755); // a project folder as usual: the postgres user can reach .picket inside it
    try {
      let pid = 0;
      let output: () => string = () => "";
      const running = picket(["worker", "--tasks", HELLO], { ...withDb, cwd, onStart: (p, o) => ((pid = p), (output = o)) });
      await expect.poll(() => output(), { timeout: 60_000, interval: 100 }).toContain("worker started");
      process.kill(pid, "SIGTERM");
      const run = await running;
      expect(run.code).toBe(0);
      expect(run.stderr).toContain("SIGTERM received, draining");
      expect(run.stdout).toContain("worker stopped");
      expect(existsSync(path.join(cwd, ".picket", "pgdata", "PG_VERSION"))).toBe(true);
    } finally {
      await rm(cwd, { recursive: true, force: true });
    }
  }, 120_000);

  it("serves the dashboard on loopback until SIGTERM, write actions off without a token", async () => {
    const port = await freePort();
    let pid = 0;
    let output: () => string = () => "";
    const running = picket(["dashboard", "--database-url", db.url, "--port", String(port)], { onStart: (p, o) => ((pid = p), (output = o)) });
    await expect.poll(() => output(), { timeout: 30_000, interval: 100 }).toContain(`picket dashboard: http://127.0.0.1:${port}/ (write actions off: no --token)`);
    const page = await fetch(`http://127.0.0.1:${port}/`);
    expect(await page.text()).toContain("<title>picket</title>");
    expect((await fetch(`http://127.0.0.1:${port}/api/jobs/1/retry`, { method: "POST" })).status).toBe(403);
    process.kill(pid, "SIGTERM");
    expect((await running).code).toBe(0);
    // One line says where it listens: not Effect's "Listening on" too.
    expect(output()).not.toContain("Listening on");
  }, 60_000);

  it("on a port another process holds, says so and exits 1 without printing a URL nothing serves", async () => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
    const { port } = holder.address() as AddressInfo;
    try {
      const run = await picket(["dashboard", "--database-url", db.url, "--port", String(port)]);
      expect(run).toEqual({
        code: 1,
        stdout: "",
        stderr: `picket: the dashboard cannot listen on 127.0.0.1:${port} (EADDRINUSE): another process holds that port: choose another with --port, or stop that process\n`,
      });
    } finally {
      holder.close();
    }
  }, 60_000);

  it("enqueues, reports stats, cancels and retries through the CLI", async () => {
    const env = { env: { DATABASE_URL: db.url } };
    const enqueued = await picket(["enqueue", "hello", '{"name":"cli"}', "--priority", "5", "--key", "cli-key"], env);
    expect(enqueued.code).toBe(0);
    const job = JSON.parse(enqueued.stdout);
    expect(job).toMatchObject({ type: "hello", payload: { name: "cli" }, priority: 5, key: "cli-key", status: "pending" });
    const stats = await picket(["stats", "--json"], env);
    expect(JSON.parse(stats.stdout).counts).toContainEqual({ type: "hello", state: "ready", count: 1 });
    expect((await picket(["stats"], env)).stdout).toMatch(/hello\s+1\s+0\s+0\s+0\s+0\s+0\s+0/);
    expect(await picket(["jobs", "cancel", job.id], env)).toMatchObject({ code: 0, stdout: `job ${job.id} cancelled\n` });
    const retry = await picket(["jobs", "retry", job.id], env);
    expect(retry).toMatchObject({ code: 1, stderr: `picket: job ${job.id} is cancelled; only dead jobs can be retried\n` });
    expect(await picket(["jobs", "cancel", job.id], env)).toMatchObject({ code: 1, stderr: `picket: job ${job.id} is cancelled; only pending or processing jobs can be cancelled\n` });
    // A finished job can be deleted; then it is gone.
    expect(await picket(["jobs", "delete", job.id], env)).toMatchObject({ code: 0, stdout: `job ${job.id} deleted\n` });
    expect(await picket(["jobs", "delete", job.id], env)).toMatchObject({ code: 1, stderr: expect.stringMatching(new RegExp(`^picket: job ${job.id} does not exist `)) });
  }, 60_000);

  it("makes a delayed job due now, recording who asked, and refuses a job that is not pending", async () => {
    const env = { env: { DATABASE_URL: db.url } };
    const job = JSON.parse((await picket(["enqueue", "cli-later", "{}", "--delay", "3600000"], env)).stdout);
    expect(await picket(["jobs", "run-now", job.id, "--by", "oncall"], env)).toMatchObject({ code: 0, stdout: `job ${job.id} made due now\n` });
    expect((await db.pool.query("SELECT run_at <= now() AS due, errors -> -1 ->> 'by' AS by FROM picket.jobs WHERE id = $1", [job.id])).rows[0]).toEqual({ due: true, by: "oncall" });
    await picket(["jobs", "cancel", job.id], env);
    expect(await picket(["jobs", "run-now", job.id], env)).toMatchObject({ code: 1, stderr: `picket: job ${job.id} is cancelled; only pending jobs can be made due now\n` });
  }, 60_000);

  it("cancels a running job, and shows a job with its recorded steps", async () => {
    const env = { env: { DATABASE_URL: db.url } };
    const [running] = await claimed(db.pool, "cli-running");
    await recordStep(db.pool, { id: running!.id, token: running!.claimToken }, { name: "charge", result: { receipt: 7 }, attempt: 1 });
    const shown = await picket(["jobs", "show", running!.id], env);
    expect(shown.code).toBe(0);
    expect(JSON.parse(shown.stdout)).toMatchObject({ id: running!.id, status: "processing", steps: [{ name: "charge", result: { receipt: 7 }, attempt: 1, claimToken: running!.claimToken }] });
    expect(await picket(["jobs", "cancel", running!.id], env)).toMatchObject({ code: 0, stdout: `job ${running!.id} cancelled\n` });
    expect(JSON.parse((await picket(["jobs", "show", running!.id], env)).stdout)).toMatchObject({ status: "cancelled" });
    expect(await picket(["jobs", "show", "999999"], env)).toMatchObject({ code: 1, stderr: "picket: job 999999 does not exist (never enqueued, or completed: workers delete completed jobs unless keepCompleted; or removed by retention)\n" });
  }, 60_000);

  it("enqueues with a dedupe mode: replace takes over the pending job, a window returns a recently completed one", async () => {
    const env = { env: { DATABASE_URL: db.url } };
    const first = JSON.parse((await picket(["enqueue", "cli.dedupe", '{"v":1}', "--key", "cli-r", "--delay", "60000"], env)).stdout);
    const replaced = await picket(["enqueue", "cli.dedupe", '{"v":2}', "--key", "cli-r", "--dedupe", "replace"], env);
    expect(JSON.parse(replaced.stdout)).toMatchObject({ id: first.id, payload: { v: 2 }, status: "pending" });
    await db.pool.query("UPDATE picket.jobs SET status = 'completed', finished_at = now() - interval '30 seconds' WHERE id = $1", [first.id]);
    const held = await picket(["enqueue", "cli.dedupe", "{}", "--key", "cli-r", "--dedupe-window", "60000"], env);
    expect(JSON.parse(held.stdout)).toMatchObject({ id: first.id, status: "completed" });
    const fresh = await picket(["enqueue", "cli.dedupe", "{}", "--key", "cli-r", "--dedupe", "window", "--dedupe-window", "10000"], env);
    expect(JSON.parse(fresh.stdout).id).not.toBe(first.id);
    const noKey = await picket(["enqueue", "cli.dedupe", "{}", "--dedupe", "replace"], env);
    expect(noKey).toMatchObject({ code: 1, stderr: expect.stringMatching(/--dedupe replace needs --key <key>/) });
    const noWindow = await picket(["enqueue", "cli.dedupe", "{}", "--key", "k", "--dedupe", "window"], env);
    expect(noWindow).toMatchObject({ code: 1, stderr: expect.stringMatching(/--dedupe window needs --dedupe-window <ms>/) });
    const both = await picket(["enqueue", "cli.dedupe", "{}", "--key", "k", "--dedupe", "replace", "--dedupe-window", "5"], env);
    expect(both).toMatchObject({ code: 1, stderr: expect.stringMatching(/--dedupe-window goes with --dedupe window \(or alone\), not --dedupe replace/) });
  }, 60_000);

  it("says what is wrong and exits non-zero on bad input", async () => {
    const env = { env: { DATABASE_URL: db.url } };
    const badJson = await picket(["enqueue", "hello", "{not json"], env);
    expect(badJson.code).toBe(1);
    expect(badJson.stderr).toMatch(/payload is not valid JSON/);
    // Refusals name the flags typed, not the API's options.
    const flagged = async (args: string[]) => (await picket(["enqueue", "hello", "{}", "--allow-unknown", ...args], env)).stderr;
    expect(await flagged(["--max-attempts", "0"])).toBe('picket: job "hello": --max-attempts must be an integer from 1 to 1000000 (got 0).\n');
    expect(await flagged(["--priority", "5000"])).toBe('picket: job "hello": --priority must be an integer from -1000 to 1000 (got 5000).\n');
    expect(await flagged(["--run-at", "soon"])).toMatch(/^picket: job "hello": --run-at must be a valid Date or an ISO 8601 string/);
    expect(await flagged(["--run-at", "2030-01-01T00:00:00Z", "--delay", "5"])).toBe('picket: job "hello": give --run-at or --delay, not both.\n');
    expect(await flagged(["--key", "k".repeat(513)])).toMatch(/^picket: job "hello": --key must be a string of 1 to 512 characters/);
    const badType = await picket(["enqueue", "has space", "{}"], env);
    expect(badType).toMatchObject({ code: 1, stderr: expect.stringMatching(/may contain only letters/) });
    const unreachable = await picket(["stats", "--database-url", "postgres://u:p@127.0.0.1:1/none"]);
    expect(unreachable).toMatchObject({ code: 1, stderr: expect.stringMatching(/cannot connect to PostgreSQL at 127\.0\.0\.1:1\/none/) });
    const noModule = await picket(["worker", "--tasks", "does-not-exist.ts"], env);
    expect(noModule).toMatchObject({ code: 1, stderr: expect.stringMatching(/could not load the tasks module does-not-exist\.ts/) });
    const unknown = await picket(["frobnicate"]);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toMatch(/unknown command 'frobnicate'/);
  }, 60_000);

  it("prints the machines as configs (JSON) and as Mermaid: one diagram per machine", async () => {
    // JSON: the job machine's config alone by default, which Stately's editor imports as is.
    const json = await picket(["machines", "--format", "json"]);
    expect(JSON.parse(json.stdout)).toEqual(JSON.parse(machineJson(jobMachine)));
    const all = await picket(["machines", "--format", "json", "--machine", "all"]);
    expect(JSON.parse(all.stdout).map((m: { id: string }) => m.id)).toEqual(["job", "supervisor"]);
    const one = await picket(["machines", "--format", "json", "--machine", "supervisor"]);
    expect(JSON.parse(one.stdout)).toEqual(JSON.parse(machineJson(supervisorMachine)));
    // Both: each diagram in its own Markdown fence.
    const both = await picket(["machines"]);
    expect(both.stdout).toBe(`\`\`\`mermaid\n%% the job machine\n${machineMermaid(jobMachine)}\`\`\`\n\n\`\`\`mermaid\n%% the supervisor machine\n${machineMermaid(supervisorMachine)}\`\`\`\n`);
    const supervisor = await picket(["machines", "--machine", "supervisor"]);
    expect(supervisor.stdout).toBe(machineMermaid(supervisorMachine));
    const wrong = await picket(["machines", "--format", "svg"]);
    expect(wrong.code).not.toBe(0);
    expect(wrong.stderr).toMatch(/argument 'svg' is invalid\. Allowed choices are json, mermaid/);
  }, 60_000);

  it("has --help for every command", async () => {
    for (const command of ["demo", "worker", "enqueue", "stats", "jobs", "flows", "migrate", "machines", "dashboard"]) {
      const help = await picket([command, "--help"]);
      expect(help.code, command).toBe(0);
      expect(help.stdout, command).toContain(`Usage: picket ${command}`);
    }
  }, 60_000);
});

describe("examples", () => {
  for (const example of ["embed.ts", "effect-layer.ts", "order-saga/run.ts"]) {
    it(`examples/${example} runs to completion`, async () => {
      const file = fileURLToPath(new URL(`../examples/${example}`, import.meta.url));
      const run = await new Promise<Run>((resolve) => {
        const child = spawn(process.execPath, [file], { env: { ...process.env, DATABASE_URL: db.url, PICKET_LOG_LEVEL: "warn" }, stdio: ["ignore", "pipe", "pipe"] });
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
        child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
        child.on("exit", (code) => resolve({ code, stdout, stderr }));
      });
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toMatch(/done\n$/);
    }, 60_000);
  }
});
