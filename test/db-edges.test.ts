// Edges of the statements that the main files do not reach: values that differ from the
// defaults, odd inputs, and the limits of each write.
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import {
  claimJobs,
  completeJobs,
  deadLetterJobs,
  enqueueJob,
  enqueueJobs,
  ERROR_MESSAGE_LIMIT,
  failJobs,
  InvalidConfigError,
  InvalidJobError,
  readMigrations,
  releaseJobs,
  renewLeases,
  reportProgress,
  sweepExpiredClaims,
} from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, expireLease, row, want } from "./support/factory.ts";

const db = useTestDatabase();

const delayMs = async (id: string) =>
  Number((await db.pool.query("SELECT extract(epoch FROM run_at - now()) * 1000 AS ms FROM picket.jobs WHERE id = $1", [id])).rows[0].ms);

describe("the row's own retry spacing", () => {
  it("is what both the failure and the sweep use, not the defaults", async () => {
    const [failed, lost] = await claimed(db.pool, "own-spacing", 2, { want: { backoffBaseMs: 50_000, backoffMaxMs: 1_000_000_000 } });
    await failJobs(db.pool, [{ id: failed!.id, token: failed!.claimToken, error: "x" }]);
    await expireLease(db.pool, lost!.id);
    await sweepExpiredClaims(db.pool, 10);
    for (const id of [failed!.id, lost!.id]) {
      const ms = await delayMs(id);
      expect(ms).toBeGreaterThanOrEqual(24_000);
      expect(ms).toBeLessThanOrEqual(50_500);
    }
  });

  it("never exceeds the row's own ceiling", async () => {
    const [failed, lost] = await claimed(db.pool, "own-ceiling", 2, { spec: { maxAttempts: 50 }, want: { backoffBaseMs: 1_000, backoffMaxMs: 1_500 } });
    await db.pool.query("UPDATE picket.jobs SET attempts = 5 WHERE id = ANY($1)", [[failed!.id, lost!.id]]);
    await failJobs(db.pool, [{ id: failed!.id, token: failed!.claimToken, error: "x" }]);
    await expireLease(db.pool, lost!.id);
    await sweepExpiredClaims(db.pool, 10);
    for (const id of [failed!.id, lost!.id]) expect(await delayMs(id)).toBeLessThanOrEqual(1_600);
  });
});

describe("the sweep's edges", () => {
  it("leaves a claim whose short lease has not yet run out", async () => {
    const [job] = await claimed(db.pool, "short-live", 1, { want: { leaseMs: 2_000 } });
    expect(await sweepExpiredClaims(db.pool, 10)).toEqual([]);
    expect(await row(db.pool, job!.id)).toMatchObject({ status: "processing", claim_token: job!.claimToken });
  });

  it("reports the lost claim's token and worker, and clears the claim on the requeued row", async () => {
    const [job] = await claimed(db.pool, "lost-token");
    await expireLease(db.pool, job!.id);
    const [swept] = await sweepExpiredClaims(db.pool, 10);
    expect(swept).toMatchObject({ status: "pending", lostToken: job!.claimToken, lostBy: "worker-a" });
    expect(await row(db.pool, job!.id)).toMatchObject({ locked_by: null, locked_at: null, claim_token: null });
  });

  it("refuses a batch size that is not a positive integer (LIMIT NULL would mean no limit)", async () => {
    await expect(sweepExpiredClaims(db.pool, undefined as unknown as number)).rejects.toThrow(InvalidConfigError);
    await expect(sweepExpiredClaims(db.pool, 0)).rejects.toThrow(/batch size must be an integer ≥ 1/);
  });
});

