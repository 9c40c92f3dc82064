// Workflows: how fast events are applied, and what each costs. N instances of a counter machine
// (each event a transition with an assign) are started, each sent K events up front, then one worker
// applies them all (concurrency 50); events/s from worker start to the last instance done and the
// last job run (the database's clock), and the costs per event applied (bench/lib/costs.ts; the
// start and the final event count as events). Then the same events sent while the worker runs, the
// sends counted. A third round gives each instance a task per event (a no-op picket job whose
// result comes back as its done event): the cost of a durable step through a job.
// Then DBOS Transact, in a process of its own, through the same shapes (bench/peers/workflows-dbos.ts):
// messages to a waiting workflow, steps in the workflow's process, and steps as queued child workflows.
// Tables are fresh and never analyzed (autovacuum off for picket's), as bench/run.ts's are;
// --analyze analyzes them after the instances are started and the events sent up front.
// Usage: node bench/workflows.ts [--instances 1000] [--events 10] [--runs 3] [--no-peer] [--analyze]
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";
import { assign, setup } from "xstate";
import { createLogger, createSupervisor, defineTask, defineWorkflow, migrate, startEmbeddedPostgres, startWorkflow, task } from "../src/index.ts";
import { sendToWorkflow } from "../src/db/workflows.ts";
import { openMeter } from "./lib/costs.ts";
import { analyzeSchema, createFreshDatabase, disableAutovacuum } from "./lib/db.ts";

const { values } = parseArgs({ options: { instances: { type: "string", default: "1000" }, events: { type: "string", default: "10" }, runs: { type: "string", default: "3" }, "no-peer": { type: "boolean", default: false }, analyze: { type: "boolean", default: false } } });
const instances = Number(values.instances);
const events = Number(values.events);

const counter = defineWorkflow({
  name: "bench-counter",
  machine: setup({ types: {} as { context: { n: number } } }).createMachine({
    context: { n: 0 },
    initial: "counting",
    states: { counting: { on: { INC: { actions: assign({ n: ({ context }) => context.n + 1 }) }, FINISH: "done" } }, done: { type: "final" } },
  }),
});
const stepped = defineWorkflow({
  name: "bench-stepped",
  machine: setup({ types: {} as { context: { n: number; of: number }; input: { of: number } }, actors: { step: task<{ i: number }, { i: number }>("bench-step") } }).createMachine({
    context: ({ input }) => ({ n: 0, of: input.of }),
    initial: "stepping",
    states: {
      stepping: {
        invoke: { src: "step", input: ({ context }) => ({ i: context.n }), onDone: { target: "next", actions: assign({ n: ({ context }) => context.n + 1 }) } },
      },
      next: { always: [{ guard: ({ context }) => context.n >= context.of, target: "done" }, { target: "stepping" }] },
      done: { type: "final" },
    },
  }),
});
const step = defineTask({ name: "bench-step", handler: async (input: { i: number }) => input });

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres({ settings: { shared_preload_libraries: "pg_stat_statements" } });
const adminUrl = process.env.DATABASE_URL ?? embedded!.url;
// PostgreSQL's CPU is measured from the embedded server's processes (bench/lib/costs.ts).
if (embedded) process.env.BENCH_POSTMASTER_PID = readFileSync(path.join(embedded.dataDir, "postmaster.pid"), "utf8").split("\n")[0]!;

