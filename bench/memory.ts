// Memory: RSS of one worker holding 10,000 in-flight jobs (handlers awaiting a promise), per job,
// and the live heap per job (after a full GC), which the young generation's size does not blur.
// Usage: node --expose-gc bench/memory.ts --url <database url> [--jobs 10000]
import { parseArgs } from "node:util";
import pg from "pg";
import { createLogger, createSupervisor, defineTask, enqueueJobs, migrate } from "../src/index.ts";
import { report } from "./lib/db.ts";

const { values } = parseArgs({ options: { url: { type: "string" }, jobs: { type: "string", default: "10000" } } });
const jobs = Number(values.jobs);
const pool = new pg.Pool({ connectionString: values.url, max: 2 });
await migrate(pool);
for (let i = 0; i < jobs; i += 10_000) await enqueueJobs(pool, Array.from({ length: Math.min(10_000, jobs - i) }, (_, k) => ({ type: "hold", payload: { k } })));
let release: () => void = () => undefined;
const gate = new Promise<void>((r) => (release = r));
const hold = defineTask({ name: "hold", timeoutMs: 600_000, leaseMs: 600_000, handler: () => gate });
const gc = (globalThis as { gc?: () => void }).gc ?? (() => undefined);
gc();
const before = process.memoryUsage().rss;
const heapBefore = process.memoryUsage().heapUsed;
const supervisor = createSupervisor({ connectionString: values.url!, tasks: [hold], concurrency: jobs, logger: createLogger({ level: "warn" }), retention: false });
await supervisor.start();
while (supervisor.stats().running < jobs) await new Promise((r) => setTimeout(r, 100));
gc();
await new Promise((r) => setTimeout(r, 500));
gc();
const during = process.memoryUsage().rss;
const heapDuring = process.memoryUsage().heapUsed;
release();
supervisor.force();
await supervisor.stop();
await pool.end();
report({ jobs, rssBeforeMiB: before / 2 ** 20, rssDuringMiB: during / 2 ** 20, bytesPerJob: (during - before) / jobs, kibPerJob: (during - before) / jobs / 1024, heapKibPerJob: (heapDuring - heapBefore) / jobs / 1024 });
process.exit(0);
