// pg-boss through bench/throughput.ts's scenario. jobs/s from worker start until every job is
// completed in pgboss.job.
// Usage: node bench/peers/throughput-pgboss.ts --url <database url> --jobs 100000 [--tuned]
import { parseArgs } from "node:util";
import pg from "pg";
import { PgBoss } from "pg-boss";

const { values } = parseArgs({
  options: { url: { type: "string" }, jobs: { type: "string", default: "100000" }, tuned: { type: "boolean", default: false }, "max-seconds": { type: "string", default: "60" } },
});
// A configuration too slow to drain the batch is cut off: the rate is what it managed until then.
const deadline = Number(values["max-seconds"]) * 1000;
const connectionString = values.url!;
const jobs = Number(values.jobs);
const boss = new PgBoss(connectionString);
boss.on("error", () => undefined);
await boss.start();
await boss.createQueue("noop");
const enqueueStart = performance.now();
for (let i = 0; i < jobs; i += 10_000) await boss.insert("noop", Array.from({ length: Math.min(10_000, jobs - i) }, () => ({ data: {} })));
const enqueueMs = performance.now() - enqueueStart;
const pool = new pg.Pool({ connectionString, max: 2 });
const started = performance.now();
let done = 0;
await boss.work("noop", values.tuned ? { batchSize: 100, localConcurrency: 4, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 } : {}, async () => undefined);
for (;;) {
  const { rows } = await pool.query("SELECT count(*) FILTER (WHERE state = 'completed')::int AS n FROM pgboss.job WHERE name = 'noop'");
  done = rows[0].n;
  if (done >= jobs || performance.now() - started > deadline) break;
  await new Promise((r) => setTimeout(r, 20));
}
const seconds = (performance.now() - started) / 1000;
await boss.stop({ graceful: false, wait: false } as never).catch(() => undefined);
await pool.end();
process.stdout.write(`BENCH_RESULT ${JSON.stringify({ jobs: done, seconds, jobsPerSecond: done / seconds, cutOff: done < jobs, enqueuePerSecond: jobs / (enqueueMs / 1000) })}\n`);
process.exit(0);
