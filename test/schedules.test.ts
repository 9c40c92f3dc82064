// Schedules against a real PostgreSQL: registering them, the missed-tick policies at a controlled
// time, and one job per tick when workers race for the same tick.
import { describe, expect, it } from "vitest";
import {
  dueSchedules,
  fireSchedule,
  InvalidConfigError,
  listSchedules,
  removeSchedule,
  runSchedules,
  syncTaskSchedules,
  upsertSchedule,
  type ScheduleSpec,
} from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";

const db = useTestDatabase();

const setLastTick = (name: string, at: string) => db.pool.query("UPDATE picket.schedules SET last_tick = $2 WHERE name = $1", [name, at]);

const jobsOf = async (type: string) =>
  (
    await db.pool.query(
      `SELECT type, payload, run_at AS "runAt", max_attempts AS "maxAttempts", key, status FROM picket.jobs WHERE type = $1 ORDER BY run_at, id`,
      [type],
    )
  ).rows;

const ticksOf = async (type: string) => (await jobsOf(type)).map((j) => j.payload.scheduledAt as string);

describe("schedule definitions", () => {
  const handler = async () => undefined;

  it.each([
    [{ schedule: "61 * * * *" }, /^picket: schedule "t": cron pattern "61 \* \* \* \*" is not valid: Invalid value for minute: 61\. Use five fields/],
    [{ schedule: "* * *" }, /cron pattern "\* \* \*" is not valid: .*Use five fields \(minute hour/],
    [{ schedule: "0 0 30 2 *" }, /cron pattern "0 0 30 2 \*" never fires/],
    [{ schedule: "" }, /cron must be a pattern like "\*\/5 \* \* \* \*"/],
    [{ schedule: { cron: "* * * * *", timezone: "Mars/Olympus" } }, /timezone "Mars\/Olympus" is not a time zone this runtime knows; use an IANA name/],
    [{ schedule: { cron: "* * * * *", missed: "all" } }, /missed must be "skip", "latest" or \{ catchUp: N \} \(got "all"\)/],
    [{ schedule: { cron: "* * * * *", missed: { catchUp: 1001 } } }, /missed\.catchUp must be an integer from 0 to 1000 \(got 1001\)/],
    [{ schedule: { cron: "* * * * *", payload: [1] } }, /payload must be a JSON object \(picket adds "scheduledAt" to it\); got an array/],
    [{ schedule: { cron: "* * * * *", payload: { scheduledAt: 1 } } }, /payload may not hold "scheduledAt"/],
    [{ schedule: { cron: "* * * * *", payload: { n: 10n } } }, /schedule "t": payload is not JSON-serialisable: payload\.n is a bigint/],
    [{ schedule: 5 }, /task "t": schedule must be a cron pattern/],
  ])("refuses bad schedule #%# with a message that says what to do", (definition, message) => {
    const define = () => defineTask({ name: "t", handler, ...(definition as object) });
    expect(define).toThrow(InvalidConfigError);
    expect(define).toThrow(message);
  });

  it("takes a pattern or an object, names the schedule after the task, and defaults to latest", () => {
    expect(defineTask({ name: "five", handler, schedule: "*/5 * * * *" }).schedule).toEqual({
      name: "five",
      task: "five",
      cron: "*/5 * * * *",
      timezone: null,
      payloadJson: "{}",
      catchUp: 1,
    });
    const full = defineTask({ name: "paris", handler, schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Paris", payload: { to: "ops" }, missed: { catchUp: 3 } } });
    expect(full.schedule).toMatchObject({ timezone: "Europe/Paris", payloadJson: '{"to":"ops"}', catchUp: 3 });
    expect(defineTask({ name: "skip", handler, schedule: { cron: "@hourly", missed: "skip" } }).schedule?.catchUp).toBe(0);
  });

  it("refuses a bad run-time schedule before writing anything", async () => {
    await expect(upsertSchedule(db.pool, { name: "bad name", task: "t", cron: "* * * * *" })).rejects.toThrow(/name must be 1 to 200 characters/);
    await expect(upsertSchedule(db.pool, { name: "ok", task: "", cron: "* * * * *" } as ScheduleSpec)).rejects.toThrow(/schedule "ok": schedule's task type must be a non-empty string/);
    expect(await listSchedules(db.pool)).toEqual([]);
  });
});

describe("registering schedules", () => {
  it("starts a new schedule from now, lists its next run by the database's clock, and removes it", async () => {
    const before = (await db.pool.query("SELECT now() AS now")).rows[0].now as Date;
    const view = await upsertSchedule(db.pool, { name: "reg", task: "reg-task", cron: "0 3 * * *", timezone: "America/New_York", payload: { a: 1 } });
    expect(view).toMatchObject({ name: "reg", task: "reg-task", cron: "0 3 * * *", timezone: "America/New_York", payload: { a: 1 }, missed: "latest", source: "api" });
    expect(view.lastTick.getTime()).toBeGreaterThanOrEqual(before.getTime());
    // 03:00 in New York is 07:00 or 08:00 UTC, within the next day.
    expect(view.nextRun!.getTime() - view.lastTick.getTime()).toBeLessThanOrEqual(86_400_000);
    expect([7, 8]).toContain(view.nextRun!.getUTCHours());
    expect(await removeSchedule(db.pool, "reg")).toBe(true);
    expect(await removeSchedule(db.pool, "reg")).toBe(false);
  });

  it("rewrites nothing when the definition is unchanged, and restarts from now when the pattern changes", async () => {
    const spec = { name: "same", task: "same-task", cron: "0 * * * *" };
    const first = await upsertSchedule(db.pool, spec);
    await setLastTick("same", "2020-01-01T00:00:00Z");
    const again = await upsertSchedule(db.pool, spec);
    // Unchanged: a worker's plan made from the row stays valid, and no tick is given up.
    expect(again.revision).toBe(first.revision);
    expect(again.lastTick.toISOString()).toBe("2020-01-01T00:00:00.000Z");
    const payloadOnly = await upsertSchedule(db.pool, { ...spec, payload: { v: 2 } });
    expect(payloadOnly.revision).not.toBe(first.revision);
    expect(payloadOnly.lastTick.toISOString()).toBe("2020-01-01T00:00:00.000Z");
    const repatterned = await upsertSchedule(db.pool, { ...spec, payload: { v: 2 }, cron: "30 * * * *" });
    expect(repatterned.lastTick.getTime()).toBeGreaterThan(Date.parse("2025-01-01"));
  });

  it("writes the schedules tasks declare, and removes a task's declared schedule once it declares none (never a run-time one)", async () => {
    const declared = defineTask({ name: "decl", handler: async () => undefined, schedule: "*/5 * * * *" });
    await syncTaskSchedules(db.pool, [{ name: declared.name, schedule: declared.schedule }]);
    await upsertSchedule(db.pool, { name: "decl-api", task: "api-only", cron: "* * * * *" });
    await upsertSchedule(db.pool, { name: "api-only", task: "api-only", cron: "* * * * *" });
    expect((await listSchedules(db.pool, { names: ["decl"] }))[0]).toMatchObject({ source: "task", cron: "*/5 * * * *" });
    const { removed } = await syncTaskSchedules(db.pool, [
      { name: "decl", schedule: undefined },
      { name: "api-only", schedule: undefined },
    ]);
    expect(removed).toEqual(["decl"]);
    expect((await listSchedules(db.pool, { names: ["decl", "decl-api", "api-only"] })).map((s) => s.name)).toEqual(["api-only", "decl-api"]);
  });
});

describe("firing at a controlled time", () => {
  const fire = (task: string, at: string, graceMs = 10_000) => runSchedules(db.pool, { tasks: [{ name: task, maxAttempts: 7 }], graceMs, at: new Date(at) });

  it("makes one job per tick: the task's type, the payload plus the tick, the tick as key and run time, the task's attempts", async () => {
    await upsertSchedule(db.pool, { name: "shape", task: "shape-task", cron: "*/10 * * * * *", payload: { to: "ops" } });
    await setLastTick("shape", "2026-03-01T10:00:00Z");
    const { fired } = await fire("shape-task", "2026-03-01T10:00:25.5Z");
    expect(fired).toMatchObject([{ schedule: "shape", advanced: true, skipped: false }]);
    expect(await jobsOf("shape-task")).toEqual(
      ["10", "20"].map((s) => ({
        type: "shape-task",
        payload: { to: "ops", scheduledAt: `2026-03-01T10:00:${s}.000Z` },
        runAt: new Date(`2026-03-01T10:00:${s}Z`),
        maxAttempts: 7,
        key: `schedule:shape:2026-03-01T10:00:${s}.000Z`,
        status: "pending",
      })),
    );
    // Fired through 10:00:20: the same instant fires nothing more, the next tick fires once.
    expect((await fire("shape-task", "2026-03-01T10:00:25.9Z")).fired).toEqual([]);
    await fire("shape-task", "2026-03-01T10:00:31Z");
    expect(await ticksOf("shape-task")).toEqual(["2026-03-01T10:00:10.000Z", "2026-03-01T10:00:20.000Z", "2026-03-01T10:00:30.000Z"]);
  });

  it("fires only the schedules of the tasks asked for", async () => {
    await upsertSchedule(db.pool, { name: "mine", task: "mine-task", cron: "* * * * * *" });
    await upsertSchedule(db.pool, { name: "theirs", task: "theirs-task", cron: "* * * * * *" });
    await setLastTick("mine", "2026-03-01T10:00:00Z");
    await setLastTick("theirs", "2026-03-01T10:00:00Z");
    const { fired } = await fire("mine-task", "2026-03-01T10:00:01.5Z");
    expect(fired.map((f) => f.schedule)).toEqual(["mine"]);
    expect(await jobsOf("theirs-task")).toEqual([]);
  });

  // Hourly, done through 01:00; the workers come back at 06:00:30 with a 10 s grace: 02:00 to
  // 06:00 were missed (five ticks). Then 07:00 is seen on time.
  it.each([
    ["skip", "skip", [], "skipped"],
    ["latest", "latest", ["06"], "skipped"],
    ["catchup3", { catchUp: 3 }, ["04", "05", "06"], "skipped"],
    ["catchup9", { catchUp: 9 }, ["02", "03", "04", "05", "06"], "all run"],
  ] as const)("after downtime, %s runs the newest missed ticks it keeps, once, then goes on", async (name, missed, hours, skipped) => {
    const task = `down-${name}`;
    await upsertSchedule(db.pool, { name: task, task, cron: "0 * * * *", missed });
    await setLastTick(task, "2026-03-01T01:00:00Z");
    const { fired } = await fire(task, "2026-03-01T06:00:30Z");
    expect(fired).toMatchObject([{ advanced: true, skipped: skipped === "skipped" }]);
    expect(await ticksOf(task)).toEqual(hours.map((h) => `2026-03-01T${h}:00:00.000Z`));
    const row = (await listSchedules(db.pool, { names: [task] }))[0]!;
    expect(row.lastTick.toISOString()).toBe("2026-03-01T06:00:00.000Z");
    // Restarting again changes nothing; the next tick runs on time whatever the policy.
    await fire(task, "2026-03-01T06:00:45Z");
    await fire(task, "2026-03-01T07:00:02Z");
    expect(await ticksOf(task)).toEqual([...hours, "07"].map((h) => `2026-03-01T${h}:00:00.000Z`));
  });

  it("counts a tick as on time within the grace and as missed past it", async () => {
    await upsertSchedule(db.pool, { name: "grace", task: "grace-task", cron: "0 * * * *", missed: "skip" });
    await setLastTick("grace", "2026-03-01T01:00:00Z");
    await fire("grace-task", "2026-03-01T02:00:09.999Z");
    await fire("grace-task", "2026-03-01T03:00:10.001Z");
    expect(await ticksOf("grace-task")).toEqual(["2026-03-01T02:00:00.000Z"]);
  });

  it("reads a pattern in its time zone", async () => {
    await upsertSchedule(db.pool, { name: "tz", task: "tz-task", cron: "0 9 * * *", timezone: "Asia/Tokyo" });
    await setLastTick("tz", "2026-03-01T00:00:00Z");
    await fire("tz-task", "2026-03-02T00:00:05Z");
    // 09:00 in Tokyo is 00:00 UTC.
    expect(await ticksOf("tz-task")).toEqual(["2026-03-01T00:00:00.000Z".replace("01T", "02T")]);
  });

  it("reads a pattern without a zone in UTC, whatever the worker's own zone", async () => {
    const zone = process.env.TZ;
    process.env.TZ = "Asia/Kathmandu";
    try {
      await upsertSchedule(db.pool, { name: "utc", task: "utc-task", cron: "0 7 * * *" });
      await setLastTick("utc", "2026-03-01T00:00:00Z");
      await fire("utc-task", "2026-03-01T07:00:05Z");
    } finally {
      if (zone === undefined) delete process.env.TZ;
      else process.env.TZ = zone;
    }
    expect(await ticksOf("utc-task")).toEqual(["2026-03-01T07:00:00.000Z"]);
  });

  it("leaves a tick to a live job that already holds its key, and goes on", async () => {
    await upsertSchedule(db.pool, { name: "held", task: "held-task", cron: "* * * * * *" });
    await setLastTick("held", "2026-03-01T10:00:00Z");
    await db.pool.query("INSERT INTO picket.jobs (type, key) VALUES ('held-task', 'schedule:held:2026-03-01T10:00:01.000Z')");
    const { fired, failed } = await fire("held-task", "2026-03-01T10:00:02.5Z");
    expect(failed).toEqual([]);
    expect(fired).toMatchObject([{ advanced: true, ticks: [new Date("2026-03-01T10:00:01Z"), new Date("2026-03-01T10:00:02Z")] }]);
    expect((await jobsOf("held-task")).map((j) => j.key).sort()).toEqual(["schedule:held:2026-03-01T10:00:01.000Z", "schedule:held:2026-03-01T10:00:02.000Z"]);
  });

  it("reports a row it cannot read and fires the others", async () => {
    await upsertSchedule(db.pool, { name: "broken", task: "mixed-task", cron: "* * * * * *" });
    await upsertSchedule(db.pool, { name: "fine", task: "mixed-task", cron: "* * * * * *" });
    await db.pool.query("UPDATE picket.schedules SET cron = 'nonsense', last_tick = '2026-03-01T10:00:00Z' WHERE name = 'broken'");
    await setLastTick("fine", "2026-03-01T10:00:00Z");
    const { fired, failed } = await fire("mixed-task", "2026-03-01T10:00:01.5Z");
    expect(fired.map((f) => f.schedule)).toEqual(["fine"]);
    expect(failed.map((f) => f.schedule)).toEqual(["broken"]);
    expect((await listSchedules(db.pool, { names: ["broken"] }))[0]!.nextRun).toBeNull();
  });
});

describe("one job per tick", () => {
  const options = (task: string, at: string) => ({ tasks: [{ name: task, maxAttempts: 5 }], graceMs: 10_000, at: new Date(at) });

  it("a worker that read the schedule before another fired it makes nothing, even after that tick's job finished", async () => {
    await upsertSchedule(db.pool, { name: "race", task: "race-task", cron: "* * * * * *" });
    await setLastTick("race", "2026-03-01T10:00:00Z");
    // Two workers read the row in the same instant; the first fires and its job completes at once.
    const [a, b] = await Promise.all([dueSchedules(db.pool, options("race-task", "2026-03-01T10:00:01.2Z")), dueSchedules(db.pool, options("race-task", "2026-03-01T10:00:01.3Z"))]);
    const first = await fireSchedule(db.pool, a.due[0]!, 5);
    expect(first).toMatchObject({ advanced: true, jobs: [expect.any(String)] });
    await db.pool.query("UPDATE picket.jobs SET status = 'completed', finished_at = now() WHERE type = 'race-task'");
    const second = await fireSchedule(db.pool, b.due[0]!, 5);
    expect(second).toMatchObject({ advanced: false, jobs: [] });
    expect(await ticksOf("race-task")).toEqual(["2026-03-01T10:00:01.000Z"]);
  });

  it("of many workers firing the same plan at once, exactly one advances the schedule", async () => {
    await upsertSchedule(db.pool, { name: "herd", task: "herd-task", cron: "* * * * * *" });
    await setLastTick("herd", "2026-03-01T10:00:00Z");
    const { due } = await dueSchedules(db.pool, options("herd-task", "2026-03-01T10:00:03.5Z"));
    const clients = await Promise.all(Array.from({ length: 8 }, () => db.connect()));
    const results = await Promise.all(clients.map((client) => fireSchedule(client, due[0]!, 5)));
    expect(results.filter((r) => r.advanced)).toHaveLength(1);
    expect(await ticksOf("herd-task")).toEqual(["01", "02", "03"].map((s) => `2026-03-01T10:00:${s}.000Z`));
  });
});
