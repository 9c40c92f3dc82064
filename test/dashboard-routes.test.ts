// The dashboard's routes through the handler a service mounts (Request in, Response out), where the
// browser test does not look: what each answers when the database does not, a job in another
// schema, the live stream's headers, which routes need which token, and the names a Host header is
// matched against. The snapshot's order of finished jobs too. test/dashboard-access.test.ts holds
// the Host check and the tokens end to end over HTTP; test/dashboard.test.ts the page in a browser.
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { beat, dashboardSnapshot, enqueueJob, enqueueJobs, listPaused, migrate } from "../src/db/index.ts";
import { hostName, loopbackHosts } from "../src/dashboard/access.ts";
import { createDashboardHandler, type DashboardOptions } from "../src/dashboard/server.ts";
import { useTestDatabase } from "./support/db.ts";
import { freePort } from "./support/ports.ts";
import { captureLogs } from "./support/worker.ts";

const db = useTestDatabase();
const TOKEN = "t0ken";

const disposals: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const dispose of disposals.splice(0)) await dispose();
});

/** The mounted handler over these options; each request is answered as a service would pass it on. */
const mounted = (options: Partial<DashboardOptions> = {}) => {
  const { handler, dispose } = createDashboardHandler({ db: db.pool, intervalMs: 50, ...options });
  disposals.push(dispose);
  return (path: string, init: RequestInit = {}) => handler(new Request(`http://dash.test${path}`, init));
};

describe("when the database does not answer", () => {
  // A real pool to a port nothing listens on: every statement fails to connect.
  const away = async () => {
    const pool = new pg.Pool({ connectionString: `postgres://picket@127.0.0.1:${await freePort()}/none`, connectionTimeoutMillis: 5_000 });
    disposals.push(() => pool.end());
    return pool;
  };

  it("each read and write says so with 503 and the database's words; the live stream sends a failure event and goes on", async () => {
    const request = mounted({ db: await away(), token: TOKEN });
    const bearer = { headers: { authorization: `Bearer ${TOKEN}` } };
    for (const [path, init] of [["/api/snapshot", {}], ["/api/jobs/1", {}], ["/api/jobs/1/retry", { method: "POST", ...bearer }], ["/api/jobs/1/cancel", { method: "POST", ...bearer }]] as const) {
      const response = await request(path, init);
      expect(response.status, path).toBe(503);
      expect((await response.json()).error, path).toMatch(/ECONNREFUSED/);
    }
    const stream = await request("/api/events");
    expect(stream.status).toBe(200);
    expect(stream.headers.get("content-type")).toMatch(/^text\/event-stream/);
    // A page's EventSource must not be served a cached stream.
    expect(stream.headers.get("cache-control")).toBe("no-cache");
    const reader = stream.body!.getReader();
    const decode = async () => new TextDecoder().decode((await reader.read()).value);
    for (let i = 0; i < 2; i++) expect(await decode()).toMatch(/^event: failure\ndata: \{"error":".*ECONNREFUSED.*"\}\n\n$/);
    await reader.cancel();
  });
});

