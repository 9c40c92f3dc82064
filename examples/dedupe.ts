// Dedupe modes: "live" (the default), "replace" and a window after completion.
// Run: node examples/dedupe.ts   (uses DATABASE_URL, or starts an embedded PostgreSQL)
import { enqueueJob, migrate, openPool, startEmbeddedPostgres } from "../src/index.ts";

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const pool = await openPool({ connectionString: process.env.DATABASE_URL ?? embedded!.url });
await migrate(pool);

// replace (debounce): each edit pushes the pending reindex back and carries the newest payload.
const first = await enqueueJob(pool, { type: "reindex", key: "reindex:doc-7", payload: { rev: 1 }, delayMs: 5_000, dedupe: "replace" });
const second = await enqueueJob(pool, { type: "reindex", key: "reindex:doc-7", payload: { rev: 2 }, delayMs: 5_000, dedupe: "replace" });
console.log("replace:", first.id === second.id, second.payload); // true { rev: 2 }

// A window: at most one digest per user per hour, counted from when the last one completed.
const hour = { windowMs: 3_600_000 };
const digest = await enqueueJob(pool, { type: "digest", key: "digest:ada", dedupe: hour });
await pool.query("UPDATE picket.jobs SET status = 'completed', finished_at = now() WHERE id = $1", [digest.id]); // as a worker would
const again = await enqueueJob(pool, { type: "digest", key: "digest:ada", dedupe: hour });
console.log("window:", again.id === digest.id, again.status); // true completed: no new digest this hour

await pool.end();
await embedded?.stop();
