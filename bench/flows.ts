// Flows: what a dependency costs. The same 10,000 no-op jobs drained by one worker in this process,
// four ways, each on a fresh database: independent (enqueueJobs), as one flow's fan-out between a
// start and a fan-in (enqueueFlow: 10,000 edges into the fan-in, one out of the start into each),
// as a fan-in alone (10,000 children, then their parent: the one shape BullMQ's flows, trees,
// share; BullMQ 6 on its PostgreSQL backend runs it too, bench/peers/flow-bullmq.ts, in its own
// process), and as 100 chains of 100 (9,900 edges, one into each job but the first). Per job, and per edge:
// the enqueue's time and statements, the drain's jobs/s, worker CPU, PostgreSQL CPU, statements,
// WAL bytes (bench/lib/costs.ts), and the row writes the flow trigger made (job_waits updates; the
// fan-in's own row is written once, when it becomes ready). One PostgreSQL for all: the embedded
// server with pg_stat_statements, or DATABASE_URL's.
// Usage: node bench/flows.ts [--jobs 10000] [--runs 3]
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { parseArgs } from "node:util";
import pg from "pg";
import { createLogger, createSupervisor, defineTask, enqueueFlow, enqueueJobs, migrate, startEmbeddedPostgres, type FlowJobSpec } from "../src/index.ts";
import { openMeter } from "./lib/costs.ts";
import { createFreshDatabase, disableAutovacuum } from "./lib/db.ts";

const { values } = parseArgs({ options: { jobs: { type: "string", default: "10000" }, runs: { type: "string", default: "3" } } });
const n = Number(values.jobs);
const runs = Number(values.runs);

const server = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres({ settings: { shared_preload_libraries: "pg_stat_statements" } });
if (server) process.env.BENCH_POSTMASTER_PID = readFileSync(path.join(server.dataDir, "postmaster.pid"), "utf8").split("\n")[0]!;
const adminUrl = process.env.DATABASE_URL ?? server!.url;

type Shape = "independent" | "fan" | "fan-in" | "chains" | "bullmq fan-in";
const shapes: Shape[] = ["independent", "fan", "fan-in", "chains", "bullmq fan-in"];
const peers = fileURLToPath(new URL("./peers/", import.meta.url));
if (!existsSync(`${peers}node_modules/bullmq`)) execFileSync("npm", ["install", "--no-audit", "--no-fund", "--prefix", peers], { stdio: "inherit" });

const flowOf = (shape: "fan" | "fan-in" | "chains"): FlowJobSpec[][] => {
  if (shape === "fan-in") {
    const leaves = Array.from({ length: n }, (_, i): FlowJobSpec => ({ name: `leaf-${i}`, type: "noop" }));
    return [[...leaves, { name: "sink", type: "noop", dependsOn: leaves.map((l) => l.name) }]];
  }
  if (shape === "fan") {
    const leaves = Array.from({ length: n }, (_, i): FlowJobSpec => ({ name: `leaf-${i}`, type: "noop", dependsOn: ["start"] }));
    return [[{ name: "start", type: "noop" }, ...leaves, { name: "sink", type: "noop", dependsOn: leaves.map((l) => l.name) }]];
  }
  return Array.from({ length: n / 100 }, () => Array.from({ length: 100 }, (_, i): FlowJobSpec => ({ name: `s${i}`, type: "noop", dependsOn: i === 0 ? [] : [`s${i - 1}`] })));
};

/** BullMQ's run, in a process of its own (its worker's CPU is that process's). */
const bullmq = async () => {
  const fresh = await createFreshDatabase(adminUrl, "bench_flows");
  const out = execFileSync(process.execPath, [`${peers}flow-bullmq.ts`, "--url", fresh.url, "--jobs", String(n)], { encoding: "utf8", env: process.env, stdio: ["ignore", "pipe", "inherit"] });
  await fresh.drop();
  const line = out.split("\n").find((l) => l.startsWith("BENCH_RESULT "))!;
  const r = JSON.parse(line.slice("BENCH_RESULT ".length));
  return { shape: "bullmq fan-in" as Shape, jobs: r.jobs as number, edges: n, enqueueMs: r.enqueueMs as number, enqueueStatements: Number.NaN, ...r };
};

