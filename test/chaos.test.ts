// @module-tag spawns: every test here runs picket (or node, npm, git) in a child process.
// The chaos run (bench/chaos.ts), reduced for CI: three real worker processes, 300 jobs, twelve
// seconds of SIGKILLs, SIGSTOP freezes and row locks held for several leases by a session of the
// run's own, one PostgreSQL pause (SIGSTOP of the whole server for longer than a lease) and one
// PostgreSQL restart, then every check of the full run (docs/chaos.md), the count of overlapping
// executions included. It starts its own embedded PostgreSQL (never DATABASE_URL's or the suite's
// shared server: it pauses and restarts the server under the workers).
import { describe, expect, it } from "vitest";
import { runChaos } from "../bench/chaos.ts";

describe("chaos: SIGKILLed and frozen workers, locked rows, a paused and a restarted PostgreSQL", () => {
  it("loses no job, completes each once, explains every extra execution, never overlaps runs on responsive workers, keeps the backoff", async () => {
    const report = await runChaos({
      workers: 3,
      jobs: 300,
      // Twelve seconds: the pause and the restart hold the kills and freezes for about four.
      durationMs: 12_000,
      leaseMs: 1_500,
      killEveryMs: 2_000,
      // On a loaded machine the pause and the restart can leave room for one kill: stretch the
      // window (kills only) until two were made, so the check below never depends on the load.
      minKills: 2,
      freezeEveryMs: 3_000,
      rowLockEveryMs: 2_000,
      // Likewise, the pause and the restart can leave no room for a row lock held two leases.
      minRowLocks: 1,
      pgPauses: 1,
      pgPauseLeases: [1.5, 2],
      // A few jobs run two to three leases, early (the pause catches them running).
      longJobLeases: [2, 3],
      longJobsWithin: 0.3,
      // Retries capped at 1 s apart: the faults charge a few attempts, and the settle stays short.
      backoffMaxMs: 1_000,
      restartPostgres: true,
      databaseUrl: undefined,
      settleTimeoutMs: 45_000,
      // Throwaway data; the restart is a clean shutdown, so durability settings do not matter.
      pgSettings: { fsync: "off", synchronous_commit: "off", full_page_writes: "off" },
    });
    console.log(report.text);
    expect(report.checks.filter((c) => !c.ok)).toEqual([]);
    expect(report.checks.length).toBe(10);
    const overlap = report.checks.find((c) => c.name.startsWith("no two runs of a job overlapped"));
    expect(overlap?.ok).toBe(true);
    expect(report.stats.overlapsBetweenResponsiveWorkers).toBe(0);
    expect(report.stats.handlerRuns).toBeGreaterThanOrEqual(300);
    // The run did what it claims: workers were killed, a row was locked for several leases,
    // PostgreSQL was paused past a lease and restarted.
    expect(report.stats.kills).toBeGreaterThanOrEqual(2);
    expect(report.rowLocks.length).toBeGreaterThanOrEqual(1);
    expect(report.rowLocks.every((l) => (l.releasedAtMs ?? 0) - l.atMs >= 2 * 1_500 || l.error !== null)).toBe(true);
    expect(report.pauses.length).toBe(1);
    expect(report.pauses[0]!.resumedAtMs! - report.pauses[0]!.atMs).toBeGreaterThan(1_500);
    expect(report.stats.restartDowntimeMs).not.toBeNull();
  }, 180_000);
});
