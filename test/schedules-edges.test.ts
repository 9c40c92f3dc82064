// The schedules module's own branches, called directly against a real PostgreSQL: names given
// twice, the view an upsert answers with, the removed list, the last fired tick, the default grace,
// a fire that changes nothing and a fire that fails.
import { describe, expect, it } from "vitest";
import {
  dueSchedules,
  fireSchedule,
  InvalidConfigError,
  listSchedules,
  migrate,
  runSchedules,
  syncTaskSchedules,
  tickKey,
  upsertSchedule,
} from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";

const db = useTestDatabase();
const handler = async () => undefined;
const setLastTick = (name: string, at: string) => db.pool.query("UPDATE picket.schedules SET last_tick = $2 WHERE name = $1", [name, at]);

describe("schedules, branch by branch", () => {
  it("refuses a schedule name given twice in one sync, and writes none of them", async () => {
    const twice = defineTask({ name: "twice", handler, schedule: "* * * * *" });
    const sync = syncTaskSchedules(db.pool, [
      { name: "twice", schedule: twice.schedule },
      { name: "twice", schedule: twice.schedule },
    ]);
    await expect(sync).rejects.toThrow(InvalidConfigError);
    await expect(sync).rejects.toThrow('picket: schedule "twice" is given twice; schedule names are unique.');
    expect(await listSchedules(db.pool)).toEqual([]);
  });

  it("answers an upsert with the schedule it wrote, not the first by name", async () => {
    await upsertSchedule(db.pool, { name: "a-first", task: "t", cron: "* * * * *" });
    expect((await upsertSchedule(db.pool, { name: "b-second", task: "t", cron: "0 * * * *" })).name).toBe("b-second");
  });

  it("removes nothing when every task declares its schedule", async () => {
    const declared = defineTask({ name: "declared", handler, schedule: "* * * * *" });
    expect(await syncTaskSchedules(db.pool, [{ name: "declared", schedule: declared.schedule }])).toEqual({ removed: [] });
  });

  it("lists the last fired tick only when last_tick is a tick of the pattern, not the registration time", async () => {
    await upsertSchedule(db.pool, { name: "hourly", task: "t", cron: "0 * * * *" });
    await setLastTick("hourly", "2026-03-01T10:00:00.123Z");
    expect((await listSchedules(db.pool, { names: ["hourly"] }))[0]!.lastFired).toBeNull();
    await setLastTick("hourly", "2026-03-01T10:00:00Z");
    const [view] = await listSchedules(db.pool, { names: ["hourly"] });
    expect(view!.lastFired).toEqual(new Date("2026-03-01T10:00:00Z"));
    // Done through a tick long past: the next run is the pattern's next after now, not after that tick.
    expect(view!.nextRun!.getTime()).toBeGreaterThan(Date.now() - 60_000);
  });

  it("uses a 10 s grace unless told otherwise, and lists only the schedules with ticks due", async () => {
    await upsertSchedule(db.pool, { name: "tens", task: "g", cron: "*/10 * * * * *", missed: "skip" });
    await upsertSchedule(db.pool, { name: "yearly", task: "g", cron: "0 0 1 1 *" });
    await setLastTick("tens", "2026-03-01T10:00:00Z");
    await setLastTick("yearly", "2026-03-01T10:00:00Z");
    const at = new Date("2026-03-01T10:00:15Z");
    // 10:00:10 is 5 s old: on time within the default grace, missed (and skipped) past a 1 s one.
    const byDefault = await dueSchedules(db.pool, { tasks: [{ name: "g", maxAttempts: 5 }], at });
    expect(byDefault.due.map((d) => [d.name, d.fire.map((t) => t.toISOString()), d.skipped])).toEqual([["tens", ["2026-03-01T10:00:10.000Z"], false]]);
    const tight = await dueSchedules(db.pool, { tasks: [{ name: "g", maxAttempts: 5 }], at, graceMs: 1_000 });
    expect(tight.due.map((d) => [d.name, d.fire, d.skipped])).toEqual([["tens", [], true]]);
  });

  it("fires a planned round once: the second fire of the same plan changes nothing and names no ticks", async () => {
    await upsertSchedule(db.pool, { name: "once", task: "o", cron: "* * * * * *" });
    await setLastTick("once", "2026-03-01T10:00:00Z");
    const [due] = (await dueSchedules(db.pool, { tasks: [{ name: "o", maxAttempts: 5 }], at: new Date("2026-03-01T10:00:01.5Z") })).due;
    const first = await fireSchedule(db.pool, due!, 5);
    expect(first).toMatchObject({ advanced: true, ticks: [new Date("2026-03-01T10:00:01Z")] });
    expect(first.jobs).toHaveLength(1);
    expect(await fireSchedule(db.pool, due!, 5)).toEqual({ schedule: "once", task: "o", advanced: false, ticks: [], jobs: [], skipped: false });
  });

  it("reports a schedule whose fire fails and fires the others", async () => {
    await upsertSchedule(db.pool, { name: "refused", task: "bad-attempts", cron: "* * * * * *" });
    await upsertSchedule(db.pool, { name: "accepted", task: "good-attempts", cron: "* * * * * *" });
    await setLastTick("refused", "2026-03-01T10:00:00Z");
    await setLastTick("accepted", "2026-03-01T10:00:00Z");
    // max_attempts 0 breaks the jobs table's check: that schedule's statement fails.
    const { fired, failed } = await runSchedules(db.pool, {
      tasks: [
        { name: "bad-attempts", maxAttempts: 0 },
        { name: "good-attempts", maxAttempts: 3 },
      ],
      at: new Date("2026-03-01T10:00:01.5Z"),
    });
    expect(fired.map((f) => f.schedule)).toEqual(["accepted"]);
    expect(failed).toEqual([{ schedule: "refused", error: expect.objectContaining({ code: "23514" }) }]);
  });

  it("fires the schedules of two schemas on one connection (each schema's statements prepared under its own name)", async () => {
    const client = await db.connect();
    try {
      await migrate(client, { schema: "other_schedules" });
      for (const schema of ["picket", "other_schedules"]) {
        await upsertSchedule(client, { name: "both", task: "both", cron: "* * * * * *" }, { schema });
        await client.query(`UPDATE ${schema}.schedules SET last_tick = '2026-03-01T10:00:00Z'`);
      }
      for (const schema of ["picket", "other_schedules"]) {
        const { fired, failed } = await runSchedules(client, { tasks: [{ name: "both", maxAttempts: 5 }], at: new Date("2026-03-01T10:00:01.5Z"), schema });
        expect(failed).toEqual([]);
        expect(fired.map((f) => f.jobs.length)).toEqual([1]);
      }
    } finally {
      await client.end();
    }
  });

  it("keys a tick's job by the schedule and the tick's instant", () => {
    expect(tickKey("nightly", new Date("2026-03-01T03:00:00Z"))).toBe("schedule:nightly:2026-03-01T03:00:00.000Z");
  });
});
