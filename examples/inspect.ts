// The live actor tree in Stately's inspector: the supervisor's actor with an actor per running job
// under it. createSkyInspector prints a link to stately.ai/inspect and sends the inspection events
// there; payloads and results are redacted unless logPayloads is on.
// Run: npm run example:inspect   (uses DATABASE_URL, or starts an embedded PostgreSQL)
import { createSkyInspector } from "@statelyai/inspect";
import { createQueue, createSupervisor, defineTask, openPool, startEmbeddedPostgres } from "../src/index.ts";

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const connectionString = process.env.DATABASE_URL ?? embedded!.url;

const resize = defineTask({ name: "resize-image", handler: async (payload: { url: string }) => ({ resized: payload.url }) });

const inspector = createSkyInspector({ onerror: (error) => console.error(`inspector: ${error.message}`) });
const supervisor = createSupervisor({ connectionString, tasks: [resize], migrate: true, inspect: inspector.inspect });
await supervisor.start();

const pool = await openPool({ connectionString });
const queue = createQueue({ pool, tasks: [resize] });
for (let i = 0; i < 20; i++) await queue.enqueue(resize, { url: `https://example.com/${i}.png` });

// Watch the tree for a minute, then drain.
await new Promise((resolve) => setTimeout(resolve, 60_000));
await supervisor.stop();
inspector.stop();
await pool.end();
await embedded?.stop();
