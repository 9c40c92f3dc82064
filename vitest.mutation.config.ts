// The suite as Stryker runs it: the in-process tests. Tests that run Node code in a child process
// (the CLI, worker scripts, the crash and chaos runs, node --test, a git install) carry the
// "spawns" tag and are left out: Stryker's mutant switch never reaches a child, so they cannot
// kill a mutant, only cost time, and the git install fails in Stryker's sandbox (not a git
// repository). test/support/spawn-guard.ts fails any such test of the ordinary suite that lacks the tag.
import { defineConfig, mergeConfig, type ViteUserConfig } from "vitest/config";
import base from "./vitest.config.ts";
import FailedThenQuickestFirst from "./test/support/mutation-sequencer.ts";

// vitest applies tagsFilter from the config's test block as it does --tags-filter, though its
// type (vitest 5.1) lists the option among the CLI's only.
export const leaveOutSpawns = { tagsFilter: ["!spawns"] } as NonNullable<ViteUserConfig["test"]>;

// MUTATION_TESTS=test/a.test.ts,test/b.test.ts narrows the run to those files: a module measured
// against the files that test it, in minutes rather than the whole suite's hour (a lower bound of
// the full suite's score). docs/mutation.md, "Focused runs".
const focus = process.env.MUTATION_TESTS?.split(",").filter((file) => file !== "");

const config = mergeConfig(
  base,
  defineConfig({
    test: {
      ...leaveOutSpawns,
      // faults-server.test.ts runs picket in-process but against a server of its own that it stops,
      // pauses and restarts, with waits of seconds: its faults are held by the suite and the chaos
      // run, and its cost per mutant run would double the mutation run.
      exclude: ["test/faults-server.test.ts", "node_modules/**"],
      // Each Stryker test runner runs a mutant's files one after another in one worker whose
      // modules stay loaded from file to file (each mutant run gets a fresh worker): re-importing
      // the runtime for every file of every mutant run cost more than most mutants' tests.
      fileParallelism: false,
      isolate: false,
      sequence: { sequencer: FailedThenQuickestFirst },
      // A mutant that hangs a drain or a retry fails its test here rather than waiting out
      // Stryker's own timeout (twice the covering tests' time plus timeoutMS), which for a
      // supervisor mutant covered by most of the suite is close to a minute. Above the longest
      // wait any test allows itself (10 s polls), so a slow test under load is not a false kill.
      testTimeout: 20_000,
      hookTimeout: 20_000,
    },
  }),
);
// Set after the merge, which would add the files to the base config's patterns, not replace them.
if (focus !== undefined && focus.length > 0) config.test!.include = focus;

export default config;
