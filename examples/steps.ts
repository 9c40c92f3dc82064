// Durable steps and cancelling a running job.
// Run: node examples/steps.ts   (uses DATABASE_URL, or starts an embedded PostgreSQL)
import { cancelJob, createLogger, createQueue, createSupervisor, defineTask, jobSteps, openPool, startEmbeddedPostgres } from "../src/index.ts";

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const connectionString = process.env.DATABASE_URL ?? embedded!.url;

// A checkout in three steps. The first attempt fails after charging the card; the retry gets the
// charge's recorded result back and does not charge again.
let charges = 0;
const checkout = defineTask({
  name: "checkout",
  backoff: { baseMs: 100, maxMs: 100 },
  handler: async (payload: { order: string }, { job, step, stepKey }) => {
    const charge = await step("charge", async () => {
      charges++;
      // A real payment API would get stepKey("charge") as its idempotency key as well.
      return { receipt: `r-${payload.order}`, key: stepKey("charge") };
    });
    if (job.attempt === 1) throw new Error("the shipping service was down");
    const label = await step("ship", async () => ({ label: `l-${payload.order}` }));
    return { ...charge, ...label };
  },
});

// A long job that an operator cancels while it runs: its handler sees the signal at once.
const longReport = defineTask({
  name: "long-report",
  handler: (_payload: unknown, { signal }) =>
    new Promise((_resolve, reject) => signal.addEventListener("abort", () => reject(new Error("stopped")), { once: true })),
});

// The example prints what happens itself: the worker logs only errors.
const supervisor = createSupervisor({ connectionString, tasks: [checkout, longReport], migrate: true, logger: createLogger({ level: "error" }) });
await supervisor.start();
const pool = await openPool({ connectionString });
const queue = createQueue({ pool, tasks: [checkout, longReport] });
const finished = (id: string) =>
  new Promise<string>((resolve) => supervisor.onJobFinished(({ job, outcome }) => job.id === id && outcome !== "retried" && resolve(outcome)));

const order = await queue.enqueue(checkout, { order: "A-17" });
console.log(`checkout: ${await finished(order.id)}, card charged ${charges} time(s); steps:`, (await jobSteps(pool, order.id)).map((s) => `${s.name} (attempt ${s.attempt})`));

const report = await queue.enqueue(longReport, {});
const reportDone = finished(report.id);
await new Promise((resolve) => setTimeout(resolve, 300));
console.log("cancel:", (await cancelJob(pool, report.id)).outcome);
console.log(`long-report: ${await reportDone}`);

await supervisor.stop();
await pool.end();
await embedded?.stop();
