// graphile-worker through bench/latency.ts's scenario: an idle worker (defaults: LISTEN/NOTIFY
// on); jobs added one at a time from another connection; enqueue call → handler's first line,
// over 200 jobs, both ends on this process's clock.
// Usage: node bench/peers/latency-graphile.ts --url <database url> [--jobs 200] [--synchronous-commit on|off]
import { parseArgs } from "node:util";
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";
import { percentile, report, setSynchronousCommit } from "../lib/db.ts";

const { values } = parseArgs({ options: { url: { type: "string" }, jobs: { type: "string", default: "200" }, "synchronous-commit": { type: "string", default: "on" } } });
// Set on the database before any other connection opens: the enqueuer's and the worker's alike.
const synchronousCommit = values["synchronous-commit"] === "off" ? "off" : "on";
await setSynchronousCommit(values.url!, synchronousCommit);
const connectionString = values.url!;
const jobs = Number(values.jobs);
await runMigrations({ connectionString });
const utils = await makeWorkerUtils({ connectionString });
// What the enqueuer's connection really runs with (the worker's connections open after it, alike).
const setting = await utils.withPgClient((c) => c.query("SHOW synchronous_commit").then((r) => r.rows[0].synchronous_commit));
const enqueuedAt = new Map<number, number>();
const latencies: number[] = [];
let next: () => void = () => undefined;
const runner = await run({
  preset: { worker: { connectionString } },
  noHandleSignals: true,
  logger: new Logger(() => () => undefined),
  taskList: {
    ping: async (payload) => {
      latencies.push(performance.now() - enqueuedAt.get((payload as { n: number }).n)!);
      next();
    },
  },
} as never);
await new Promise((r) => setTimeout(r, 500)); // idle: LISTEN connected, first polls done
for (let n = 0; n < jobs; n++) {
  const handled = new Promise<void>((resolve) => (next = resolve));
  enqueuedAt.set(n, performance.now());
  await utils.addJob("ping", { n });
  await handled;
  await new Promise((r) => setTimeout(r, 5)); // back to idle between jobs
}
await runner.stop();
await utils.release();
const sorted = [...latencies].sort((a, b) => a - b);
report({ jobs, synchronousCommit: setting, p50Ms: percentile(sorted, 50), p95Ms: percentile(sorted, 95), maxMs: sorted.at(-1) });
process.exit(0);
