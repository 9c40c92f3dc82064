// service.ts: the HTTP API and the worker that runs its jobs, in one process.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createSupervisor, openPool } from "picket";
import { createShop, tables } from "./shop.ts";

const port = Number(process.env.PORT ?? 3000);
const pool = await openPool({ connectionString: process.env.DATABASE_URL! });
await pool.query(tables);
const shop = createShop(pool);

// The worker, embedded: it claims send-receipt jobs and runs them here. The health server
// answers /health, /ready and /metrics (Prometheus) on its own port.
const worker = createSupervisor({
  pool,
  tasks: [shop.sendReceipt],
  migrate: true, // creates or updates picket's tables (idempotent)
  health: { port: Number(process.env.HEALTH_PORT ?? 9090) },
});
await worker.start();

const send = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
};
const readJson = async (req: IncomingMessage) => {
  let text = "";
  for await (const chunk of req) text += chunk;
  return JSON.parse(text);
};

const server = createServer(async (req, res) => {
  try {
    if (req.method === "POST" && req.url === "/orders") {
      const { email, totalCents } = await readJson(req);
      if (typeof email !== "string" || !Number.isInteger(totalCents) || totalCents <= 0) {
        return send(res, 400, { error: 'send {"email": "...", "totalCents": 1250}' });
      }
      return send(res, 201, await shop.placeOrder({ email, totalCents }));
    }
    const id = req.url?.match(/^\/orders\/(\d+)$/)?.[1];
    if (req.method === "GET" && id) {
      const order = await shop.getOrder(id);
      return order ? send(res, 200, order) : send(res, 404, { error: `no order ${id}` });
    }
    send(res, 404, { error: "try POST /orders or GET /orders/<id>" });
  } catch (error) {
    if (error instanceof SyntaxError) return send(res, 400, { error: "the body is not JSON" });
    console.error(error);
    send(res, 500, { error: "internal error" });
  }
});
server.listen(port, "127.0.0.1", () => console.log(`shop listening on http://127.0.0.1:${port}`));

// SIGTERM (what a deploy or `docker stop` sends) or Ctrl-C: stop taking requests, let running
// jobs finish (30 s at most, then they are released for another worker), and exit 0.
// A second signal interrupts and releases running jobs at once.
let stopping = false;
const shutdown = async () => {
  if (stopping) return worker.force();
  stopping = true;
  server.close();
  await worker.stop();
  await pool.end();
  console.log("shop stopped");
};
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
