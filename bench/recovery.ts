// Recovery: a worker process SIGKILLed with 100 jobs in flight; the time until a second worker
// has completed all 100, with picket's defaults (lease 20 s, sweep every 5 s).
// Usage: node bench/recovery.ts --url <database url>
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";
import { enqueueJobs, migrate } from "../src/index.ts";
import { report } from "./lib/db.ts";

const { values } = parseArgs({ options: { url: { type: "string" }, jobs: { type: "string", default: "100" } } });
const jobs = Number(values.jobs);
const cli = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
const tasks = fileURLToPath(new URL("./recovery-tasks.ts", import.meta.url));
const pool = new pg.Pool({ connectionString: values.url, max: 2 });
await migrate(pool);
await enqueueJobs(pool, Array.from({ length: jobs }, () => ({ type: "held" })));
const gate = path.join(mkdtempSync(path.join(tmpdir(), "picket-recovery-")), "open");
const worker = () =>
  spawn(process.execPath, [cli, "worker", "--tasks", tasks], { env: { ...process.env, DATABASE_URL: values.url, RECOVERY_GATE: gate, PICKET_LOG_LEVEL: "warn" }, stdio: "ignore" });
const count = async (status: string) => (await pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE status = $1", [status])).rows[0].n as number;

const first = worker();
while ((await count("processing")) < jobs) await new Promise((r) => setTimeout(r, 50));
first.kill("SIGKILL");
const killedAt = performance.now();
writeFileSync(gate, ""); // jobs finish at once from now on: what is measured is the takeover
const second = worker();
// Completed rows are deleted (the worker's defaults): recovered when none is left.
while ((await count("processing")) + (await count("pending")) > 0) await new Promise((r) => setTimeout(r, 50));
const seconds = (performance.now() - killedAt) / 1000;
second.kill("SIGTERM");
await pool.end();
report({ jobs, recoverySeconds: seconds });
