// The slow claim's own checks and arguments (src/db/claim-limited.ts), each by what a caller sees:
// the message for a bad limit, queue name or token count, no round trip when nothing is wanted,
// and the per-task limit and the total each bounding what one claim takes. Found by Stryker from
// a fresh clone (issue 28, item 20): 32 of the module's mutants survived the suite.
import { describe, expect, it } from "vitest";
import { checkQueueName, checkTaskLimits, claimLimited, drawClaimTokens, enqueueJobs, InvalidConfigError, type LimitedClaimWant, type Queryable } from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { want } from "./support/factory.ts";

const db = useTestDatabase();

const limited = (type: string, overrides: Partial<LimitedClaimWant> = {}): LimitedClaimWant => ({ ...want(type, { limit: 10 }), clusterConcurrency: 100, ...overrides });

/** A database that must not be asked anything. */
const untouched: Queryable = {
  query: () => {
    throw new Error("the claim made a round trip");
  },
} as unknown as Queryable;

describe("a task's limits", () => {
  it("accept integers from 1 to 2147483647", () => {
    expect(() => checkTaskLimits("t", { clusterConcurrency: 1, rateLimit: { max: 1, windowMs: 2_147_483_647 } })).not.toThrow();
    expect(() => checkTaskLimits("t", {})).not.toThrow();
  });

  it.each([
    [{ clusterConcurrency: 0 }, 'picket: task "t": clusterConcurrency must be an integer from 1 to 2147483647 (got 0).'],
    [{ clusterConcurrency: 2_147_483_648 }, 'picket: task "t": clusterConcurrency must be an integer from 1 to 2147483647 (got 2147483648).'],
    [{ clusterConcurrency: 1.5 }, 'picket: task "t": clusterConcurrency must be an integer from 1 to 2147483647 (got 1.5).'],
    [{ clusterConcurrency: "3" }, 'picket: task "t": clusterConcurrency must be an integer from 1 to 2147483647 (got 3).'],
    [{ rateLimit: null }, 'picket: task "t": rateLimit must be { max, windowMs }, e.g. { max: 10, windowMs: 1000 } (got null).'],
    [{ rateLimit: 5 }, 'picket: task "t": rateLimit must be { max, windowMs }, e.g. { max: 10, windowMs: 1000 } (got 5).'],
    [{ rateLimit: { max: 0, windowMs: 1_000 } }, 'picket: task "t": rateLimit.max must be an integer from 1 to 2147483647 (got 0).'],
    [{ rateLimit: { max: 1, windowMs: 0 } }, 'picket: task "t": rateLimit.windowMs must be an integer from 1 to 2147483647 (got 0).'],
  ])("refuse %j, saying which and what is allowed", (limits, message) => {
    expect(() => checkTaskLimits("t", limits as never)).toThrow(new InvalidConfigError(message));
  });
});

describe("a queue's name in a worker's settings", () => {
  it("is 1 to 128 characters", () => {
    expect(checkQueueName("q", "queues")).toBe("q");
    expect(checkQueueName("q".repeat(128), "queues")).toBe("q".repeat(128));
    for (const bad of ["", "q".repeat(129), 7]) {
      expect(() => checkQueueName(bad, "queues")).toThrow(
        new InvalidConfigError(`picket: queues: a queue name must be a string of 1 to 128 characters (got ${JSON.stringify(bad)}).`),
      );
    }
  });

  it("is one PostgreSQL stores as written", () => {
    expect(() => checkQueueName("q\ud800", "queues")).toThrow(/^picket: queues: the queue name "q\\ud800" /);
  });
});

describe("claimLimited's arguments", () => {
  const tokens = drawClaimTokens(10);

  it("makes no round trip when nothing is wanted or the total is 0", async () => {
    expect(await claimLimited(untouched, "w", [], { tokens })).toEqual([]);
    expect(await claimLimited(untouched, "w", [limited("cl.none")], { total: 0, tokens })).toEqual([]);
    expect(await claimLimited(untouched, "w", [limited("cl.none", { limit: 0 })], { tokens })).toEqual([]);
  });

  it("refuses a bad want, a bad queue setting and too few tokens before asking the database", async () => {
    await expect(claimLimited(untouched, "w", [limited("cl.bad", { leaseMs: 0 })], { tokens })).rejects.toThrow(
      'picket: claim for "cl.bad": leaseMs must be an integer from 1 to 2147483647 (got 0).',
    );
    await expect(claimLimited(untouched, "w", [limited("cl.bad", { clusterConcurrency: 0 })], { tokens })).rejects.toThrow(
      'picket: task "cl.bad": clusterConcurrency must be an integer from 1 to 2147483647 (got 0).',
    );
    await expect(claimLimited(untouched, "w", [limited("cl.bad")], { total: 3, tokens: tokens.slice(0, 2) })).rejects.toThrow(
      "picket: a claim of up to 3 jobs needs as many tokens (got 2); draw them with drawClaimTokens(total).",
    );
    await expect(claimLimited(untouched, "w", [limited("cl.bad")], { tokens, queues: { q: { concurrency: 0 } } })).rejects.toThrow(
      'picket: queue "q": concurrency must be an integer from 1 to 2147483647 (got 0).',
    );
    await expect(claimLimited(untouched, "w", [limited("cl.bad")], { tokens, queues: { "": { concurrency: 1 } } })).rejects.toThrow(
      'picket: queues: a queue name must be a string of 1 to 128 characters (got "").',
    );
    await expect(claimLimited(untouched, "w", [limited("cl.bad")], { tokens, defaultQueueConcurrency: 0 })).rejects.toThrow(
      "picket: defaultQueueConcurrency must be an integer from 1 to 2147483647 (got 0).",
    );
  });

  it("takes at most each task's own limit, and at most the total, however many tokens it is given", async () => {
    await enqueueJobs(db.pool, Array.from({ length: 4 }, () => ({ type: "cl.each" })));
    await enqueueJobs(db.pool, Array.from({ length: 4 }, () => ({ type: "cl.other" })));
    // The total leaves room: the task's own limit (1) is what stops it.
    const one = await claimLimited(db.pool, "w", [limited("cl.each", { limit: 1 })], { total: 4, tokens: drawClaimTokens(4) });
    expect(one.map((j) => j.type)).toEqual(["cl.each"]);
    // Limits leave room: the total (2) stops it, whatever the number of tokens.
    const two = await claimLimited(db.pool, "w", [limited("cl.each", { limit: 3 }), limited("cl.other", { limit: 3 })], { total: 2, tokens: drawClaimTokens(6) });
    expect(two).toHaveLength(2);
    const given = new Set(two.map((j) => j.claimToken));
    expect(given.size).toBe(2);
  });
});
