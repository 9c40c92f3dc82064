// The optional health server (@effect/platform-node). /health is 503 only when the poll loop is
// stuck or the database is unreachable: a worker busy with long jobs is healthy, and restarting
// it would only lose their work. /ready is 503 while draining, so a balancer stops sending to it.
import { createServer } from "node:http";
import { NodeHttpServer } from "@effect/platform-node";
import { Effect, Layer, Logger } from "effect";
import type { Logger as PinoLogger } from "./logger.ts";
import { HttpRouter, HttpServerResponse } from "effect/http";

export interface HealthReport {
  healthy: boolean;
  ready: boolean;
  lastPollAt: string | null;
  pollStuck: boolean;
  databaseReachable: boolean;
  draining: boolean;
  inFlight: Record<string, number>;
}

/** Serves until interrupted; interrupting the returned Effect closes the port. */
export const startHealthServer = (
  options: { port: number; host: string },
  report: () => Promise<HealthReport>,
  logger: PinoLogger,
): Effect.Effect<never, unknown> => {
  const respond = (ok: (r: HealthReport) => boolean) =>
    Effect.promise(report).pipe(Effect.map((r) => HttpServerResponse.jsonUnsafe(r, { status: ok(r) ? 200 : 503 })));
  const routes = Layer.mergeAll(
    HttpRouter.add("GET", "/health", respond((r) => r.healthy)),
    HttpRouter.add("GET", "/ready", respond((r) => r.ready && r.healthy)),
  );
  // Requests are not logged: probes arrive every few seconds and would drown the job logs.
  const app = HttpRouter.serve(routes, { disableLogger: true }).pipe(Layer.provide(NodeHttpServer.layer(createServer, { port: options.port, host: options.host })));
  // The server's own messages ("Listening on ...") go to picket's logger, not to stdout.
  const logs = Logger.layer([Logger.make(({ message }) => logger.debug({ component: "health" }, String(message)))]);
  return Layer.launch(app.pipe(Layer.provide(logs)));
};
