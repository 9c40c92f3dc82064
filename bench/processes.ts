// Throughput of `picket worker --processes N`: N no-op jobs bulk-enqueued, then drained by the CLI
// worker (its processes, each at --concurrency). jobs/s from the worker's start to the last outcome
// recorded, on the database's clock for both ends. bench/run.ts runs it for 1 and 2 processes.
// Tables are fresh and never analyzed unless --analyze (bench/lib/db.ts).
// Usage: node bench/processes.ts --url <database url> --jobs 100000 --processes 2 [--concurrency 200] [--analyze]
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";
import { enqueueJobs, migrate } from "../src/db/index.ts";
import { analyzeSchema, disableAutovacuum, report } from "./lib/db.ts";

const { values } = parseArgs({
  options: { url: { type: "string" }, jobs: { type: "string", default: "100000" }, processes: { type: "string", default: "2" }, concurrency: { type: "string", default: "200" }, analyze: { type: "boolean", default: false } },
});
const jobs = Number(values.jobs);
const cli = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
const tasks = fileURLToPath(new URL("./noop-tasks.ts", import.meta.url));

const pool = new pg.Pool({ connectionString: values.url, max: 4 });
await migrate(pool);
if (!values.analyze) await disableAutovacuum(pool, "picket");
for (let i = 0; i < jobs; i += 10_000) await enqueueJobs(pool, Array.from({ length: Math.min(10_000, jobs - i) }, () => ({ type: "noop" })));
if (values.analyze) await analyzeSchema(pool, "picket");
const { rows: [start] } = await pool.query("SELECT clock_timestamp() AS t");
const worker = spawn(process.execPath, [cli, "worker", "--tasks", tasks, "--processes", values.processes!, "--concurrency", values.concurrency!], {
  env: { ...process.env, DATABASE_URL: values.url, PICKET_LOG_LEVEL: "warn" },
  stdio: ["ignore", "inherit", "inherit"],
});
// Completed rows are deleted (the workers' defaults): the drain ends when no job is left, as seen
// by a poll every 20 ms (under 0.5% of a drain of seconds).
let end: { t: Date };
for (;;) {
  const { rows } = await pool.query("SELECT count(*)::int AS n, clock_timestamp() AS t FROM picket.jobs WHERE status IN ('pending', 'processing')");
  end = rows[0];
  if (rows[0].n === 0) break;
  await new Promise((r) => setTimeout(r, 20));
}
worker.kill("SIGTERM");
await new Promise((resolve) => worker.once("exit", resolve));
await pool.end();
report({ jobs, processes: Number(values.processes), jobsPerSecond: jobs / ((end.t.getTime() - start.t.getTime()) / 1000) });