const once = async (shape: Shape) => {
  if (shape === "bullmq fan-in") return bullmq();
  const fresh = await createFreshDatabase(adminUrl, "bench_flows");
  const pool = new pg.Pool({ connectionString: fresh.url, max: 4 });
  await migrate(pool);
  await disableAutovacuum(pool, "picket");
  let statements = 0;
  const counted = { query: (...args: unknown[]) => (statements++, (pool.query as (...a: unknown[]) => unknown)(...args)) } as unknown as pg.Pool;
  const enqueueStart = performance.now();
  let jobs = 0;
  let edges = 0;
  if (shape === "independent") {
    await enqueueJobs(counted, Array.from({ length: n }, () => ({ type: "noop" })));
    jobs = n;
  } else {
    for (const flow of flowOf(shape)) {
      await enqueueFlow(counted, { name: shape, jobs: flow });
      jobs += flow.length;
      edges += flow.reduce((sum, j) => sum + (j.dependsOn?.length ?? 0), 0);
    }
  }
  const enqueueMs = performance.now() - enqueueStart;
  await pool.end();

  const supervisor = createSupervisor({ connectionString: fresh.url, tasks: [defineTask({ name: "noop", handler: async () => undefined })], logger: createLogger({ level: "warn" }), retention: false, concurrency: 200, pollIntervalMs: 100 });
  const meter = await openMeter(fresh.url);
  await meter.start();
  const { rows: [start] } = await meter.query("SELECT clock_timestamp() AS t");
  let finished = 0;
  const drained = new Promise<void>((resolve) => supervisor.onJobFinished(() => ++finished === jobs && resolve()));
  await supervisor.start();
  await drained;
  const { rows: [end] } = await meter.query("SELECT clock_timestamp() AS t");
  await supervisor.stop();
  const costs = await meter.stop(jobs);
  const { rows: [writes] } = await meter.query(
    "SELECT (SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'picket.job_waits'::regclass)::int AS waits_updates, (SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'picket.jobs'::regclass)::int AS jobs_updates",
  ).catch(() => ({ rows: [{}] }));
  await meter.end();
  await fresh.drop();
  const seconds = (end.t.getTime() - start.t.getTime()) / 1000;
  return { shape, jobs, edges, enqueueMs, enqueueStatements: statements, jobsPerSecond: jobs / seconds, ...costs, ...writes };
};

type Result = Awaited<ReturnType<typeof once>>;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const results = new Map<Shape, Result[]>(shapes.map((s) => [s, []]));
for (let r = 0; r < runs; r++) for (const shape of shapes) results.get(shape)!.push(await once(shape));
if (server) await server.stop();

const med = (shape: Shape, key: keyof Result) => median(results.get(shape)!.map((r) => Number(r[key] ?? Number.NaN)));
const base = (key: keyof Result) => med("independent", key);
const fmt = (x: number, digits = 1) => (Number.isNaN(x) ? "—" : x.toLocaleString("en-US", { maximumFractionDigits: digits }));
const lines = [
  `Flows, ${n.toLocaleString("en-US")} no-op jobs, one worker (concurrency 200, poll 100 ms), medians of ${runs} runs:`,
  "",
  "| shape | edges | enqueue ms | enqueue statements | jobs/s | worker CPU µs/job | PostgreSQL CPU µs/job | statements/job | WAL bytes/job | job_waits updates |",
  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ...shapes.map((s) =>
    `| ${s} | ${fmt(med(s, "edges"), 0)} | ${fmt(med(s, "enqueueMs"), 0)} | ${fmt(med(s, "enqueueStatements"), 0)} | ${fmt(med(s, "jobsPerSecond"), 0)} | ${fmt(med(s, "workerCpuUsPerJob"))} | ${fmt(med(s, "pgCpuUsPerJob"))} | ${fmt(med(s, "statementsPerJob"), 2)} | ${fmt(med(s, "walBytesPerJob"), 0)} | ${fmt(med(s, "waits_updates"), 0)} |`,
  ),
  "",
  "Per edge, over independent jobs (the flow's cost, spread over its edges):",
  "",
  "| shape | PostgreSQL CPU µs/edge | WAL bytes/edge | worker CPU µs/edge |",
  "| --- | --- | --- | --- |",
  ...(["fan", "fan-in", "chains"] as const).map((s) => {
    const perEdge = (key: keyof Result) => ((med(s, key) - base(key)) * med(s, "jobs")) / med(s, "edges");
    return `| ${s} | ${fmt(perEdge("pgCpuUsPerJob"))} | ${fmt(perEdge("walBytesPerJob"), 0)} | ${fmt(perEdge("workerCpuUsPerJob"))} |`;
  }),
];
process.stdout.write(`${lines.join("\n")}\n`);
