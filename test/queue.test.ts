import { Schema } from "effect";
import { describe, expect, it } from "vitest";
import { InvalidConfigError, InvalidJobError } from "../src/db/index.ts";
import { createQueue } from "../src/runtime/queue.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";

const db = useTestDatabase();

const Email = Schema.Struct({ to: Schema.String });
const withEffectSchema = defineTask({ name: "email", schema: Email, maxAttempts: 9, handler: async () => "sent" });

describe("enqueue through tasks", () => {
  it("checks the payload against an Effect Schema before writing, and applies the task's max attempts", async () => {
    const queue = createQueue({ pool: db.pool, tasks: [withEffectSchema] });
    const job = await queue.enqueue(withEffectSchema, { to: "a@example.com" });
    expect(await row(db.pool, job.id)).toMatchObject({ type: "email", max_attempts: 9 });
    const bad = queue.enqueue("email", { to: 42 });
    await expect(bad).rejects.toThrow(InvalidJobError);
    await expect(bad).rejects.toThrow(/payload does not match the task's schema: .*Expected string/s);
    const { rows } = await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'email'");
    expect(rows[0].n).toBe(1);
  });

  it("enqueues many in one call, inside the caller's transaction", async () => {
    // "untyped" is defined elsewhere: allowUnknown lets the queue enqueue it (test/unknown-tasks.test.ts).
    const queue = createQueue({ pool: db.pool, tasks: [withEffectSchema], allowUnknown: true });
    const client = await db.connect();
    await client.query("BEGIN");
    const jobs = await queue.enqueueMany([{ task: "email", payload: { to: "x@example.com" } }, { task: "untyped", payload: [1] }], { client });
    await client.query("ROLLBACK");
    expect(jobs).toHaveLength(2);
    for (const job of jobs) expect(await row(db.pool, job.id)).toBeUndefined();
  });
});

describe("task definitions are checked once, at definition", () => {
  const cases: Array<[string, object, RegExp]> = [
    ["no handler", { name: "t" }, /needs a handler/],
    ["a bad name", { name: "has space", handler: () => 1 }, /may contain only letters/],
    ["a zero timeout", { name: "t", handler: () => 1, timeoutMs: 0 }, /timeoutMs must be an integer from 1/],
    ["a tiny lease", { name: "t", handler: () => 1, leaseMs: 10 }, /leaseMs must be an integer from 100/],
    ["a ceiling below the base", { name: "t", handler: () => 1, backoff: { baseMs: 10, maxMs: 5 } }, /backoff.maxMs \(5\) is below backoff.baseMs \(10\)/],
    ["a schema that is not one", { name: "t", handler: () => 1, schema: { parse: () => 1 } }, /schema must be an Effect Schema or a Standard Schema/],
  ];
  for (const [name, definition, message] of cases) {
    it(name, () => {
      expect(() => defineTask(definition as never)).toThrow(InvalidConfigError);
      expect(() => defineTask(definition as never)).toThrow(message);
    });
  }
});
