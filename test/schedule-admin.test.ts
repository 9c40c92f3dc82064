// An operator's hands on schedules (migration 0014): a paused schedule fires no tick, its resume
// skips the ticks that fell while paused, a trigger makes one job as a tick would, and the job of
// each schedule's last tick is found with its status.
import { describe, expect, it } from "vitest";
import {
  lastScheduledJobs,
  listSchedules,
  pauseSchedule,
  resumeSchedule,
  runSchedules,
  triggerSchedule,
  upsertSchedule,
  InvalidConfigError,
} from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { rejectionOf } from "./support/errors.ts";

const db = useTestDatabase();

const fire = (task: string, at: Date) => runSchedules(db.pool, { tasks: [{ name: task, maxAttempts: 3 }], at, graceMs: 3_600_000 });
const seconds = (n: number) => new Date(Date.now() + n * 1000);

describe("a schedule an operator pauses", () => {
  it("fires no tick while paused, and after its resume only the ticks from then on", async () => {
    await upsertSchedule(db.pool, { name: "paused-every-second", task: "paused-tick", cron: "* * * * * *" });
    const paused = await pauseSchedule(db.pool, "paused-every-second", { by: "ana" });
    expect(paused).toMatchObject({ outcome: "applied", schedule: { pausedAt: expect.any(Date), pausedBy: "ana" } });
    expect(await pauseSchedule(db.pool, "paused-every-second")).toMatchObject({ outcome: "unchanged", schedule: { pausedBy: "ana" } });
    // Ten seconds' ticks due, none fired.
    expect((await fire("paused-tick", seconds(10))).fired).toEqual([]);
    // Paused for an hour: 3,600 ticks fell meanwhile.
    await db.pool.query("UPDATE picket.schedules SET last_tick = now() - interval '1 hour' WHERE name = 'paused-every-second'");
    const resumedAt = Date.now();
    const resumed = await resumeSchedule(db.pool, "paused-every-second");
    expect(resumed).toMatchObject({ outcome: "applied", schedule: { pausedAt: null, pausedBy: null } });
    // Counting starts at the resume: the hour's ticks are skipped, the ones after it fire.
    const { fired } = await fire("paused-tick", new Date(resumedAt + 3_500));
    expect(fired).toHaveLength(1);
    expect(fired[0]!.ticks.length).toBeGreaterThanOrEqual(2);
    expect(fired[0]!.ticks.length).toBeLessThanOrEqual(5);
    expect(fired[0]!.ticks.every((tick) => tick.getTime() > resumedAt - 1_000)).toBe(true);
    expect(await resumeSchedule(db.pool, "paused-every-second")).toMatchObject({ outcome: "unchanged" });
  });

  it("stays paused when a worker registers its task's schedule again", async () => {
    await upsertSchedule(db.pool, { name: "paused-kept", task: "paused-kept-task", cron: "0 * * * *" });
    await pauseSchedule(db.pool, "paused-kept");
    await upsertSchedule(db.pool, { name: "paused-kept", task: "paused-kept-task", cron: "0 * * * *", payload: { changed: true } });
    expect((await listSchedules(db.pool, { names: ["paused-kept"] }))[0]!.pausedAt).not.toBeNull();
  });

  it("answers not_found for a schedule that does not exist, and refuses a name no schedule could have", async () => {
    expect(await pauseSchedule(db.pool, "no-such-schedule")).toEqual({ outcome: "not_found" });
    expect(await resumeSchedule(db.pool, "no-such-schedule")).toEqual({ outcome: "not_found" });
    expect(await triggerSchedule(db.pool, "no-such-schedule")).toBeNull();
    const error = await rejectionOf(pauseSchedule(db.pool, ""));
    expect(error).toBeInstanceOf(InvalidConfigError);
    expect((error as Error).message).toBe('picket: a schedule name is 1 to 200 characters (got "").');
  });
});

describe("triggering a schedule now", () => {
  it("makes one job as a tick would, each trigger its own, paused or not, naming who asked", async () => {
    await upsertSchedule(db.pool, { name: "triggered", task: "triggered-task", cron: "0 0 1 1 *", payload: { to: "ops" } });
    await pauseSchedule(db.pool, "triggered");
    const first = await triggerSchedule(db.pool, "triggered", { by: "bo" });
    const second = await triggerSchedule(db.pool, "triggered");
    expect(first).not.toBeNull();
    expect(second).not.toBe(first);
    const { rows } = await db.pool.query("SELECT type, payload, key, status FROM picket.jobs WHERE type = 'triggered-task' ORDER BY id");
    expect(rows).toEqual([
      { type: "triggered-task", payload: { to: "ops", scheduledAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/), triggeredBy: "bo" }, key: expect.stringMatching(/^schedule:triggered:triggered:/), status: "pending" },
      { type: "triggered-task", payload: { to: "ops", scheduledAt: expect.any(String), triggeredBy: null }, key: expect.stringMatching(/^schedule:triggered:triggered:/), status: "pending" },
    ]);
  });
});

describe("the job of a schedule's last tick", () => {
  it("is found with its status while it lives, when it died or was cancelled, and is none once gone", async () => {
    await upsertSchedule(db.pool, { name: "last-job", task: "last-job-task", cron: "* * * * * *" });
    await upsertSchedule(db.pool, { name: "never-fired", task: "never-task", cron: "0 0 1 1 *" });
    const { fired } = await fire("last-job-task", seconds(2.5));
    const lastJob = fired[0]!.jobs.at(-1)!;
    const found = async () => (await lastScheduledJobs(db.pool, await listSchedules(db.pool, { names: ["last-job", "never-fired"] }))).map((j) => [j.schedule, j.id, j.status]);
    expect(await found()).toEqual([["last-job", lastJob, "pending"]]);
    // A tick's job finishes after its tick (here the ticks are seconds ahead of the clock).
    await db.pool.query("UPDATE picket.jobs SET status = 'dead', finished_at = now() + interval '10 seconds' WHERE id = $1", [lastJob]);
    expect(await found()).toEqual([["last-job", lastJob, "dead"]]);
    await db.pool.query("UPDATE picket.jobs SET status = 'cancelled' WHERE id = $1", [lastJob]);
    expect(await found()).toEqual([["last-job", lastJob, "cancelled"]]);
    await db.pool.query("UPDATE picket.jobs SET status = 'completed' WHERE id = $1", [lastJob]);
    expect(await found()).toEqual([["last-job", lastJob, "completed"]]);
    await db.pool.query("DELETE FROM picket.jobs WHERE id = $1", [lastJob]);
    expect(await found()).toEqual([["last-job", null, "none"]]);
  });
});
