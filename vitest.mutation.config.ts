// The suite as Stryker runs it: the in-process tests. Tests that spawn processes (the CLI, the
// SIGKILL/SIGTERM crash tests, the chaos run, the examples) run picket's code in child processes,
// which Stryker's mutant switch never reaches, so they cannot kill a mutant and only cost time.
import { defineConfig, mergeConfig } from "vitest/config";
import base from "./vitest.config.ts";
import FailedThenQuickestFirst from "./test/support/mutation-sequencer.ts";

export default mergeConfig(
  base,
  defineConfig({
    test: {
      // faults-server.test.ts runs picket in-process but against a server of its own that it stops,
      // pauses and restarts, with waits of seconds: its faults are held by the suite and the chaos
      // run, and its cost per mutant run would double the mutation run.
      exclude: ["test/cli.test.ts", "test/cli-processes.test.ts", "test/crash.test.ts", "test/chaos.test.ts", "test/faults-server.test.ts", "node_modules/**"],
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
