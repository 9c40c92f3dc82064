// graphile-worker through bench/throughput.ts's scenario: N no-op jobs bulk-enqueued, drained by
// one worker; jobs/s from worker start until the queue is observed empty (graphile-worker deletes
// finished jobs, so "the last outcome recorded" is the last row gone), and the drain's costs per
// job (bench/lib/costs.ts). Tables are fresh and never analyzed unless --analyze.
// Usage: node bench/peers/throughput-graphile.ts --url <database url> --jobs 100000 [--tuned] [--analyze]
import { parseArgs } from "node:util";
import pg from "pg";
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";
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
await runMigrations({ connectionString });
const setup = new pg.Pool({ connectionString, max: 1 });
if (!values.analyze) await disableAutovacuum(setup, "graphile_worker");
const utils = await makeWorkerUtils({ connectionString });
const enqueueStart = performance.now();
for (let i = 0; i < jobs; i += 10_000) {
  await utils.addJobs(Array.from({ length: Math.min(10_000, jobs - i) }, () => ({ identifier: "noop", payload: {} })));
}
const enqueueMs = performance.now() - enqueueStart;
await utils.release();
if (values.analyze) await analyzeSchema(setup, "graphile_worker");
// The enqueue's connections close before the drain's costs are measured.
await setup.end();
// The documented high-throughput settings, and otherwise the defaults.
const tuned = values.tuned
  ? { concurrentJobs: 24, maxPoolSize: 25, localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 }
  : {};
const meter = await openMeter(connectionString);
await meter.start();
const started = performance.now();
let done = 0;
const runner = await run({
  preset: { worker: { connectionString, ...tuned } },
  noHandleSignals: true,
  // Quiet, as picket runs at level warn: graphile-worker logs a line per job by default.
  logger: new Logger(() => () => undefined),
  taskList: { noop: async () => undefined },
} as never);
for (;;) {
  const { rows } = await meter.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs");
  done = jobs - rows[0].n;
  if (rows[0].n === 0 || performance.now() - started > deadline) break;
  await new Promise((r) => setTimeout(r, 20));
}
const seconds = (performance.now() - started) / 1000;
await runner.stop();
// A cut-off run: the jobs done by the time the worker stopped.
const { rows: [left] } = await meter.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs");
const costs = await meter.stop(jobs - left.n);
await meter.end();
report({ jobs: done, seconds, jobsPerSecond: done / seconds, cutOff: done < jobs, enqueuePerSecond: jobs / (enqueueMs / 1000), ...costs });
process.exit(0);
