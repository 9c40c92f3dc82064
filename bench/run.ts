// npm run bench: every scenario, several times, each run in a fresh process against a fresh
// database on one PostgreSQL (embedded by default, DATABASE_URL to override); prints medians with
// min–max, picket ÷ peer ratios and the drains' costs per job, and rewrites docs/benchmarks.md
// with the results.
// Usage: node bench/run.ts [--runs 3] [--jobs 100000] [--only throughput,latency,...] [--analyze]
//   --analyze   ANALYZE the queues' tables after the enqueue (default: fresh tables, never
//               analyzed, autovacuum off for them; see bench/lib/db.ts)
// With DATABASE_URL, PostgreSQL's CPU is measured only if BENCH_POSTMASTER_PID names that server's
// postmaster on this machine; statements only if it preloads pg_stat_statements.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { startEmbeddedPostgres } from "../src/db/index.ts";
import { createFreshDatabase } from "./lib/db.ts";

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "3" },
    jobs: { type: "string", default: "100000" },
    only: { type: "string" },
    analyze: { type: "boolean", default: false },
  },
});
const runs = Number(values.runs);
const jobs = values.jobs!;
const analyze = values.analyze ? ["--analyze"] : [];
const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));

if (!existsSync(here("./peers/node_modules"))) {
  process.stdout.write("installing the peers (graphile-worker, pg-boss) into bench/peers …\n");
  execFileSync("npm", ["install", "--no-audit", "--no-fund", "--prefix", here("./peers")], { stdio: "inherit" });
}

/** One benchmark process: scenarios that name the same script and arguments share its runs. */
interface Run {
  script: string;
  args: string[];
  node?: string[];
}
const runKey = (run: Run) => `${run.script} ${run.args.join(" ")}`;

interface Scenario {
  group: string;
  name: string;
  run: Run;
  metric: string;
  unit: string;
  /** Higher is better (throughput) or lower (latency, memory, recovery). */
  higherIsBetter: boolean;
  /** Scenarios compared with each other ("picket ÷ this") share group, metric and variant. */
  variant?: string;
}

// The drains: no-op jobs bulk-enqueued, then drained; each also reports its costs per job.
const drains = {
  picketDefaults: { script: "throughput.ts", args: ["--jobs", jobs, ...analyze] },
  picketBest: { script: "throughput.ts", args: ["--jobs", jobs, "--tuned", ...analyze] },
  picketBestKept: { script: "throughput.ts", args: ["--jobs", jobs, "--tuned", "--keep-completed", ...analyze] },
  bareLoop: { script: "limit.ts", args: ["--jobs", jobs, ...analyze] },
  bareLoopKept: { script: "limit.ts", args: ["--jobs", jobs, "--keep-completed", ...analyze] },
  graphileDefaults: { script: "peers/throughput-graphile.ts", args: ["--jobs", jobs, ...analyze] },
  graphileTuned: { script: "peers/throughput-graphile.ts", args: ["--jobs", jobs, "--tuned", ...analyze] },
  pgbossDefaults: { script: "peers/throughput-pgboss.ts", args: ["--jobs", jobs, ...analyze] },
  pgbossTuned: { script: "peers/throughput-pgboss.ts", args: ["--jobs", jobs, "--tuned", ...analyze] },
} satisfies Record<string, Run>;

const workerCounts = ["1", "8", "32"];
const workersRun = (n: string, mixed: boolean): Run => ({ script: "workers.ts", args: ["--jobs", jobs, "--workers", n, ...(mixed ? ["--mixed"] : []), ...analyze] });

const throughput = (name: string, run: Run): Scenario => ({ group: "throughput", name, run, metric: "jobsPerSecond", unit: "jobs/s", higherIsBetter: true });

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
    run: { script: "scale.ts", args: ["--finished", finished, "--pending", jobs] },
    metric: metric as string,
    unit: unit as string,
    higherIsBetter: higherIsBetter as boolean,
  }));

