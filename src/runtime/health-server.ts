// The optional health server (Effect's HTTP router on node:http, serve-fetch.ts). /health is 503 when a check fails: the
// database does not answer a new connection, the poll loop is stuck, or a claim's lease has not
// been confirmed for longer than a lease (renewals are failing). A worker busy with long jobs is
// healthy: restarting it would only lose their work. /ready is 503 while draining, so a balancer
// stops sending to it. /metrics serves the worker's metrics as Prometheus text.
import type { Server } from "node:http";
import * as Effect from "effect/Effect";
import * as Layer from "effect/Layer";
import type { Logger as PinoLogger } from "./logger.ts";
import { HttpRouter, HttpServerResponse } from "effect/http";
import type { Registry } from "prom-client";
import { serveFetchHandler } from "./serve-fetch.ts";

/** One check: ok, or why not, in words an operator can act on. */
export interface HealthCheck {
  ok: boolean;
  reason?: string;
}

export interface HealthReport {
  healthy: boolean;
  ready: boolean;
  draining: boolean;
  lastPollAt: string | null;
  inFlight: Record<string, number>;
  checks: {
    /** A new connection of its own (not the worker's pool) answers SELECT 1 within 2 s. */
    database: HealthCheck;
    /** The poll loop is not stuck in one poll, nor silent for longer than expected. */
    poll: HealthCheck;
    /** Every claim the worker holds had its lease confirmed within the last lease. */
    leases: HealthCheck;
    /** With `worker --processes N`: every worker process is running and answers. */
    processes?: HealthCheck;
  };
}

/**
 * Serves until interrupted; interrupting the returned Effect closes the port and every connection
 * to it (a probe that keeps its request half-sent included), then returns.
 */
export const startHealthServer = (
  options: { port: number; host: string },
  report: () => Promise<HealthReport>,
  registry: Registry | undefined,
  logger: PinoLogger,
  created: (server: Server) => void = () => undefined,
): Effect.Effect<never, unknown> => {
  const respond = (ok: (r: HealthReport) => boolean) =>
    Effect.promise(report).pipe(Effect.map((r) => HttpServerResponse.jsonUnsafe(r, { status: ok(r) ? 200 : 503 })));
  const routes = Layer.mergeAll(
    HttpRouter.add("GET", "/health", respond((r) => r.healthy)),
    HttpRouter.add("GET", "/ready", respond((r) => r.ready && r.healthy)),
    // Prometheus text, in the registry's own format (prom-client writes it).
    ...(registry === undefined
      ? []
      : [HttpRouter.add("GET", "/metrics", Effect.promise(() => registry.metrics()).pipe(Effect.map((text) => HttpServerResponse.text(text, { contentType: registry.contentType }))))]),
  );
  // Requests are not logged: probes arrive every few seconds and would drown the job logs. Where
  // it listens is, at debug, under component "health" (port 0 picks one).
  return serveFetchHandler(() => HttpRouter.toWebHandler(routes, { disableLogger: true }), {
    port: options.port,
    host: options.host,
    created,
    listening: (url) => logger.debug({ component: "health" }, `Listening on ${url}`),
  });
};
