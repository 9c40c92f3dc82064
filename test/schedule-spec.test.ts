// A schedule's checks and tick arithmetic, called directly: each refusal by its whole message, each
// bound on both sides, and the ticks a plan fires at instants chosen on and around its edges.
import { describe, expect, it } from "vitest";
import {
  catchUpOf,
  checkCron,
  checkSchedule,
  cronOf,
  InvalidConfigError,
  MAX_TICKS_PER_ROUND,
  missedPolicyOf,
  planTicks,
  type ScheduleSpec,
  type TickState,
} from "../src/db/index.ts";
import { refusalOf } from "./support/errors.ts";

const refusal = (fn: () => unknown): string => refusalOf(fn, InvalidConfigError);

const spec = (over: Partial<ScheduleSpec>): ScheduleSpec => ({ name: "nightly", task: "report", cron: "0 3 * * *", ...over });

describe("checkSchedule", () => {
  it("refuses what is not an object", () => {
    for (const bad of [null, "0 3 * * *"]) {
      expect(refusal(() => checkSchedule(bad as unknown as ScheduleSpec))).toBe(
        `picket: schedule: a schedule must be an object like { name: "nightly", task: "report", cron: "0 3 * * *" } (got ${String(bad)}).`,
      );
    }
  });

  it("takes names of 1 to 200 allowed characters and refuses others by the same message", () => {
    const message = (name: unknown) => `picket: schedule: name must be 1 to 200 characters of letters, digits and _ . : / - (got ${JSON.stringify(name)}).`;
    for (const bad of [7, "", "a".repeat(201), "two words"]) expect(refusal(() => checkSchedule(spec({ name: bad as string })))).toBe(message(bad));
    for (const good of ["a", "b".repeat(200), "x_y.z:w/v-u"]) expect(checkSchedule(spec({ name: good })).name).toBe(good);
  });

  it("says which schedule a bad task, pattern or payload belongs to, without a second prefix", () => {
    expect(refusal(() => checkSchedule(spec({ task: "" })))).toMatch(/^picket: schedule "nightly": schedule's task type must be a non-empty string/);
    expect(refusal(() => checkSchedule(spec({ payload: { n: 10n } })))).toBe(
      'picket: schedule "nightly": payload is not JSON-serialisable: payload.n is a bigint (10n); send it as a string.',
    );
  });

  it("refuses a payload that is not an object, naming what it was", () => {
    const message = (got: string) => `picket: schedule "nightly": payload must be a JSON object (picket adds "scheduledAt" to it); got ${got}.`;
    expect(refusal(() => checkSchedule(spec({ payload: "x" as never })))).toBe(message("string"));
    expect(refusal(() => checkSchedule(spec({ payload: [] as never })))).toBe(message("an array"));
    expect(checkSchedule(spec({ payload: null as never })).payloadJson).toBe("{}");
  });

  it("lets an error that is not a bad payload through as it is", () => {
    const boom = new Error("a getter failed");
    const payload = {
      get x() {
        throw boom;
      },
    };
    expect(() => checkSchedule(spec({ payload }))).toThrow(boom);
  });
});

describe("checkCron", () => {
  it("refuses a pattern that is not a string, is blank or is over 200 characters", () => {
    const message = (cron: unknown) =>
      `picket: here: cron must be a pattern like "*/5 * * * *" (five fields, or six with seconds first), at most 200 characters (got ${JSON.stringify(cron)}).`;
    const tooLong = "* * * * *".padEnd(201);
    for (const bad of [5, "   ", tooLong]) expect(refusal(() => checkCron(bad, undefined, "here"))).toBe(message(bad));
    // 200 characters with the padding: trimmed, then read.
    expect(checkCron("* * * * *".padEnd(200), undefined, "here")).toEqual({ cron: "* * * * *", timezone: null });
    expect(checkCron("  */5 * * * *  ", undefined, "here").cron).toBe("*/5 * * * *");
  });

  it("reads no zone (undefined or null) as UTC and refuses a zone that is not a string", () => {
    expect(checkCron("* * * * *", null, "here").timezone).toBeNull();
    expect(checkCron("* * * * *", "Asia/Tokyo", "here").timezone).toBe("Asia/Tokyo");
    const lookalike = { toString: () => "UTC" };
    expect(refusal(() => checkCron("* * * * *", lookalike, "here"))).toBe(
      `picket: here: timezone {} is not a time zone this runtime knows; use an IANA name such as "Europe/Paris" or "America/New_York", or leave it out for UTC.`,
    );
  });

  it("passes croner's reason on without its prefix or its closing dot", () => {
    expect(refusal(() => checkCron("1.5 * * * *", undefined, "here"))).toBe(
      'picket: here: cron pattern "1.5 * * * *" is not valid: configuration entry 1 (1.5) contains illegal characters. ' +
        'Use five fields (minute hour day-of-month month day-of-week), or six with seconds first, e.g. "*/5 * * * *".',
    );
    // Seven fields (croner's year) are refused: picket reads five or six.
    expect(refusal(() => checkCron("* * * * * * *", undefined, "here"))).toMatch(/requires exactly 5 or 6 parts/);
  });
});

describe("the missed-tick policy", () => {
  it("takes catch-up counts from 0 to 1000, integers only", () => {
    expect(catchUpOf({ catchUp: 0 }, "here")).toBe(0);
    expect(catchUpOf({ catchUp: 1000 }, "here")).toBe(1000);
    for (const bad of [-1, 1001, 2.5, "3", null]) {
      expect(refusal(() => catchUpOf({ catchUp: bad }, "here"))).toBe(`picket: here: missed.catchUp must be an integer from 0 to 1000 (got ${JSON.stringify(bad)}).`);
    }
    expect(refusal(() => catchUpOf({}, "here"))).toBe('picket: here: missed must be "skip", "latest" or { catchUp: N } (got {}).');
    expect(refusal(() => catchUpOf(null, "here"))).toBe('picket: here: missed must be "skip", "latest" or { catchUp: N } (got null).');
  });

  it("gives back the policy a stored count stands for", () => {
    expect([0, 1, 2, 1000].map(missedPolicyOf)).toEqual(["skip", "latest", { catchUp: 2 }, { catchUp: 1000 }]);
  });
});

describe("cronOf", () => {
  it("keeps one evaluator per pattern and zone, and reads each pattern in its own zone", () => {
    const utc = cronOf("0 9 * * *", null);
    expect(cronOf("0 9 * * *", null)).toBe(utc);
    const tokyo = cronOf("0 9 * * *", "Asia/Tokyo");
    expect(tokyo).not.toBe(utc);
    const from = new Date("2026-03-01T12:00:00Z");
    expect(utc.nextRun(from)?.toISOString()).toBe("2026-03-02T09:00:00.000Z");
    expect(tokyo.nextRun(from)?.toISOString()).toBe("2026-03-02T00:00:00.000Z");
    expect(cronOf("30 9 * * *", null).nextRun(from)?.toISOString()).toBe("2026-03-02T09:30:00.000Z");
    // Two zones of one pattern are two evaluators, and making another keeps the first.
    expect(cronOf("0 9 * * *", "Europe/Paris").nextRun(from)?.toISOString()).toBe("2026-03-02T08:00:00.000Z");
    expect(cronOf("0 9 * * *", "Asia/Tokyo")).toBe(tokyo);
    expect(cronOf("0 9 * * *", null)).toBe(utc);
  });

  it("reads a pattern without a zone in UTC whatever the process's own zone", () => {
    const zone = process.env.TZ;
    process.env.TZ = "Asia/Kathmandu";
    try {
      expect(cronOf("17 9 * * *", null).nextRun(new Date("2026-03-01T12:00:00Z"))?.toISOString()).toBe("2026-03-02T09:17:00.000Z");
    } finally {
      if (zone === undefined) delete process.env.TZ;
      else process.env.TZ = zone;
    }
  });

  it("forgets its evaluators once it holds more than 10,000, so a stream of new patterns cannot grow it without end", () => {
    const first = cronOf("1 2 3 4 5", null);
    for (let i = 0; i < 10_002; i++) cronOf(`${i % 60} ${Math.floor(i / 60) % 60} ${Math.floor(i / 3600)} * * *`, null);
    expect(cronOf("1 2 3 4 5", null)).not.toBe(first);
    // 10,002 patterns parsed: seconds on a loaded machine.
  }, 60_000);
});

describe("planTicks", () => {
  const every10s = (lastTick: string, catchUp = 1): TickState => ({ cron: "*/10 * * * * *", timezone: null, catchUp, lastTick: new Date(lastTick) });
  const iso = (plan: ReturnType<typeof planTicks>) => plan && { fire: plan.fire.map((t) => t.toISOString()), through: plan.through.toISOString(), skipped: plan.skipped };

  it("fires a tick that falls on now, and nothing when no tick is due", () => {
    expect(iso(planTicks(every10s("2026-03-01T10:00:00Z"), new Date("2026-03-01T10:00:20Z"), 60_000))).toEqual({
      fire: ["2026-03-01T10:00:10.000Z", "2026-03-01T10:00:20.000Z"],
      through: "2026-03-01T10:00:20.000Z",
      skipped: false,
    });
    expect(planTicks(every10s("2026-03-01T10:00:20Z"), new Date("2026-03-01T10:00:29.999Z"), 60_000)).toBeNull();
  });

  it("counts a tick on the grace boundary as missed, and keeps the newest the policy allows", () => {
    // Boundary 10:00:30: the tick on it is the newest missed one; 10:00:10 and :20 are dropped.
    expect(iso(planTicks(every10s("2026-03-01T10:00:00Z"), new Date("2026-03-01T10:00:35Z"), 5_000))).toEqual({
      fire: ["2026-03-01T10:00:30.000Z"],
      through: "2026-03-01T10:00:30.000Z",
      skipped: true,
    });
  });

  it("fires at most MAX_TICKS_PER_ROUND on-time ticks in one round", () => {
    const plan = planTicks(
      { cron: "* * * * * *", timezone: null, catchUp: 1, lastTick: new Date("2026-03-01T10:00:00Z") },
      new Date("2026-03-01T11:00:00Z"),
      24 * 3_600_000,
    )!;
    expect(plan.fire).toHaveLength(MAX_TICKS_PER_ROUND);
    expect(plan.through.toISOString()).toBe(new Date(Date.parse("2026-03-01T10:00:00Z") + MAX_TICKS_PER_ROUND * 1000).toISOString());
  });
});
