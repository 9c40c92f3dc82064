// The limit: the same drain as bench/throughput.ts done by a bare loop over picket's own claim and
// complete statements, with no handler, no machine and no runtime: the ceiling of this server.
// Also the drain's costs per job (bench/lib/costs.ts); tables never analyzed unless --analyze.
// Usage: node bench/limit.ts --url <database url> --jobs 100000 [--batch 200] [--connections 4] [--analyze] [--keep-completed]
import { parseArgs } from "node:util";
import pg from "pg";
// The claim and the completion are picket's internals, not its public API: from src/db directly.
import { claimJobs, completeJobs } from "../src/db/index.ts";
import { enqueueJobs, migrate } from "../src/index.ts";
import { openMeter } from "./lib/costs.ts";
import { analyzeSchema, disableAutovacuum, report } from "./lib/db.ts";

const { values } = parseArgs({
  options: {
    url: { type: "string" },
    jobs: { type: "string", default: "100000" },
    batch: { type: "string", default: "200" },
    connections: { type: "string", default: "4" },
    analyze: { type: "boolean", default: false },
    "keep-completed": { type: "boolean", default: false },
  },
});
const keepCompleted = values["keep-completed"]!;
const jobs = Number(values.jobs);
const batch = Number(values.batch);
const setup = new pg.Pool({ connectionString: values.url, max: 4 });
await migrate(setup);
if (!values.analyze) await disableAutovacuum(setup, "picket");
for (let i = 0; i < jobs; i += 10_000) await enqueueJobs(setup, Array.from({ length: Math.min(10_000, jobs - i) }, () => ({ type: "noop" })));
if (values.analyze) await analyzeSchema(setup, "picket");
// The enqueue's connections close before the drain's costs are measured.
await setup.end();

const want = { type: "noop", limit: batch, leaseMs: 30_000, backoffBaseMs: 1_000, backoffMaxMs: 3_600_000 };
const meter = await openMeter(values.url!);
await meter.start();
const { rows: [start] } = await meter.query("SELECT clock_timestamp() AS t");
const pool = new pg.Pool({ connectionString: values.url, max: Number(values.connections) });
let completed = 0;
await Promise.all(
  Array.from({ length: Number(values.connections) }, async () => {
    for (;;) {
      const claimed = await claimJobs(pool, "limit", [want]);
      if (claimed.length === 0) return;
      // A row another connection's claim holds for a moment is reported busy: written again, as
      // the runtime does.
      let left = claimed.map((j) => ({ id: j.id, token: j.claimToken }));
      while (left.length > 0) {
        const results = await completeJobs(pool, left, { keepCompleted });
        completed += results.filter((r) => r.outcome === "applied").length;
        left = left.filter((_, i) => results[i]!.outcome === "busy");
      }
    }
  }),
);
// The last completion has committed: the database's clock now is the drain's end.
const { rows: [end] } = await meter.query("SELECT clock_timestamp() AS t");
await pool.end();
const costs = await meter.stop(completed);
await meter.end();
const seconds = (end.t.getTime() - start.t.getTime()) / 1000;
report({ jobs: completed, seconds, jobsPerSecond: completed / seconds, keepCompleted, ...costs });
