// The dashboard mounted under a prefix in a user's service (issue 29): Express, Fastify, Hono and
// node:http, each a real package serving on a real port. The page is opened in Chromium under the
// prefix (its relative URLs must resolve there), and its routes, stream and write actions answer
// through the framework, beside a route of the service's own.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import express from "express";
import Fastify from "fastify";
import { Hono } from "hono";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { enqueueJob } from "../src/db/index.ts";
import { createDashboardHandler, createDashboardNodeHandler, type DashboardOptions } from "../src/dashboard/server.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { captureLogs } from "./support/worker.ts";
import { launchChromium } from "./support/browser.ts";

const db = useTestDatabase();
const TOKEN = "mounted-token";

let browser: Browser;
beforeAll(async () => {
  browser = await launchChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
});

const options = (): DashboardOptions => ({ db: db.pool, token: TOKEN, intervalMs: 100, logger: captureLogs().logger });
const portOf = (server: Server) => (server.address() as AddressInfo).port;
const listening = (server: Server) => new Promise<void>((resolve) => (server.listening ? resolve() : server.once("listening", () => resolve())));

/** A service with the dashboard under /picket, on a free port: its base URL and how to stop it. */
type Service = { base: string; stop: () => Promise<void> };
const closeServer = (server: Server) =>
  new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });

const services: Record<string, () => Promise<Service>> = {
  express: async () => {
    const { listener, dispose } = createDashboardNodeHandler(options());
    const app = express();
    app.get("/health", (_req, res) => void res.send("ok"));
    app.use("/picket", listener);
    const server = app.listen(0, "127.0.0.1");
    await listening(server);
    return { base: `http://127.0.0.1:${portOf(server)}`, stop: async () => (await closeServer(server), await dispose()) };
  },
  fastify: async () => {
    const { listener, dispose } = createDashboardNodeHandler({ ...options(), prefix: "/picket" });
    const app = Fastify();
    app.get("/health", async () => "ok");
    for (const url of ["/picket", "/picket/*"]) {
      app.all(url, (request, reply) => {
        reply.hijack();
        listener(request.raw, reply.raw);
      });
    }
    await app.listen({ port: 0, host: "127.0.0.1" });
    return { base: `http://127.0.0.1:${portOf(app.server)}`, stop: async () => (app.server.closeAllConnections(), await app.close(), await dispose()) };
  },
  hono: async () => {
    const { handler, dispose } = createDashboardHandler(options());
    const app = new Hono();
    app.get("/health", (c) => c.text("ok"));
    // Hono's mount takes the prefix off; the page needs its trailing slash to resolve its URLs.
    app.get("/picket", (c) => c.redirect("/picket/", 308));
    app.mount("/picket", handler);
    const server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }) as Server;
    await listening(server);
    return { base: `http://127.0.0.1:${portOf(server)}`, stop: async () => (await closeServer(server), await dispose()) };
  },
  "node:http": async () => {
    const { listener, dispose } = createDashboardNodeHandler({ ...options(), prefix: "/picket" });
    const server = createServer((req, res) => {
      if (req.url === "/health") return void res.end("ok");
      listener(req, res);
    });
    server.listen(0, "127.0.0.1");
    await listening(server);
    return { base: `http://127.0.0.1:${portOf(server)}`, stop: async () => (await closeServer(server), await dispose()) };
  },
};

describe("the dashboard mounted under /picket", () => {
  for (const [framework, start] of Object.entries(services)) {
    it(`in ${framework}: the page works under the prefix, and the routes, the stream and the actions answer beside the service's own`, async () => {
      const task = `mounted-${framework.replace(":", "-")}`;
      const job = await enqueueJob(db.pool, { type: task, runAt: new Date(Date.now() + 3_600_000) });
      const service = await start();
      try {
        expect(await (await fetch(`${service.base}/health`)).text()).toBe("ok");
        // Without its trailing slash, the page is sent to it.
        const bare = await fetch(`${service.base}/picket`, { redirect: "manual" });
        expect(bare.status).toBe(308);
        expect(new URL(bare.headers.get("location")!, service.base).pathname).toBe("/picket/");
        const jobs = await fetch(`${service.base}/picket/api/jobs?state=scheduled&task=${task}`);
        expect((await jobs.json()).jobs.map((j: { id: string }) => j.id)).toEqual([job.id]);
        // The live stream, through the framework.
        const stream = await fetch(`${service.base}/picket/api/events`);
        expect(stream.headers.get("content-type")).toMatch(/^text\/event-stream/);
        const reader = stream.body!.getReader();
        expect(new TextDecoder().decode((await reader.read()).value)).toMatch(/^event: snapshot\n/);
        await reader.cancel();
        // The page in a browser, from the bare prefix: it follows the redirect, goes live and shows the job's task.
        const page = await browser.newPage();
        try {
          await page.goto(`${service.base}/picket`);
          await expect.poll(() => page.locator("#status").textContent(), { timeout: 10_000 }).toMatch(/^live · /);
          await expect.poll(() => page.locator(`[data-task="${task}"] [data-col="scheduled"]`).textContent(), { timeout: 10_000 }).toBe("1");
          expect(page.url()).toBe(`${service.base}/picket/`);
        } finally {
          await page.close();
        }
        // A write action with the token, through the framework.
        const cancel = await fetch(`${service.base}/picket/api/jobs/${job.id}/cancel`, { method: "POST", headers: { authorization: `Bearer ${TOKEN}` } });
        expect(cancel.status).toBe(200);
        expect((await cancel.json()).message).toBe(`job ${job.id} is cancelled (if it was running, its handler is being stopped)`);
        expect((await row(db.pool, job.id)).status).toBe("cancelled");
      } finally {
        await service.stop();
      }
    }, 60_000);
  }
});
