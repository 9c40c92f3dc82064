// Mutation testing over the queue's own code: `npm run mutation` writes reports/mutation/.
/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: "vitest",
  vitest: { configFile: "vitest.mutation.config.ts" },
  plugins: ["@stryker-mutator/vitest-runner"],
  mutate: [
    "src/db/**/*.ts",
    "src/machines/**/*.ts",
    "src/runtime/**/*.ts",
    "src/dashboard/**/*.ts",
    "src/testing/**/*.ts",
    "src/cli/db.ts",
    "src/cli/database.ts",
    // Barrels re-export; there is nothing in them to mutate.
    "!src/**/index.ts",
    // Runs in vitest's global setup (the embedded server) and in worker threads (isolated
    // handlers): outside the test process, where Stryker's mutant switch never reaches.
    "!src/db/embedded.ts",
    "!src/runtime/isolated-worker.ts",
    "!src/testing/global-setup.ts",
  ],
  coverageAnalysis: "perTest",
  // Static mutants (module-level code: the machine definitions, constants) can only be tested by
  // running the whole suite for each one: 623 of them took the estimate from under an hour to
  // three on this 2-core machine. They are reported as ignored; the machines' transitions are
  // held by the model-based tests' coverage check instead (docs/mutation.md).
  ignoreStatic: true,
  concurrency: 4,
  // The dry run is the whole in-process suite, once, with coverage per test: about 10 minutes on
  // an idle 2-core machine and over 20 on a loaded one, past Stryker's default of 5.
  dryRunTimeoutMinutes: 45,
  timeoutMS: 5000,
  timeoutFactor: 2,
  reporters: ["clear-text", "progress", "html", "json"],
  htmlReporter: { fileName: "reports/mutation/index.html" },
  jsonReporter: { fileName: "reports/mutation/mutation.json" },
  // TypeScript 7 has no JS API for Stryker to rewrite tsconfig.json with, and nothing here needs
  // it rewritten (vitest strips types itself): point Stryker at a file that does not exist.
  tsconfigFile: "tsconfig.stryker-none.json",
  // Nothing type-checks in the sandbox, so no file needs "// @ts-nocheck" put atop it; the default
  // (every file) changed examples/guide/*, which test/guide.test.ts holds equal to docs/guide.md.
  disableTypeChecks: false,
  tempDirName: ".stryker-tmp",
  cleanTempDir: "always",
};
