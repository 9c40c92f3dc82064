// The mutation run leaves out the tests that run Node code in a child process (the "spawns" tag),
// and the ordinary suite fails a test that does so untagged (test/support/spawn-guard.ts). Both
// halves are checked here: without either, the next `npm run mutation` from a fresh clone slows
// down or stops at its dry run, as it did with the git-install test.
import { execFile, spawn } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import mutationConfig, { leaveOutSpawns } from "../vitest.mutation.config.ts";
import suiteConfig from "../vitest.config.ts";

const exited = (child: ReturnType<typeof spawn>) => new Promise<number | null>((resolve) => child.on("exit", resolve));

describe("tests that run Node in a child process stay out of the mutation run", () => {
  it("an untagged test that spawns node, npm or git fails, saying what to add", () => {
    expect(() => spawn(process.execPath, ["-e", ""])).toThrow(/runs .*node in a child process without the "spawns" tag: add \{ tags: \["spawns"\] \}/);
    expect(() => spawn("npm", ["--version"])).toThrow(/without the "spawns" tag/);
    // promisify keeps execFile's own form ({ stdout, stderr }), and is guarded as well.
    expect(() => promisify(execFile)("git", ["--version"])).toThrow(/without the "spawns" tag/);
  });

  it("a child that is not Node (a server, a shell tool) needs no tag", async () => {
    expect(await exited(spawn("true", [], { stdio: "ignore" }))).toBe(0);
  });

  it("a tagged test may spawn node, and execFile still resolves stdout and stderr", { tags: ["spawns"] }, async () => {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, ["-e", "process.stdout.write('out'); process.stderr.write('err')"]);
    expect({ stdout, stderr }).toEqual({ stdout: "out", stderr: "err" });
  });

  it("the mutation config filters the tag out, and the suite's config defines it", () => {
    expect(leaveOutSpawns).toEqual({ tagsFilter: ["!spawns"] });
    expect(mutationConfig.test).toMatchObject(leaveOutSpawns);
    expect(suiteConfig.test?.tags?.map((t) => t.name)).toContain("spawns");
  });
});
