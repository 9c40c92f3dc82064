// Memory over time: one worker process (picket's CLI worker, or graphile-worker) at concurrency 10
// runs jobs that sleep 20–300 ms, kept topped up to a backlog of 100, for --minutes; its RSS (from
// /proc) is sampled every 5 s. Reports the mean RSS per quarter of the run, the minimum and the
// maximum, and the jobs done.
// Usage: node bench/soak.ts --url <database url> [--minutes 30] [--worker picket|graphile] [--concurrency 10]
import { execFileSync, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";
import { enqueueJobs, migrate } from "../src/index.ts";
import { report } from "./lib/db.ts";

const { values } = parseArgs({
  options: {
    url: { type: "string" },
    minutes: { type: "string", default: "30" },
    worker: { type: "string", default: "picket" },
    concurrency: { type: "string", default: "10" },
  },
});
const url = values.url!;
const graphile = values.worker === "graphile";
const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));
const pool = new pg.Pool({ connectionString: url, max: 2 });
const sleepMs = () => 20 + Math.floor(Math.random() * 281);
// graphile-worker's jobs are added through its SQL API (graphile_worker.add_job), once its worker
// has migrated its schema: this script never loads graphile-worker itself (bench/peers holds it).
const backlog = async (): Promise<number> =>
  (await pool.query(graphile ? "SELECT count(*)::int AS n FROM graphile_worker._private_jobs" : "SELECT count(*)::int AS n FROM picket.jobs WHERE status IN ('pending', 'processing')")).rows[0].n;
const add = async (n: number): Promise<void> => {
  const specs = Array.from({ length: n }, () => ({ ms: sleepMs() }));
  if (graphile) await pool.query("SELECT graphile_worker.add_job('soak'::text, p::json) FROM jsonb_array_elements($1::jsonb) AS p", [JSON.stringify(specs)]);
  else await enqueueJobs(pool, specs.map((payload) => ({ type: "soak", payload })));
};
// picket's worker runs as it is installed: the built CLI (node strips the types of a .ts file with
// a WebAssembly transpiler that holds its own memory, so running src would measure that too). The
// tasks module is TypeScript, as graphile-worker's harness is, so both processes load it.
if (!graphile) {
  execFileSync("npm", ["run", "--silent", "build"], { cwd: here(".."), stdio: "inherit" });
  await migrate(pool);
}

const child = graphile
  ? spawn(process.execPath, [here("./peers/soak-graphile.ts"), "--url", url, "--concurrency", values.concurrency!], { stdio: ["ignore", "pipe", "inherit"] })
  : spawn(process.execPath, [here("../dist/cli/main.js"), "worker", "--tasks", here("./soak-tasks.ts"), "--concurrency", values.concurrency!], {
      env: { ...process.env, DATABASE_URL: url, PICKET_LOG_LEVEL: "warn" },
      stdio: ["ignore", "pipe", "inherit"],
    });
// A driver that fails takes its worker with it.
process.on("exit", () => child.kill("SIGKILL"));
// graphile-worker's child prints a line once running, its schema migrated (picket's is, above).
if (graphile) await new Promise<void>((resolve) => child.stdout!.once("data", () => resolve()));
await add(100);
child.stdout!.resume();
const rssKiB = (): number => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))?.[1] ?? NaN);

const durationMs = Number(values.minutes) * 60_000;
const started = performance.now();
const samples: Array<{ atMs: number; rssKiB: number }> = [];
let done = 0;
while (performance.now() - started < durationMs) {
  const left = await backlog();
  if (left < 100) {
    await add(100 - left);
    done += 100 - left;
  }
  const atMs = performance.now() - started;
  if (samples.length === 0 || atMs - samples.at(-1)!.atMs >= 5_000) samples.push({ atMs, rssKiB: rssKiB() });
  await new Promise((r) => setTimeout(r, 200));
}
child.kill("SIGTERM");
await new Promise((r) => child.once("exit", r));
await pool.end();
const mib = (kib: number) => Math.round((kib / 1024) * 10) / 10;
const quarter = (q: number) => samples.filter((s) => s.atMs >= (q * durationMs) / 4 && s.atMs < ((q + 1) * durationMs) / 4);
const mean = (xs: { rssKiB: number }[]) => xs.reduce((a, s) => a + s.rssKiB, 0) / Math.max(xs.length, 1);
report({
  worker: graphile ? "graphile-worker" : "picket",
  minutes: Number(values.minutes),
  jobsDone: done,
  rssQuarterMeansMiB: [0, 1, 2, 3].map((q) => mib(mean(quarter(q)))),
  rssMinMiB: mib(Math.min(...samples.map((s) => s.rssKiB))),
  rssMaxMiB: mib(Math.max(...samples.map((s) => s.rssKiB))),
  rssLastQuarterMeanMiB: mib(mean(quarter(3))),
});
