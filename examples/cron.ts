// Recurring jobs: a task declared with a schedule, and a schedule registered at run time.
// Run: node examples/cron.ts   (uses DATABASE_URL, or starts an embedded PostgreSQL)
import { createSupervisor, defineTask, listSchedules, openPool, removeSchedule, startEmbeddedPostgres, upsertSchedule } from "../src/index.ts";

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const connectionString = process.env.DATABASE_URL ?? embedded!.url;

// Every 2 seconds (six fields: seconds first). However many workers run this task, each tick
// makes one job; a tick missed while no worker ran is run once when one comes back ("latest").
const heartbeat = defineTask({
  name: "heartbeat",
  schedule: { cron: "*/2 * * * * *", payload: { service: "billing" }, missed: "latest" },
  handler: async (payload: { service: string; scheduledAt: string }) => {
    console.log(`heartbeat of ${payload.service} for the tick at ${payload.scheduledAt}`);
  },
});

const report = defineTask({
  name: "report",
  handler: async (payload: { team: string; scheduledAt: string }) => console.log(`report for ${payload.team}, tick ${payload.scheduledAt}`),
});

const supervisor = createSupervisor({ connectionString, tasks: [heartbeat, report], migrate: true });
await supervisor.start();

// A schedule registered at run time (from an admin endpoint, say): any Queryable, your transaction too.
const pool = await openPool({ connectionString });
await upsertSchedule(pool, { name: "report:ops", task: "report", cron: "*/3 * * * * *", timezone: "Europe/Paris", payload: { team: "ops" } });

let finished = 0;
const enough = new Promise<void>((resolve) => supervisor.onJobFinished(() => ++finished === 4 && resolve()));
await enough;
for (const s of await listSchedules(pool)) console.log(`${s.name}: ${s.cron}, next run ${s.nextRun?.toISOString()}`);

await removeSchedule(pool, "report:ops");
await supervisor.stop();
await pool.end();
await embedded?.stop();
console.log("done");
