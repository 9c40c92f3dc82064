// graphile-worker as bench/soak.ts runs it: one worker process, the same sleeping jobs, its
// defaults but for concurrentJobs. Usage: node bench/peers/soak-graphile.ts --url <url> [--concurrency 10]
import { parseArgs } from "node:util";
import { Logger, run } from "graphile-worker";

const { values } = parseArgs({ options: { url: { type: "string" }, concurrency: { type: "string", default: "10" } } });
const runner = await run({
  preset: { worker: { connectionString: values.url!, concurrentJobs: Number(values.concurrency) } },
  logger: new Logger(() => () => undefined),
  taskList: { soak: async (payload) => new Promise<void>((resolve) => setTimeout(resolve, (payload as { ms: number }).ms)) },
} as never);
process.stdout.write("worker started\n");
await runner.promise;
