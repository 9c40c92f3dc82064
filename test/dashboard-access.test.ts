// Who may read the dashboard (issue 28, item 5). A page on another site can rebind its DNS name to
// 127.0.0.1 and read a loopback dashboard from the victim's browser: its requests carry the page's
// own name as Host, which is how the dashboard tells them apart. And an operator may want reads to
// need the token as writes do. Raw HTTP requests here (fetch will not send a Host of its choosing).
import { request, type Server } from "node:http";
import { Effect, Fiber } from "effect";
import { afterEach, describe, expect, it } from "vitest";
import { enqueueJob, type Queryable } from "../src/db/index.ts";
import { hostName } from "../src/dashboard/access.ts";
import { createDashboardHandler, serveDashboard, type DashboardOptions } from "../src/dashboard/server.ts";
import { useTestDatabase } from "./support/db.ts";
import { freePort } from "./support/ports.ts";

const db = useTestDatabase();
const TOKEN = "reads-need-this";

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
});

const dashboard = async (options: Partial<DashboardOptions> & { host?: string } = {}) => {
  const port = await freePort();
  let server: Server | undefined;
  const fiber = Effect.runFork(serveDashboard({ db: db.pool, port, host: "127.0.0.1", intervalMs: 100, ...options }, (s) => (server = s)));
  stops.push(async () => {
    server?.closeAllConnections();
    await Effect.runPromise(Fiber.interrupt(fiber));
  });
  await expect.poll(() => get(port, "/", { host: `127.0.0.1:${port}` }).then((r) => r.status, () => 0), { timeout: 10_000 }).toBe(200);
  return port;
};

/** One GET to 127.0.0.1:port with these headers: the status and the body (a stream's first chunk). */
const get = (port: number, path: string, headers: Record<string, string>): Promise<{ status: number; body: string }> =>
  new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, headers }, (response) => {
      response.once("data", (chunk: Buffer) => {
        resolve({ status: response.statusCode ?? 0, body: chunk.toString() });
        req.destroy();
      });
      response.once("end", () => resolve({ status: response.statusCode ?? 0, body: "" }));
    });
    req.on("error", reject);
    req.end();
  });

describe("the Host a request names", () => {
  it("is refused on every route unless it is localhost, a loopback address, the bound address or an allowed name", async () => {
    await enqueueJob(db.pool, { type: "host-check" });
    const port = await dashboard({ allowedHosts: ["dash.internal"] });
    for (const path of ["/", "/api/snapshot", "/api/machines", "/api/events", "/api/jobs/1"]) {
      const rebound = await get(port, path, { host: `evil.example:${port}` });
      expect(rebound.status).toBe(403);
      expect(JSON.parse(rebound.body).error).toMatch(/does not answer for the host "evil\.example:\d+": open it as localhost, 127\.0\.0\.1, \[::1\], dash\.internal/);
    }
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, `LOCALHOST:${port}`, "localhost", `dash.internal:${port}`]) {
      expect((await get(port, "/api/snapshot", { host })).status).toBe(200);
    }
    // A write, too, is refused before its token is looked at.
    const write = await new Promise<number>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port, path: "/api/jobs/1/cancel", method: "POST", headers: { host: "evil.example" } }, (r) => resolve(r.statusCode ?? 0));
      req.on("error", reject);
      req.end();
    });
    expect(write).toBe(403);
  });

  it("is read without its port, IPv6 brackets kept", () => {
    expect(hostName("Example.com:7070")).toBe("example.com");
    expect(hostName("[::1]:7070")).toBe("[::1]");
    expect(hostName("[::1]")).toBe("[::1]");
    expect(hostName("localhost")).toBe("localhost");
    expect(hostName(undefined)).toBeUndefined();
  });

  it("is not checked by a mounted handler unless it is given names (the service routes its own hosts)", async () => {
    const open = createDashboardHandler({ db: db.pool });
    const checked = createDashboardHandler({ db: db.pool, allowedHosts: ["service.local"] });
    try {
      expect((await open.handler(new Request("http://anything.example/api/machines"))).status).toBe(200);
      expect((await checked.handler(new Request("http://anything.example/api/machines"))).status).toBe(403);
      expect((await checked.handler(new Request("http://service.local/api/machines"))).status).toBe(200);
    } finally {
      await open.dispose();
      await checked.dispose();
    }
  });
});