describe("fenced writes with odd values", () => {
  it("matches results by token: a stale claim batched with the live one on the same job is fenced", async () => {
    const [job] = await claimed(db.pool, "same-job-two-tokens");
    const stale = "00000000-0000-4000-8000-000000000000";
    const results = await renewLeases(db.pool, [
      { id: job!.id, token: stale, leaseMs: 1000 },
      { id: job!.id, token: job!.claimToken, leaseMs: 1000 },
    ]);
    expect(results.map((r) => r.outcome)).toEqual(["fenced", "applied"]);
  });

  it("records a failure whose message is huge, empty or holds NUL characters", async () => {
    const [a, b, c] = await claimed(db.pool, "odd-errors", 3);
    await failJobs(db.pool, [
      { id: a!.id, token: a!.claimToken, error: "e".repeat(10_000) },
      { id: b!.id, token: b!.claimToken, error: "nul\u0000inside" },
      { id: c!.id, token: c!.claimToken, error: undefined as unknown as string },
    ]);
    const ra = await row(db.pool, a!.id);
    expect(ra.last_error).toHaveLength(ERROR_MESSAGE_LIMIT);
    expect(ra.errors[0].message).toHaveLength(ERROR_MESSAGE_LIMIT);
    expect((await row(db.pool, b!.id)).last_error).toBe("nulinside");
    expect((await row(db.pool, c!.id)).last_error).toBe("unknown error");
  });

  it("records any JSON result (bigints as strings), and refuses one PostgreSQL cannot store before touching any row", async () => {
    const [a, b] = await claimed(db.pool, "odd-results", 2);
    // Kept completed, so the stored result can be read.
    const kept = { keepCompleted: true };
    expect((await completeJobs(db.pool, [{ id: a!.id, token: a!.claimToken, result: { big: 10n, at: new Date(0) } }], kept))[0]!.outcome).toBe("applied");
    expect((await row(db.pool, a!.id)).result).toEqual({ big: "10", at: "1970-01-01T00:00:00.000Z" });
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const refused = async (result: unknown, message: RegExp) => {
      await expect(completeJobs(db.pool, [{ id: b!.id, token: b!.claimToken, result }])).rejects.toThrow(message);
      expect(await row(db.pool, b!.id)).toMatchObject({ status: "processing", result: null });
    };
    await refused({ text: "a\u0000b" }, /the job's result\.text contains a NUL character/);
    await refused({ list: ["ok", "🙂".slice(0, 1)] }, /the job's result\.list\[1\] contains a lone UTF-16 surrogate/);
    await refused({ ["\udc00"]: 1 }, /the key "\\udc00" of the job's result contains a lone UTF-16 surrogate/);
    await refused(cyclic, /the job's result cannot be stored as JSON: Converting circular structure/);
    await refused("x".repeat(1024 * 1024 + 1), /the job's result is 1048579 bytes as JSON; the limit is 1048576/);
    // A string that only looks like an escape once written as JSON is stored as it is.
    expect((await completeJobs(db.pool, [{ id: b!.id, token: b!.claimToken, result: "\\u0000 and \\ud800" }], kept))[0]!.outcome).toBe("applied");
    expect((await row(db.pool, b!.id)).result).toBe("\\u0000 and \\ud800");
    const [p] = await claimed(db.pool, "odd-progress");
    await expect(reportProgress(db.pool, [{ id: p!.id, token: p!.claimToken, progress: cyclic, leaseMs: 60_000 }])).rejects.toThrow(/the progress value cannot be stored/);
  });

  it("refuses a lease that is not a positive integer before touching any row", async () => {
    const [job] = await claimed(db.pool, "bad-lease");
    await expect(renewLeases(db.pool, [{ id: job!.id, token: job!.claimToken, leaseMs: -60_000 }])).rejects.toThrow(InvalidConfigError);
    await expect(renewLeases(db.pool, [{ id: job!.id, token: job!.claimToken, leaseMs: 1.5 }])).rejects.toThrow(/leaseMs must be an integer/);
  });

  it("makes no round trip for an empty batch", async () => {
    let queries = 0;
    const counting = { query: (config: never) => (queries++, db.pool.query(config)) };
    expect(await completeJobs(counting, [])).toEqual([]);
    expect(await renewLeases(counting, [])).toEqual([]);
    expect(queries).toBe(0);
  });

  it("reports a token with anything around a UUID as fenced instead of failing the batch", async () => {
    const [job] = await claimed(db.pool, "padded-token");
    const results = await completeJobs(db.pool, [
      { id: job!.id, token: `x${job!.claimToken}` },
      { id: job!.id, token: `${job!.claimToken}x` },
    ]);
    expect(results.map((r) => r.outcome)).toEqual(["fenced", "fenced"]);
  });

  it("reports a malformed id as fenced instead of failing the batch", async () => {
    const [job] = await claimed(db.pool, "bad-id");
    const results = await completeJobs(db.pool, [
      { id: "abc", token: job!.claimToken },
      { id: job!.id, token: job!.claimToken },
    ]);
    expect(results.map((r) => r.outcome)).toEqual(["fenced", "applied"]);
  });

  it("releases a row with no attempt counted without going below zero", async () => {
    const { rows } = await db.pool.query(
      "INSERT INTO picket.jobs (type, status, claim_token, lock_until) VALUES ('raw', 'processing', gen_random_uuid(), now() + interval '1 minute') RETURNING id, claim_token",
    );
    const [result] = await releaseJobs(db.pool, [{ id: rows[0].id, token: rows[0].claim_token }]);
    expect(result!.outcome).toBe("applied");
    expect((await row(db.pool, rows[0].id)).attempts).toBe(0);
  });

  it("a claim clears the previous attempt's progress", async () => {
    const [job] = await claimed(db.pool, "progress-reset", 1, { want: { backoffBaseMs: 0, backoffMaxMs: 0 } });
    await reportProgress(db.pool, [{ id: job!.id, token: job!.claimToken, progress: { pct: 90 }, leaseMs: 60_000 }]);
    await failJobs(db.pool, [{ id: job!.id, token: job!.claimToken, error: "x" }]);
    const [again] = await claimJobs(db.pool, "w", [want("progress-reset", { limit: 1 })]);
    expect(again!.attempts).toBe(2);
    expect((await row(db.pool, again!.id)).progress).toBeNull();
  });
});

describe("the schema refuses what the statements never write", () => {
  it("a processing row without a claim token", async () => {
    const job = await enqueueJob(db.pool, { type: "no-token" });
    await expect(db.pool.query("UPDATE picket.jobs SET status = 'processing', lock_until = now() WHERE id = $1", [job.id])).rejects.toThrow(
      /processing_has_claim/,
    );
  });

  it("a lease on a row that is not processing (the sweep's index holds only leased rows)", async () => {
    const job = await enqueueJob(db.pool, { type: "no-lease" });
    await expect(db.pool.query("UPDATE picket.jobs SET lock_until = now() WHERE id = $1", [job.id])).rejects.toThrow(/lease_only_while_processing/);
    await expect(
      db.pool.query("UPDATE picket.jobs SET status = 'completed', finished_at = now(), lock_until = now() WHERE id = $1", [job.id]),
    ).rejects.toThrow(/lease_only_while_processing/);
  });

  it("keeps the sweep index partial: only rows holding a lease", async () => {
    const { rows } = await db.pool.query("SELECT indexdef FROM pg_indexes WHERE indexname = 'jobs_sweep_idx'");
    expect(rows[0].indexdef).toMatch(/WHERE \(lock_until IS NOT NULL\)/);
  });

  it("records each migration's checksum over the file's exact bytes", async () => {
    const [first] = await readMigrations();
    const raw = await readFile(new URL("../src/db/migrations/0001_jobs.sql", import.meta.url));
    expect(first!.checksum).toBe(createHash("sha256").update(raw).digest("hex"));
    const { rows } = await db.pool.query("SELECT checksum FROM picket.migrations WHERE version = 1");
    expect(rows[0].checksum).toBe(first!.checksum);
  });
});

describe("claim edges", () => {
  it("takes the oldest run_at first among equal priorities", async () => {
    const newer = await enqueueJob(db.pool, { type: "fifo", payload: "newer" });
    await enqueueJob(db.pool, { type: "fifo", payload: "older", runAt: new Date(Date.now() - 60_000) });
    const [first] = await claimJobs(db.pool, "w", [want("fifo", { limit: 1 })]);
    expect(first!.payload).toBe("older");
    expect(first!.id).not.toBe(newer.id);
  });

  it("deals the total across types round-robin, in the order the types are given", async () => {
    await enqueueJobs(db.pool, [...Array.from({ length: 5 }, () => ({ type: "deal-a" })), ...Array.from({ length: 5 }, () => ({ type: "deal-b" }))]);
    const jobs = await claimJobs(db.pool, "w", [want("deal-b", { limit: 5 }), want("deal-a", { limit: 5 })], { total: 3 });
    expect(jobs.map((j) => j.type).sort()).toEqual(["deal-a", "deal-b", "deal-b"]);
  });

  it("refuses a type named twice, an oversized lease and a negative total", async () => {
    await expect(claimJobs(db.pool, "w", [want("twice"), want("twice")])).rejects.toThrow(/names a type more than once/);
    await expect(claimJobs(db.pool, "w", [want("x", { leaseMs: 2 ** 31 })])).rejects.toThrow(/from 1 to 2147483647/);
    await expect(claimJobs(db.pool, "w", [want("x")], { total: -1 })).rejects.toThrow(InvalidConfigError);
  });
});

describe("enqueue edges", () => {
  const bad: Array<[string, object, RegExp]> = [
    ["an infinite delay", { type: "t", delayMs: Number.POSITIVE_INFINITY }, /delayMs must be a finite number/],
    ["a key over 512 characters", { type: "t", key: "k".repeat(513) }, /key must be a string of 1 to 512 characters/],
    ["a key that is not a string", { type: "t", key: 42 }, /key must be a string/],
    ["undefined inside an array", { type: "t", payload: [1, undefined] }, /payload\[1\] is undefined/],
    ["a priority below the range", { type: "t", priority: -5000 }, /priority must be an integer from -1000 to 1000/],
  ];
  for (const [name, spec, message] of bad) {
    it(`refuses ${name}`, async () => {
      await expect(enqueueJob(db.pool, spec as never)).rejects.toThrow(InvalidJobError);
      await expect(enqueueJob(db.pool, spec as never)).rejects.toThrow(message);
    });
  }

  it("returns the live holder of a key, never a finished job that once held it", async () => {
    const first = await enqueueJob(db.pool, { type: "k", key: "reused" });
    await db.pool.query("UPDATE picket.jobs SET status = 'completed', finished_at = now() WHERE id = $1", [first.id]);
    const live = await enqueueJob(db.pool, { type: "k", key: "reused" });
    await db.pool.query("UPDATE picket.jobs SET updated_at = now() + interval '1 hour' WHERE id = $1", [first.id]);
    const again = await enqueueJob(db.pool, { type: "k", key: "reused" });
    expect(again.id).toBe(live.id);
  });
});

describe("claim input and round trips", () => {
  it("refuses a lease that is not an integer number, and accepts the largest one", async () => {
    await expect(claimJobs(db.pool, "w", [want("x", { leaseMs: "100" as unknown as number })])).rejects.toThrow(/leaseMs must be an integer from 1 to 2147483647 \(got 100\)/);
    await expect(claimJobs(db.pool, "w", [want("x", { leaseMs: 1.5 })])).rejects.toThrow(/leaseMs must be an integer/);
    await expect(claimJobs(db.pool, "w", [want("max-lease", { leaseMs: 2_147_483_647 })])).resolves.toEqual([]);
  });

  it("names the repeated types and a bad total in its errors", async () => {
    await expect(claimJobs(db.pool, "w", [want("a"), want("a")])).rejects.toThrow("picket: claim names a type more than once (a, a); give each type once.");
    await expect(claimJobs(db.pool, "w", [want("a")], { total: 1.5 })).rejects.toThrow("picket: claim total must be an integer ≥ 0 (got 1.5).");
  });

  it("makes no round trip when nothing is wanted, and claims nothing for a type offered no slot", async () => {
    let queries = 0;
    const counting = { query: (config: never) => (queries++, db.pool.query(config)) };
    await enqueueJobs(db.pool, [{ type: "no-slot" }, { type: "one-slot" }]);
    expect(await claimJobs(counting, "w", [want("no-slot", { limit: 0 })])).toEqual([]);
    expect(await claimJobs(counting, "w", [want("no-slot")], { total: 0 })).toEqual([]);
    expect(await claimJobs(counting, "w", [], { total: 5 })).toEqual([]);
    expect(queries).toBe(0);
    const jobs = await claimJobs(counting, "w", [want("no-slot", { limit: 0 }), want("one-slot", { limit: 5 })]);
    expect(jobs.map((j) => j.type)).toEqual(["one-slot"]);
    expect(queries).toBe(1);
  });

  it("runs the hot statements as named prepared statements", async () => {
    const client = await db.connect();
    const [job] = await claimed(client, "prepared");
    const claim = { id: job!.id, token: job!.claimToken };
    await renewLeases(client, [{ ...claim, leaseMs: 1000 }]);
    await reportProgress(client, [{ ...claim, progress: 1, leaseMs: 60_000 }]);
    await completeJobs(client, [claim]);
    await completeJobs(client, [claim], { keepCompleted: true });
    await failJobs(client, [{ ...claim, error: "x" }]);
    await deadLetterJobs(client, [{ ...claim, error: "x" }]);
    await releaseJobs(client, [claim]);
    await sweepExpiredClaims(client, 10);
    const { rows } = await client.query("SELECT name FROM pg_prepared_statements ORDER BY name");
    expect(rows.map((r) => r.name)).toEqual(
      ["claim", "complete_delete", "complete", "dead_letter", "fail", "progress", "release", "renew", "sweep"].map((s) => `picket_${s}_picket`),
    );
  });
});
