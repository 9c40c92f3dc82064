// A worker's health endpoint, as the supervisor runs it: the HTTP server started only when asked
// for (health-server.ts), and the report it serves, each check saying why it failed.
import type { Server } from "node:http";
import * as Effect from "effect/Effect";
import * as Fiber from "effect/Fiber";
import type { Registry } from "prom-client";
import { InvalidConfigError } from "../db/index.ts";
import type { HealthCheck, HealthReport } from "./health-server.ts";
import type { Logger } from "./logger.ts";

/** What the report is made of, read by the supervisor when it is asked. */
export interface HealthInputs {
  now: number;
  /** A poll older than this is stuck; no poll for this plus the interval, the loop has stopped. */
  stalePollMs: number;
  pollIntervalMs: number;
  pollStartedAt: number | null;
  lastPollAt: number | null;
  draining: boolean;
  inFlight: Record<string, number>;
  /** null when the database answered a connection of the report's own; else why it did not. */
  unreachable: string | null;
  leases: HealthCheck;
}

/**
 * Unhealthy when the database does not answer, when the poll loop is stuck, or when a claim's
 * lease has gone unconfirmed for longer than a lease. Ready until the drain begins.
 */
export const healthReport = (input: HealthInputs): HealthReport => {
  const { now, stalePollMs, pollStartedAt, lastPollAt } = input;
  const poll: HealthCheck =
    pollStartedAt !== null && now - pollStartedAt > stalePollMs
      ? { ok: false, reason: `a poll has been running for ${now - pollStartedAt} ms (threshold ${stalePollMs} ms)` }
      : !input.draining && lastPollAt !== null && now - lastPollAt > stalePollMs + input.pollIntervalMs
        ? { ok: false, reason: `no poll for ${now - lastPollAt} ms (threshold ${stalePollMs + input.pollIntervalMs} ms)` }
        : { ok: true };
  const database: HealthCheck = input.unreachable === null ? { ok: true } : { ok: false, reason: `the database does not answer: ${input.unreachable}` };
  return {
    healthy: database.ok && poll.ok && input.leases.ok,
    ready: !input.draining,
    draining: input.draining,
    lastPollAt: lastPollAt === null ? null : new Date(lastPollAt).toISOString(),
    inFlight: input.inFlight,
    checks: { database, poll, leases: input.leases },
  };
};

/** The health server of one worker: started once, stopped once. */
export class HealthEndpoint {
  private fiber: Fiber.Fiber<never, unknown> | undefined;
  private server: Server | undefined;

  /**
   * Starts the server and waits until it listens. An orchestrator probing a port nobody listens on
   * restarts the worker forever, or, without probes, a dead health server goes unnoticed: so a port
   * that is taken (or not allowed) rejects, naming it, with nothing left running. Should the server
   * fail later, the worker runs on and logs it.
   */
  async start(health: { port: number; host: string }, report: () => Promise<HealthReport>, registry: Registry | undefined, logger: Logger): Promise<void> {
    // Loaded only when asked for: the HTTP server and its Effect modules are a sizeable part of a
    // worker's memory (docs/benchmarks.md).
    const { startHealthServer } = await import("./health-server.ts");
    let failed: (error: unknown) => void = () => undefined;
    const listening = new Promise<void>((resolve, reject) => {
      failed = reject;
      this.fiber = Effect.runFork(
        startHealthServer(health, report, registry, logger, (server) => {
          this.server = server;
          server.once("listening", () => resolve());
          server.once("error", reject);
        }).pipe(
          Effect.tapCause((cause) =>
            Effect.sync(() => {
              failed(cause);
              logger.error({ cause: String(cause), port: health.port }, "health server failed; the worker runs on without it");
            }),
          ),
        ),
      );
    });
    try {
      await listening;
    } catch (error) {
      await this.stop();
      const reason = (error as { code?: string }).code ?? (error instanceof Error ? error.message : "it could not listen");
      throw new InvalidConfigError(
        `picket: the health server cannot listen on ${health.host}:${health.port} (${reason}): ` +
          (reason === "EADDRINUSE" ? "another process holds that port: choose another health port, or stop that process." : "choose another health port."),
        { cause: error },
      );
    }
  }

  async stop(): Promise<void> {
    const fiber = this.fiber;
    // Open connections first: a probe that keeps its request half-sent would hold the close.
    this.server?.closeAllConnections();
    this.fiber = undefined;
    this.server = undefined;
    if (fiber) await Effect.runPromise(Fiber.interrupt(fiber));
  }
}