// Pickup latency with synchronous_commit on (PostgreSQL's default: a commit waits for its WAL to
// reach disk) and off, for the enqueuer's and the worker's connections alike.
const latencyScenarios = (setting: "on" | "off"): Scenario[] =>
  (
    [
      ["picket enqueue → handler", "latency.ts"],
      ["graphile-worker add → handler", "peers/latency-graphile.ts"],
    ] as const
  ).flatMap(([name, script]) =>
    (["p50", "p95"] as const).map((p) => ({
      group: "latency",
      name: `${name} ${p}, synchronous_commit ${setting}`,
      run: { script, args: ["--synchronous-commit", setting] },
      metric: `${p}Ms`,
      unit: "ms",
      higherIsBetter: false,
      variant: setting,
    })),
  );

const scenarios: Scenario[] = [
  throughput("picket (defaults)", drains.picketDefaults),
  throughput("picket (concurrency 200)", drains.picketBest),
  throughput("picket (concurrency 200, keepCompleted)", drains.picketBestKept),
  throughput("graphile-worker (defaults)", drains.graphileDefaults),
  throughput("graphile-worker (high-throughput settings)", drains.graphileTuned),
  throughput("pg-boss (defaults)", drains.pgbossDefaults),
  throughput("pg-boss (batchSize 100, localConcurrency 4)", drains.pgbossTuned),
  ...["1", "2"].map((n): Scenario => ({
    group: "processes",
    name: `picket worker --processes ${n} (concurrency 200 each)`,
    run: { script: "processes.ts", args: ["--jobs", jobs, "--processes", n, "--concurrency", "200", ...analyze] },
    metric: "jobsPerSecond",
    unit: "jobs/s",
    higherIsBetter: true,
  })),
  // Many workers against one server (bench/workers.ts): plain jobs, and with a tenth of them on
  // serial queues and a limited task (--mixed), which go through the slow claim.
  ...workerCounts.flatMap((n) =>
    [false, true].map((mixed): Scenario => ({
      group: "workers",
      name: `picket ${n} worker process${n === "1" ? "" : "es"} (concurrency 10 each${mixed ? ", a tenth of the jobs queued or limited" : ""})`,
      run: workersRun(n, mixed),
      metric: "jobsPerSecond",
      unit: "jobs/s",
      higherIsBetter: true,
    })),
  ),
  // The enqueue rates come from the drains' enqueue phase.
  { group: "enqueue", name: "picket bulk enqueue", run: drains.picketBest, metric: "enqueuePerSecond", unit: "jobs/s", higherIsBetter: true },
  { group: "enqueue", name: "graphile-worker addJobs", run: drains.graphileDefaults, metric: "enqueuePerSecond", unit: "jobs/s", higherIsBetter: true },
  { group: "enqueue", name: "pg-boss insert", run: drains.pgbossDefaults, metric: "enqueuePerSecond", unit: "jobs/s", higherIsBetter: true },
  { group: "limit", name: "bare claim + complete loop (picket's statements)", run: drains.bareLoop, metric: "jobsPerSecond", unit: "jobs/s", higherIsBetter: true },
  { group: "limit", name: "bare claim + complete loop, completed rows kept", run: drains.bareLoopKept, metric: "jobsPerSecond", unit: "jobs/s", higherIsBetter: true },
  ...latencyScenarios("on"),
  ...latencyScenarios("off"),
  { group: "recovery", name: "picket SIGKILL → 100 jobs done elsewhere", run: { script: "recovery.ts", args: [] }, metric: "recoverySeconds", unit: "s", higherIsBetter: false },
  ...scaleScenarios("empty table", "0"),
  ...scaleScenarios("1,000,000 finished rows", "1000000"),
  { group: "browse", name: "job browser page, slowest of 28 p95s (1,000,000 rows)", run: { script: "browse.ts", args: [] }, metric: "maxP95Ms", unit: "ms", higherIsBetter: false },
  { group: "browse", name: "job browser, dead jobs of a task, p95", run: { script: "browse.ts", args: [] }, metric: "dead_taskP95Ms", unit: "ms", higherIsBetter: false },
  { group: "browse", name: "job browser, text search in dead jobs, p95", run: { script: "browse.ts", args: [] }, metric: "dead_searchP95Ms", unit: "ms", higherIsBetter: false },
  { group: "memory", name: "picket RSS per in-flight job (10,000)", run: { script: "memory.ts", args: [], node: ["--expose-gc"] }, metric: "kibPerJob", unit: "KiB", higherIsBetter: false },
  { group: "memory", name: "picket live heap per in-flight job (10,000)", run: { script: "memory.ts", args: [], node: ["--expose-gc"] }, metric: "heapKibPerJob", unit: "KiB", higherIsBetter: false },
];
const selected = values.only ? scenarios.filter((s) => values.only!.split(",").includes(s.group)) : scenarios;

