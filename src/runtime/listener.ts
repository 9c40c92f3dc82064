// LISTEN for enqueues on a dedicated connection. When the connection drops it reconnects with
// backoff; polling goes on meanwhile, so a lost LISTEN costs latency, never jobs. Once listening,
// it sends itself a probe through the worker's own connections: a LISTEN that hears nothing (a
// connection through PgBouncer in transaction mode, whose server connection goes back to the pool
// after the LISTEN) is reported once, clearly, and the worker goes on by polling.
import { randomBytes } from "node:crypto";
import * as Effect from "effect/Effect";
import * as Schedule from "effect/Schedule";
import pg from "pg";
import { destroySocket, notifyChannel, parseWake } from "../db/index.ts";
import type { Logger } from "./logger.ts";

export interface ListenOptions {
  connection: pg.ClientConfig;
  schema: string;
  /** Types with work ready ("all": too many to name); `queued`: some of it names a serial queue. */
  onWake: (types: "all" | string[], queued: boolean) => void;
  /** A processing job was cancelled under the claim with this token. */
  onCancel: (claim: { id: string; token: string }) => void;
  /** Sends a probe notification with this id through the worker's own connections. */
  sendProbe: (id: string) => Promise<void>;
  /** How long a probe may take to arrive before LISTEN is reported deaf; default 5 s. */
  probeTimeoutMs?: number;
  /** Where LISTEN connects, without a password, for the warning. */
  where: string;
  logger: Logger;
}

export const listenForJobs = (options: ListenOptions): Effect.Effect<never> => {
  const { logger } = options;
  const probeTimeoutMs = options.probeTimeoutMs ?? 5_000;
  // One connection's lifetime: resolves (as a failure) when the connection is lost.
  const session = Effect.callback<never, Error>((resume) => {
    const client = new pg.Client({ ...options.connection, keepAlive: true, keepAliveInitialDelayMillis: 10_000, connectionTimeoutMillis: 10_000 });
    const probeId = randomBytes(8).toString("hex");
    let heard: () => void = () => undefined;
    const probeHeard = new Promise<void>((resolve) => (heard = resolve));
    let closed = false;
    const lost = (error: Error) => {
      if (closed) return;
      closed = true;
      client.end().catch(() => undefined);
      resume(Effect.fail(error));
    };
    client.on("error", lost);
    client.on("end", () => lost(new Error("LISTEN connection ended")));
    client.on("notification", (message) => {
      const wake = parseWake(message.payload ?? "");
      if ("probe" in wake) {
        if (wake.probe === probeId) heard();
      } else if ("cancel" in wake) {
        options.onCancel(wake.cancel);
      } else {
        options.onWake(wake.types, wake.queued);
      }
    });
    const deaf = new Promise<"deaf">((resolve) => setTimeout(() => resolve("deaf"), probeTimeoutMs).unref());
    client
      .connect()
      .then(() => client.query(`LISTEN "${notifyChannel(options.schema)}"`))
      .then(async () => {
        // A probe that cannot be sent (the worker's pool is failing too) proves nothing either way.
        const sent = await options.sendProbe(probeId).then(
          () => true,
          () => false,
        );
        if (sent && (await Promise.race([probeHeard, deaf])) === "deaf" && !closed) {
          logger.warn(
            { listen: options.where },
            `LISTEN on ${options.where} received no notification within ${probeTimeoutMs} ms: a connection through a pooler in transaction mode ` +
              `(PgBouncer) cannot LISTEN. Give picket a direct connection to PostgreSQL with listenConnectionString (--listen-url); ` +
              `until then new jobs are found by polling.`,
          );
        } else {
          logger.debug("listening for new jobs");
        }
      })
      .catch(lost);
    return Effect.sync(() => {
      closed = true;
      client.end().catch(() => undefined);
      // A paused or unreachable server would keep end() waiting for its reply: the socket goes soon.
      setTimeout(() => destroySocket(client), 1_000).unref();
    });
  });
  return session.pipe(
    Effect.tapError((error) => Effect.sync(() => logger.warn({ err: error }, "LISTEN connection lost; polling continues while it reconnects"))),
    Effect.retry(Schedule.min([Schedule.exponential("200 millis", 2), Schedule.spaced("10 seconds")])),
    Effect.orDie,
  );
};
