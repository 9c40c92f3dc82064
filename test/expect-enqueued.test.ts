// picket/testing's expectEnqueued at its edges: the options it refuses, the statuses and schema it
// reads, and every shape of its failure message (one job, many, none of the type, none at all).
// test/testing-kit.test.ts holds its ordinary use.
import { AssertionError } from "node:assert";
import { beforeEach, describe, expect, it } from "vitest";
import { enqueueJobs, InvalidConfigError, migrate } from "../src/db/index.ts";
import { expectEnqueued, matchesPartially } from "../src/testing/expect-enqueued.ts";
import { useTestDatabase } from "./support/db.ts";
import { rejectionOf } from "./support/errors.ts";

const db = useTestDatabase();

beforeEach(async () => {
  await db.pool.query("DELETE FROM picket.jobs");
});

/** The message expectEnqueued fails with. */
const failureOf = async (options: Parameters<typeof expectEnqueued>[1]) => {
  const error = await rejectionOf(expectEnqueued(db.pool, options));
  expect(error).toBeInstanceOf(AssertionError);
  return (error as AssertionError).message;
};

describe("expectEnqueued refuses", () => {
  it("a missing or empty task name, and a count that is no integer ≥ 0, saying what to give", async () => {
    for (const type of [undefined, "", 7]) {
      const error = await rejectionOf(expectEnqueued(db.pool, { type } as never));
      expect(error).toBeInstanceOf(InvalidConfigError);
      expect((error as Error).message).toBe('picket/testing: expectEnqueued needs the task name: expectEnqueued(db, { type: "send-email", payload: { to: "a@b.c" } }).');
    }
    for (const count of [-1, 1.5, Number.NaN]) {
      const error = await rejectionOf(expectEnqueued(db.pool, { type: "t", count }));
      expect(error).toBeInstanceOf(InvalidConfigError);
      expect((error as Error).message).toBe(`picket/testing: expectEnqueued's count must be an integer ≥ 0 (got ${String(count)}).`);
    }
    // 0 is a count: "none of these".
    expect(await expectEnqueued(db.pool, { type: "t", count: 0 })).toEqual([]);
  });
});

describe("expectEnqueued reads", () => {
  it("pending jobs by default, every status with 'any', the statuses listed, and says which in its message", async () => {
    const [dead] = await enqueueJobs(db.pool, [{ type: "st" }, { type: "st" }]);
    await db.pool.query("UPDATE picket.jobs SET status = 'dead', finished_at = now() WHERE id = $1", [dead!.id]);
    expect(await expectEnqueued(db.pool, { type: "st", count: 1 })).toHaveLength(1);
    expect(await expectEnqueued(db.pool, { type: "st", status: "any", count: 2 })).toHaveLength(2);
    expect((await expectEnqueued(db.pool, { type: "st", status: ["dead", "completed"], count: 1 }))[0]!.id).toBe(dead!.id);
    expect(await failureOf({ type: "st", status: "any", count: 3 })).toMatch(/^expected 3 jobs of type "st" in status any; found 2\.\nJobs of type "st" in status any \(2\):/);
    expect(await failureOf({ type: "st", status: ["dead", "completed"], count: 2 })).toMatch(/^expected 2 jobs of type "st" in status dead or completed; found 1\./);
  });

  it("the schema it is given, and only that one", async () => {
    await migrate(db.pool, { schema: "kit_elsewhere" });
    await enqueueJobs(db.pool, [{ type: "there" }], { schema: "kit_elsewhere" });
    expect(await expectEnqueued(db.pool, { type: "there", schema: "kit_elsewhere", count: 1 })).toHaveLength(1);
    expect(await expectEnqueued(db.pool, { type: "there", count: 0 })).toEqual([]);
  });
});

describe("expectEnqueued's failure", () => {
  it("says 'job' for one, lists at most 20 jobs of the type and counts the rest", async () => {
    await enqueueJobs(db.pool, Array.from({ length: 23 }, (_, i) => ({ type: "many", payload: { i } })));
    const message = await failureOf({ type: "many", count: 1 });
    expect(message.split("\n")[0]).toBe('expected 1 job of type "many" in status pending; found 23.');
    expect(message.split("\n").filter((line) => /^ {2}#\d+ many pending payload/.test(line))).toHaveLength(20);
    expect(message.split("\n").at(-1)).toBe("  … and 3 more");
  });

  it("with no job of the type: lists up to 20 of the others, any type and status, and says there are more", async () => {
    await enqueueJobs(db.pool, Array.from({ length: 21 }, (_, i) => ({ type: `other-${i}` })));
    const lines = (await failureOf({ type: "absent" })).split("\n");
    expect(lines[0]).toBe('expected at least one job of type "absent" in status pending; found 0.');
    expect(lines[1]).toBe("No job of that type; the jobs there are (any type, any status):");
    expect(lines.filter((line) => /^ {2}#\d+ other-\d+ pending payload \{\}$/.test(line))).toHaveLength(20);
    expect(lines.at(-1)).toBe("  … and more");
  });

  it("with no job at all: says so", async () => {
    expect(await failureOf({ type: "absent", payload: { a: 1 } })).toBe(
      'expected at least one job of type "absent" with a payload matching {"a":1} in status pending; found 0.\nNo job of any type was enqueued.',
    );
  });
});

describe("matchesPartially", () => {
  it("needs every element and every given field to match, and an object where an object is expected", () => {
    expect(matchesPartially([1, 2], [1, 3])).toBe(false);
    expect(matchesPartially({ a: 1, b: 2 }, { a: 1, b: 3 })).toBe(false);
    expect(matchesPartially("x", {})).toBe(false);
    expect(matchesPartially([], {})).toBe(false);
    expect(matchesPartially(null, null)).toBe(true);
    expect(matchesPartially({ a: null }, { a: null })).toBe(true);
  });
});
