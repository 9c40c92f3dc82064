// The dashboard's HTTP side, on Effect's HTTP router (as the health server): the page, a JSON
// snapshot, a server-sent-event stream of snapshots, a job's full row, the two machines' configs,
// and the admin actions, which are picket's fenced admin statements. Everything it shows comes
// from the database, so one dashboard sees every worker on every host.
//
// Served by `picket dashboard` (loopback by default), or mounted in a service behind its own
// auth through createDashboardHandler (a fetch-style handler). Write actions need the token the
// dashboard was given; without one they are refused.
import { timingSafeEqual } from "node:crypto";
import { createServer, type Server } from "node:http";
import { NodeHttpServer } from "@effect/platform-node";
import * as Effect from "effect/Effect";
import * as Layer from "effect/Layer";
import * as Stream from "effect/Stream";
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http";
import { cancelJob, dashboardSnapshot, getJob, jobSteps, retryDeadJob, type AdminResult, type Queryable, type StatementOptions } from "../db/index.ts";
import { jobMachine, machineConfig, supervisorMachine } from "../machines/index.ts";
import { DASHBOARD_PAGE } from "./page.ts";

export interface DashboardOptions {
  /** Where picket's tables are (a pool of the caller's, or of `picket dashboard`). */
  db: Queryable;
  /** Schema and statement bounds, as for any picket statement. */
  statements?: StatementOptions;
  /** Write actions (retry, cancel) need `Authorization: Bearer <token>`; without a token they are refused. */
  token?: string;
  /** How often the live stream sends a snapshot; default 1000 ms. */
  intervalMs?: number;
}

const json = (body: unknown, status = 200) => HttpServerResponse.jsonUnsafe(body, { status });

/** A statement's failure as the page shows it: what went wrong, in the database's words. */
const failure = (error: unknown) => json({ error: error instanceof Error ? error.message : String(error) }, 503);

const sameToken = (given: string, expected: string): boolean => {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
};

const encoder = new TextEncoder();

/** The dashboard's routes, as a Layer for HttpRouter.serve or HttpRouter.toWebHandler. */
export const dashboardRoutes = (options: DashboardOptions) => {
  const { db, token } = options;
  const statements = options.statements ?? {};
  const intervalMs = options.intervalMs ?? 1_000;
  const snapshot = () => dashboardSnapshot(db, statements);

  // One snapshot per interval while the page is open; a failed one is sent as an error event, and
  // the stream goes on (the database may come back).
  async function* events(): AsyncGenerator<Uint8Array> {
    for (;;) {
      let message: string;
      try {
        message = `event: snapshot\ndata: ${JSON.stringify(await snapshot())}\n\n`;
      } catch (error) {
        message = `event: failure\ndata: ${JSON.stringify({ error: error instanceof Error ? error.message : String(error) })}\n\n`;
      }
      yield encoder.encode(message);
      await new Promise((resolve) => setTimeout(resolve, intervalMs));
    }
  }

  const admin = (action: (db: Queryable, id: string, options: StatementOptions) => Promise<AdminResult>) =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest;
      if (token === undefined) return json({ error: "write actions are off: start the dashboard with a token (picket dashboard --token, or PICKET_DASHBOARD_TOKEN)" }, 403);
      const given = /^Bearer (.+)$/.exec(request.headers["authorization"] ?? "")?.[1];
      if (given === undefined || !sameToken(given, token)) return json({ error: "this action needs the dashboard's token (Authorization: Bearer <token>)" }, 401);
      const { id } = yield* HttpRouter.params;
      return yield* Effect.tryPromise(() => action(db, id ?? "", statements)).pipe(
        Effect.map((result) => json(result, result.outcome === "applied" ? 200 : 409)),
        Effect.catch((error) => Effect.succeed(failure(error))),
      );
    });

  return Layer.mergeAll(
    HttpRouter.add("GET", "/", Effect.succeed(HttpServerResponse.html(DASHBOARD_PAGE))),
    HttpRouter.add("GET", "/api/machines", Effect.succeed(json({ job: machineConfig(jobMachine), supervisor: machineConfig(supervisorMachine) }))),
    HttpRouter.add(
      "GET",
      "/api/snapshot",
      Effect.tryPromise(snapshot).pipe(
        Effect.map((body) => json(body)),
        Effect.catch((error) => Effect.succeed(failure(error))),
      ),
    ),
    HttpRouter.add(
      "GET",
      "/api/events",
      Effect.succeed(
        HttpServerResponse.stream(
          Stream.fromAsyncIterable(events(), (error) => error),
          { contentType: "text/event-stream", headers: { "cache-control": "no-cache" } },
        ),
      ),
    ),
    HttpRouter.add(
      "GET",
      "/api/jobs/:id",
      Effect.gen(function* () {
        const { id } = yield* HttpRouter.params;
        // The job with its recorded steps: its history as a handler wrote it.
        const read = async () => {
          const job = await getJob(db, id ?? "", statements);
          return job === null ? null : { ...job, steps: await jobSteps(db, job.id, statements) };
        };
        return yield* Effect.tryPromise(read).pipe(
          Effect.map((job) => (job === null ? json({ error: `no job ${id}` }, 404) : json(job))),
          Effect.catch((error) => Effect.succeed(failure(error))),
        );
      }),
    ),
    HttpRouter.add("POST", "/api/jobs/:id/retry", admin(retryDeadJob)),
    HttpRouter.add("POST", "/api/jobs/:id/cancel", admin(cancelJob)),
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

/** Serves the dashboard until interrupted (`picket dashboard`). */
export const serveDashboard = (options: DashboardOptions & { port: number; host: string }, created: (server: Server) => void = () => undefined) => {
  const server = () => {
    const made = createServer();
    created(made);
    return made;
  };
  const app = HttpRouter.serve(dashboardRoutes(options), { disableLogger: true }).pipe(
    Layer.provide(NodeHttpServer.layer(server, { port: options.port, host: options.host })),
  );
  return Layer.launch(app);
};
