// The optional health server (@effect/platform-node). /health is 503 only when the poll loop is
// stuck or the database is unreachable: a worker busy with long jobs is healthy, and restarting
// it would only lose their work. /ready is 503 while draining, so a balancer stops sending to it.
import { createServer } from "node:http";
import { NodeHttpServer } from "@effect/platform-node";
import { Effect, Layer } from "effect";
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
): Effect.Effect<never, unknown> => {
  const respond = (ok: (r: HealthReport) => boolean) =>
    Effect.promise(report).pipe(Effect.map((r) => HttpServerResponse.jsonUnsafe(r, { status: ok(r) ? 200 : 503 })));
  const routes = Layer.mergeAll(
    HttpRouter.add("GET", "/health", respond((r) => r.healthy)),
    HttpRouter.add("GET", "/ready", respond((r) => r.ready && r.healthy)),
  );
  const app = HttpRouter.serve(routes).pipe(Layer.provide(NodeHttpServer.layer(createServer, { port: options.port, host: options.host })));
  return Layer.launch(app);
};
