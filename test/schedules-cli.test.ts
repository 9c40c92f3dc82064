// @module-tag spawns: every test here runs picket (or node, npm, git) in a child process.
// `picket schedules` as a user runs it: a real process against the test database.
import { describe, expect, it } from "vitest";
import { listSchedules, upsertSchedule } from "../src/db/index.ts";
import { picket } from "./support/cli.ts";
import { useTestDatabase } from "./support/db.ts";

const db = useTestDatabase();

describe("picket schedules", () => {
  it("lists every schedule with its pattern, zone, missed policy, last tick fired (never, for one that has not fired) and next run", async () => {
    const env = { env: { DATABASE_URL: db.url } };
    expect((await picket(["schedules"], env)).stdout).toBe("(no schedules: declare one with defineTask({ schedule }) or upsertSchedule())\n");
    await upsertSchedule(db.pool, { name: "nightly", task: "report", cron: "0 3 * * *", timezone: "Europe/Paris", missed: { catchUp: 2 } });
    await upsertSchedule(db.pool, { name: "often", task: "ping", cron: "*/5 * * * * *", missed: "skip" });
    await db.pool.query("UPDATE picket.schedules SET last_tick = '2030-01-01T00:00:00Z'");
    const run = await picket(["schedules"], env);
    expect(run.code).toBe(0);
    const lines = run.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^schedule\s+task\s+cron\s+missed\s+last fired\s+next run$/);
    // The next run is the first tick after the later of now and the last tick: 03:00 in Paris is 02:00 UTC in January.
    // Midnight UTC is no tick of 03:00 in Paris: counting starts there, nothing has fired. It is
    // one of every 5 seconds: that tick is the last one fired.
    expect(lines[1]).toMatch(/^nightly\s+report\s+0 3 \* \* \* \(Europe\/Paris\)\s+catch up 2\s+never\s+2030-01-01T02:00:00\.000Z$/);
    expect(lines[2]).toMatch(/^often\s+ping\s+\*\/5 \* \* \* \* \*\s+skip\s+2030-01-01T00:00:00\.000Z\s+2030-01-01T00:00:05\.000Z$/);
    const json = JSON.parse((await picket(["schedules", "--json"], env)).stdout);
    expect(json.map((s: { name: string; nextRun: string; missed: unknown; lastFired: string | null }) => [s.name, s.nextRun, s.missed, s.lastFired])).toEqual([
      ["nightly", "2030-01-01T02:00:00.000Z", { catchUp: 2 }, null],
      ["often", "2030-01-01T00:00:05.000Z", "skip", "2030-01-01T00:00:00.000Z"],
    ]);
    // Just made: counting starts at its creation, which is no tick.
    await upsertSchedule(db.pool, { name: "fresh", task: "ping", cron: "0 0 1 1 *" });
    expect((await picket(["schedules"], env)).stdout).toMatch(/\nfresh\s+ping\s+0 0 1 1 \*\s+\S+\s+never\s+\d{4}-01-01T00:00:00\.000Z\n/);
    const help = await picket(["schedules", "--help"]);
    expect(help.stdout).toContain("Usage: picket schedules");
  }, 60_000);

  it("pauses, resumes and triggers a schedule by name, and says when there is no such schedule", async () => {
    const env = { env: { DATABASE_URL: db.url } };
    await upsertSchedule(db.pool, { name: "cli-paused", task: "cli-paused-task", cron: "0 3 * * *" });
    expect(await picket(["schedules", "pause", "cli-paused", "--by", "ops"], env)).toMatchObject({ code: 0, stdout: "schedule cli-paused paused: it fires no tick until resumed\n" });
    expect((await picket(["schedules", "pause", "cli-paused"], env)).stdout).toBe("schedule cli-paused was already paused\n");
    expect((await listSchedules(db.pool, { names: ["cli-paused"] }))[0]).toMatchObject({ pausedBy: "ops", pausedAt: expect.any(Date) });
    const triggered = await picket(["schedules", "trigger", "cli-paused"], env);
    expect(triggered.stdout).toMatch(/^schedule cli-paused triggered: job \d+\n$/);
    expect((await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'cli-paused-task'")).rows[0].n).toBe(1);
    expect((await picket(["schedules", "resume", "cli-paused"], env)).stdout).toBe("schedule cli-paused resumed: it fires from its next tick\n");
    expect((await picket(["schedules", "resume", "cli-paused"], env)).stdout).toBe("schedule cli-paused was not paused\n");
    const missing = await picket(["schedules", "pause", "no-such"], env);
    expect(missing).toMatchObject({ code: 1, stderr: 'picket: there is no schedule "no-such" (picket schedules lists them)\n' });
    // The list is still the command's own.
    expect((await picket(["schedules"], env)).stdout).toMatch(/^schedule\s+task\s+cron/);
  }, 60_000);
});
