// The limit: the same drain as bench/throughput.ts done by a bare loop over picket's own claim and
// complete statements, with no handler, no machine and no runtime: the ceiling of this server.
// Usage: node bench/limit.ts --url <database url> --jobs 100000 [--batch 200] [--connections 4]
import { parseArgs } from "node:util";
import pg from "pg";
import { claimJobs, completeJobs, enqueueJobs, migrate } from "../src/index.ts";
import { report } from "./lib/db.ts";

const { values } = parseArgs({
  options: { url: { type: "string" }, jobs: { type: "string", default: "100000" }, batch: { type: "string", default: "200" }, connections: { type: "string", default: "4" } },
});
const jobs = Number(values.jobs);
const batch = Number(values.batch);
const pool = new pg.Pool({ connectionString: values.url, max: Number(values.connections) + 1 });
await migrate(pool);
for (let i = 0; i < jobs; i += 10_000) await enqueueJobs(pool, Array.from({ length: Math.min(10_000, jobs - i) }, () => ({ type: "noop" })));
await pool.query("ANALYZE picket.jobs");
const want = { type: "noop", limit: batch, leaseMs: 30_000, backoffBaseMs: 1_000, backoffMaxMs: 3_600_000 };
const { rows: [start] } = await pool.query("SELECT clock_timestamp() AS t");
await Promise.all(
  Array.from({ length: Number(values.connections) }, async () => {
    for (;;) {
      const claimed = await claimJobs(pool, "limit", [want]);
      if (claimed.length === 0) return;
      // A row another connection's claim holds for a moment is reported busy: written again, as
      // the runtime does.
      let left = claimed.map((j) => ({ id: j.id, token: j.claimToken }));
      while (left.length > 0) {
        const results = await completeJobs(pool, left);
        left = left.filter((_, i) => results[i]!.outcome === "busy");
      }
    }
  }),
);
const { rows: [end] } = await pool.query("SELECT max(finished_at) AS t, count(*) FILTER (WHERE status = 'completed')::int AS n FROM picket.jobs");
await pool.end();
const seconds = (end.t.getTime() - start.t.getTime()) / 1000;
report({ jobs: end.n, seconds, jobsPerSecond: end.n / seconds });
