// The supervisor's and a task's configuration: every default, every bound, every message. A wrong
// default (a lease, a drain deadline, a sweep interval) changes how the queue behaves under
// failure, so each one is pinned here rather than left to whichever test happens to pass by it.
import { hostname } from "node:os";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { InvalidConfigError, defineTask } from "../src/index.ts";
import * as Schema from "effect/Schema";
import { resolveConfig } from "../src/runtime/config.ts";
import { isEffectSchema } from "../src/runtime/task.ts";

const noop = defineTask({ name: "noop", handler: async () => undefined });
const base = { tasks: [noop], connectionString: "postgres://localhost/x" };

describe("supervisor options", () => {
  it("has the documented defaults", () => {
    const config = resolveConfig(base);
    expect(config).toEqual({
      schema: "picket",
      // Every statement is cut off after 10 s; named statements unless behind a transaction pooler.
      statementTimeoutMs: 10_000,
      transactionPooling: false,
      workerId: expect.any(String),
      concurrency: 10,
      // Up to 100 jobs claimed ahead, when handlers free slots fast enough.
      prefetch: 100,
      queues: {},
      poolSize: 14,
      pollIntervalMs: 1_000,
      sweepIntervalMs: 5_000,
      heartbeatIntervalMs: 2_000,
      sweepBatchSize: 1_000,
      drainTimeoutMs: 30_000,
      // A quarter of the default 20 s lease: the worker counts a lease lost a fifth of it early,
      // so one renewal may fail, or run late, without interrupting anything.
      renewIntervalMs: 5_000,
      // A completed job's row is deleted at completion.
      keepCompleted: false,
      retention: { olderThanMs: 7 * 86_400_000, intervalMs: 3_600_000, batchSize: 1_000 },
      listen: true,
      // The scheduler looks for due ticks each second; a tick seen more than 10 s late was missed.
      schedules: { intervalMs: 1_000, graceMs: 10_000, now: undefined },
      health: false,
      logPayloads: false,
    });
    expect(config.workerId).toMatch(new RegExp(`^${hostname().replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}-${process.pid}-[0-9a-f]{6}$`));
    expect(resolveConfig(base).workerId).not.toBe(config.workerId);
  });

  it("makes the buffer's default room the concurrency when that is above 100", () => {
    expect(resolveConfig({ ...base, concurrency: 99 }).prefetch).toBe(100);
    expect(resolveConfig({ ...base, concurrency: 250 }).prefetch).toBe(250);
  });

  it("keeps what it is given", () => {
    const config = resolveConfig({
      ...base,
      schema: "jobs_here",
      workerId: "w1",
      concurrency: 3,
      prefetch: 0,
      pollIntervalMs: 10,
      sweepIntervalMs: 10,
      heartbeatIntervalMs: 10,
      sweepBatchSize: 1,
      drainTimeoutMs: 0,
      keepCompleted: true,
      retention: { olderThanMs: 0, intervalMs: 1_000, batchSize: 1 },
      listen: false,
      schedules: false,
      health: { port: 0, host: "127.0.0.1", stalePollMs: 1 },
      logPayloads: true,
      statementTimeoutMs: 1,
      transactionPooling: true,
      queues: { "one-at-a-time": { concurrency: 2 } },
    });
    expect(config).toEqual({
      schema: "jobs_here",
      statementTimeoutMs: 1,
      transactionPooling: true,
      workerId: "w1",
      concurrency: 3,
      prefetch: 0,
      poolSize: 7,
      pollIntervalMs: 10,
      sweepIntervalMs: 10,
      heartbeatIntervalMs: 10,
      sweepBatchSize: 1,
      drainTimeoutMs: 0,
      renewIntervalMs: 5_000,
      keepCompleted: true,
      retention: { olderThanMs: 0, intervalMs: 1_000, batchSize: 1 },
      listen: false,
      schedules: false,
      health: { port: 0, host: "127.0.0.1", stalePollMs: 1 },
      logPayloads: true,
      queues: { "one-at-a-time": { concurrency: 2 } },
    });
  });

  it("sizes its own pool a few connections above the concurrency, at most 20", () => {
    expect(resolveConfig({ ...base, concurrency: 1 }).poolSize).toBe(5);
    expect(resolveConfig({ ...base, concurrency: 16 }).poolSize).toBe(20);
    expect(resolveConfig({ ...base, concurrency: 200 }).poolSize).toBe(20);
  });

  it("renews every quarter of the shortest lease, never more often than every 25 ms", () => {
    const short = defineTask({ name: "short", leaseMs: 900, handler: async () => undefined });
    const long = defineTask({ name: "long", leaseMs: 60_000, handler: async () => undefined });
    expect(resolveConfig({ ...base, tasks: [long, short] }).renewIntervalMs).toBe(225);
    expect(resolveConfig({ ...base, tasks: [short, long] }).renewIntervalMs).toBe(225);
    expect(resolveConfig({ ...base, tasks: [defineTask({ name: "odd", leaseMs: 1_001, handler: async () => undefined })] }).renewIntervalMs).toBe(250);
    const tiny = defineTask({ name: "tiny", leaseMs: 100, handler: async () => undefined });
    expect(resolveConfig({ ...base, tasks: [tiny] }).renewIntervalMs).toBe(25);
  });

  it("fills in the health server's defaults, and the stale-poll threshold from the poll interval", () => {
    expect(resolveConfig({ ...base, health: { port: 8080 } }).health).toEqual({ port: 8080, host: "0.0.0.0", stalePollMs: 30_000 });
    expect(resolveConfig({ ...base, pollIntervalMs: 5_000, health: {} as never }).health).toEqual({ port: 0, host: "0.0.0.0", stalePollMs: 50_000 });
    expect(resolveConfig({ ...base, pollIntervalMs: 2_999, health: { port: 0 } }).health).toMatchObject({ stalePollMs: 30_000 });
    expect(resolveConfig({ ...base, pollIntervalMs: 3_001, health: { port: 0 } }).health).toMatchObject({ stalePollMs: 30_010 });
  });

  it("takes retention settings one by one, and turns retention off with false", () => {
    expect(resolveConfig({ ...base, retention: { olderThanMs: 60_000 } }).retention).toEqual({ olderThanMs: 60_000, intervalMs: 3_600_000, batchSize: 1_000 });
    expect(resolveConfig({ ...base, retention: false }).retention).toBe(false);
  });

  it("takes the scheduler's settings, keeps the grace at least two rounds, and turns it off with false", () => {
    expect(resolveConfig({ ...base, schedules: { intervalMs: 200 } }).schedules).toEqual({ intervalMs: 200, graceMs: 10_000, now: undefined });
    expect(resolveConfig({ ...base, schedules: { intervalMs: 8_000 } }).schedules).toEqual({ intervalMs: 8_000, graceMs: 16_000, now: undefined });
    expect(resolveConfig({ ...base, schedules: { intervalMs: 500, graceMs: 1_000 } }).schedules).toMatchObject({ graceMs: 1_000 });
    expect(resolveConfig({ ...base, schedules: false }).schedules).toBe(false);
  });

  it("accepts a pool instead of a connection string", () => {
    const pool = new pg.Pool();
    expect(resolveConfig({ tasks: [noop], pool }).concurrency).toBe(10);
    void pool.end();
  });

  it("says what is wrong with a missing or doubled task, or a missing database", () => {
    const fails = (options: unknown, message: string) => {
      expect(() => resolveConfig(options as never)).toThrow(InvalidConfigError);
      expect(() => resolveConfig(options as never)).toThrow(message);
    };
    const hint = "picket: give the supervisor at least one task: createSupervisor({ tasks: [defineTask({ name, handler })], ... }).";
    fails(undefined, hint);
    fails({ connectionString: "x" }, hint);
    fails({ tasks: "noop", connectionString: "x" }, hint);
    fails({ tasks: [], connectionString: "x" }, hint);
    fails({ tasks: [noop, noop], connectionString: "x" }, 'picket: task "noop" is defined twice.');
    fails({ tasks: [noop] }, "picket: give the supervisor a connectionString (e.g. process.env.DATABASE_URL) or a pg pool.");
    fails({ tasks: [noop], connectionString: "" }, "a connectionString");
  });

  it.each([
    ["concurrency", 1],
    ["prefetch", 0],
    ["pollIntervalMs", 10],
    ["sweepIntervalMs", 10],
    ["heartbeatIntervalMs", 10],
    ["sweepBatchSize", 1],
    ["drainTimeoutMs", 0],
  ] as const)("bounds %s from %i to 2147483647, integers only, and names the bad value", (name, min) => {
    expect(resolveConfig({ ...base, [name]: min })[name]).toBe(min);
    expect(resolveConfig({ ...base, [name]: 2_147_483_647 })[name]).toBe(2_147_483_647);
    for (const bad of [min - 1, 2_147_483_648, min + 0.5, String(min + 1), Number.NaN]) {
      expect(() => resolveConfig({ ...base, [name]: bad })).toThrow(
        new InvalidConfigError(`picket: ${name} must be an integer ≥ ${min} (got ${String(bad)}).`),
      );
    }
  });

  it("takes keepCompleted as true or false only, and names the bad value", () => {
    for (const bad of ["yes", 1, null]) {
      expect(() => resolveConfig({ ...base, keepCompleted: bad as never })).toThrow(new InvalidConfigError(`picket: keepCompleted must be true or false (got ${String(bad)}).`));
    }
  });

  it.each([
    ["retention.olderThanMs", { retention: { olderThanMs: -1 } }, "-1"],
    ["retention.intervalMs", { retention: { intervalMs: 999 } }, "999"],
    ["retention.batchSize", { retention: { batchSize: 0 } }, "0"],
    ["health.stalePollMs", { health: { stalePollMs: 0 } }, "0"],
    ["schedules.intervalMs", { schedules: { intervalMs: 9 } }, "9"],
    // A tick must be given at least two scheduler rounds before it counts as missed.
    ["schedules.graceMs", { schedules: { intervalMs: 500, graceMs: 999 } }, "999"],
  ] as const)("checks %s", (name, options, got) => {
    expect(() => resolveConfig({ ...base, ...options } as never)).toThrow(new RegExp(`^picket: ${name.replace(".", "\\.")} must be an integer ≥ \\d+ \\(got ${got}\\)\\.$`));
  });

  it("checks health.port is a port number", () => {
    for (const bad of [-1, 65_536, 99_999, 1.5, "8080"]) {
      expect(() => resolveConfig({ ...base, health: { port: bad as number } })).toThrow(
        new InvalidConfigError(`picket: health.port must be a port number from 0 to 65535 (got ${String(bad)}).`),
      );
    }
    expect(resolveConfig({ ...base, health: { port: 65_535 } }).health).toMatchObject({ port: 65_535 });
  });
});

