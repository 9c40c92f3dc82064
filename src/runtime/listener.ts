// LISTEN for enqueues on a dedicated connection. When the connection drops it reconnects with
// backoff; polling goes on meanwhile, so a lost LISTEN costs latency, never jobs.
import { Effect, Schedule } from "effect";
import pg from "pg";
import { notifyChannel } from "../db/index.ts";
import type { Logger } from "./logger.ts";

export const listenForJobs = (
  connection: pg.ClientConfig,
  schema: string,
  onNotify: (types: string[]) => void,
  logger: Logger,
): Effect.Effect<never> => {
  // One connection's lifetime: resolves (as a failure) when the connection is lost.
  const session = Effect.callback<never, Error>((resume) => {
    const client = new pg.Client(connection);
    let closed = false;
    const lost = (error: Error) => {
      if (closed) return;
      closed = true;
      client.end().catch(() => undefined);
      resume(Effect.fail(error));
    };
    client.on("error", lost);
    client.on("end", () => lost(new Error("LISTEN connection ended")));
    client.on("notification", (message) => onNotify((message.payload ?? "").split(",").filter(Boolean)));
    client
      .connect()
      .then(() => client.query(`LISTEN "${notifyChannel(schema)}"`))
      .then(() => logger.debug("listening for new jobs"))
      .catch(lost);
    return Effect.promise(async () => {
      closed = true;
      await client.end().catch(() => undefined);
    });
  });
  return session.pipe(
    Effect.tapError((error) => Effect.sync(() => logger.warn({ err: error }, "LISTEN connection lost; polling continues while it reconnects"))),
    Effect.retry(Schedule.min([Schedule.exponential("200 millis", 2), Schedule.spaced("10 seconds")])),
    Effect.orDie,
  );
};
