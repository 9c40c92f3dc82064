// The dashboard's HTTP side, on Effect's HTTP router (as the health server): the page, a JSON
// snapshot, a server-sent-event stream of snapshots, a job's full row, the two machines' configs,
// and the admin actions, which are picket's fenced admin statements. Everything it shows comes
// from the database, so one dashboard sees every worker on every host.
//
// Served by `picket dashboard` (loopback by default), or mounted in a service behind its own
// auth through createDashboardHandler (a fetch-style handler). Write actions need the token the
// dashboard was given; without one they are refused.
import { timingSafeEqual } from "node:crypto";
import type { Server } from "node:http";
import * as Effect from "effect/Effect";
import * as Layer from "effect/Layer";
import * as Stream from "effect/Stream";
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http";
import { cancelJob, dashboardSnapshot, getJob, isJobId, jobSteps, retryDeadJob, type AdminOptions, type AdminResult, type Queryable, type StatementOptions } from "../db/index.ts";
import { jobMachine, machineConfig, supervisorMachine } from "../machines/index.ts";
import { serveFetchHandler } from "../runtime/serve-fetch.ts";
import { LiveFeed } from "./live-feed.ts";
import { DASHBOARD_PAGE } from "./page.ts";

export interface DashboardOptions {
  /** Where picket's tables are (a pool of the caller's, or of `picket dashboard`). */
  db: Queryable;
  /** Schema and statement bounds, as for any picket statement. */
  statements?: StatementOptions;
  /** Write actions (retry, cancel) need `Authorization: Bearer <token>`; without a token they are refused. */
  token?: string;
  /**
   * Reads need the token too: every route but the page itself (which holds no data). The live
   * stream takes it as `?token=` (a browser's EventSource sends no headers).
   */
  tokenForReads?: boolean;
  /**
   * The Host header values (names or addresses, without the port) requests must carry; others get
   * 403. A page on another site that rebinds its DNS name to 127.0.0.1 reaches a loopback
   * dashboard with its own name as Host, so this is what keeps such a page from reading it.
   * serveDashboard always checks: localhost, the loopback addresses and the address it listens on,
   * plus these. createDashboardHandler checks only when given (the service's own routing decides).
   */
  allowedHosts?: readonly string[];
  /** How often the live stream sends a snapshot; default 1000 ms. */
  intervalMs?: number;
}

const json = (body: unknown, status = 200) => HttpServerResponse.jsonUnsafe(body, { status });

/** A statement's failure as the page shows it: what went wrong, in the database's words. */
const failure = (error: unknown) => json({ error: error instanceof Error ? error.message : String(error) }, 503);

/**
 * A statement run for a route: `respond` with its result, or 503 with the database's own error (the
 * error itself is kept: Effect.tryPromise without a catch wraps it in one that says only "An error
 * occurred in Effect.tryPromise", which is what the page showed).
 */
const answered = <A>(run: () => Promise<A>, respond: (result: A) => HttpServerResponse.HttpServerResponse) =>
  Effect.tryPromise({ try: run, catch: (error) => error }).pipe(
    Effect.map(respond),
    Effect.catch((error) => Effect.succeed(failure(error))),
  );

/** A job route's id that is no job id: the caller's mistake (400), not the database's (503). */
const badJobId = (id: string | undefined) => json({ error: `job id must be a positive integer (got ${JSON.stringify(id ?? "")})` }, 400);

const sameToken = (given: string, expected: string): boolean => {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
};

/** The token an `Authorization: Bearer <token>` header carries, if any. */
const bearerToken = (request: HttpServerRequest.HttpServerRequest): string | undefined => /^Bearer (.+)$/.exec(request.headers["authorization"] ?? "")?.[1];

/** The Host header's name or address, without the port, in lower case ("[::1]" keeps its brackets). */
export const hostName = (header: string | undefined): string | undefined => {
  if (header === undefined || header === "") return undefined;
  const host = header.trim().toLowerCase();
  return host.startsWith("[") ? host.slice(0, host.indexOf("]") + 1) : host.replace(/:\d*$/, "");
};

/** The names a dashboard listening on `host` answers to without being told more. */
export const loopbackHosts = (host: string): string[] => {
  const names = ["localhost", "127.0.0.1", "[::1]"];
  // An address it listens on, unless a wildcard: a request naming 0.0.0.0 has no business here.
  if (host !== "0.0.0.0" && host !== "::" && host !== "[::]") names.push(host.includes(":") && !host.startsWith("[") ? `[${host}]` : host);
  return names.map((name) => name.toLowerCase());
};