describe("task definitions", () => {
  const handler = async () => undefined;

  it("has the documented defaults", () => {
    expect(defineTask({ name: "t", handler })).toEqual({
      name: "t",
      handler,
      timeoutMs: 60_000,
      maxAttempts: 5,
      backoffBaseMs: 1_000,
      backoffMaxMs: 3_600_000,
      concurrency: 2_147_483_647,
      leaseMs: 20_000,
      schema: undefined,
      isolate: undefined,
      schedule: undefined,
    });
  });

  it("accepts each bound and refuses one past it, naming the task and the value", () => {
    const bounds = [
      ["timeoutMs", 1, 2_147_483_647],
      ["maxAttempts", 1, 1_000_000],
      ["concurrency", 1, 2_147_483_647],
      ["leaseMs", 100, 2_147_483_647],
    ] as const;
    for (const [name, min, max] of bounds) {
      expect(defineTask({ name: "t", handler, [name]: min })[name]).toBe(min);
      expect(defineTask({ name: "t", handler, [name]: max })[name]).toBe(max);
      for (const bad of [min - 1, max + 1, min + 0.5, String(min)]) {
        expect(() => defineTask({ name: "t", handler, [name]: bad } as never)).toThrow(InvalidConfigError);
        expect(() => defineTask({ name: "t", handler, [name]: bad } as never)).toThrow(`picket: task "t": ${name}`);
        expect(() => defineTask({ name: "t", handler, [name]: bad } as never)).toThrow(String(bad));
      }
    }
  });

  it("keeps the backoff ceiling at or above its base", () => {
    expect(defineTask({ name: "t", handler, backoff: { baseMs: 0, maxMs: 0 } })).toMatchObject({ backoffBaseMs: 0, backoffMaxMs: 0 });
    expect(defineTask({ name: "t", handler, backoff: { baseMs: 500, maxMs: 500 } })).toMatchObject({ backoffBaseMs: 500, backoffMaxMs: 500 });
    expect(() => defineTask({ name: "t", handler, backoff: { baseMs: 501, maxMs: 500 } })).toThrow(
      new InvalidConfigError('picket: task "t": backoff.maxMs (500) is below backoff.baseMs (501).'),
    );
    expect(() => defineTask({ name: "t", handler, backoff: { maxMs: 999 } })).toThrow("backoff.maxMs (999) is below backoff.baseMs (1000)");
    expect(() => defineTask({ name: "t", handler, backoff: { maxMs: -1 } })).toThrow(
      new InvalidConfigError('picket: task "t": backoff.maxMs must be an integer from 0 to 2147483647 (got -1).'),
    );
    expect(() => defineTask(undefined as never)).toThrow(new InvalidConfigError("picket: task type must be a non-empty string (got undefined)."));
    expect(() => defineTask({ name: "t", handler, backoff: { baseMs: -1 } })).toThrow('task "t": backoff.baseMs');
  });

  it("tells an Effect Schema as effect/Schema's own isSchema does, without loading it", () => {
    const candidates: unknown[] = [
      Schema.String,
      Schema.Struct({ email: Schema.String, n: Schema.optional(Schema.Number) }),
      Schema.Array(Schema.Number),
      Schema.Literal("a"),
      Schema.toStandardSchemaV1(Schema.String),
      { "~standard": { validate: () => ({ value: 1 }) } },
      {},
      null,
      "~effect/Schema/Schema",
      () => undefined,
    ];
    for (const u of candidates) expect(isEffectSchema(u), String(u)).toBe(Schema.isSchema(u));
    expect(candidates.filter(isEffectSchema).length).toBeGreaterThanOrEqual(4);
  });

  it("says what is missing or wrong in a definition", () => {
    expect(() => defineTask({ name: "t" } as never)).toThrow(
      new InvalidConfigError('picket: task "t" needs a handler (or isolate: { module } naming the module that exports it).'),
    );
    expect(() => defineTask({ name: "t", handler: "run" } as never)).toThrow(
      new InvalidConfigError('picket: task "t": handler must be a function (got string).'),
    );
    expect(() => defineTask({ name: "t", handler, schema: {} } as never)).toThrow(
      new InvalidConfigError('picket: task "t": schema must be an Effect Schema or a Standard Schema validator (zod, valibot, ...).'),
    );
    expect(() => defineTask({ name: "", handler })).toThrow(InvalidConfigError);
    expect(() => defineTask(undefined as never)).toThrow(InvalidConfigError);
    const module = new URL("./x.ts", import.meta.url);
    expect(defineTask({ name: "t", isolate: { module } }).isolate).toEqual({ module });
  });
});
