// Throughput: N no-op jobs bulk-enqueued, then drained by one picket worker in this process.
// jobs/s from worker start to the last outcome recorded (the database's clock for both ends), and
// the drain's costs per job (bench/lib/costs.ts). Tables are fresh and never analyzed unless
// --analyze (bench/lib/db.ts).
// Usage: node bench/throughput.ts --url <database url> --jobs 100000 [--tuned] [--analyze] [--keep-completed]
import { parseArgs } from "node:util";
import pg from "pg";
import { createLogger, createSupervisor, defineTask, enqueueJobs, migrate } from "../src/index.ts";
import { openMeter } from "./lib/costs.ts";
import { analyzeSchema, disableAutovacuum, report } from "./lib/db.ts";

const { values } = parseArgs({
  options: { url: { type: "string" }, jobs: { type: "string", default: "100000" }, tuned: { type: "boolean", default: false }, analyze: { type: "boolean", default: false }, "keep-completed": { type: "boolean", default: false } },
});
const url = values.url!;
const jobs = Number(values.jobs);
const pool = new pg.Pool({ connectionString: url, max: 4 });
await migrate(pool);
if (!values.analyze) await disableAutovacuum(pool, "picket");

const batch = 10_000;
const enqueueStart = performance.now();
for (let i = 0; i < jobs; i += batch) {
  await enqueueJobs(pool, Array.from({ length: Math.min(batch, jobs - i) }, () => ({ type: "noop" })));
}
const enqueueMs = performance.now() - enqueueStart;
if (values.analyze) await analyzeSchema(pool, "picket");
// The enqueue's connections close before the drain's costs are measured.
await pool.end();

const noop = defineTask({ name: "noop", handler: async () => undefined });
const supervisor = createSupervisor({
  connectionString: url,
  tasks: [noop],
  logger: createLogger({ level: "warn" }),
  retention: false,
  keepCompleted: values["keep-completed"]!,
  ...(values.tuned ? { concurrency: 200, pollIntervalMs: 100 } : {}),
});
const meter = await openMeter(url);
await meter.start();
const { rows: [start] } = await meter.query("SELECT clock_timestamp() AS t");
// The drain ends with the last outcome written (a completed row may be deleted: the worker's own
// count says when, and the database's clock then is the end).
let finished = 0;
const drained = new Promise<void>((resolve) => supervisor.onJobFinished(() => ++finished === jobs && resolve()));
await supervisor.start();
await drained;
const { rows: [end] } = await meter.query("SELECT clock_timestamp() AS t");
await supervisor.stop();
const costs = await meter.stop(jobs);
await meter.end();
const seconds = (end.t.getTime() - start.t.getTime()) / 1000;
report({ jobs, seconds, jobsPerSecond: jobs / seconds, keepCompleted: values["keep-completed"], enqueuePerSecond: jobs / (enqueueMs / 1000), ...costs });
