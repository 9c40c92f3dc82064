// Throughput of `picket worker --processes N`: N no-op jobs bulk-enqueued, then drained by the CLI
// worker with 1, 2, ... processes, alternating, each run on a fresh database of one server
// (embedded by default, DATABASE_URL to override). jobs/s from the worker's start to the last
// outcome recorded, on the database's clock for both ends.
// Usage: node bench/processes.ts [--jobs 30000] [--processes 1,2] [--runs 3]
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";
import { enqueueJobs, migrate, startEmbeddedPostgres } from "../src/db/index.ts";
import { createFreshDatabase } from "./lib/db.ts";

const { values } = parseArgs({ options: { jobs: { type: "string", default: "30000" }, processes: { type: "string", default: "1,2" }, runs: { type: "string", default: "3" } } });
const jobs = Number(values.jobs);
const counts = values.processes!.split(",").map(Number);
const cli = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
const tasks = fileURLToPath(new URL("./noop-tasks.ts", import.meta.url));

const drain = async (adminUrl: string, processes: number): Promise<number> => {
  const database = await createFreshDatabase(adminUrl, "picket_bench_processes");
  const pool = new pg.Pool({ connectionString: database.url, max: 4 });
  try {
    await migrate(pool);
    for (let i = 0; i < jobs; i += 10_000) await enqueueJobs(pool, Array.from({ length: Math.min(10_000, jobs - i) }, () => ({ type: "noop" })));
    await pool.query("ANALYZE picket.jobs");
    const { rows: [start] } = await pool.query("SELECT clock_timestamp() AS t");
    const worker = spawn(process.execPath, [cli, "worker", "--tasks", tasks, "--processes", String(processes)], {
      env: { ...process.env, DATABASE_URL: database.url, PICKET_LOG_LEVEL: "warn" },
      stdio: "inherit",
    });
    for (;;) {
      const { rows } = await pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE status = 'completed'");
      if (rows[0].n >= jobs) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const { rows: [end] } = await pool.query("SELECT max(finished_at) AS t FROM picket.jobs");
    worker.kill("SIGTERM");
    await new Promise((resolve) => worker.once("exit", resolve));
    return jobs / ((end.t.getTime() - start.t.getTime()) / 1000);
  } finally {
    await pool.end();
    await database.drop();
  }
};

const server = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
try {
  const results = new Map<number, number[]>(counts.map((n) => [n, []]));
  for (let run = 0; run < Number(values.runs); run++) {
    for (const n of counts) {
      const rate = await drain(process.env.DATABASE_URL ?? server!.url, n);
      results.get(n)!.push(rate);
      process.stdout.write(`run ${run + 1}, ${n} process(es): ${Math.round(rate)} jobs/s\n`);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  for (const [n, rates] of results) {
    process.stdout.write(`--processes ${n}: median ${Math.round(median(rates))} jobs/s (${rates.map(Math.round).join(", ")})\n`);
  }
} finally {
  await server?.stop();
}
