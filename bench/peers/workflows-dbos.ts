// DBOS Transact through bench/workflows.ts's scenario: N workflow instances started, and their
// events sent, before the executor starts; then one executor drains them (a queue of worker
// concurrency 50 polled every 100 ms, picket's worker settings); events/s from its launch to the
// last instance done, and the drain's costs per event (bench/lib/costs.ts), counted as picket
// counts them (the start, each event or step, and the final event).
//   events   each instance receives K "INC" messages and a "FINISH" (DBOS.recv in a loop);
//   steps    each instance runs K steps in its own process (DBOS.runStep): DBOS's own idiom,
//            a step is a checkpoint, not a job another worker may run;
//   queued   each step is a child workflow on a second queue, awaited: the form in which a step
//            may run on any worker, as a picket task does.
// Usage: node bench/peers/workflows-dbos.ts --url <database url> --shape events|steps|queued [--instances 1000] [--events 10]
import { parseArgs } from "node:util";
import { DBOS, DBOSClient } from "@dbos-inc/dbos-sdk";
import { openMeter } from "../lib/costs.ts";
import { report } from "../lib/db.ts";

const { values } = parseArgs({
  options: {
    url: { type: "string" },
    shape: { type: "string", default: "events" },
    instances: { type: "string", default: "1000" },
    events: { type: "string", default: "10" },
    // 0: DBOS's default, no limit (every instance at once).
    concurrency: { type: "string", default: "50" },
  },
});
const url = values.url!;
const shape = values.shape as "events" | "steps" | "queued";
const instances = Number(values.instances);
const events = Number(values.events);
const limit = Number(values.concurrency) > 0 ? { workerConcurrency: Number(values.concurrency) } : {};

type Message = { type: "INC" | "FINISH" };
const counter = DBOS.registerWorkflow(
  async () => {
    let n = 0;
    for (;;) {
      const message = await DBOS.recv<Message>("ev", 3600);
      if (message?.type === "FINISH") return n;
      n++;
    }
  },
  { name: "bench-counter" },
);
const step = DBOS.registerWorkflow(async (input: { i: number }) => input, { name: "bench-step" });
const stepped = DBOS.registerWorkflow(
  async (of: number) => {
    let n = 0;
    while (n < of) {
      if (shape === "queued") {
        const handle = await DBOS.startWorkflow(step, { queueName: "bench-steps" })({ i: n });
        // Polled every 100 ms, as picket's worker polls (DBOS's default is 1 s).
        n = (await handle.getResult({ pollingIntervalMs: 100 })).i + 1;
      } else {
        n = (await DBOS.runStep(async () => ({ i: n }), { name: "bench-step" })).i + 1;
      }
    }
    return n;
  },
  { name: "bench-stepped" },
);
void counter;
void stepped;

// Set-up, outside the window: the schema, the instances enqueued and (events) their messages sent.
await DBOS.migrate(url);
const client = await DBOSClient.create({ systemDatabaseUrl: url });
const ids: string[] = [];
for (let i = 0; i < instances; i++) {
  const workflowName = shape === "events" ? "bench-counter" : "bench-stepped";
  const handle = await client.enqueue({ queueName: "bench", workflowName }, ...(shape === "events" ? [] : [events]));
  ids.push(handle.workflowID);
}
if (shape === "events") {
  await Promise.all(
    Array.from({ length: 8 }, async (_, w) => {
      for (let i = w; i < ids.length; i += 8) {
        for (let k = 0; k < events; k++) await client.send<Message>(ids[i]!, { type: "INC" }, "ev");
        await client.send<Message>(ids[i]!, { type: "FINISH" }, "ev");
      }
    }),
  );
}
await client.destroy();

const meter = await openMeter(url);
await meter.start();
const { rows: [start] } = await meter.query("SELECT clock_timestamp() AS t");
DBOS.setConfig({ name: "bench", systemDatabaseUrl: url, logLevel: "warn", runAdminServer: false });
await DBOS.launch();
await DBOS.registerQueue("bench", { ...limit, minPollingIntervalMs: 100 });
if (shape === "queued") await DBOS.registerQueue("bench-steps", { ...limit, minPollingIntervalMs: 100 });
for (;;) {
  const { rows: [left] } = await meter.query("SELECT count(*)::int AS n FROM dbos.workflow_status WHERE status <> 'SUCCESS'");
  if (left.n === 0) break;
  await new Promise((resolve) => setTimeout(resolve, 50));
}
const { rows: [end] } = await meter.query("SELECT clock_timestamp() AS t");
await DBOS.shutdown();
const applied = instances * (shape === "events" ? events + 2 : events + 1);
const costs = await meter.stop(applied);
await meter.end();
const seconds = (end.t.getTime() - start.t.getTime()) / 1000;
report({ peer: "dbos", shape, concurrency: Number(values.concurrency), instances, applied, seconds, eventsPerSecond: applied / seconds, ...costs });
