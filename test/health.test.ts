import { connect, createServer, type Socket } from "node:net";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { enqueueJob } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { startWorker } from "./support/worker.ts";
import { freePort } from "./support/ports.ts";

const db = useTestDatabase();


const get = async (port: number, path: string) => {
  const response = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
};

describe("health", () => {
  it("stays 200 while a job runs longer than the stale-poll threshold, and other jobs keep being claimed", async () => {
    const port = await freePort();
    let finishLong: () => void = () => undefined;
    const long = defineTask({ name: "long-running", handler: () => new Promise<void>((resolve) => (finishLong = resolve)) });
    const quick = defineTask({ name: "quick", handler: async () => "ok" });
    const longJob = await enqueueJob(db.pool, { type: "long-running" });
    const { outcomes } = await startWorker({
      connectionString: db.url,
      tasks: [long, quick],
      health: { port, host: "127.0.0.1", stalePollMs: 200 },
    });
    await expect.poll(async () => (await get(port, "/health").catch(() => ({ status: 0 }))).status, { timeout: 5_000 }).toBe(200);
    await new Promise((r) => setTimeout(r, 600)); // three times the threshold, the long job still running
    const health = await get(port, "/health");
    expect(health.status).toBe(200);
    expect(health.body).toMatchObject({ healthy: true, draining: false, inFlight: { "long-running": 1 }, checks: { database: { ok: true }, poll: { ok: true }, leases: { ok: true } } });
    const quickJob = await enqueueJob(db.pool, { type: "quick" });
    await expect.poll(() => outcomes.find((o) => o.id === quickJob.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
    expect(outcomes.find((o) => o.id === longJob.id)).toBeUndefined();
    finishLong();
  });

  it("shares one database probe among health checks that arrive while it is in flight", async () => {
    // A TCP proxy in front of the server counts the connections the worker opens.
    let connections = 0;
    const sockets = new Set<Socket>();
    const target = new URL(db.url);
    const proxy = createServer((client) => {
      connections++;
      const upstream = connect(Number(target.port), target.hostname);
      sockets.add(client);
      sockets.add(upstream);
      client.on("error", () => upstream.destroy()).pipe(upstream).on("error", () => client.destroy()).pipe(client);
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    const url = new URL(db.url);
    url.host = `127.0.0.1:${(proxy.address() as { port: number }).port}`;
    try {
      const { supervisor } = await startWorker({ connectionString: url.toString(), tasks: [defineTask({ name: "unused", handler: async () => "ok" })], listen: false, pollIntervalMs: 60_000 });
      expect(await supervisor.health()).toMatchObject({ checks: { database: { ok: true } } });
      const before = connections;
      const reports = await Promise.all(Array.from({ length: 20 }, () => supervisor.health()));
      expect(reports.every((r) => r.checks.database.ok)).toBe(true);
      // One probe for the twenty (one more, at most, should the pool open a connection meanwhile).
      const burst = connections - before;
      expect(burst).toBeGreaterThanOrEqual(1);
      expect(burst).toBeLessThanOrEqual(2);
      // A check after the answer probes afresh.
      await supervisor.health();
      expect(connections - before).toBeGreaterThan(burst);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((r) => proxy.close(r));
    }
  });

  it("answers /ready 503 while draining", async () => {
    const port = await freePort();
    let finish: () => void = () => undefined;
    const task = defineTask({ name: "holds-drain", handler: () => new Promise<void>((resolve) => (finish = resolve)) });
    const job = await enqueueJob(db.pool, { type: "holds-drain" });
    const { supervisor, outcomes } = await startWorker({
      connectionString: db.url,
      tasks: [task],
      health: { port, host: "127.0.0.1", stalePollMs: 200 },
    });
    await expect.poll(async () => (await get(port, "/ready").catch(() => ({ status: 0 }))).status, { timeout: 5_000 }).toBe(200);
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    const stopping = supervisor.stop();
    const ready = await get(port, "/ready");
    expect(ready).toMatchObject({ status: 503, body: { ready: false, draining: true } });
    finish();
    await stopping;
    expect(outcomes).toEqual([expect.objectContaining({ id: job.id, outcome: "completed" })]);
  });


  it("stops at once though a client keeps a request to it half-sent", async () => {
    const port = await freePort();
    const task = defineTask({ name: "health-slowloris", handler: async () => "ok" });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], health: { port, host: "127.0.0.1" } });
    await expect.poll(async () => (await get(port, "/health").catch(() => ({ status: 0 }))).status, { timeout: 5_000 }).toBe(200);
    const socket = connect(port, "127.0.0.1");
    socket.on("error", () => undefined);
    await new Promise((resolve) => socket.once("connect", resolve));
    socket.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"); // no blank line: the request never ends
    await new Promise((r) => setTimeout(r, 100));
    const stopAt = Date.now();
    await supervisor.stop();
    expect(Date.now() - stopAt).toBeLessThan(2_000);
    socket.destroy();
  });
});
