// Bulk actions over a filter (src/db/bulk.ts): the count an operator confirms, then the action on at
// most that many, in batches, each job's history recording it; keys that block a retry; refusals.
// Each test works in a schema of its own.
import { describe, expect, it } from "vitest";
import { applyBulk, countBulk, InvalidJobError, type BulkFilter } from "../src/db/index.ts";
import { schemasFor, useTestDatabase } from "./support/db.ts";
import { rejectionOf } from "./support/errors.ts";

const db = useTestDatabase();

const freshSchema = schemasFor(db, "bulk");
const statuses = async (schema: string) =>
  Object.fromEntries((await db.pool.query(`SELECT type || ' ' || status AS k, count(*)::int AS n FROM ${schema}.jobs GROUP BY 1 ORDER BY 1`)).rows.map((r) => [r.k, r.n]));

describe("a bulk action", () => {
  it("retries every dead job of a task in batches, each job's history naming who asked, and leaves other tasks' alone", async () => {
    const schema = await freshSchema();
    await db.pool.query(`INSERT INTO ${schema}.jobs (type, status, attempts, finished_at) SELECT 'mailer', 'dead', 3, now() - g * interval '1 second' FROM generate_series(1, 1200) AS g`);
    await db.pool.query(`INSERT INTO ${schema}.jobs (type, status, attempts, finished_at) SELECT 'billing', 'dead', 3, now() FROM generate_series(1, 5)`);
    const filter: BulkFilter = { state: "dead", task: "mailer" };
    expect(await countBulk(db.pool, "retry", filter, { schema })).toBe(1200);
    expect(await applyBulk(db.pool, "retry", filter, { schema, expected: 1200, by: "oncall", batchSize: 500 })).toEqual({ applied: 1200, skipped: 0, batches: 3 });
    expect(await statuses(schema)).toEqual({ "billing dead": 5, "mailer pending": 1200 });
    const { rows } = await db.pool.query(`SELECT DISTINCT attempts, prior_attempts, errors -> -1 ->> 'operator' AS op, errors -> -1 ->> 'by' AS by FROM ${schema}.jobs WHERE type = 'mailer'`);
    expect(rows).toEqual([{ attempts: 0, prior_attempts: 3, op: "retry", by: "oncall" }]);
    expect(await countBulk(db.pool, "retry", filter, { schema })).toBe(0);
  });

  it("takes at most the count confirmed, oldest first, though more jobs came to match since", async () => {
    const schema = await freshSchema();
    await db.pool.query(`INSERT INTO ${schema}.jobs (type, status, finished_at) SELECT 't', 'dead', timestamptz '2026-01-01' + g * interval '1 minute' FROM generate_series(1, 10) AS g`);
    expect(await applyBulk(db.pool, "delete", { state: "dead" }, { schema, expected: 6, batchSize: 4 })).toEqual({ applied: 6, skipped: 0, batches: 2 });
    const { rows } = await db.pool.query(`SELECT id FROM ${schema}.jobs ORDER BY id`);
    expect(rows.map((r) => r.id)).toEqual(["7", "8", "9", "10"]);
    expect(await applyBulk(db.pool, "delete", { state: "dead" }, { schema, expected: 0 })).toEqual({ applied: 0, skipped: 0, batches: 0 });
  });

  it("cancels the scheduled jobs of a queue, makes a task's retrying jobs due now, and deletes the completed jobs finished before a time", async () => {
    const schema = await freshSchema();
    await db.pool.query(`
      INSERT INTO ${schema}.jobs (type, status, queue, run_at, attempts, finished_at) VALUES
        ('a', 'pending', 'outbox', now() + interval '1 hour', 0, NULL),
        ('a', 'pending', 'outbox', now() + interval '2 hours', 0, NULL),
        ('a', 'pending', 'other', now() + interval '1 hour', 0, NULL),
        ('a', 'pending', 'outbox', now() - interval '1 minute', 0, NULL),
        ('b', 'pending', NULL, now() + interval '5 minutes', 2, NULL),
        ('c', 'completed', NULL, now(), 1, '2026-01-01'),
        ('c', 'completed', NULL, now(), 1, '2026-03-01')`);
    expect(await countBulk(db.pool, "cancel", { state: "scheduled", queue: "outbox" }, { schema })).toBe(2);
    expect(await applyBulk(db.pool, "cancel", { state: "scheduled", queue: "outbox" }, { schema, expected: 2 })).toMatchObject({ applied: 2 });
    // Only the scheduled ones of that queue: the ready one and the other queue's stay pending.
    expect((await db.pool.query(`SELECT id FROM ${schema}.jobs WHERE status = 'cancelled' ORDER BY id`)).rows.map((r) => r.id)).toEqual(["1", "2"]);
    expect(await applyBulk(db.pool, "run-now", { state: "retrying", task: "b" }, { schema, expected: 1 })).toMatchObject({ applied: 1 });
    expect((await db.pool.query(`SELECT run_at <= now() AS due FROM ${schema}.jobs WHERE id = 5`)).rows[0].due).toBe(true);
    expect(await applyBulk(db.pool, "delete", { state: "completed", before: new Date("2026-02-01") }, { schema, expected: 10 })).toMatchObject({ applied: 1 });
    expect((await db.pool.query(`SELECT id FROM ${schema}.jobs WHERE type = 'c'`)).rows.map((r) => r.id)).toEqual(["7"]);
  });

  it("leaves dead jobs whose key a live job holds, and of two dead jobs with one key retries the first only, counting the rest as skipped", async () => {
    const schema = await freshSchema();
    await db.pool.query(`
      INSERT INTO ${schema}.jobs (type, status, key, finished_at) VALUES
        ('k', 'dead', 'held', now() - interval '3 minutes'),
        ('k', 'dead', 'twice', now() - interval '2 minutes'),
        ('k', 'dead', 'twice', now() - interval '1 minute'),
        ('k', 'dead', NULL, now()),
        ('k', 'pending', 'held', now())`);
    // Batches of two: the jobs a batch left are not read again by the next.
    expect(await applyBulk(db.pool, "retry", { state: "dead" }, { schema, expected: 4, batchSize: 2 })).toEqual({ applied: 2, skipped: 2, batches: 2 });
    expect((await db.pool.query(`SELECT id, status FROM ${schema}.jobs ORDER BY id`)).rows).toEqual([
      { id: "1", status: "dead" },
      { id: "2", status: "pending" },
      { id: "3", status: "dead" },
      { id: "4", status: "pending" },
      { id: "5", status: "pending" },
    ]);
  });

  it("refuses an action on a state it cannot change, and filters or counts it cannot use, before touching a row", async () => {
    const schema = await freshSchema();
    const refusal = async (run: Promise<unknown>) => {
      const error = await rejectionOf(run);
      expect(error).toBeInstanceOf(InvalidJobError);
      return (error as Error).message;
    };
    expect(await refusal(countBulk(db.pool, "retry", { state: "ready" }, { schema }))).toBe('picket: retry applies to dead jobs, not "ready" ones.');
    expect(await refusal(applyBulk(db.pool, "delete", { state: "running" }, { schema, expected: 1 }))).toBe('picket: delete applies to dead, completed, cancelled jobs, not "running" ones.');
    expect(await refusal(countBulk(db.pool, "explode" as never, { state: "dead" }, { schema }))).toBe('picket: a bulk action is one of retry, cancel, run-now, delete (got "explode").');
    expect(await refusal(countBulk(db.pool, "retry", { state: "dead", task: "" }, { schema }))).toBe('picket: bulk filter task must be a name of 1 to 200 characters (got "").');
    expect(await refusal(countBulk(db.pool, "retry", { state: "dead", before: new Date("x") }, { schema }))).toBe("picket: bulk filter before must be a valid Date (got Invalid Date).");
    expect(await refusal(applyBulk(db.pool, "retry", { state: "dead" }, { schema, expected: -1 }))).toBe("picket: a bulk action's expected count must be an integer ≥ 0 (got -1).");
    expect(await refusal(applyBulk(db.pool, "retry", { state: "dead" }, { schema, expected: 1, batchSize: 0 }))).toBe("picket: a bulk action's batch size must be an integer from 1 to 10000 (got 0).");
  });
});
