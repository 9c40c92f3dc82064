// npm run bench: every scenario, several times, each run in a fresh process against a fresh
// database on one PostgreSQL (embedded by default, DATABASE_URL to override); prints medians with
// min–max and picket ÷ peer ratios, and rewrites docs/benchmarks.md with the results.
// Usage: node bench/run.ts [--runs 3] [--jobs 100000] [--only throughput,latency,...]
import { execFileSync, spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { startEmbeddedPostgres } from "../src/db/index.ts";
import { createFreshDatabase } from "./lib/db.ts";

const { values } = parseArgs({
  options: { runs: { type: "string", default: "3" }, jobs: { type: "string", default: "100000" }, only: { type: "string" } },
});
const runs = Number(values.runs);
const jobs = values.jobs!;
const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));

if (!existsSync(here("./peers/node_modules"))) {
  process.stdout.write("installing the peers (graphile-worker, pg-boss) into bench/peers …\n");
  execFileSync("npm", ["install", "--no-audit", "--no-fund", "--prefix", here("./peers")], { stdio: "inherit" });
}

interface Scenario {
  group: string;
  name: string;
  script: string;
  args: string[];
  node?: string[];
  metric: string;
  unit: string;
  /** Higher is better (throughput) or lower (latency, memory, recovery). */
  higherIsBetter: boolean;
}

const throughput = (name: string, script: string, tuned: boolean): Scenario => ({
  group: "throughput",
  name,
  script,
  args: ["--jobs", jobs, ...(tuned ? ["--tuned"] : [])],
  metric: "jobsPerSecond",
  unit: "jobs/s",
  higherIsBetter: true,
});

// The same backlog (--jobs pending rows) in an otherwise empty table, and behind a million finished
// rows: the drain's throughput and the claim's and sweep's statement latency.
const scaleScenarios = (label: string, finished: string): Scenario[] =>
  [
    ["throughput", "jobsPerSecond", "jobs/s", true],
    ["claim statement p50", "claimP50Ms", "ms", false],
    ["claim statement p95", "claimP95Ms", "ms", false],
    ["sweep statement p50", "sweepP50Ms", "ms", false],
    ["sweep statement p95", "sweepP95Ms", "ms", false],
  ].map(([what, metric, unit, higherIsBetter]) => ({
    group: "scale",
    name: `picket scale, ${label}: ${what}`,
    script: "scale.ts",
    args: ["--finished", finished, "--pending", jobs],
    metric: metric as string,
    unit: unit as string,
    higherIsBetter: higherIsBetter as boolean,
  }));

const scenarios: Scenario[] = [
  throughput("picket (defaults)", "throughput.ts", false),
  throughput("picket (concurrency 200)", "throughput.ts", true),
  throughput("graphile-worker (defaults)", "peers/throughput-graphile.ts", false),
  throughput("graphile-worker (high-throughput settings)", "peers/throughput-graphile.ts", true),
  throughput("pg-boss (defaults)", "peers/throughput-pgboss.ts", false),
  throughput("pg-boss (batchSize 100, localConcurrency 4)", "peers/throughput-pgboss.ts", true),
  ...["1", "2"].map((n): Scenario => ({
    group: "processes",
    name: `picket worker --processes ${n} (concurrency 200 each)`,
    script: "processes.ts",
    args: ["--jobs", jobs, "--processes", n, "--concurrency", "200"],
    metric: "jobsPerSecond",
    unit: "jobs/s",
    higherIsBetter: true,
  })),
  { group: "enqueue", name: "picket bulk enqueue", script: "throughput.ts", args: ["--jobs", jobs, "--tuned"], metric: "enqueuePerSecond", unit: "jobs/s", higherIsBetter: true },
  { group: "enqueue", name: "graphile-worker addJobs", script: "peers/throughput-graphile.ts", args: ["--jobs", jobs], metric: "enqueuePerSecond", unit: "jobs/s", higherIsBetter: true },
  { group: "enqueue", name: "pg-boss insert", script: "peers/throughput-pgboss.ts", args: ["--jobs", jobs], metric: "enqueuePerSecond", unit: "jobs/s", higherIsBetter: true },
  { group: "limit", name: "bare claim + complete loop (picket's statements)", script: "limit.ts", args: ["--jobs", jobs], metric: "jobsPerSecond", unit: "jobs/s", higherIsBetter: true },
  { group: "latency", name: "picket enqueue → handler p50", script: "latency.ts", args: [], metric: "p50Ms", unit: "ms", higherIsBetter: false },
  { group: "latency", name: "picket enqueue → handler p95", script: "latency.ts", args: [], metric: "p95Ms", unit: "ms", higherIsBetter: false },
  { group: "latency", name: "graphile-worker add → handler p50", script: "peers/latency-graphile.ts", args: [], metric: "p50Ms", unit: "ms", higherIsBetter: false },
  { group: "latency", name: "graphile-worker add → handler p95", script: "peers/latency-graphile.ts", args: [], metric: "p95Ms", unit: "ms", higherIsBetter: false },
  { group: "recovery", name: "picket SIGKILL → 100 jobs done elsewhere", script: "recovery.ts", args: [], metric: "recoverySeconds", unit: "s", higherIsBetter: false },
  ...scaleScenarios("empty table", "0"),
  ...scaleScenarios("1,000,000 finished rows", "1000000"),
  { group: "memory", name: "picket RSS per in-flight job (10,000)", script: "memory.ts", args: [], node: ["--expose-gc"], metric: "kibPerJob", unit: "KiB", higherIsBetter: false },
  { group: "memory", name: "picket live heap per in-flight job (10,000)", script: "memory.ts", args: [], node: ["--expose-gc"], metric: "heapKibPerJob", unit: "KiB", higherIsBetter: false },
];
const selected = values.only ? scenarios.filter((s) => values.only!.split(",").includes(s.group)) : scenarios;

