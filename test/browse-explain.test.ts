// The job browser's pages at a million rows (issue 29): every state's statement, newest and oldest
// first, with and without filters, reads its state's index in order and never the whole table,
// on a table never analyzed (through picket's own pool, as \`picket dashboard\` reads it) and on an
// analyzed one (through any pool); and a page reads at most its scan budget.
// Their timings are measured by bench/browse.ts (docs/benchmarks.md), not here.
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BROWSE_STATES, browseJobs, migrate, openPool, SCAN_BUDGET, type BrowseFilter, type BrowseState } from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";

const db = useTestDatabase();
const SCHEMA = "browse_million";

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  "Actual Rows"?: number;
  Plans?: PlanNode[];
}
const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

/** The index each state's rows are read through. */
const INDEX: Record<BrowseState, string> = {
  ready: "jobs_pending_browse_idx",
  scheduled: "jobs_pending_browse_idx",
  retrying: "jobs_pending_browse_idx",
  waiting: "jobs_waiting_browse_idx",
  running: "jobs_sweep_idx",
  dead: "jobs_dead_browse_idx",
  completed: "jobs_finished_idx",
  cancelled: "jobs_cancelled_browse_idx",
};

/** The statement browseJobs sends for `filter`, EXPLAINed (ANALYZE: with the rows each node read). */
const explain = async (pool: pg.Pool, filter: BrowseFilter, analyze: boolean): Promise<PlanNode[]> => {
  let captured: { text: string; values?: unknown[] } | undefined;
  await browseJobs(
    {
      query: async (config: { text: string; values?: unknown[] }) => {
        captured = config;
        throw new Error("captured");
      },
    } as never,
    filter,
    { schema: SCHEMA },
  ).catch(() => undefined);
  const { rows } = await pool.query({ text: `EXPLAIN (${analyze ? "ANALYZE, " : ""}FORMAT JSON) ${captured!.text}`, values: captured!.values });
  return nodes(rows[0]["QUERY PLAN"][0].Plan as PlanNode);
};

const FILTERS: Array<Omit<BrowseFilter, "state">> = [{}, { order: "oldest" }, { order: "newest" }, { task: "task-3", text: "needle" }];

const checkPlans = async (pool: pg.Pool, analyze: boolean) => {
  for (const state of BROWSE_STATES) {
    for (const filter of FILTERS) {
      const plan = await explain(pool, { state, ...filter }, analyze);
      const scans = plan.filter((n) => n["Relation Name"] === "jobs");
      const where = `${state} ${JSON.stringify(filter)}: ${JSON.stringify(scans.map((n) => [n["Node Type"], n["Index Name"], n["Actual Rows"]]))}`;
      expect(scans.filter((n) => n["Node Type"] === "Seq Scan"), where).toEqual([]);
      expect(scans.length, where).toBeGreaterThan(0);
      // An index scan names its index; a bitmap heap scan's index is named by its bitmap index scan.
      expect([...new Set(plan.map((n) => n["Index Name"]).filter((name) => name !== undefined))], where).toEqual([INDEX[state]]);
      // A page reads at most its budget of its state's rows (running: all of them, as many as the
      // workers' slots). jobs_finished_idx holds no id: completed pages read the rows tied at the
      // budget's last time too (here about 23 a minute).
      if (analyze && state !== "running") for (const scan of scans) expect(scan["Actual Rows"], where).toBeLessThanOrEqual(SCAN_BUDGET + (state === "completed" ? 100 : 0));
    }
  }
};

// picket's own pool plans without sequential scans where an index serves (pool.ts): on a table never
// analyzed, the planner may otherwise read all million rows to find the running few.
let picketPool: pg.Pool;
afterAll(async () => {
  await picketPool?.end();
});

beforeAll(async () => {
  picketPool = await openPool({ connectionString: db.url, max: 2 });
  await migrate(db.pool, { schema: SCHEMA });
  // A million rows: 60% completed, 20% dead, 5% cancelled, 14% pending (ready, scheduled and
  // retrying), 0.5% waiting (a flow's), 0.5% running; ten tasks; the times spread over a month.
  await db.pool.query(`
    INSERT INTO ${SCHEMA}.jobs (type, status, run_at, attempts, finished_at, last_error, payload, claim_token, locked_by, locked_at, lock_until)
    SELECT 'task-' || (g % 10), s.status,
           CASE WHEN s.status = 'pending' AND g % 3 > 0 THEN now() + (g % 1000) * interval '1 minute' ELSE now() - (g % 43200) * interval '1 minute' END,
           CASE WHEN s.status = 'pending' AND g % 3 = 2 THEN 1 ELSE 0 END,
           CASE WHEN s.status IN ('completed', 'dead', 'cancelled') THEN now() - (g % 43200) * interval '1 minute' END,
           CASE WHEN s.status = 'dead' THEN 'error ' || g END,
           jsonb_build_object('n', g),
           CASE WHEN s.status = 'processing' THEN gen_random_uuid() END,
           CASE WHEN s.status = 'processing' THEN 'w-' || (g % 50) END,
           CASE WHEN s.status = 'processing' THEN now() - (g % 600) * interval '1 second' END,
           CASE WHEN s.status = 'processing' THEN now() + interval '1 minute' END
    FROM generate_series(1, 1000000) AS g
    CROSS JOIN LATERAL (SELECT CASE WHEN g % 200 = 0 THEN 'processing' WHEN g % 200 = 100 THEN 'waiting' WHEN g % 20 < 12 THEN 'completed' WHEN g % 20 < 16 THEN 'dead'
                                    WHEN g % 20 = 16 THEN 'cancelled' ELSE 'pending' END AS status) AS s`);
}, 300_000);

describe("the job browser's statements at a million rows", () => {
  it("read each state's index in order, never the whole table, on a table never analyzed", async () => {
    await checkPlans(picketPool, false);
  }, 120_000);

  it("and so once it is analyzed; each page reads at most its budget of rows", async () => {
    await db.pool.query(`ANALYZE ${SCHEMA}.jobs`);
    await checkPlans(db.pool, true);
    await checkPlans(picketPool, true);
    // The pages are real: a full page of each state, the first of a task's dead jobs among 200,000.
    for (const state of BROWSE_STATES) expect((await browseJobs(db.pool, { state, limit: 50 }, { schema: SCHEMA })).jobs.length, state).toBe(50);
    const page = await browseJobs(db.pool, { state: "dead", task: "task-3", limit: 50 }, { schema: SCHEMA });
    expect(page.jobs.every((job) => job.type === "task-3")).toBe(true);
    expect(page.jobs.length).toBe(50);
  }, 120_000);
});
