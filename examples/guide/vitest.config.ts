import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // One PostgreSQL and one migrated template for the whole run; each test file clones its own database.
    globalSetup: ["picket/testing/global-setup"],
    testTimeout: 60_000, // checkTask runs the job dozens of times
  },
});
