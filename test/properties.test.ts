// Property tests (fast-check): the backoff's bounds for any inputs, enqueue validation for any
// value, and random interleavings of claim / complete / renew / sweep / release / fail on two
// connections, which must never let a write with a stale token apply.
import fc from "fast-check";
import type pg from "pg";
import { describe, expect, it } from "vitest";
import {
  claimJobs,
  completeJobs,
  enqueueJobs,
  failJobs,
  InvalidJobError,
  releaseJobs,
  renewLeases,
  sweepExpiredClaims,
  type FencedResult,
} from "../src/db/index.ts";
import { checkJobSpec } from "../src/db/job-spec.ts";
import { useTestDatabase } from "./support/db.ts";
import { want } from "./support/factory.ts";

const db = useTestDatabase();

describe("backoff, for any attempt, base, ceiling and jitter", () => {
  it("stays within [raw/2, raw], never above the ceiling, and never overflows", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: -5, max: 2_147_483_647 }),
        fc.integer({ min: 0, max: 2_147_483_647 }),
        fc.integer({ min: 0, max: 2_147_483_647 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        async (attempt, base, max, jitter) => {
          const { rows } = await db.pool.query("SELECT picket.backoff_ms($1, $2, $3, $4) AS ms", [attempt, base, max, jitter]);
          const ms = Number(rows[0].ms);
          const raw = Math.min(max, base * 2 ** (Math.min(Math.max(attempt, 1), 64) - 1));
          expect(Number.isFinite(ms)).toBe(true);
          expect(ms).toBeLessThanOrEqual(max);
          expect(ms).toBeGreaterThanOrEqual(raw / 2 - 1e-6 * raw);
          expect(ms).toBeLessThanOrEqual(raw + 1e-6 * raw);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("grows with the attempt until the ceiling", async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 100_000 }), async (attempt, base) => {
        const { rows } = await db.pool.query("SELECT picket.backoff_ms($1, $2, 2147483647, 0) AS a, picket.backoff_ms($1 + 1, $2, 2147483647, 0) AS b", [attempt, base]);
        expect(Number(rows[0].b)).toBeGreaterThanOrEqual(Number(rows[0].a));
      }),
      { numRuns: 100 },
    );
  });
});

describe("enqueue validation, for any value", () => {
  it("accepts exactly what JSON round-trips unchanged, and refuses the rest with InvalidJobError", () => {
    fc.assert(
      fc.property(fc.anything({ withBigInt: true, withDate: true, withMap: true, withSet: true, withNullPrototype: true, withTypedArray: true }), (payload) => {
        let checked: ReturnType<typeof checkJobSpec> | undefined;
        try {
          checked = checkJobSpec({ type: "t", payload });
        } catch (error) {
          expect(error).toBeInstanceOf(InvalidJobError);
          return;
        }
        // Accepted: JSON must carry it without loss (undefined object properties mean "absent";
        // -0 becomes 0, the one difference JSON cannot express and no payload depends on).
        const strip = (v: unknown): unknown =>
          Object.is(v, -0) ? 0 : Array.isArray(v) ? v.map(strip) : v !== null && typeof v === "object" ? Object.fromEntries(Object.entries(v).filter(([, x]) => x !== undefined).map(([k, x]) => [k, strip(x)])) : v;
        expect(JSON.parse(checked.payloadJson)).toEqual(strip(payload === undefined ? {} : payload));
      }),
      { numRuns: 2000 },
    );
  });
});

type Op =
  | { kind: "claim"; worker: 0 | 1 }
  | { kind: "complete" | "fail" | "renew" | "release"; worker: 0 | 1; pick: number }
  | { kind: "expire"; pick: number }
  | { kind: "sweep"; worker: 0 | 1 };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant("claim" as const), worker: fc.constantFrom(0 as const, 1 as const) }),
  fc.record({ kind: fc.constantFrom("complete" as const, "fail" as const, "renew" as const, "release" as const), worker: fc.constantFrom(0 as const, 1 as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant("expire" as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant("sweep" as const), worker: fc.constantFrom(0 as const, 1 as const) }),
);

describe("random interleavings on two connections", () => {
  it("never apply a write made with a stale token, and never leave two live claims", async () => {
    const connections: pg.Client[] = [await db.connect(), await db.connect()];
    let round = 0;
    const seen = { applied: 0, fenced: 0, busy: 0, cancelled: 0 };
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 5, maxLength: 40 }), async (ops) => {
        const type = `prop-${round++}`;
        await enqueueJobs(db.pool, Array.from({ length: 3 }, () => ({ type, maxAttempts: 100 })));
        // Every claim a worker ever received, including the ones it has since lost.
        const held: Array<Array<{ id: string; token: string }>> = [[], []];
        for (const op of ops) {
          if (op.kind === "claim") {
            const jobs = await claimJobs(connections[op.worker]!, `w${op.worker}`, [want(type, { limit: 2, backoffBaseMs: 0, backoffMaxMs: 0 })]);
            held[op.worker]!.push(...jobs.map((j) => ({ id: j.id, token: j.claimToken })));
          } else if (op.kind === "sweep") {
            await sweepExpiredClaims(connections[op.worker]!, 100);
          } else if (op.kind === "expire") {
            const all = [...held[0]!, ...held[1]!];
            if (all.length === 0) continue;
            await db.pool.query("UPDATE picket.jobs SET lock_until = now() - interval '1 second' WHERE id = $1 AND status = 'processing'", [all[op.pick % all.length]!.id]);
          } else {
            const mine = held[op.worker]!;
            if (mine.length === 0) continue;
            const claim = mine[op.pick % mine.length]!;
            const before = (await db.pool.query("SELECT status, claim_token FROM picket.jobs WHERE id = $1", [claim.id])).rows[0];
            // (A completion deletes a keyless row unless it keeps completed rows: a later write finds none.)
            const live = before?.status === "processing" && before.claim_token === claim.token;
            const conn = connections[op.worker]!;
            const [result]: FencedResult[] =
              op.kind === "complete"
                ? await completeJobs(conn, [claim], { keepCompleted: op.pick % 2 === 0 })
                : op.kind === "fail"
                  ? await failJobs(conn, [{ ...claim, error: "x" }])
                  : op.kind === "renew"
                    ? await renewLeases(conn, [{ ...claim, leaseMs: 60_000 }])
                    : await releaseJobs(conn, [claim]);
            expect(result!.outcome, `${op.kind} with a ${live ? "live" : "stale"} token`).toBe(live ? "applied" : "fenced");
            seen[result!.outcome]++;
          }
          // At most one live claim per job: a processing row has exactly one token, held by one worker's claim.
          const { rows } = await db.pool.query("SELECT id, claim_token FROM picket.jobs WHERE type = $1 AND status = 'processing'", [type]);
          for (const row of rows) {
            const holders = [...held[0]!, ...held[1]!].filter((c) => c.id === row.id && c.token === row.claim_token);
            expect(holders).toHaveLength(1);
          }
        }
      }),
      { numRuns: 60 },
    );
    // The generated interleavings really produced both live and stale writes.
    expect(seen.applied).toBeGreaterThan(20);
    expect(seen.fenced).toBeGreaterThan(5);
  }, 120_000);
});
