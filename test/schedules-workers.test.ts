// Schedules run by real supervisors: three workers, each stopped and started again several times,
// make exactly one job per tick of a per-second schedule, none missing while a worker was up; and
// a worker that comes back after downtime applies each schedule's missed policy.
import { describe, expect, it } from "vitest";
import { enqueueJob, listSchedules, syncTaskSchedules, upsertSchedule } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { interceptedPool, useTestDatabase } from "./support/db.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

const dbNow = async (): Promise<Date> => (await db.pool.query("SELECT now() AS now")).rows[0].now;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("schedules under supervisors", () => {
  it("three workers restarted again and again make exactly one job per tick, none missing", { timeout: 90_000 }, async () => {
    const ran: string[] = [];
    const task = defineTask({
      name: "every-second",
      schedule: "* * * * * *",
      handler: async (payload: { scheduledAt: string }) => void ran.push(payload.scheduledAt),
    });
    // Rounds every 20 ms: the three workers read each tick's row within milliseconds of each other
    // and race to fire it, which is what the compare-and-set must settle (without it, this test
    // sees ticks with two jobs).
    const options = { connectionString: db.url, tasks: [task], schedules: { intervalMs: 20, graceMs: 30_000 }, drainTimeoutMs: 2_000 };
    const fired = new Map<string, Set<string>>();
    const start = async (id: string) => {
      const worker = await startWorker({ ...options, workerId: id });
      return { ...worker, id };
    };
    const collect = (id: string, logs: Array<{ msg: string; ticks?: unknown }>) => {
      for (const line of logs) if (line.msg === "schedule fired") for (const tick of line.ticks as string[]) fired.set(tick, (fired.get(tick) ?? new Set()).add(id));
    };
    // Each worker runs 6 s, is down 1.5 s, and starts again, three times; their cycles are offset
    // by 2.5 s, so from the start to the end at least one of them is up (mostly two).
    let endAt: Date | undefined;
    const cycle = async (n: number) => {
      await sleep(n * 2_500);
      for (let round = 0; round < 3; round++) {
        const { supervisor, logs, id } = await start(`w${n}-${round}`);
        await sleep(6_000);
        if (n === 2 && round === 2) endAt = await dbNow();
        await supervisor.stop();
        collect(id, logs);
        await sleep(1_500);
      }
    };
    const running = Promise.all([0, 1, 2].map(cycle));
    // The schedule is written by the first worker's first scheduler round.
    await expect.poll(async () => (await listSchedules(db.pool, { names: ["every-second"] })).length, { timeout: 5_000 }).toBe(1);
    const created = (await listSchedules(db.pool, { names: ["every-second"] }))[0]!.lastTick;
    await running;
    // Ticks up to 2 s before the last worker began to stop were all due while a worker was up.
    const lastTick = new Date(Math.floor(endAt!.getTime() / 1_000) * 1_000 - 2_000).toISOString();

    const { rows } = await db.pool.query<{ tick: string; jobs: number }>(
      `SELECT payload->>'scheduledAt' AS tick, count(*)::int AS jobs FROM picket.jobs WHERE type = 'every-second' GROUP BY 1 ORDER BY 1`,
    );
    // Exactly one job per tick: no tick twice, whoever fired it.
    expect(rows.filter((r) => r.jobs !== 1)).toEqual([]);
    // None missing: every second from the first tick to the last has its job. The first job's
    // tick is no later than the one after the schedule's last tick as the test first read it
    // (read after the schedule appeared, that may already be a tick the workers fired).
    const first = Date.parse(rows[0]!.tick);
    expect(first).toBeLessThanOrEqual(Math.floor(created.getTime() / 1_000) * 1_000 + 1_000);
    const expected: string[] = [];
    for (let t = first; t <= Date.parse(lastTick); t += 1_000) expected.push(new Date(t).toISOString());
    expect(rows.filter((r) => r.tick <= lastTick).map((r) => r.tick)).toEqual(expected);
    expect(expected.length).toBeGreaterThan(20);
    // The ticks were fired by different workers (they raced for them), and they ran as jobs.
    expect(new Set([...fired.values()].flatMap((ids) => [...ids])).size).toBeGreaterThan(2);
    expect([...fired.values()].filter((ids) => ids.size > 1)).toEqual([]);
    expect(new Set(ran).size).toBeGreaterThan(expected.length - 5);
  });

  it("after downtime, a worker applies each schedule's missed policy, once, and the jobs run", { timeout: 30_000 }, async () => {
    const ran: Array<{ task: string; tick: string }> = [];
    const hourly = (name: string, missed: "skip" | "latest" | { catchUp: number }) =>
      defineTask({ name, schedule: { cron: "0 * * * *", missed, payload: { policy: name } }, handler: async (p: { scheduledAt: string; policy: string }) => void ran.push({ task: p.policy, tick: p.scheduledAt }) });
    const tasks = [hourly("down-skip", "skip"), hourly("down-latest", "latest"), hourly("down-catchup", { catchUp: 3 })];
    // The schedules as a worker writes them, done through 01:00; the workers come back at 06:00:30.
    await syncTaskSchedules(db.pool, tasks.map((t) => ({ name: t.name, schedule: t.schedule })));
    await db.pool.query("UPDATE picket.schedules SET last_tick = '2026-03-01T01:00:00Z' WHERE task LIKE 'down-%'");
    const now = () => new Date("2026-03-01T06:00:30Z");
    const workers = await Promise.all([1, 2].map(() => startWorker({ connectionString: db.url, tasks, schedules: { intervalMs: 100, now } })));
    await expect.poll(() => ran.length, { timeout: 15_000 }).toBe(4);
    // Several more rounds of both workers at the same instant make nothing more.
    await sleep(1_000);
    await Promise.all(workers.map((w) => w.supervisor.stop()));
    const hours = (task: string) => ran.filter((r) => r.task === task).map((r) => r.tick.slice(11, 13)).sort();
    expect(hours("down-skip")).toEqual([]);
    expect(hours("down-latest")).toEqual(["06"]);
    expect(hours("down-catchup")).toEqual(["04", "05", "06"]);
    const schedules = await listSchedules(db.pool, { names: tasks.map((t) => t.name) });
    expect(schedules.map((s) => s.lastTick.toISOString())).toEqual(Array(3).fill("2026-03-01T06:00:00.000Z"));
    const logs = workers.flatMap((w) => w.logs);
    expect(logs.filter((l) => l.msg.startsWith("schedule missed ticks")).map((l) => l.schedule).sort()).toEqual(["down-catchup", "down-latest", "down-skip"]);
  });

  it("a draining worker fires no more ticks", { timeout: 30_000 }, async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const task = defineTask({ name: "drain-tick", schedule: "* * * * * *", handler: () => held });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], schedules: { intervalMs: 20 }, drainTimeoutMs: 20_000 });
    const count = async () => (await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'drain-tick'")).rows[0].n as number;
    await expect.poll(count, { timeout: 5_000 }).toBeGreaterThan(0);
    // The drain waits for the held handler; meanwhile two ticks pass and make nothing.
    const stopped = supervisor.stop();
    const atStop = await count();
    await sleep(2_500);
    expect(await count()).toBe(atStop);
    release();
    await stopped;
  });

  it("a scheduler that fails is logged and tried again; the worker claims and runs jobs all along", { timeout: 30_000 }, async () => {
    // Every read of the schedules fails, and one schedule's row cannot be read either.
    const { pool, end } = interceptedPool(db.url, (statement, forward) =>
      /schedules WHERE task = ANY/.test(statement.text) && failing ? Promise.reject(new Error("refused by test")) : forward(),
    );
    let failing = true;
    try {
      const task = defineTask({ name: "still-runs", handler: async () => "ran" });
      await upsertSchedule(db.pool, { name: "unreadable", task: "still-runs", cron: "* * * * * *" });
      await db.pool.query("UPDATE picket.schedules SET cron = 'nonsense' WHERE name = 'unreadable'");
      const { supervisor, outcomes, logs } = await startWorker({ pool, tasks: [task], schedules: { intervalMs: 50 } });
      await expect.poll(() => logs.filter((l) => l.msg === "scheduler failed; it will run again").length, { timeout: 5_000 }).toBeGreaterThan(2);
      const job = await enqueueJob(db.pool, { type: "still-runs" });
      await expect.poll(() => outcomes.find((o) => o.id === job.id)?.outcome, { timeout: 5_000 }).toBe("completed");
      failing = false;
      await expect.poll(() => logs.filter((l) => l.msg === "schedule could not be fired; trying again next round" && l.schedule === "unreadable").length, { timeout: 5_000 }).toBeGreaterThan(0);
      const second = await enqueueJob(db.pool, { type: "still-runs" });
      await expect.poll(() => outcomes.find((o) => o.id === second.id)?.outcome, { timeout: 5_000 }).toBe("completed");
      await supervisor.stop();
    } finally {
      await end();
    }
  });
});
