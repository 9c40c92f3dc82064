// Throughput: N no-op jobs bulk-enqueued, then drained by one picket worker in this process.
// jobs/s from worker start to the last outcome recorded (the database's clock for both ends).
// Usage: node bench/throughput.ts --url <database url> --jobs 100000 [--tuned]
import { parseArgs } from "node:util";
import pg from "pg";
import { createLogger, createSupervisor, defineTask, enqueueJobs, migrate } from "../src/index.ts";
import { report } from "./lib/db.ts";

const { values } = parseArgs({ options: { url: { type: "string" }, jobs: { type: "string", default: "100000" }, tuned: { type: "boolean", default: false } } });
const url = values.url!;
const jobs = Number(values.jobs);
const pool = new pg.Pool({ connectionString: url, max: 4 });
await migrate(pool);

const batch = 10_000;
const enqueueStart = performance.now();
for (let i = 0; i < jobs; i += batch) {
  await enqueueJobs(pool, Array.from({ length: Math.min(batch, jobs - i) }, () => ({ type: "noop" })));
}
const enqueueMs = performance.now() - enqueueStart;
await pool.query("ANALYZE picket.jobs");

const noop = defineTask({ name: "noop", handler: async () => undefined });
const supervisor = createSupervisor({
  connectionString: url,
  tasks: [noop],
  logger: createLogger({ level: "warn" }),
  retention: false,
  ...(values.tuned ? { concurrency: 200, pollIntervalMs: 100 } : {}),
});
const { rows: [start] } = await pool.query("SELECT clock_timestamp() AS t");
await supervisor.start();
for (;;) {
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE status = 'completed'");
  if (rows[0].n >= jobs) break;
  await new Promise((r) => setTimeout(r, 50));
}
const { rows: [end] } = await pool.query("SELECT max(finished_at) AS t FROM picket.jobs");
await supervisor.stop();
await pool.end();
const seconds = (end.t.getTime() - start.t.getTime()) / 1000;
report({ jobs, seconds, jobsPerSecond: jobs / seconds, enqueuePerSecond: jobs / (enqueueMs / 1000) });
