// What a trigger on the job table costs jobs that do not use it: the no-op drain (bench/throughput.ts)
// on fresh databases with picket's statement-level AFTER UPDATE triggers as they are, and with one
// of them dropped, alternating, several runs each. Prints jobs/s and PostgreSQL CPU per job.
// Usage: node bench/trigger-cost.ts [--runs 3] [--jobs 100000] [--trigger jobs_workflow_report]
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";
import { migrate, startEmbeddedPostgres } from "../src/index.ts";
import { createFreshDatabase } from "./lib/db.ts";

const { values } = parseArgs({ options: { runs: { type: "string", default: "3" }, jobs: { type: "string", default: "100000" }, trigger: { type: "string", default: "jobs_workflow_report" } } });
const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const adminUrl = process.env.DATABASE_URL ?? embedded!.url;
const script = fileURLToPath(new URL("./throughput.ts", import.meta.url));
const results: Record<string, Array<{ jobsPerSecond: number; pgCpuUsPerJob: number }>> = { with: [], without: [] };
for (let run = 0; run < Number(values.runs); run++) {
  for (const variant of ["with", "without"] as const) {
    const db = await createFreshDatabase(adminUrl, "trigger_cost");
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    await migrate(pool);
    if (variant === "without") await pool.query(`DROP TRIGGER ${values.trigger} ON picket.jobs`);
    await pool.end();
    const out = execFileSync(process.execPath, [script, "--url", db.url, "--jobs", values.jobs!], {
      encoding: "utf8",
      env: { ...process.env, ...(embedded ? { BENCH_POSTMASTER_PID: readFileSync(path.join(embedded.dataDir, "postmaster.pid"), "utf8").split("\n")[0]! } : {}) },
    });
    const line = out.split("\n").find((l) => l.startsWith("BENCH_RESULT "))!;
    const r = JSON.parse(line.slice("BENCH_RESULT ".length));
    results[variant]!.push({ jobsPerSecond: r.jobsPerSecond, pgCpuUsPerJob: r.costs?.pgCpuUsPerJob ?? r.pgCpuUsPerJob });
    process.stdout.write(`${variant} ${values.trigger}: ${JSON.stringify(r)}\n`);
    await db.drop();
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
for (const variant of ["with", "without"] as const) {
  const rs = results[variant]!;
  process.stdout.write(`${variant}: ${median(rs.map((r) => r.jobsPerSecond))} jobs/s, PostgreSQL CPU ${median(rs.map((r) => r.pgCpuUsPerJob))} µs/job (median of ${rs.length})\n`);
}
await embedded?.stop();
