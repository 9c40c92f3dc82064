// The claim and the sweep stay index scans however many finished rows pile up.
import { describe, expect, it } from "vitest";
import { claimJobs, sweepExpiredClaims } from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { want } from "./support/factory.ts";

const db = useTestDatabase();

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  Plans?: PlanNode[];
}

const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

/** Captures the text of the next statement a function sends, then EXPLAINs it with its values. */
const explain = async (run: (q: { query: (c: { text: string; values?: unknown[] }) => Promise<never> }) => Promise<unknown>) => {
  let captured: { text: string; values?: unknown[] } | undefined;
  await run({
    query: async (config) => {
      captured = config;
      throw new Error("captured");
    },
  }).catch(() => undefined);
  const client = await db.pool.connect();
  try {
    await client.query("BEGIN");
    const { rows } = await client.query({ text: `EXPLAIN (FORMAT JSON) ${captured!.text}`, values: captured!.values });
    await client.query("ROLLBACK");
    return nodes(rows[0]["QUERY PLAN"][0].Plan as PlanNode);
  } finally {
    client.release();
  }
};

describe("query plans on a table of 100,000 finished and 1,000 pending rows", () => {
  it("claim and sweep use their partial indexes, never a sequential scan of the job table", async () => {
    await db.pool.query(`
      INSERT INTO picket.jobs (type, status, finished_at, created_at)
      SELECT 'type-' || (g % 10), CASE WHEN g % 7 = 0 THEN 'dead' ELSE 'completed' END, now(), now()
      FROM generate_series(1, 100000) g`);
    await db.pool.query(`INSERT INTO picket.jobs (type) SELECT 'type-' || (g % 10) FROM generate_series(1, 1000) g`);
    await db.pool.query(`
      UPDATE picket.jobs SET status = 'processing', claim_token = gen_random_uuid(), lock_until = now() + interval '1 minute'
      WHERE id IN (SELECT id FROM picket.jobs WHERE status = 'pending' LIMIT 50)`);
    await db.pool.query("ANALYZE picket.jobs");

    const claimPlan = await explain((q) => claimJobs(q as never, "w", [want("type-1", { limit: 10 }), want("type-2", { limit: 10 })]));
    const sweepPlan = await explain((q) => sweepExpiredClaims(q as never, 100));

    for (const [name, plan, index] of [
      ["claim", claimPlan, "jobs_claim_idx"],
      ["sweep", sweepPlan, "jobs_sweep_idx"],
    ] as const) {
      const scans = plan.filter((n) => n["Relation Name"] === "jobs" && /Scan/.test(n["Node Type"]));
      expect(scans.length, `${name} plan scans the job table`).toBeGreaterThan(0);
      expect(scans.filter((n) => n["Node Type"] === "Seq Scan"), `${name} plan: ${JSON.stringify(scans)}`).toEqual([]);
      expect(scans.some((n) => n["Index Name"] === index), `${name} uses ${index}`).toBe(true);
    }
  });
});
