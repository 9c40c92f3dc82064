// Many workers against one server, as users who outgrow one host run it: N CLI worker processes
// (each its own pool and poll loop, --concurrency each) drain one queue of no-op jobs. With
// --mixed, a tenth of the jobs go through the slow claim, which every worker runs once per poll
// and which one advisory lock per schema serialises: half of that tenth on 100 serial queues, half
// of a task limited to 20 running across the cluster.
//
// The workers start first, on an empty table, and are waited for (their heartbeat rows); the jobs
// are then inserted in one statement, so no worker's start-up falls in the window. The window runs
// from that statement's return to the last outcome: jobs/s on the database's clock, the workers'
// CPU (each process's utime + stime from /proc over the window), and the server's costs
// (bench/lib/costs.ts, from the insert's return to the workers stopped). During the window the
// sessions waiting on the slow claim's advisory lock are counted every 10 ms (pg_stat_activity):
// their mean is how many workers stood waiting on it at any moment.
// Before the window, a warm-up batch (--warmup, default a tenth of --jobs) is drained the same way.
// Usage: node bench/workers.ts --url <database url> --jobs 50000 --workers 8 [--concurrency 10] [--mixed] [--analyze] [--warmup N]
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";
import { migrate } from "../src/db/index.ts";
import { clockTicks, openMeter } from "./lib/costs.ts";
import { analyzeSchema, disableAutovacuum, report } from "./lib/db.ts";

const { values } = parseArgs({
  options: {
    url: { type: "string" },
    jobs: { type: "string", default: "50000" },
    workers: { type: "string", default: "1" },
    concurrency: { type: "string", default: "10" },
    mixed: { type: "boolean", default: false },
    analyze: { type: "boolean", default: false },
    warmup: { type: "string" },
  },
});
const url = values.url!;
const jobs = Number(values.jobs);
const workers = Number(values.workers);
const warmup = values.warmup === undefined ? Math.ceil(jobs / 10) : Number(values.warmup);
const cli = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
const tasks = fileURLToPath(new URL("./workers-tasks.ts", import.meta.url));

const pool = new pg.Pool({ connectionString: url, max: 2 });
await migrate(pool);
if (!values.analyze) await disableAutovacuum(pool, "picket");

const children: ChildProcess[] = Array.from({ length: workers }, () =>
  spawn(process.execPath, [cli, "worker", "--tasks", tasks, "--concurrency", values.concurrency!], {
    env: { ...process.env, DATABASE_URL: url, PICKET_LOG_LEVEL: "warn", BENCH_MIXED: values.mixed ? "1" : "0" },
    stdio: ["ignore", "inherit", "inherit"],
  }),
);
process.on("exit", () => children.forEach((child) => child.kill("SIGKILL")));
for (let waited = 0; ; waited += 100) {
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM picket.workers");
  if (rows[0].n >= workers) break;
  if (waited > 120_000) throw new Error(`only ${rows[0].n} of ${workers} workers registered within 120 s`);
  await new Promise((r) => setTimeout(r, 100));
}

/** A worker process's CPU so far (utime + stime), in clock ticks. */
const ticks = (pid: number): number => {
  const text = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return Number(f[11]) + Number(f[12]);
};
const workerTicks = () => children.reduce((sum, child) => sum + ticks(child.pid!), 0);

// The jobs, in one statement: 90% no-op (all of them without --mixed); with --mixed 5% on serial
// queues q0..q99 and 5% of the limited task.
const insert = `
  INSERT INTO picket.jobs (type, queue)
  SELECT CASE WHEN $2 AND g % 20 = 1 THEN 'limited' ELSE 'noop' END,
         CASE WHEN $2 AND g % 20 = 0 THEN 'q' || (g / 20) % 100 END
  FROM generate_series(1, $1::int) AS g`;
if (values.analyze) {
  // Statistics as the table would have them with this backlog in it, gathered before the window.
  await pool.query(insert, [jobs, values.mixed]);
  await analyzeSchema(pool, "picket");
  await pool.query("TRUNCATE picket.jobs CASCADE");
}

const meter = await openMeter(url);
// Whether any job is left, through the partial indexes that hold exactly the pending and the
// processing rows. (A count of them was a scan of the whole table every 10 ms, a third of a core
// on this server's two: the benchmark's own load, beside the drain it measured.)
await meter.query("SET enable_seqscan = off");
const anyLeft = `(EXISTS (SELECT 1 FROM picket.jobs WHERE status = 'pending' AND queue IS NULL)
                  OR EXISTS (SELECT 1 FROM picket.jobs WHERE status = 'pending' AND queue IS NOT NULL)
                  OR EXISTS (SELECT 1 FROM picket.jobs WHERE lock_until IS NOT NULL))::int`;
// A warm-up batch before the window, as long-running workers are warm: each worker's connections
// have planned their statements (the slow claim's PL/pgSQL function alone took 4 ms on a
// connection's first call against 0.5 ms after; 32 workers hold about 200 connections) and V8 has
// compiled the job path. Without it, most of 32 workers' extra cost per job was that start-up.
if (warmup > 0) {
  await meter.query(insert, [warmup, values.mixed]);
  while ((await meter.query(`SELECT ${anyLeft} AS n`)).rows[0].n !== 0) await new Promise((r) => setTimeout(r, 50));
}
await meter.query(insert, [jobs, values.mixed]);
await meter.start({ othersConnected: true });
const startTicks = workerTicks();
const { rows: [start] } = await meter.query("SELECT clock_timestamp() AS t");
let samples = 0;
let waiting = 0;
let end: { t: Date };
for (;;) {
  const { rows } = await meter.query(
    `SELECT ${anyLeft} AS n,
            (SELECT count(*)::int FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND datname = current_database()) AS waiting,
            clock_timestamp() AS t`,
  );
  end = rows[0];
  samples++;
  waiting += rows[0].waiting;
  if (rows[0].n === 0) break;
  await new Promise((r) => setTimeout(r, 10));
}
const cpuTicks = workerTicks() - startTicks;
await Promise.all(children.map((child) => new Promise((resolve) => (child.once("exit", resolve), child.kill("SIGTERM")))));
const costs = await meter.stop(jobs);
await meter.end();
await pool.end();
const seconds = (end.t.getTime() - start.t.getTime()) / 1000;
report({
  jobs,
  workers,
  concurrency: Number(values.concurrency),
  mixed: values.mixed,
  jobsPerSecond: jobs / seconds,
  ...costs,
  // The workers' own CPU, not this process's (the meter's workerCpuUsPerJob is this process: the monitor).
  workerCpuUsPerJob: (cpuTicks * (1e6 / clockTicks())) / jobs,
  slowClaimLockWaiters: waiting / samples,
});
