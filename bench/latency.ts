// Latency: an idle worker; jobs enqueued one at a time from another connection; the time from
// the enqueue call to the handler's first line, over 200 jobs (both ends on this process's clock).
// Usage: node bench/latency.ts --url <database url> [--jobs 200] [--synchronous-commit on|off]
import { parseArgs } from "node:util";
import pg from "pg";
import { createLogger, createSupervisor, defineTask, enqueueJob, migrate } from "../src/index.ts";
import { percentile, report, setSynchronousCommit } from "./lib/db.ts";

const { values } = parseArgs({ options: { url: { type: "string" }, jobs: { type: "string", default: "200" }, "synchronous-commit": { type: "string", default: "on" } } });
// Set on the database before any other connection opens: the enqueuer's and the worker's alike.
const synchronousCommit = values["synchronous-commit"] === "off" ? "off" : "on";
await setSynchronousCommit(values.url!, synchronousCommit);
const jobs = Number(values.jobs);
const client = new pg.Client({ connectionString: values.url });
await client.connect();
// What the enqueuer's connection really runs with (the worker's connections open after it, alike).
const { rows: [setting] } = await client.query("SHOW synchronous_commit");
await migrate(client);
const enqueuedAt = new Map<number, number>();
const latencies: number[] = [];
let next: () => void = () => undefined;
const ping = defineTask({
  name: "ping",
  handler: async (payload: { n: number }) => {
    latencies.push(performance.now() - enqueuedAt.get(payload.n)!);
    next();
  },
});
const supervisor = createSupervisor({ connectionString: values.url!, tasks: [ping], logger: createLogger({ level: "warn" }), retention: false });
await supervisor.start();
await new Promise((r) => setTimeout(r, 500)); // idle: LISTEN connected, first polls done
for (let n = 0; n < jobs; n++) {
  const handled = new Promise<void>((resolve) => (next = resolve));
  enqueuedAt.set(n, performance.now());
  await enqueueJob(client, { type: "ping", payload: { n } });
  await handled;
  await new Promise((r) => setTimeout(r, 5)); // back to idle between jobs
}
await supervisor.stop();
await client.end();
const sorted = [...latencies].sort((a, b) => a - b);
report({ jobs, synchronousCommit: setting.synchronous_commit, p50Ms: percentile(sorted, 50), p95Ms: percentile(sorted, 95), maxMs: sorted.at(-1) });