describe("the routes", () => {
  it("read the schema they were given: a job there is found, and one that is nowhere is 404 saying which", async () => {
    await migrate(db.pool, { schema: "dash_elsewhere" });
    const job = await enqueueJob(db.pool, { type: "elsewhere", payload: { n: 1 } }, { schema: "dash_elsewhere" });
    const request = mounted({ statements: { schema: "dash_elsewhere" } });
    const found = await request(`/api/jobs/${job.id}`);
    expect(found.status).toBe(200);
    expect(await found.json()).toMatchObject({ id: job.id, type: "elsewhere", payload: { n: 1 }, steps: [] });
    const missing = await request("/api/jobs/987654");
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ error: "no job 987654" });
  });

  it("with reads behind the token: the icon needs none, and a write without one is refused as a write, not as a read", async () => {
    const request = mounted({ token: TOKEN, tokenForReads: true });
    expect((await request("/favicon.ico")).status).toBe(204);
    expect((await request("/api/snapshot")).status).toBe(401);
    for (const action of ["retry", "cancel", "run-now", "delete"]) {
      const refused = await request(`/api/jobs/1/${action}`, { method: "POST" });
      expect(refused.status).toBe(401);
      expect(await refused.json()).toEqual({
        error: `this action (${action}) needs the dashboard's token, and none was sent: type it in the token field at the top of the page (or send Authorization: Bearer <token>)`,
      });
    }
    for (const path of ["/api/pause?queue=q", "/api/resume?task=t"]) {
      const refused = await request(path, { method: "POST", headers: { authorization: "Bearer not-it" } });
      expect(refused.status).toBe(401);
      expect((await refused.json()).error).toMatch(/^the token sent is not this dashboard's token/);
    }
  });

  it("take a token only from a Bearer header that is one: another scheme that ends in the token is refused", async () => {
    const request = mounted({ token: TOKEN, tokenForReads: true });
    expect((await request("/api/snapshot", { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
    for (const authorization of [`Basic Bearer ${TOKEN}`, `bearer ${TOKEN}`, `Bearer  ${TOKEN}`, "Bearer "]) {
      expect((await request("/api/snapshot", { headers: { authorization } })).status, authorization).toBe(401);
      expect((await request("/api/jobs/1/cancel", { method: "POST", headers: { authorization } })).status, authorization).toBe(401);
    }
  });
});

describe("the names a dashboard answers to", () => {
  it("hostName: none for an absent or empty header, lower case, the port gone, anything else kept", () => {
    expect(hostName(undefined)).toBeUndefined();
    expect(hostName("")).toBeUndefined();
    expect(hostName(" Dash.Example:8080 ")).toBe("dash.example");
    expect(hostName("dash.example:")).toBe("dash.example");
    // Not a port: kept whole, so it matches no allowed name by accident.
    expect(hostName("dash:example")).toBe("dash:example");
    expect(hostName("[FE80::1]:4000")).toBe("[fe80::1]");
  });

  it("loopbackHosts: the loopback names, and the address it listens on unless a wildcard, an IPv6 one in brackets, all lower case", () => {
    const loopback = ["localhost", "127.0.0.1", "[::1]"];
    for (const wildcard of ["0.0.0.0", "::", "[::]"]) expect(loopbackHosts(wildcard), wildcard).toEqual(loopback);
    expect(loopbackHosts("192.168.1.5")).toEqual([...loopback, "192.168.1.5"]);
    expect(loopbackHosts("Dash.Internal")).toEqual([...loopback, "dash.internal"]);
    expect(loopbackHosts("fe80::1")).toEqual([...loopback, "[fe80::1]"]);
    expect(loopbackHosts("[fe80::1]")).toEqual([...loopback, "[fe80::1]"]);
  });
});

describe("the snapshot's finished jobs", () => {
  it("are listed by task, then by status, the workers' completions among the rows' dead and cancelled", async () => {
    const jobs = await enqueueJobs(db.pool, [{ type: "order-b" }, { type: "order-a" }, { type: "order-a" }, { type: "order-b" }]);
    const finish = (i: number, status: string) => db.pool.query("UPDATE picket.jobs SET status = $2, finished_at = now() WHERE id = $1", [jobs[i]!.id, status]);
    await finish(0, "dead");
    await finish(1, "dead");
    await finish(2, "cancelled");
    await finish(3, "cancelled");
    await beat(db.pool, {
      id: "order-worker", host: "h", pid: 1, version: "test", startedAt: new Date(), concurrency: 1, state: "running",
      jobs: [], running: 0, waiting: 0, tasks: ["order-a", "order-c"], completedPerSecond: { "order-c": 1, "order-a": 2 },
    });
    const { finished } = await dashboardSnapshot(db.pool);
    expect(finished.filter((f) => f.type.startsWith("order-")).map((f) => `${f.type} ${f.status}`)).toEqual([
      "order-a cancelled",
      "order-a completed",
      "order-a dead",
      "order-b cancelled",
      "order-b dead",
      "order-c completed",
    ]);
  });
});

describe("the write actions", () => {
  const bearer = { authorization: `Bearer ${TOKEN}` };

  it("say in words what became of the job, name who asked in its history, and log each action", async () => {
    const logs = captureLogs();
    const request = mounted({ token: TOKEN, logger: logs.logger });
    const later = await enqueueJob(db.pool, { type: "dash-words", runAt: new Date(Date.now() + 3_600_000) });
    const runNow = await request(`/api/jobs/${later.id}/run-now`, { method: "POST", headers: { ...bearer, "x-picket-by": encodeURIComponent("Zoë on call") } });
    expect(runNow.status).toBe(200);
    expect(await runNow.json()).toMatchObject({ outcome: "applied", message: `job ${later.id} is due now: the next free worker takes it` });
    expect((await db.pool.query("SELECT errors -> -1 ->> 'by' AS by FROM picket.jobs WHERE id = $1", [later.id])).rows[0].by).toBe("dashboard: Zoë on call");
    // A cancel that lost the race to the job's end: why nothing was done, not wrong_status.
    await db.pool.query("UPDATE picket.jobs SET status = 'completed', finished_at = now() WHERE id = $1", [later.id]);
    const lost = await request(`/api/jobs/${later.id}/cancel`, { method: "POST", headers: bearer });
    expect(lost.status).toBe(409);
    expect(await lost.json()).toEqual({
      outcome: "wrong_status",
      status: "completed",
      message: `job ${later.id} is already completed, so nothing was done: only a pending or running job can be cancelled`,
    });
    const deleted = await request(`/api/jobs/${later.id}/delete`, { method: "POST", headers: bearer });
    expect((await deleted.json()).message).toBe(`job ${later.id} is deleted, with its recorded steps`);
    const gone = await request(`/api/jobs/${later.id}/retry`, { method: "POST", headers: bearer });
    expect(gone.status).toBe(409);
    expect((await gone.json()).message).toBe(`job ${later.id} no longer exists (workers delete completed jobs unless they keep them, and retention removes old ones): nothing was done`);
    expect(logs.lines.filter((l) => l.msg === "dashboard action").map((l) => [l.action, l.on, l.by, l.outcome])).toEqual([
      ["run-now", `job ${later.id}`, "dashboard: Zoë on call", "applied"],
      ["cancel", `job ${later.id}`, "dashboard", "wrong_status"],
      ["delete", `job ${later.id}`, "dashboard", "applied"],
      ["retry", `job ${later.id}`, "dashboard", "not_found"],
    ]);
  });

  it("pause and resume a queue or a task, refusing a request that names neither or a name no job could have", async () => {
    const logs = captureLogs();
    const request = mounted({ token: TOKEN, logger: logs.logger });
    const paused = await request(`/api/pause?queue=${encodeURIComponent("mail/eu")}`, { method: "POST", headers: bearer });
    expect(paused.status).toBe(200);
    expect(await paused.json()).toMatchObject({ outcome: "applied", message: "queue mail/eu paused: no worker claims its jobs until it is resumed (running jobs finish)" });
    expect(await listPaused(db.pool)).toEqual([expect.objectContaining({ kind: "queue", name: "mail/eu", pausedBy: "dashboard" })]);
    const again = await request(`/api/pause?queue=${encodeURIComponent("mail/eu")}`, { method: "POST", headers: bearer });
    expect(again.status).toBe(409);
    expect((await again.json()).message).toMatch(/^queue mail\/eu was already paused, since \S+Z by dashboard$/);
    expect((await (await request("/api/resume?queue=mail%2Feu", { method: "POST", headers: bearer })).json()).message).toBe("queue mail/eu resumed: workers claim its jobs again");
    expect((await (await request("/api/resume?task=dash-t", { method: "POST", headers: bearer })).json()).message).toBe("task dash-t was not paused: nothing changed");
    for (const [path, error] of [
      ["/api/pause", "say what to pause: ?queue=<name> or ?task=<name>, one of them"],
      ["/api/pause?queue=a&task=b", "say what to pause: ?queue=<name> or ?task=<name>, one of them"],
      ["/api/resume?task=has%20space", 'picket: paused task type "has space" may contain only letters, digits and _ . : / - (no spaces).'],
    ] as const) {
      const refused = await request(path, { method: "POST", headers: bearer });
      expect(refused.status, path).toBe(400);
      expect((await refused.json()).error, path).toBe(error);
    }
    const badName = await request("/api/pause?task=t", { method: "POST", headers: { ...bearer, "x-picket-by": "%E0%A4%A" } });
    expect(badName.status).toBe(400);
    expect((await badName.json()).error).toBe('x-picket-by must be a URI-encoded name (got "%E0%A4%A")');
    expect(await listPaused(db.pool)).toEqual([]);
    expect(logs.lines.filter((l) => l.msg === "dashboard action").map((l) => [l.action, l.on, l.outcome])).toEqual([
      ["pause", "queue mail/eu", "applied"],
      ["pause", "queue mail/eu", "already_paused"],
      ["resume", "queue mail/eu", "applied"],
      ["resume", "task dash-t", "not_paused"],
    ]);
  });
});

describe("the job browser's route", () => {
  it("answers a page of a state's jobs, and 400 with what to change for a filter it cannot use", async () => {
    await migrate(db.pool, { schema: "dash_browse" });
    const request = mounted({ statements: { schema: "dash_browse" } });
    await db.pool.query("INSERT INTO dash_browse.jobs (type, status, finished_at) SELECT 'gone', 'dead', timestamptz '2026-01-01' + g * interval '1 minute' FROM generate_series(1, 3) AS g");
    const page = await request("/api/jobs?state=dead&limit=2&from=2026-01-01T00:01:30Z");
    expect(page.status).toBe(200);
    const body = await page.json();
    expect(body.jobs.map((job: { id: string }) => job.id)).toEqual(["3", "2"]);
    expect(body.next).toMatch(/^2026-01-01T00:02:00\.000000Z_2$/);
    const rest = await (await request(`/api/jobs?state=dead&limit=2&after=${encodeURIComponent(body.next)}`)).json();
    expect(rest).toMatchObject({ jobs: [expect.objectContaining({ id: "1" })], next: null, searchedTo: null });
    // Without a state: the ready jobs.
    expect(await (await request("/api/jobs")).json()).toEqual({ jobs: [], next: null, searchedTo: null });
    for (const [query, error] of [
      ["state=stuck", 'picket: browse state must be one of ready, scheduled, retrying, waiting, running, dead, completed, cancelled (got "stuck").'],
      ["state=dead&from=yesterday", 'from must be a time like 2026-01-02T03:04:05Z (got "yesterday")'],
      ["state=dead&limit=lots", "picket: browse limit must be an integer from 1 to 200 (got NaN)."],
    ] as const) {
      const refused = await request(`/api/jobs?${query}`);
      expect(refused.status, query).toBe(400);
      expect((await refused.json()).error, query).toBe(error);
    }
    // Behind the token when reads are.
    expect((await mounted({ token: TOKEN, tokenForReads: true })("/api/jobs?state=dead")).status).toBe(401);
  });
});

describe("the bulk routes", () => {
  it("count, then act on at most the count confirmed; refuse an unknown action, a state it cannot change, or no count", async () => {
    await migrate(db.pool, { schema: "dash_bulk" });
    const logs = captureLogs();
    const request = mounted({ statements: { schema: "dash_bulk" }, token: TOKEN, logger: logs.logger });
    const bearer = { authorization: `Bearer ${TOKEN}` };
    await db.pool.query("INSERT INTO dash_bulk.jobs (type, status, finished_at) SELECT 'b', 'dead', now() - g * interval '1 minute' FROM generate_series(1, 5) AS g");
    expect(await (await request("/api/bulk/retry/count?state=dead&task=b")).json()).toEqual({ count: 5 });
    const done = await request("/api/bulk/retry?state=dead&task=b&expected=3", { method: "POST", headers: { ...bearer, "x-picket-by": "Kim" } });
    expect(done.status).toBe(200);
    expect(await done.json()).toEqual({ applied: 3, skipped: 0, batches: 1, outcome: "applied", message: "3 jobs will run again (1 batch)" });
    expect(logs.lines.filter((l) => l.msg === "dashboard action").map((l) => [l.action, l.on, l.by])).toEqual([["bulk", "retry 3 dead jobs of task b", "dashboard: Kim"]]);
    for (const [path, method, status, error] of [
      ["/api/bulk/explode/count?state=dead", "GET", 400, 'a bulk action is one of retry, cancel, run-now, delete (got "explode")'],
      ["/api/bulk/retry/count?state=ready", "GET", 400, 'picket: retry applies to dead jobs, not "ready" ones.'],
      ["/api/bulk/delete?state=dead", "POST", 400, "say how many jobs you confirmed: ?expected=<the count>, from GET api/bulk/<action>/count"],
      ["/api/bulk/delete?state=dead&before=soon&expected=1", "POST", 400, 'before must be a time like 2026-01-02T03:04:05Z (got "soon")'],
    ] as const) {
      const refused = await request(path, { method, headers: bearer });
      expect(refused.status, path).toBe(status);
      expect((await refused.json()).error, path).toBe(error);
    }
    // A write: the token first.
    expect((await request("/api/bulk/delete?state=dead&expected=1", { method: "POST" })).status).toBe(401);
    expect((await db.pool.query("SELECT count(*)::int AS n FROM dash_bulk.jobs WHERE status = 'dead'")).rows[0].n).toBe(2);
  });
});