/** The dashboard's routes, as a Layer for HttpRouter.serve or HttpRouter.toWebHandler. */
export const dashboardRoutes = (options: DashboardOptions) => {
  const { db, token } = options;
  const allowed = options.allowedHosts === undefined ? undefined : new Set(options.allowedHosts.map((host) => hostName(host)));
  const statements = options.statements ?? {};

  /**
   * Every route's first check: the Host header (when the dashboard has a list), then, for reads
   * when they need it, the token. Refusals say what to change.
   */
  const guarded = <E, R>(route: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>, read: boolean) =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest;
      if (allowed !== undefined) {
        // A web Request (the mounted handler) carries no Host header: its URL names the host.
        const header = request.headers["host"] || (/^https?:\/\//.test(request.originalUrl) ? new URL(request.originalUrl).host : undefined);
        const host = hostName(header);
        if (host === undefined || !allowed.has(host)) {
          return json(
            { error: `this dashboard does not answer for the host ${JSON.stringify(header ?? "")}: open it as ${[...allowed].join(", ")}, or add the name you use (picket dashboard --allowed-host <name>, or allowedHosts)` },
            403,
          );
        }
      }
      if (read && options.tokenForReads === true) {
        if (token === undefined) return json({ error: "reads need the dashboard's token, and none was given: start it with --token (or PICKET_DASHBOARD_TOKEN)" }, 403);
        const given = bearerToken(request) ?? new URL(request.url, "http://dashboard").searchParams.get("token") ?? undefined;
        if (given === undefined || !sameToken(given, token)) return json({ error: "reading this dashboard needs its token (Authorization: Bearer <token>)" }, 401);
      }
      return yield* route;
    });
  const intervalMs = options.intervalMs ?? 1_000;
  const snapshot = () => dashboardSnapshot(db, statements);

  // One snapshot per interval while any page is open, whatever their number; a failed one is sent
  // as an error event, and the stream goes on (the database may come back).
  const feed = new LiveFeed(
    () =>
      snapshot().then(
        (body) => `event: snapshot\ndata: ${JSON.stringify(body)}\n\n`,
        (error: unknown) => `event: failure\ndata: ${JSON.stringify({ error: error instanceof Error ? error.message : String(error) })}\n\n`,
      ),
    intervalMs,
  );

  // The job's history names the dashboard as who asked: its token is shared, so it cannot say which person.
  const admin = (action: (db: Queryable, id: string, options: AdminOptions) => Promise<AdminResult>) =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest;
      if (token === undefined) return json({ error: "write actions are off: start the dashboard with a token (picket dashboard --token, or PICKET_DASHBOARD_TOKEN)" }, 403);
      const given = bearerToken(request);
      if (given === undefined || !sameToken(given, token)) return json({ error: "this action needs the dashboard's token (Authorization: Bearer <token>)" }, 401);
      const { id } = yield* HttpRouter.params;
      if (id === undefined || !isJobId(id)) return badJobId(id);
      return yield* answered(
        () => action(db, id, { ...statements, by: "dashboard" }),
        (result) => json(result, result.outcome === "applied" ? 200 : 409),
      );
    });

  return Layer.mergeAll(
    HttpRouter.add("GET", "/", guarded(Effect.succeed(HttpServerResponse.html(DASHBOARD_PAGE)), false)),
    // Browsers ask for it: no icon, rather than a 404 in their console.
    HttpRouter.add("GET", "/favicon.ico", guarded(Effect.succeed(HttpServerResponse.empty({ status: 204 })), false)),
    HttpRouter.add("GET", "/api/machines", guarded(Effect.succeed(json({ job: machineConfig(jobMachine), supervisor: machineConfig(supervisorMachine) })), true)),
    HttpRouter.add(
      "GET",
      "/api/snapshot",
      guarded(answered(snapshot, (body) => json(body)), true),
    ),
    HttpRouter.add(
      "GET",
      "/api/events",
      guarded(
        Effect.sync(() =>
          HttpServerResponse.stream(
            Stream.fromAsyncIterable({ [Symbol.asyncIterator]: () => feed.open() }, (error) => error),
            { contentType: "text/event-stream", headers: { "cache-control": "no-cache" } },
          ),
        ),
        true,
      ),
    ),
    HttpRouter.add(
      "GET",
      "/api/jobs/:id",
      guarded(Effect.gen(function* () {
        const { id } = yield* HttpRouter.params;
        if (id === undefined || !isJobId(id)) return badJobId(id);
        // The job with its recorded steps: its history as a handler wrote it.
        const read = async () => {
          const job = await getJob(db, id, statements);
          return job === null ? null : { ...job, steps: await jobSteps(db, job.id, statements) };
        };
        return yield* answered(read, (job) => (job === null ? json({ error: `no job ${id}` }, 404) : json(job)));
      }), true),
    ),
    HttpRouter.add("POST", "/api/jobs/:id/retry", guarded(admin(retryDeadJob), false)),
    HttpRouter.add("POST", "/api/jobs/:id/cancel", guarded(admin(cancelJob), false)),
  );
};

/**
 * A fetch-style handler (Request in, Response out) a service mounts behind its own auth: in
 * Hono, Bun, Deno or any framework that speaks the Fetch API. `dispose` releases it.
 */
export const createDashboardHandler = (options: DashboardOptions) => {
  const { handler, dispose } = HttpRouter.toWebHandler(dashboardRoutes(options), { disableLogger: true });
  return { handler: (request: Request) => handler(request), dispose };
};

/**
 * Serves the dashboard until interrupted (`picket dashboard`): the handler a service would mount,
 * on node:http. Interrupting it ends the live streams still open and closes the port.
 */
export const serveDashboard = (
  options: DashboardOptions & { port: number; host: string },
  created: (server: Server) => void = () => undefined,
  listening: (url: string) => void = () => undefined,
) => {
  const allowedHosts = [...loopbackHosts(options.host), ...(options.allowedHosts ?? [])];
  // picket dashboard says where it listens itself, once it does: no "Listening on" line here.
  return serveFetchHandler(() => createDashboardHandler({ ...options, allowedHosts }), { port: options.port, host: options.host, created, listening });
};