describe("reads that need the token", () => {
  it("are refused without it or with a wrong one, served with it (the stream by ?token=), and the page itself needs none", async () => {
    const port = await dashboard({ token: TOKEN, tokenForReads: true });
    const host = `127.0.0.1:${port}`;
    expect((await get(port, "/", { host })).status).toBe(200);
    for (const path of ["/api/snapshot", "/api/machines", "/api/events", "/api/jobs/1"]) {
      const refused = await get(port, path, { host });
      expect(refused.status).toBe(401);
      expect(JSON.parse(refused.body).error).toBe(
        "reading this dashboard needs the dashboard's token, and none was sent: type it in the token field at the top of the page (or send Authorization: Bearer <token>)",
      );
      // A wrong token is told apart from none: a typo, or another dashboard's token.
      const wrong = await get(port, path, { host, authorization: "Bearer wrong" });
      expect(wrong.status).toBe(401);
      expect(JSON.parse(wrong.body).error).toBe(
        "the token sent is not this dashboard's token: check the token field at the top of the page (the dashboard's is the value of --token, or PICKET_DASHBOARD_TOKEN)",
      );
    }
    expect((await get(port, "/api/snapshot", { host, authorization: `Bearer ${TOKEN}` })).status).toBe(200);
    const stream = await get(port, `/api/events?token=${TOKEN}`, { host });
    expect(stream.status).toBe(200);
    expect(stream.body).toMatch(/^event: snapshot\n/);
  });

  it("are refused, saying why, when the dashboard was given no token to check them against", async () => {
    const port = await dashboard({ tokenForReads: true });
    const refused = await get(port, "/api/snapshot", { host: `127.0.0.1:${port}` });
    expect(refused.status).toBe(403);
    expect(JSON.parse(refused.body).error).toMatch(/reads need the dashboard's token, and none was given/);
  });
});

describe("the icon browsers ask for", () => {
  it("is answered with no content rather than a 404", async () => {
    const port = await dashboard();
    expect((await get(port, "/favicon.ico", { host: `127.0.0.1:${port}` })).status).toBe(204);
  });
});

describe("a job route's id", () => {
  it("that is no job id is the caller's mistake: 400 saying so, not the database's 503", async () => {
    const port = await dashboard({ token: TOKEN });
    const host = `127.0.0.1:${port}`;
    for (const id of ["abc", "0", "-1", "1.5", "9223372036854775808"]) {
      const read = await get(port, `/api/jobs/${id}`, { host });
      expect(read.status).toBe(400);
      expect(JSON.parse(read.body)).toEqual({ error: `job id must be a positive integer (got ${JSON.stringify(id)})` });
    }
    const write = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port, path: "/api/jobs/abc/retry", method: "POST", headers: { host, authorization: `Bearer ${TOKEN}` } }, (r) =>
        r.once("data", (c: Buffer) => resolve({ status: r.statusCode ?? 0, body: c.toString() })),
      );
      req.on("error", reject);
      req.end();
    });
    expect(write.status).toBe(400);
    expect((await get(port, "/api/jobs/9223372036854775807", { host })).status).toBe(404);
  });
});

