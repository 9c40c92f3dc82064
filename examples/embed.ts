// Embedding picket in a Node service: define a task, start a supervisor, enqueue, drain on exit.
// Run: npm run example   (uses DATABASE_URL, or starts an embedded PostgreSQL)
import { createQueue, createSupervisor, defineTask, openPool, startEmbeddedPostgres } from "../src/index.ts";

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const connectionString = process.env.DATABASE_URL ?? embedded!.url;

const sendEmail = defineTask({
  name: "send-email",
  timeoutMs: 10_000,
  handler: async (payload: { to: string }, { job, idempotencyKey }) => {
    // Pass idempotencyKey to the mail provider so a retried job does not send twice.
    console.log(`sending to ${payload.to} (job ${job.id}, attempt ${job.attempt}, key ${idempotencyKey})`);
    return { sent: true };
  },
});

const supervisor = createSupervisor({ connectionString, tasks: [sendEmail], migrate: true, concurrency: 5 });
await supervisor.start();

const pool = await openPool({ connectionString });
const queue = createQueue({ pool, tasks: [sendEmail] });
const done = new Promise<void>((resolve) => supervisor.onJobFinished(({ outcome }) => outcome === "completed" && resolve()));
await queue.enqueue(sendEmail, { to: "ada@example.com" });
await done;

await supervisor.stop(); // drains: running jobs finish (or are released at the deadline)
await pool.end();
await embedded?.stop();
console.log("done");