// The per-job cost table's rows: drains whose runs the selected scenarios include.
const costRows: Array<{ label: string; run: Run }> = [
  { label: "picket (defaults)", run: drains.picketDefaults },
  { label: "picket (best: concurrency 200)", run: drains.picketBest },
  { label: "picket (concurrency 200, keepCompleted)", run: drains.picketBestKept },
  { label: "picket bare claim + complete loop", run: drains.bareLoop },
  { label: "picket bare loop, completed rows kept", run: drains.bareLoopKept },
  { label: "graphile-worker (defaults)", run: drains.graphileDefaults },
  { label: "graphile-worker (high-throughput settings)", run: drains.graphileTuned },
  { label: "pg-boss (batchSize 100, localConcurrency 4)", run: drains.pgbossTuned },
];
const costColumns = [
  ["jobs/s", "jobsPerSecond"],
  ["worker CPU µs/job", "workerCpuUsPerJob"],
  ["PostgreSQL CPU µs/job", "pgCpuUsPerJob"],
  ["statements/job", "statementsPerJob"],
  ["commits/job", "commitsPerJob"],
  ["WAL bytes/job", "walBytesPerJob"],
] as const;

type Result = Record<string, unknown>;

const runOnce = (adminUrl: string, run: Run, env: NodeJS.ProcessEnv): Promise<Result> =>
  createFreshDatabase(adminUrl, "bench").then(
    (db) =>
      new Promise((resolve, reject) => {
        const child = spawn(process.execPath, [...(run.node ?? []), here(`./${run.script}`), "--url", db.url, ...run.args], {
          stdio: ["ignore", "pipe", "inherit"],
          env: { ...process.env, PICKET_LOG_LEVEL: "warn", ...env },
        });
        let out = "";
        child.stdout.on("data", (c: Buffer) => (out += c.toString()));
        child.on("exit", async (code) => {
          await db.drop().catch(() => undefined);
          const line = out.split("\n").find((l) => l.startsWith("BENCH_RESULT "));
          if (code !== 0 || !line) return reject(new Error(`${runKey(run)}: exit ${code}\n${out.slice(-2000)}`));
          resolve(JSON.parse(line.slice("BENCH_RESULT ".length)));
        });
      }),
  );

// pg_stat_statements, preloaded, counts the statements of the drains (bench/lib/costs.ts).
const server = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres({ settings: { shared_preload_libraries: "pg_stat_statements" } });
const adminUrl = process.env.DATABASE_URL ?? server!.url;
// The drains read the server's CPU from /proc, from its postmaster down (PostgreSQL's own lock
// file names it). With DATABASE_URL, only a BENCH_POSTMASTER_PID the caller gives.
const env: NodeJS.ProcessEnv = server ? { BENCH_POSTMASTER_PID: readFileSync(path.join(server.dataDir, "postmaster.pid"), "utf8").split("\n")[0]! } : {};

