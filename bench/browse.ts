// The job browser's pages at a million rows (issue 29: p95 ≤ 50 ms a page): each state's first
// page and pages deeper in, newest and oldest first, with no filter, a task, and a text search;
// the time of each browseJobs call as the dashboard makes it (one statement, picket's own pool).
// Usage: node bench/browse.ts --url <database url> [--rows 1000000] [--pages 40]
import { parseArgs } from "node:util";
import { BROWSE_STATES, browseJobs, migrate, openPool, type BrowseFilter } from "../src/db/index.ts";
import { percentile, report } from "./lib/db.ts";

const { values } = parseArgs({ options: { url: { type: "string" }, rows: { type: "string", default: "1000000" }, pages: { type: "string", default: "40" } } });
const rows = Number(values.rows);
const pages = Number(values.pages);
const pool = await openPool({ connectionString: values.url!, max: 2 });
await migrate(pool);
// The shape of test/browse-explain.test.ts: 60% completed, 20% dead, 5% cancelled, 14.5% pending
// (ready, scheduled, retrying), 0.5% running, ten tasks, times over a month.
const loadStarted = performance.now();
await pool.query(`
  INSERT INTO picket.jobs (type, status, run_at, attempts, finished_at, last_error, payload, claim_token, locked_by, locked_at, lock_until)
  SELECT 'task-' || (g % 10), s.status,
         CASE WHEN s.status = 'pending' AND g % 3 > 0 THEN now() + (g % 1000) * interval '1 minute' ELSE now() - (g % 43200) * interval '1 minute' END,
         CASE WHEN s.status = 'pending' AND g % 3 = 2 THEN 1 ELSE 0 END,
         CASE WHEN s.status IN ('completed', 'dead', 'cancelled') THEN now() - (g % 43200) * interval '1 minute' END,
         CASE WHEN s.status = 'dead' THEN 'error ' || g END,
         jsonb_build_object('n', g, 'customer', 'c-' || (g % 5000)),
         CASE WHEN s.status = 'processing' THEN gen_random_uuid() END,
         CASE WHEN s.status = 'processing' THEN 'w-' || (g % 50) END,
         CASE WHEN s.status = 'processing' THEN now() - (g % 600) * interval '1 second' END,
         CASE WHEN s.status = 'processing' THEN now() + interval '1 hour' END
  FROM generate_series(1, $1::int) AS g
  CROSS JOIN LATERAL (SELECT CASE WHEN g % 200 = 0 THEN 'processing' WHEN g % 20 < 12 THEN 'completed' WHEN g % 20 < 16 THEN 'dead'
                                  WHEN g % 20 = 16 THEN 'cancelled' ELSE 'pending' END AS status) AS s`, [rows]);
await pool.query("VACUUM ANALYZE picket.jobs");
process.stderr.write(`loaded ${rows} rows in ${((performance.now() - loadStarted) / 1000).toFixed(1)} s\n`);

const variants: Array<[string, Omit<BrowseFilter, "state">]> = [
  ["", {}],
  [" oldest", { order: "oldest" }],
  [" task", { task: "task-3" }],
  [" search", { text: "c-4242" }],
];
const result: Record<string, number> = { rows };
let slowest = 0;
for (const state of BROWSE_STATES) {
  for (const [label, variant] of variants) {
    const times: number[] = [];
    let after: string | undefined;
    // Page after page from the start (a text search that finds little goes on from where its budget ran out).
    for (let page = 0; page < pages; page++) {
      const started = performance.now();
      const found = await browseJobs(pool, { state, ...variant, limit: 50, ...(after ? { after } : {}) });
      times.push(performance.now() - started);
      after = found.next ?? undefined;
      if (after === undefined) break;
    }
    times.sort((a, b) => a - b);
    const p95 = percentile(times, 95);
    result[`${state}${label.replace(" ", "_")}P95Ms`] = Number(p95.toFixed(2));
    process.stderr.write(`${(state + label).padEnd(20)} pages ${String(times.length).padStart(3)}  p50 ${percentile(times, 50).toFixed(2).padStart(6)} ms  p95 ${p95.toFixed(2).padStart(6)} ms\n`);
    slowest = Math.max(slowest, p95);
  }
}
result.maxP95Ms = Number(slowest.toFixed(2));
await pool.end();
report(result);
