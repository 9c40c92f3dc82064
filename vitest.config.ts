import { configDefaults, defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // The examples of picket/testing run as tests too (examples/testing/*.test.ts).
    include: ["test/**/*.test.ts", "examples/**/*.test.ts"],
    // Except the guide's (docs/guide.md): they import picket by its package name, as an installed
    // service does, and test/git-install.test.ts runs them in a project that installed picket from git.
    exclude: [...configDefaults.exclude, "examples/guide/**"],
    globalSetup: ["test/support/global-setup.ts"],
    setupFiles: ["test/support/setup-file.ts"],
    // test/support/spawn-guard.ts fails a test that runs Node code in a child process without it.
    tags: [{ name: "spawns", description: "runs picket (or node, npm, git) in a child process: left out of the mutation run, whose mutant switch never reaches a child" }],
    // Each file gets its own database cloned from a migrated template, so files run in parallel.
    fileParallelism: true,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