// Each distinct run once per repetition, the repetitions alternating (rep 1 of every run, then rep
// 2, ...): this machine's speed drifts over minutes, and alternating spreads the drift over all.
const plan = [...new Map(selected.map((s) => [runKey(s.run), s])).values()];
const done = new Map<string, Result[]>(plan.map((s) => [runKey(s.run), []]));
try {
  for (let i = 0; i < runs; i++) {
    for (const s of plan) {
      process.stdout.write(`run ${i + 1}/${runs}: ${s.run.script} ${s.run.args.join(" ")} … `);
      const r = await runOnce(adminUrl, s.run, env);
      process.stdout.write(`${JSON.stringify(r)}\n`);
      done.get(runKey(s.run))!.push(r);
    }
  }
} finally {
  await server?.stop();
}
const results = selected.map((scenario) => ({ scenario, values: done.get(runKey(scenario.run))!.map((r) => r[scenario.metric] as number) }));

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fmt = (x: number) => (x >= 100 ? Math.round(x).toLocaleString("en-US") : x.toFixed(x >= 10 ? 1 : 2));
// picket's best median for a group, metric and variant (the highest rate, the lowest latency).
const picketBest = (group: string, metric = "jobsPerSecond", variant?: string) => {
  const ours = results.filter((r) => r.scenario.group === group && r.scenario.metric === metric && r.scenario.variant === variant && r.scenario.name.startsWith("picket"));
  if (ours.length === 0) return undefined;
  const medians = ours.map((r) => median(r.values));
  return ours[0]!.scenario.higherIsBetter ? Math.max(...medians) : Math.min(...medians);
};
const lines = ["| scenario | median | min–max | picket ÷ this |", "| --- | ---: | ---: | ---: |"];
for (const r of results) {
  const m = median(r.values);
  const best = picketBest(r.scenario.group, r.scenario.metric, r.scenario.variant);
  const ratio = best !== undefined && !r.scenario.name.startsWith("picket") ? (best / m).toFixed(2) : "";
  lines.push(`| ${r.scenario.name} | ${fmt(m)} ${r.scenario.unit} | ${fmt(Math.min(...r.values))}–${fmt(Math.max(...r.values))} | ${ratio} |`);
}

// Costs per job: the median of each column over the runs; "n/a" where it was not measured (null).
const costLines = [`| drain | ${costColumns.map(([title]) => title).join(" | ")} |`, `| --- |${" ---: |".repeat(costColumns.length)}`];
let cutOff = false;
for (const row of costRows) {
  const rs = done.get(runKey(row.run));
  if (rs === undefined || rs.length === 0) continue;
  const rowCutOff = rs.some((r) => r.cutOff === true);
  cutOff ||= rowCutOff;
  const cells = costColumns.map(([, metric]) => {
    const xs = rs.map((r) => r[metric]).filter((x): x is number => typeof x === "number");
    if (xs.length === 0) return "n/a";
    // Three significant digits: batched statements come to a few hundredths per job.
    const m = median(xs);
    return m >= 100 ? Math.round(m).toLocaleString("en-US") : m.toPrecision(3);
  });
  costLines.push(`| ${row.label}${rowCutOff ? " †" : ""} | ${cells.join(" | ")} |`);
}
const costTable =
  costLines.length > 2
    ? `\nCosts per job of the drains above (medians of the same runs):\n\n${costLines.join("\n")}\n${cutOff ? "\n† cut off at 60 s: costs are per job done by then.\n" : ""}`
    : "";

// Many workers: what each job cost as workers are added, against one worker's (the target: the
// server's CPU per job within 1.2× of one worker's, throughput not falling).
const workerLines = ["| workers | jobs | jobs/s | worker CPU µs/job | PostgreSQL CPU µs/job | × one worker's | commits/job | WAL bytes/job | sessions waiting on the slow claim's lock |", "| ---: | --- |" + " ---: |".repeat(7)];
for (const mixed of [false, true]) {
  const one = done.get(runKey(workersRun("1", mixed)));
  for (const n of workerCounts) {
    const rs = done.get(runKey(workersRun(n, mixed)));
    if (rs === undefined || rs.length === 0) continue;
    const m = (metric: string, from = rs) => {
      const xs = from.map((r) => r[metric]).filter((x): x is number => typeof x === "number");
      return xs.length === 0 ? undefined : median(xs);
    };
    const cell = (x: number | undefined) => (x === undefined ? "n/a" : x >= 100 ? Math.round(x).toLocaleString("en-US") : x.toPrecision(3));
    const pg = m("pgCpuUsPerJob");
    const pgOne = one && one.length > 0 ? m("pgCpuUsPerJob", one) : undefined;
    workerLines.push(
      `| ${n} | ${mixed ? "a tenth queued or limited" : "plain"} | ${cell(m("jobsPerSecond"))} | ${cell(m("workerCpuUsPerJob"))} | ${cell(pg)} | ${pg !== undefined && pgOne ? `${(pg / pgOne).toFixed(2)}×` : "n/a"} | ${cell(m("commitsPerJob"))} | ${cell(m("walBytesPerJob"))} | ${cell(m("slowClaimLockWaiters"))} |`,
    );
  }
}
const workersTable =
  workerLines.length > 2
    ? `
Many workers against one server (\`bench/workers.ts\`: CLI worker processes at concurrency 10, started and registered, then a warm-up batch of a tenth of the jobs drained, before the jobs are inserted in one statement; the end found by probing the partial indexes; worker CPU is the sum over the processes; the last column is the mean number of sessions waiting on the slow claim's advisory lock, sampled every 10 ms):

${workerLines.join("\n")}
`
    : "";

