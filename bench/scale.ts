// Scale: the table as it looks after months of work — many finished rows, a deep backlog — against
// the same backlog in an otherwise empty table. Measures the per-statement latency of the claim
// and of the sweep, then the throughput of one worker draining the backlog.
// Usage: node bench/scale.ts --url <database url> [--finished 1000000] [--pending 100000]
import { parseArgs } from "node:util";
import pg from "pg";
// The claim, the completion and the sweep are picket's internals, not its public API: from src/db directly.
import { claimJobs, completeJobs, sweepExpiredClaims } from "../src/db/index.ts";
import { createLogger, createSupervisor, defineTask, migrate, openPool } from "../src/index.ts";
import { percentile, report } from "./lib/db.ts";

const { values } = parseArgs({
  options: { url: { type: "string" }, finished: { type: "string", default: "1000000" }, pending: { type: "string", default: "100000" } },
});
const url = values.url!;
const finished = Number(values.finished);
const pending = Number(values.pending);
// Connections as the worker opens them (each statement planned once, see src/db/pool.ts).
const pool = await openPool({ connectionString: url, max: 4 });
await migrate(pool);

// Seeded on a connection of its own, without the statement bound picket's pool sets (a million
// rows take longer than any one of picket's statements may).
const seeder = new pg.Client({ connectionString: url });
await seeder.connect();
// Seeded in SQL: a million rows through the client would measure the seeding, not the queue.
// Finished rows look like real ones: claimed, with a token, a result and a finish time spread
// over the last week (so retention's index holds them in time order), and no lease (a completion
// clears lock_until; the schema refuses a lease on a row that is not processing).
await seeder.query(
  `INSERT INTO picket.jobs (type, status, attempts, claim_token, locked_by, locked_at, result, finished_at, created_at, updated_at)
   SELECT 'noop', 'completed', 1, gen_random_uuid(), 'seed', t, '{"ok":true}', t, t, t
   FROM (SELECT now() - (g * interval '600 milliseconds') AS t FROM generate_series(1, $1::int) AS g) AS s`,
  [finished],
);
await seeder.query(`INSERT INTO picket.jobs (type) SELECT 'noop' FROM generate_series(1, $1::int)`, [pending]);
await seeder.query("VACUUM ANALYZE picket.jobs");
await seeder.end();

// Per-statement latency, on the worker's own statements: a claim of 10 jobs (then completed, not
// timed) and a sweep while those 10 are processing under a live lease.
const want = { type: "noop", limit: 10, leaseMs: 60_000, backoffBaseMs: 1_000, backoffMaxMs: 3_600_000 };
const claimMs: number[] = [];
const sweepMs: number[] = [];
for (let i = 0; i < 200; i++) {
  let t = performance.now();
  const claimed = await claimJobs(pool, "scale", [want]);
  claimMs.push(performance.now() - t);
  t = performance.now();
  await sweepExpiredClaims(pool, 1_000);
  sweepMs.push(performance.now() - t);
  await completeJobs(pool, claimed.map((j) => ({ id: j.id, token: j.claimToken })));
}
const left = pending - 2_000;

const noop = defineTask({ name: "noop", handler: async () => undefined });
const supervisor = createSupervisor({
  connectionString: url,
  tasks: [noop],
  logger: createLogger({ level: "warn" }),
  retention: false,
  // Finished rows accumulate only where they are kept: this measures that case.
  keepCompleted: true,
  concurrency: 200,
  pollIntervalMs: 100,
});
const { rows: [start] } = await pool.query("SELECT clock_timestamp() AS t");
// Counted in the process, not by polling the table: a count of the pending rows has no index to
// serve it (the claim's partial indexes split them by queue), so it scanned all million finished
// rows every 100 ms on the server's shared cores (in parallel workers), and that scan, not the
// claim, was most of what the finished rows cost the drain.
let done = 0;
const drained = new Promise<void>((resolve) => supervisor.onJobFinished(() => ++done === left && resolve()));
await supervisor.start();
await drained;
await supervisor.stop();
const { rows: [end] } = await pool.query("SELECT max(finished_at) AS t FROM picket.jobs WHERE locked_by <> 'seed' AND locked_by <> 'scale'");
await pool.end();
const seconds = (end.t.getTime() - start.t.getTime()) / 1000;
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
report({
  finished,
  pending,
  jobsPerSecond: left / seconds,
  claimP50Ms: percentile(sorted(claimMs), 50),
  claimP95Ms: percentile(sorted(claimMs), 95),
  sweepP50Ms: percentile(sorted(sweepMs), 50),
  sweepP95Ms: percentile(sorted(sweepMs), 95),
});
