// A pending job is ready (due now), scheduled (a run time ahead that its enqueue asked for) or
// retrying (a failed attempt's backoff still running). `picket stats`, the queue-depth gauge and
// the dashboard count the three apart, so delayed jobs no longer make a queue look stuck.
import { describe, expect, it } from "vitest";
import { dashboardSnapshot, enqueueJob, enqueueJobs, queueDepth, queueStats } from "../src/db/index.ts";
import { formatStats } from "../src/cli/stats.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("ready, scheduled and retrying counted apart", () => {
  it("in the stats, the depth query, the dashboard's snapshot and the stats table", async () => {
    // Two attempts fail through a real worker; their backoff (an hour) keeps them waiting.
    const fails = defineTask({ name: "split", maxAttempts: 3, backoff: { baseMs: 3_600_000, maxMs: 3_600_000 }, handler: async () => Promise.reject(new Error("not yet")) });
    const failed = [await enqueueJob(db.pool, { type: "split" }), await enqueueJob(db.pool, { type: "split" })];
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [fails] });
    const waiting = async () => (await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'split' AND attempts = 1 AND status = 'pending'")).rows[0].n;
    await expect.poll(waiting, { timeout: 10_000 }).toBe(2);
    await supervisor.stop();
    // One backoff has run out: that job is due again, so it is ready, not retrying.
    await db.pool.query("UPDATE picket.jobs SET run_at = now() - interval '1 second' WHERE id = $1", [failed[0]!.id]);
    await enqueueJobs(db.pool, [{ type: "split" }, { type: "split" }]);
    const later = new Date(Date.now() + 3_600_000);
    await enqueueJobs(db.pool, [{ type: "split", runAt: later }, { type: "split", runAt: later }, { type: "split", runAt: later }]);

    const expected = [
      { type: "split", state: "ready", count: 3 },
      { type: "split", state: "retrying", count: 1 },
      { type: "split", state: "scheduled", count: 3 },
    ];
    const stats = await queueStats(db.pool);
    expect(stats.counts.filter((c) => c.type === "split")).toEqual(expected);
    expect((await queueDepth(db.pool)).filter((c) => c.type === "split")).toEqual(expected);
    expect((await dashboardSnapshot(db.pool)).depth.filter((c) => c.type === "split")).toEqual(expected);

    const table = formatStats(stats).split("\n");
    expect(table[0]).toMatch(/^task\s+ready\s+scheduled\s+retrying\s+waiting\s+processing\s+completed\s+dead\s+cancelled$/);
    expect(table.find((line) => line.startsWith("split"))).toMatch(/^split\s+3\s+3\s+1\s+0\s+0\s+0\s+0\s+0$/);
    // Each number sits under its column's name: right-aligned to the same edge.
    const header = table[0]!;
    const splitRow = table.find((line) => line.startsWith("split"))!;
    expect(splitRow.length).toBe(header.length);
    expect(splitRow.indexOf("3", header.indexOf("ready"))).toBe(header.indexOf("ready") + "ready".length - 1);
  });
});
