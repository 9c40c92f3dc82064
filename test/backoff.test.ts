import { describe, expect, it } from "vitest";
import { useTestDatabase } from "./support/db.ts";

const db = useTestDatabase();

const backoffMs = async (attempt: number, base: number, max: number, jitter: number): Promise<number> => {
  const { rows } = await db.pool.query("SELECT picket.backoff_ms($1, $2, $3, $4) AS ms", [attempt, base, max, jitter]);
  return Number(rows[0].ms);
};

describe("the backoff", () => {
  it("doubles per attempt until the ceiling (no jitter)", async () => {
    const delays = await Promise.all([1, 2, 3, 4, 5, 6].map((a) => backoffMs(a, 1000, 20_000, 0)));
    expect(delays).toEqual([1000, 2000, 4000, 8000, 16000, 20000]);
  });

  it("keeps jitter within [raw/2, raw]", async () => {
    expect(await backoffMs(3, 1000, 1e9, 1)).toBe(2000);
    expect(await backoffMs(3, 1000, 1e9, 0.5)).toBe(3000);
    const { rows } = await db.pool.query(
      `SELECT min(ms) AS lo, max(ms) AS hi, count(DISTINCT ms) AS distinct_values FROM (
         SELECT extract(epoch FROM picket.backoff(4, 1000, 1000000000)) * 1000 AS ms FROM generate_series(1, 2000)
       ) s`,
    );
    expect(Number(rows[0].lo)).toBeGreaterThanOrEqual(4000);
    expect(Number(rows[0].hi)).toBeLessThanOrEqual(8000);
    // Really jittered: a constant would defeat the point of spreading retries.
    expect(Number(rows[0].distinct_values)).toBeGreaterThan(1000);
    expect(Number(rows[0].hi) - Number(rows[0].lo)).toBeGreaterThan(3000);
  });

  it("never exceeds its ceiling and does not overflow at absurd attempt counts", async () => {
    for (const attempt of [30, 31, 64, 65, 1000, 10_000, 2_147_483_647]) {
      expect(await backoffMs(attempt, 1000, 3_600_000, 0)).toBe(3_600_000);
    }
    const { rows } = await db.pool.query(
      "SELECT max(extract(epoch FROM picket.backoff(10000, 2147483647, 3600000)) * 1000) AS ms FROM generate_series(1, 200)",
    );
    expect(Number(rows[0].ms)).toBeLessThanOrEqual(3_600_000);
    expect(await backoffMs(0, 1000, 60_000, 0)).toBe(1000);
  });
});
