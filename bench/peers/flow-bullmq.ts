// BullMQ's flows on its PostgreSQL backend (bullmq 6's createPostgresBackend), as bench/flows.ts's
// fan-in: one parent waiting for N no-op children (BullMQ's flows are trees: a parent and its
// children, no job before the children). The enqueue (FlowProducer.add: one call), then one Worker
// at concurrency 200 from its start until the parent has completed; costs per job
// (bench/lib/costs.ts) over the drain.
// Usage: node bench/peers/flow-bullmq.ts --url <database url> --jobs 10000
import { parseArgs } from "node:util";
import { createPostgresBackend, FlowProducer, Worker } from "bullmq";
import { openMeter } from "../lib/costs.ts";
import { report } from "../lib/db.ts";

const { values } = parseArgs({ options: { url: { type: "string" }, jobs: { type: "string", default: "10000" }, "max-seconds": { type: "string", default: "120" } } });
const connection = { connectionString: values.url!, migrate: true };
const leaves = Number(values.jobs);
const jobs = leaves + 1;

const producer = new FlowProducer({ connection }, createPostgresBackend);
const enqueueStart = performance.now();
await producer.add({
  name: "sink",
  queueName: "fan",
  data: {},
  children: Array.from({ length: leaves }, (_, i) => ({ name: "leaf", queueName: "fan", data: { i } })),
});
const enqueueMs = performance.now() - enqueueStart;
await producer.close();

const meter = await openMeter(connection.connectionString);
await meter.start();
const started = performance.now();
let done = 0;
const worker = new Worker("fan", async () => undefined, { connection, concurrency: 200 }, createPostgresBackend);
const finished = new Promise<void>((resolve) => {
  const deadline = setTimeout(resolve, Number(values["max-seconds"]) * 1000);
  worker.on("completed", () => {
    if (++done === jobs) {
      clearTimeout(deadline);
      resolve();
    }
  });
});
await finished;
const seconds = (performance.now() - started) / 1000;
await worker.close();
const costs = await meter.stop(done);
await meter.end();
report({ jobs: done, seconds, jobsPerSecond: done / seconds, cutOff: done < jobs, enqueueMs, ...costs });
process.exit(0);
