// A test that runs Node code in a child process of its own (picket's CLI, a worker script,
// `node --test`, npm, git) carries the `spawns` tag, and the mutation run leaves it out
// (vitest.mutation.config.ts): Stryker's mutant switch never reaches a child process, so such a
// test cannot kill a mutant, only cost the run minutes, and one that installs packages fails
// outright in Stryker's sandbox (not a git repository). This guard makes a missing tag fail the
// ordinary suite, where it is seen, instead of slowing or breaking the next mutation run.
//
// Children that picket's own code starts (the embedded server, a process group's workers) are
// not the test's: the code that starts them runs in the test process, where mutants are reached.
// So is any child that is not Node or a package tool (a PostgreSQL or PgBouncer server, `id`, `sleep`).
import childProcess from "node:child_process";
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { syncBuiltinESMExports } from "node:module";
import { promisify } from "node:util";
import { expect, TestRunner } from "vitest";

export const SPAWNS_TAG = "spawns";

// By the command's file name: process.execPath's is "node".
const NODE_CODE = new Set(["node", "npm", "npx", "git"]);
const moduleTagged = new Map<string, boolean>();

const fileIsTagged = (path: string): boolean => {
  let tagged = moduleTagged.get(path);
  if (tagged === undefined) moduleTagged.set(path, (tagged = new RegExp(`@module-tag\\s+${SPAWNS_TAG}\\b`).test(readFileSync(path, "utf8"))));
  return tagged;
};

/** Called by picket's own code, not by the test: the first frame outside this file and node's. */
const startedByPicket = (): boolean => {
  const frames = (new Error().stack ?? "").split("\n").slice(1).filter((frame) => !frame.includes("spawn-guard.ts") && !frame.includes("node:"));
  return frames[0]?.includes("/src/") ?? false;
};

const check = (command: unknown): void => {
  if (typeof command !== "string" || !NODE_CODE.has(basename(command))) return;
  if (startedByPicket()) return;
  const test = TestRunner.getCurrentTest();
  if (test?.tags?.includes(SPAWNS_TAG)) return;
  const path = expect.getState().testPath;
  if (path !== undefined && fileIsTagged(path)) return;
  throw new Error(
    `${test?.name ?? path ?? "this test"} runs ${command} in a child process without the "${SPAWNS_TAG}" tag: ` +
      `add { tags: ["${SPAWNS_TAG}"] } to the test (or "// @module-tag ${SPAWNS_TAG}" to the file) so the mutation run leaves it out`,
  );
};

for (const name of ["spawn", "execFile", "fork", "spawnSync", "execFileSync"] as const) {
  const original = childProcess[name] as ((...args: unknown[]) => unknown) & { [promisify.custom]?: (...args: unknown[]) => unknown };
  // fork's command is a module that node runs: always Node code.
  const command = (args: unknown[]) => (name === "fork" ? process.execPath : args[0]);
  const guarded = Object.assign(
    function guarded(this: unknown, ...args: unknown[]) {
      check(command(args));
      return original.apply(this, args);
    },
    // promisify(execFile) resolves { stdout, stderr } through execFile's own custom form: kept.
    original[promisify.custom] && {
      [promisify.custom]: (...args: unknown[]) => {
        check(command(args));
        return original[promisify.custom]!(...args);
      },
    },
  );
  (childProcess as unknown as Record<string, unknown>)[name] = guarded;
}
// `import { spawn } from "node:child_process"` in a test file reads the guarded functions too.
syncBuiltinESMExports();