// "events": sent before the worker starts, so only their application is measured; "live": sent by
// eight connections while the worker runs, each instance's in a burst, sends included in the costs
// (their CPU in the worker's: this process).
const round = async (shape: "events" | "live" | "tasks") => {
  const db = await createFreshDatabase(adminUrl, "bench_workflows");
  const pool = new pg.Pool({ connectionString: db.url, max: 8 });
  await migrate(pool);
  if (!values.analyze) await disableAutovacuum(pool, "picket");
  const ids: string[] = [];
  for (let i = 0; i < instances; i++) {
    const { id } = shape === "tasks" ? await startWorkflow(pool, stepped, { of: events }) : await startWorkflow(pool, counter, null);
    ids.push(id);
  }
  const send = () =>
    Promise.all(
      Array.from({ length: 8 }, async (_, w) => {
        for (let i = w; i < ids.length; i += 8) {
          for (let k = 0; k < events; k++) await sendToWorkflow(pool, ids[i]!, { type: "INC" });
          await sendToWorkflow(pool, ids[i]!, { type: "FINISH" });
        }
      }),
    );
  if (shape === "events") await send();
  if (values.analyze) await analyzeSchema(pool, "picket");
  const supervisor = createSupervisor({ connectionString: db.url, tasks: [step], workflows: [counter, stepped], logger: createLogger({ level: "warn" }), retention: false, concurrency: 50, pollIntervalMs: 100 });
  const meter = await openMeter(db.url);
  await meter.start();
  const { rows: [start] } = await meter.query("SELECT clock_timestamp() AS t");
  await supervisor.start();
  if (shape === "live") await send();
  await pool.end();
  for (;;) {
    // Done when every instance is, and every job has run: an applier job left over (one whose events
    // an earlier run applied) is work the events caused, measured with them.
    const { rows: [left] } = await meter.query(
      "SELECT (SELECT count(*) FROM picket.workflows WHERE status <> 'done') + (SELECT count(*) FROM picket.jobs WHERE status IN ('pending', 'processing')) AS n",
    );
    if (Number(left.n) === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const { rows: [end] } = await meter.query("SELECT clock_timestamp() AS t");
  await supervisor.stop();
  // Events applied: start, K events (or K task results), and FINISH for the counter.
  const applied = instances * (shape === "tasks" ? events + 1 : events + 2);
  const costs = await meter.stop(applied);
  await meter.end();
  await db.drop();
  const seconds = (end.t.getTime() - start.t.getTime()) / 1000;
  return { shape, instances, applied, seconds, eventsPerSecond: applied / seconds, ...costs };
};

type Result = Awaited<ReturnType<typeof round>>;

/** DBOS's run, in a process of its own (its executor's CPU is that process's). */
const peers = fileURLToPath(new URL("./peers/", import.meta.url));
const dbos = async (shape: "events" | "steps" | "queued") => {
  const db = await createFreshDatabase(adminUrl, "bench_workflows_dbos");
  const args = ["--url", db.url, "--shape", shape, "--instances", String(instances), "--events", String(events)];
  const out = execFileSync(process.execPath, [`${peers}workflows-dbos.ts`, ...args], { encoding: "utf8", env: process.env, stdio: ["ignore", "pipe", "inherit"] });
  await db.drop();
  const line = out.split("\n").find((l) => l.startsWith("BENCH_RESULT "))!;
  return JSON.parse(line.slice("BENCH_RESULT ".length)) as Result;
};

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rounds: [string, () => Promise<Result>][] = [
  ["picket, events sent", () => round("events")],
  ["picket, events sent while the worker runs", () => round("live")],
  ["picket, a task per step", () => round("tasks")],
];
if (!values["no-peer"]) {
  if (!existsSync(`${peers}node_modules/@dbos-inc/dbos-sdk`)) execFileSync("npm", ["install", "--no-audit", "--no-fund", "--prefix", peers], { stdio: "inherit" });
  rounds.push(["DBOS, messages sent", () => dbos("events")], ["DBOS, a step in the workflow's process", () => dbos("steps")], ["DBOS, a queued child workflow per step", () => dbos("queued")]);
}
for (const [name, once] of rounds) {
  const results: Result[] = [];
  for (let r = 0; r < Number(values.runs); r++) {
    const result = await once();
    results.push(result);
    process.stdout.write(`BENCH_RESULT ${JSON.stringify(result)}\n`);
  }
  const of = (pick: (r: Result) => number | null) => median(results.map((r) => pick(r) ?? Number.NaN));
  process.stdout.write(
    `${name}: ${Math.round(of((r) => r.eventsPerSecond))} events applied/s (min ${Math.round(Math.min(...results.map((r) => r.eventsPerSecond)))}, max ${Math.round(Math.max(...results.map((r) => r.eventsPerSecond)))}); per event: ` +
      `PostgreSQL CPU ${of((r) => r.pgCpuUsPerJob).toFixed(0)} µs, worker CPU ${of((r) => r.workerCpuUsPerJob).toFixed(0)} µs, ` +
      `WAL ${Math.round(of((r) => r.walBytesPerJob))} B, statements ${of((r) => r.statementsPerJob).toFixed(2)}, commits ${of((r) => r.commitsPerJob).toFixed(2)} (median of ${results.length})\n`,
  );
}
await embedded?.stop();
