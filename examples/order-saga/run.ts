// The order saga (./saga.ts) run on a worker: four orders, one declined by the card, one shipped,
// one cancelled after the charge, one whose shipping deadline passes; then each one's history.
// Run: npm run example:saga   (uses DATABASE_URL, or starts an embedded PostgreSQL)
import { createSupervisor, getWorkflow, openPool, sendToWorkflow, startEmbeddedPostgres, startWorkflow, workflowHistory } from "../../src/index.ts";
import { orderSaga, sagaTasks } from "./saga.ts";

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const connectionString = process.env.DATABASE_URL ?? embedded!.url;

const worker = createSupervisor({ connectionString, tasks: sagaTasks(), workflows: [orderSaga], migrate: true, pollIntervalMs: 100 });
await worker.start();
const pool = await openPool({ connectionString });

const run = `${Date.now()}`;
const start = (n: number, amount: number, shipWithinMs: number) =>
  startWorkflow(pool, orderSaga, { orderId: `${run}-${n}`, amount, shipWithinMs }, { key: `order-${run}-${n}` });
const orders = [await start(1, 127, 60_000), await start(2, 120, 60_000), await start(3, 130, 60_000), await start(4, 140, 500)];

const inState = async (id: string, state: string) => {
  while ((await getWorkflow(pool, id))!.state !== state) await new Promise((resolve) => setTimeout(resolve, 50));
};
// Order 2 ships; order 3 is cancelled once charged; order 4 waits past its deadline.
await inState(orders[1]!.id, "awaitingShipment");
await sendToWorkflow(pool, orders[1]!.id, { type: "SHIPPED" }, { by: "warehouse" });
await inState(orders[2]!.id, "awaitingShipment");
await sendToWorkflow(pool, orders[2]!.id, { type: "CANCEL" }, { by: "customer" });

for (const { id } of orders) {
  let wf = (await getWorkflow(pool, id))!;
  while (wf.status !== "done") {
    await new Promise((resolve) => setTimeout(resolve, 50));
    wf = (await getWorkflow(pool, id))!;
  }
  const { history } = await workflowHistory(pool, id);
  console.log(`workflow ${id}: ${JSON.stringify(wf.output)}`);
  for (const e of history) {
    const what = e.kind === "task" ? `task job ${e.jobId} ${(e.event as { status: string }).status}` : e.kind === "start" ? "start" : (e.event as { type: string }).type;
    console.log(`  ${String(e.seq ?? "-").padStart(2)} ${e.kind.padEnd(5)} ${what}${e.by ? ` (by ${e.by})` : ""} -> ${JSON.stringify(e.state)}${e.note ? ` [${e.note}]` : ""}`);
  }
}

await worker.stop();
await pool.end();
await embedded?.stop();
console.log("done");
