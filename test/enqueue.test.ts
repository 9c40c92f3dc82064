import { describe, expect, it } from "vitest";
import { enqueueJob, enqueueJobs, InvalidJobError, MAX_PAYLOAD_BYTES, notifyChannel } from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";

const db = useTestDatabase();

describe("enqueue", () => {
  it("stores the job with its options; delay and run_at are honoured", async () => {
    const runAt = new Date(Date.now() + 3_600_000);
    const [a, b, c] = await enqueueJobs(db.pool, [
      { type: "mail.send", payload: { to: "a@example.com" }, priority: 7, maxAttempts: 2 },
      { type: "mail.send", runAt },
      { type: "mail.send", delayMs: 60_000 },
    ]);
    expect(a).toMatchObject({ type: "mail.send", payload: { to: "a@example.com" }, priority: 7, maxAttempts: 2, status: "pending", attempts: 0 });
    expect(b!.runAt.toISOString()).toBe(runAt.toISOString());
    expect(b!.payload).toEqual({});
    const delay = c!.runAt.getTime() - c!.createdAt.getTime();
    expect(delay).toBeGreaterThanOrEqual(59_990);
    expect(delay).toBeLessThanOrEqual(60_010);
  });

  it("bulk-enqueues in one statement and returns jobs in the order given", async () => {
    const specs = Array.from({ length: 500 }, (_, i) => ({ type: "bulk", payload: { i } }));
    const jobs = await enqueueJobs(db.pool, specs);
    expect(jobs.map((j) => (j.payload as { i: number }).i)).toEqual(specs.map((s) => s.payload.i));
    expect(await enqueueJobs(db.pool, [])).toEqual([]);
  });

  it("commits and rolls back with the caller's own transaction", async () => {
    const client = await db.connect();
    await client.query("BEGIN");
    const rolledBack = await enqueueJob(client, { type: "tx", payload: "no" });
    await client.query("ROLLBACK");
    await client.query("BEGIN");
    const committed = await enqueueJob(client, { type: "tx", payload: "yes" });
    await client.query("COMMIT");
    expect(await row(db.pool, rolledBack.id)).toBeUndefined();
    expect(await row(db.pool, committed.id)).toMatchObject({ payload: "yes" });
  });

  it("returns the live job for a key instead of creating another, even under concurrent enqueues", async () => {
    const clients = await Promise.all(Array.from({ length: 8 }, () => db.connect()));
    const results = await Promise.all(clients.map((c, i) => enqueueJob(c, { type: "dedupe", key: "invoice-42", payload: { i } })));
    expect(new Set(results.map((j) => j.id)).size).toBe(1);
    const { rows } = await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE key = 'invoice-42'");
    expect(rows[0].n).toBe(1);
    // Same key twice in one bulk call: one job.
    const [x, y] = await enqueueJobs(db.pool, [
      { type: "dedupe", key: "bulk-key" },
      { type: "dedupe", key: "bulk-key" },
    ]);
    expect(x!.id).toBe(y!.id);
  });

  it("holds the key against a concurrent enqueue in an open transaction, and frees it if that rolls back", async () => {
    const [first, second] = await Promise.all([db.connect(), db.connect()]);
    await first.query("BEGIN");
    const held = await enqueueJob(first, { type: "dedupe", key: "held" });
    const waiting = enqueueJob(second, { type: "dedupe", key: "held" });
    await new Promise((resolve) => setTimeout(resolve, 100));
    await first.query("ROLLBACK");
    const won = await waiting;
    expect(won.id).not.toBe(held.id);
    expect(await row(db.pool, won.id)).toMatchObject({ key: "held", status: "pending" });
  });

  it("frees a key once its job has finished", async () => {
    const first = await enqueueJob(db.pool, { type: "dedupe", key: "reusable" });
    await db.pool.query("UPDATE picket.jobs SET status = 'completed', finished_at = now() WHERE id = $1", [first.id]);
    const second = await enqueueJob(db.pool, { type: "dedupe", key: "reusable" });
    expect(second.id).not.toBe(first.id);
  });

  it("sends one NOTIFY naming the ready types, delivered at commit", async () => {
    const listener = await db.connect();
    const received: string[] = [];
    listener.on("notification", (n) => received.push(`${n.channel}|${n.payload}`));
    await listener.query(`LISTEN "${notifyChannel("picket")}"`);
    const client = await db.connect();
    await client.query("BEGIN");
    await enqueueJobs(client, [{ type: "n1" }, { type: "n1" }, { type: "n2" }, { type: "later", delayMs: 60_000 }]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(received).toEqual([]);
    await client.query("COMMIT");
    await expect.poll(() => received, { timeout: 5_000 }).toEqual(["picket:picket|n1,n2"]);
  });

  it("enqueues from SQL with the same dedupe rule", async () => {
    const { rows: [a] } = await db.pool.query("SELECT (picket.add_job('sql.task', '{\"n\": 1}', job_key => 'sql-key')).*");
    const { rows: [b] } = await db.pool.query("SELECT (picket.add_job('sql.task', '{\"n\": 2}', job_key => 'sql-key')).*");
    expect(a.id).toBe(b.id);
    expect(a).toMatchObject({ type: "sql.task", payload: { n: 1 }, status: "pending", max_attempts: null, queue: null });
    await expect(db.pool.query("SELECT picket.add_job('sql.task', jsonb_build_object('s', repeat('x', 1048577)))")).rejects.toThrow(
      /limit is 1048576 bytes/,
    );
    await expect(db.pool.query("SELECT picket.add_job('', '{}')")).rejects.toThrow(/jobs_type_check/);
  });
});

describe("enqueue refuses bad input with a clear error and writes nothing", () => {
  const cases: Array<[string, unknown, RegExp]> = [
    ["a payload with a function", { type: "t", payload: { f: () => 1 } }, /payload is not JSON-serialisable: payload\.f is a function/],
    ["a payload with a bigint", { type: "t", payload: { n: 10n } }, /payload\.n is a bigint/],
    ["a payload with NaN", { type: "t", payload: [1, Number.NaN] }, /payload\[1\] is NaN/],
    ["a payload with a Date", { type: "t", payload: { at: new Date() } }, /payload\.at is a Date.*toISOString/],
    ["a payload with a Map", { type: "t", payload: new Map() }, /payload is a Map/],
    ["a cyclic payload", (() => { const p: Record<string, unknown> = {}; p.self = p; return { type: "t", payload: p }; })(), /payload\.self refers back to itself/],
    ["a NUL character", { type: "t", payload: "a\u0000b" }, /NUL character/],
    ["an oversized payload", { type: "t", payload: "x".repeat(MAX_PAYLOAD_BYTES) }, /payload is 1048578 bytes as JSON; the limit is 1048576 bytes/],
    ["an empty type", { type: "" }, /type must be a non-empty string/],
    ["a missing type", { payload: 1 }, /type must be a non-empty string \(got undefined\)/],
    ["an over-long type", { type: "t".repeat(129) }, /type is 129 characters; the limit is 128/],
    ["a type with spaces", { type: "send email" }, /may contain only letters/],
    ["a negative max_attempts", { type: "t", maxAttempts: -1 }, /maxAttempts must be an integer from 1 to 1000000 \(got -1\)/],
    ["a fractional max_attempts", { type: "t", maxAttempts: 1.5 }, /maxAttempts must be an integer/],
    ["an invalid run_at", { type: "t", runAt: "next tuesday" }, /runAt must be a valid Date or an ISO 8601 string .* \(got "next tuesday"\)/],
    ["an invalid Date", { type: "t", runAt: new Date("nope") }, /runAt must be a valid Date/],
    ["runAt and delayMs together", { type: "t", runAt: new Date(), delayMs: 5 }, /runAt or delayMs, not both/],
    ["a negative delay", { type: "t", delayMs: -5 }, /delayMs must be a finite number/],
    ["an out-of-range priority", { type: "t", priority: 5000 }, /priority must be an integer from -1000 to 1000/],
    ["an empty key", { type: "t", key: "" }, /key must be a string of 1 to 512 characters/],
  ];
  for (const [name, spec, message] of cases) {
    it(name, async () => {
      const { rows: before } = await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs");
      const attempt = enqueueJobs(db.pool, [{ type: "ok-before-bad" }, spec as never]);
      await expect(attempt).rejects.toThrow(InvalidJobError);
      await expect(attempt).rejects.toThrow(message);
      const { rows: after } = await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs");
      // Validation runs before the statement: the valid spec in the same batch is not written either.
      expect(after[0].n).toBe(before[0].n);
    });
  }

  it("accepts the largest payload allowed and JSON it can round-trip", async () => {
    const payload = { s: "x".repeat(MAX_PAYLOAD_BYTES - 8), skip: undefined };
    const job = await enqueueJob(db.pool, { type: "big", payload });
    expect(((await row(db.pool, job.id)).payload as { s: string }).s).toHaveLength(MAX_PAYLOAD_BYTES - 8);
  });
});
