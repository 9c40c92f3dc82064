// The suite as Stryker runs it: the in-process tests. Tests that spawn processes (the CLI, the
// SIGKILL/SIGTERM crash tests, the chaos run, the examples) run picket's code in child processes,
// which Stryker's mutant switch never reaches, so they cannot kill a mutant and only cost time.
import { defineConfig, mergeConfig } from "vitest/config";
import base from "./vitest.config.ts";

export default mergeConfig(
  base,
  defineConfig({
    test: {
      exclude: ["test/cli.test.ts", "test/crash.test.ts", "test/chaos.test.ts", "node_modules/**"],
      // Stryker runs two test runners on the two cores; each runs its files one after another.
      fileParallelism: false,
    },
  }),
);