const runOnce = (adminUrl: string, scenario: Scenario): Promise<Record<string, number>> =>
  createFreshDatabase(adminUrl, "bench").then(
    (db) =>
      new Promise((resolve, reject) => {
        const child = spawn(process.execPath, [...(scenario.node ?? []), here(`./${scenario.script}`), "--url", db.url, ...scenario.args], {
          stdio: ["ignore", "pipe", "inherit"],
          env: { ...process.env, PICKET_LOG_LEVEL: "warn" },
        });
        let out = "";
        child.stdout.on("data", (c: Buffer) => (out += c.toString()));
        child.on("exit", async (code) => {
          await db.drop().catch(() => undefined);
          const line = out.split("\n").find((l) => l.startsWith("BENCH_RESULT "));
          if (code !== 0 || !line) return reject(new Error(`${scenario.name}: exit ${code}\n${out.slice(-2000)}`));
          resolve(JSON.parse(line.slice("BENCH_RESULT ".length)));
        });
      }),
  );

const server = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const adminUrl = process.env.DATABASE_URL ?? server!.url;
const results: Array<{ scenario: Scenario; values: number[] }> = [];
try {
  // Same-named scripts share runs (the enqueue rate comes from the throughput runs' enqueue phase).
  const cache = new Map<string, Array<Record<string, number>>>();
  for (const scenario of selected) {
    const key = `${scenario.script} ${scenario.args.join(" ")}`;
    if (!cache.has(key)) {
      const rs: Array<Record<string, number>> = [];
      for (let i = 0; i < runs; i++) {
        process.stdout.write(`${scenario.name} — run ${i + 1}/${runs} … `);
        const r = await runOnce(adminUrl, scenario);
        process.stdout.write(`${JSON.stringify(r)}\n`);
        rs.push(r);
      }
      cache.set(key, rs);
    }
    results.push({ scenario, values: cache.get(key)!.map((r) => r[scenario.metric]!) });
  }
} finally {
  await server?.stop();
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fmt = (x: number) => (x >= 100 ? Math.round(x).toLocaleString("en-US") : x.toFixed(x >= 10 ? 1 : 2));
// picket's best median for a group and metric (the highest rate, the lowest latency).
const picketBest = (group: string, metric = "jobsPerSecond") => {
  const ours = results.filter((r) => r.scenario.group === group && r.scenario.metric === metric && r.scenario.name.startsWith("picket"));
  if (ours.length === 0) return undefined;
  const medians = ours.map((r) => median(r.values));
  return ours[0]!.scenario.higherIsBetter ? Math.max(...medians) : Math.min(...medians);
};
const lines = ["| scenario | median | min–max | picket ÷ this |", "| --- | ---: | ---: | ---: |"];
for (const r of results) {
  const m = median(r.values);
  const best = picketBest(r.scenario.group, r.scenario.metric);
  const ratio = best !== undefined && !r.scenario.name.startsWith("picket") ? (best / m).toFixed(2) : "";
  lines.push(`| ${r.scenario.name} | ${fmt(m)} ${r.scenario.unit} | ${fmt(Math.min(...r.values))}–${fmt(Math.max(...r.values))} | ${ratio} |`);
}
const limit = results.find((r) => r.scenario.group === "limit");
const best = picketBest("throughput");
const share = limit && best ? `\npicket's best throughput is ${((100 * best) / median(limit.values)).toFixed(0)}% of the bare-statement limit on this server.\n` : "";
const machine = `${cpus().length} × ${cpus()[0]?.model ?? "cpu"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${process.env.DATABASE_URL ? "PostgreSQL at DATABASE_URL" : "embedded PostgreSQL 18"}`;
const scaleAt = (label: string) => results.find((r) => r.scenario.name === `picket scale, ${label}: throughput`);
const [emptyScale, fullScale] = [scaleAt("empty table"), scaleAt("1,000,000 finished rows")];
const scaleShare = emptyScale && fullScale
  ? `With 1,000,000 finished rows in the table, throughput is ${((100 * median(fullScale.values)) / median(emptyScale.values)).toFixed(0)}% of the empty-table figure.\n`
  : "";
const table = `${lines.join("\n")}\n${share}${scaleShare}`;
process.stdout.write(`\n${table}\n`);
// The generated part of docs/benchmarks.md sits between two markers; the rest of the page (the
// optimisation log) is written by hand and kept.
const generated = `<!-- generated:start (bench/run.ts) -->
Generated by \`npm run bench -- --runs ${runs} --jobs ${jobs}\` on ${new Date().toISOString().slice(0, 10)}.
Machine: ${machine}. Each number is the median of ${runs} run(s), each in a fresh process against a
fresh database; min–max beside it. Throughput is no-op jobs drained by one worker process (the
\`--processes\` rows: by the CLI worker's processes), from worker start to the last outcome
recorded in the database. "picket ÷ this" compares picket's best
median on the same metric: above 1 favours picket for rates, below 1 favours it for latencies.

${table}<!-- generated:end -->`;
// A partial run (--only) would leave the table without the scenarios it skipped: printed only.
if (values.only) {
  process.stdout.write("--only: docs/benchmarks.md left as it is\n");
  process.exit(0);
}
const docPath = here("../docs/benchmarks.md");
const previous = existsSync(docPath) ? readFileSync(docPath, "utf8") : "# Benchmarks\n\n<!-- generated:start --><!-- generated:end -->\n";
writeFileSync(docPath, previous.replace(/<!-- generated:start[\s\S]*<!-- generated:end -->/, generated));
process.stdout.write("updated docs/benchmarks.md\n");