describe("the live stream", () => {
  /** A stream opened by fetch, its first event read, and kept open. */
  const openStream = async (port: number) => {
    const response = await fetch(`http://127.0.0.1:${port}/api/events`);
    const reader = response.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toMatch(/^event: snapshot\n/);
    return reader;
  };

  it("ends when the dashboard stops, though a page keeps it open: the stop does not wait for the page", async () => {
    const port = await freePort();
    const fiber = Effect.runFork(serveDashboard({ db: db.pool, port, host: "127.0.0.1", intervalMs: 100 }));
    await expect.poll(() => fetch(`http://127.0.0.1:${port}/favicon.ico`).then((r) => r.status, () => 0), { timeout: 10_000 }).toBe(204);
    const reader = await openStream(port);
    const stopAt = Date.now();
    await Effect.runPromise(Fiber.interrupt(fiber));
    // It waited 20 s for the page to leave before the server was picket's own (serve-fetch.ts).
    expect(Date.now() - stopAt).toBeLessThan(2_000);
    await expect(reader.read()).rejects.toThrow();
  });

  it("stops reading the database for a page that has gone", async () => {
    let statements = 0;
    const counted: Queryable = { query: (config) => ((statements += 1), db.pool.query(config)) };
    const port = await dashboard({ db: counted });
    const reader = await openStream(port);
    await expect.poll(() => statements, { timeout: 5_000 }).toBeGreaterThan(2); // a snapshot every 100 ms
    await reader.cancel();
    // One snapshot may be under way as the page leaves; then none.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const after = statements;
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(statements).toBe(after);
  });

  it("serves every connection, one after another, as a reloaded page makes them", async () => {
    const port = await dashboard();
    for (let load = 0; load < 3; load++) {
      const stream = await get(port, "/api/events", { host: `127.0.0.1:${port}` });
      expect(stream.status).toBe(200);
      expect(stream.body).toMatch(/^event: snapshot\ndata: \{/);
    }
  });

  /** A page's stream, read on in the background: how many snapshots it has been sent. */
  const viewer = async (port: number) => {
    const response = await fetch(`http://127.0.0.1:${port}/api/events`);
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    const seen = { snapshots: 0, firstAt: 0 };
    void (async () => {
      let text = "";
      for (;;) {
        const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
        if (done) return;
        text += decoder.decode(value, { stream: true });
        const events = text.split("\n\n");
        text = events.pop()!;
        for (const event of events) {
          if (!event.startsWith("event: snapshot\n")) continue;
          if (seen.snapshots === 0) seen.firstAt = Date.now();
          seen.snapshots += 1;
        }
      }
    })();
    return { seen, close: () => reader.cancel() };
  };

  /** A db that counts the snapshot's reads (one of its statements, run once per snapshot). */
  const countingReads = () => {
    const counter = { reads: 0 };
    const counted: Queryable = {
      query: (config) => {
        if (typeof config === "object" && config.text.includes("last_error IS NOT NULL ORDER BY updated_at DESC")) counter.reads += 1;
        return db.pool.query(config);
      },
    };
    return { counter, db: counted };
  };

  it("reads the snapshot once per interval for all the pages open, and sends it to each of them", async () => {
    const { counter, db: counted } = countingReads();
    const port = await dashboard({ db: counted });
    const viewers = await Promise.all(Array.from({ length: 10 }, () => viewer(port)));
    await expect.poll(() => Math.min(...viewers.map((v) => v.seen.snapshots)), { timeout: 10_000 }).toBeGreaterThan(0);
    const readsBefore = counter.reads;
    const sentBefore = viewers.map((v) => v.seen.snapshots);
    // Each page is sent a snapshot every interval (100 ms here)...
    await expect.poll(() => Math.min(...viewers.map((v, i) => v.seen.snapshots - sentBefore[i]!)), { timeout: 10_000 }).toBeGreaterThanOrEqual(5);
    const sent = viewers.reduce((sum, v, i) => sum + v.seen.snapshots - sentBefore[i]!, 0);
    const reads = counter.reads - readsBefore;
    // ...and the database is read for all ten at once: a read per page made as many reads as sends.
    expect(reads).toBeGreaterThan(0);
    expect(reads).toBeLessThan(sent / 3);
    await Promise.all(viewers.map((v) => v.close()));
  });

  it("sends a page opened between two reads the last snapshot at once, and goes on for pages opened and closed", async () => {
    // A long interval: a page that waited for the next read would wait ten seconds.
    const port = await dashboard({ intervalMs: 10_000 });
    const first = await viewer(port);
    await expect.poll(() => first.seen.snapshots, { timeout: 10_000 }).toBe(1);
    // Ten reloads: each new page shows the picture at once, while the pages before it close.
    let previous = first;
    for (let reload = 0; reload < 10; reload++) {
      const openedAt = Date.now();
      const page = await viewer(port);
      await expect.poll(() => page.seen.snapshots, { timeout: 5_000 }).toBe(1);
      expect(page.seen.firstAt - openedAt).toBeLessThan(5_000);
      await previous.close();
      previous = page;
    }
    await previous.close();
  });
});
