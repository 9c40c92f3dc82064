// pg-boss through bench/throughput.ts's scenario. jobs/s from worker start until every job is
// completed in pgboss.job, and the drain's costs per job (bench/lib/costs.ts). The jobs are
// inserted by one pg-boss instance, stopped before the drain, and worked by another, so that the
// enqueue's connections are gone when the costs are measured. Tables are fresh and never analyzed
// unless --analyze.
// Usage: node bench/peers/throughput-pgboss.ts --url <database url> --jobs 100000 [--tuned] [--analyze]
import { parseArgs } from "node:util";
import pg from "pg";
import { PgBoss } from "pg-boss";
import { openMeter } from "../lib/costs.ts";
import { analyzeSchema, disableAutovacuum, report } from "../lib/db.ts";

const { values } = parseArgs({
  options: {
    url: { type: "string" },
    jobs: { type: "string", default: "100000" },
    tuned: { type: "boolean", default: false },
    analyze: { type: "boolean", default: false },
    "max-seconds": { type: "string", default: "60" },
  },
});
// A configuration too slow to drain the batch is cut off: the rate is what it managed until then.
const deadline = Number(values["max-seconds"]) * 1000;
const connectionString = values.url!;
const jobs = Number(values.jobs);
const enqueuer = new PgBoss(connectionString);
enqueuer.on("error", () => undefined);
await enqueuer.start();
await enqueuer.createQueue("noop");
const setup = new pg.Pool({ connectionString, max: 1 });
// After createQueue: the queue's partition of pgboss.job is one of the tables.
if (!values.analyze) await disableAutovacuum(setup, "pgboss");
const enqueueStart = performance.now();
for (let i = 0; i < jobs; i += 10_000) await enqueuer.insert("noop", Array.from({ length: Math.min(10_000, jobs - i) }, () => ({ data: {} })));
const enqueueMs = performance.now() - enqueueStart;
await enqueuer.stop();
if (values.analyze) await analyzeSchema(setup, "pgboss");
await setup.end();

const meter = await openMeter(connectionString);
await meter.start();
const boss = new PgBoss(connectionString);
boss.on("error", () => undefined);
await boss.start();
const started = performance.now();
let done = 0;
await boss.work("noop", values.tuned ? { batchSize: 100, localConcurrency: 4, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 } : {}, async () => undefined);
for (;;) {
  const { rows } = await meter.query("SELECT count(*) FILTER (WHERE state = 'completed')::int AS n FROM pgboss.job WHERE name = 'noop'");
  done = rows[0].n;
  if (done >= jobs || performance.now() - started > deadline) break;
  await new Promise((r) => setTimeout(r, 20));
}
const seconds = (performance.now() - started) / 1000;
await boss.stop({ graceful: false }).catch(() => undefined);
// A cut-off run: the jobs done by the time the worker stopped.
const { rows: [completed] } = await meter.query("SELECT count(*) FILTER (WHERE state = 'completed')::int AS n FROM pgboss.job WHERE name = 'noop'");
const costs = await meter.stop(completed.n);
await meter.end();
report({ jobs: done, seconds, jobsPerSecond: done / seconds, cutOff: done < jobs, enqueuePerSecond: jobs / (enqueueMs / 1000), ...costs });
process.exit(0);
