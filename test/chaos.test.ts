// The chaos run (bench/chaos.ts), reduced for CI: three real worker processes, 300 jobs, ten
// seconds of SIGKILLs and SIGSTOP freezes, one PostgreSQL restart, then every check of the full
// run (docs/chaos.md). It starts
// its own embedded PostgreSQL (never DATABASE_URL's or the suite's shared server: it restarts
// the server under the workers).
import { describe, expect, it } from "vitest";
import { runChaos } from "../bench/chaos.ts";

describe("chaos: SIGKILLed workers and a PostgreSQL restart", () => {
  it("loses no job, completes each once, explains every extra execution, keeps the backoff", async () => {
    const report = await runChaos({
      workers: 3,
      jobs: 300,
      durationMs: 10_000,
      leaseMs: 1_500,
      killEveryMs: 2_000,
      freezeEveryMs: 3_000,
      restartPostgres: true,
      databaseUrl: undefined,
      settleTimeoutMs: 45_000,
      // Throwaway data; the restart is a clean shutdown, so durability settings do not matter.
      pgSettings: { fsync: "off", synchronous_commit: "off", full_page_writes: "off" },
    });
    console.log(report.text);
    expect(report.checks.filter((c) => !c.ok)).toEqual([]);
    expect(report.checks.length).toBe(9);
    // The run did what it claims: workers were killed and PostgreSQL was restarted.
    expect(report.stats.kills).toBeGreaterThanOrEqual(2);
    expect(report.stats.restartDowntimeMs).not.toBeNull();
  }, 180_000);
});
