// Serial queues and cluster-wide limits: two workers share one serial queue per account, a task
// capped at two running across both workers, and a task rate-limited to 5 starts per second.
// Run: npm run example:queues   (uses DATABASE_URL, or starts an embedded PostgreSQL)
import { createLogger, createSupervisor, defineTask, enqueueJobs, openPool, startEmbeddedPostgres } from "../src/index.ts";

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const connectionString = process.env.DATABASE_URL ?? embedded!.url;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const started = Date.now();
const at = () => `${String(Date.now() - started).padStart(5)} ms`;

// Ledger entries of one account must never be applied concurrently: each job names the account's queue.
const applyEntry = defineTask({
  name: "apply-entry",
  handler: async (payload: { account: string; entry: number }, { job }) => {
    console.log(`${at()}  apply-entry  ${payload.account} #${payload.entry} (job ${job.id})`);
    await sleep(100);
  },
});
// A report generator the database can only afford twice at once, however many workers run.
const buildReport = defineTask({
  name: "build-report",
  clusterConcurrency: 2,
  handler: async (payload: { n: number }) => {
    console.log(`${at()}  build-report #${payload.n}`);
    await sleep(200);
  },
});
// A partner API that allows 5 calls per second across the whole cluster.
const callPartner = defineTask({
  name: "call-partner",
  rateLimit: { max: 5, windowMs: 1_000 },
  handler: async (payload: { n: number }) => console.log(`${at()}  call-partner #${payload.n}`),
});

const tasks = [applyEntry, buildReport, callPartner];
const pool = await openPool({ connectionString });
const logger = createLogger({ level: "warn" });
const first = createSupervisor({ connectionString, tasks, logger, migrate: true, concurrency: 10, pollIntervalMs: 200 });
await first.start();
const second = createSupervisor({ connectionString, tasks, logger, concurrency: 10, pollIntervalMs: 200 });
await second.start();

let finished = 0;
const total = 6 + 6 + 10;
const done = new Promise<void>((resolve) => {
  for (const worker of [first, second]) worker.onJobFinished(() => ++finished === total && resolve());
});
await enqueueJobs(pool, [
  ...[1, 2, 3].flatMap((entry) => ["acct-a", "acct-b"].map((account) => ({ type: "apply-entry", queue: account, payload: { account, entry } }))),
  ...Array.from({ length: 6 }, (_, n) => ({ type: "build-report", payload: { n } })),
  ...Array.from({ length: 10 }, (_, n) => ({ type: "call-partner", payload: { n } })),
]);
await done;

await Promise.all([first.stop(), second.stop()]);
await pool.end();
await embedded?.stop();
console.log("done: each account's entries ran one at a time and in order, reports two at a time, partner calls at most 5 per second");