const limit = results.find((r) => r.scenario.group === "limit");
const best = picketBest("throughput");
const share = limit && best ? `\npicket's best throughput is ${((100 * best) / median(limit.values)).toFixed(0)}% of the bare-statement limit on this server.\n` : "";
const machine = `${cpus().length} × ${cpus()[0]?.model ?? "cpu"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${process.env.DATABASE_URL ? "PostgreSQL at DATABASE_URL" : "embedded PostgreSQL 18"}`;
const scaleAt = (label: string) => results.find((r) => r.scenario.name === `picket scale, ${label}: throughput`);
const [emptyScale, fullScale] = [scaleAt("empty table"), scaleAt("1,000,000 finished rows")];
const scaleShare = emptyScale && fullScale
  ? `With 1,000,000 finished rows in the table, throughput is ${((100 * median(fullScale.values)) / median(emptyScale.values)).toFixed(0)}% of the empty-table figure.\n`
  : "";
const table = `${lines.join("\n")}\n${share}${scaleShare}${costTable}${workersTable}`;
process.stdout.write(`\n${table}\n`);
// The generated part of docs/benchmarks.md sits between two markers; the rest of the page (the
// optimisation log) is written by hand and kept.
const statistics = values.analyze
  ? "Tables analyzed (`--analyze`): ANALYZE ran after the enqueue, before the drain; autovacuum on."
  : "Tables fresh and never analyzed (the default; `--analyze` to analyze them after the enqueue): autovacuum, which would analyze them mid-run, is turned off (`autovacuum_enabled = false`) for every table in each queue's schema (picket, graphile_worker, pgboss) before the enqueue.";
const generated = `<!-- generated:start (bench/run.ts) -->
Generated by \`npm run bench -- --runs ${runs} --jobs ${jobs}${values.analyze ? " --analyze" : ""}\` on ${new Date().toISOString().slice(0, 10)}.
Machine: ${machine}. Each number is the median of ${runs} run(s), each in a fresh process against a
fresh database, the scenarios' runs alternating; min–max beside it. Throughput is no-op jobs drained by one worker process (the
\`--processes\` rows: by the CLI worker's processes), from worker start to the last outcome
recorded in the database. "picket ÷ this" compares picket's best
median on the same metric: above 1 favours picket for rates, below 1 favours it for latencies.
${statistics}

The costs per job are measured by each drain (\`bench/lib/costs.ts\`) from worker start to worker
stopped (the enqueue excluded), leaving out the benchmark's own connection that polls the queue:
worker CPU is \`process.cpuUsage()\` of the worker's process (user + system); PostgreSQL CPU is
utime + stime from \`/proc\` of every server process (backends, walwriter, checkpointer,
autovacuum, ..., and those that exited, through the postmaster's cutime + cstime), in clock ticks
of ${clockTickMs()} ms; statements are top-level statements clients sent (\`pg_stat_statements\`,
preloaded on the embedded server; BEGIN/COMMIT included); commits are \`pg_stat_database.xact_commit\`;
WAL bytes are the \`pg_current_wal_insert_lsn()\` difference.

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

function clockTickMs(): number {
  return 1000 / (Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100);
}
