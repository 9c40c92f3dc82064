// An HTTP service with picket inside: a plain node:http server whose sign-up saves a user and
// enqueues the welcome mail in ONE transaction, with the worker that sends it in the same process.
//
//   node examples/http-service/service.ts          (DATABASE_URL, or an embedded PostgreSQL)
//   curl -i -X POST localhost:3000/signups -H 'content-type: application/json' -d '{"email":"ada@example.com"}'
//   curl -i localhost:3000/health
//   curl -s localhost:3000/metrics | grep picket_job_outcomes_total
//
// Environment: DATABASE_URL, PORT (3000; 0 = any free port), HOST (127.0.0.1), DRAIN_TIMEOUT_MS
// (30000), MAIL_LATENCY_MS (0: how long the pretend mail provider takes to send).
//
// What it shows:
// - POST /signups {"email"}: INSERT the user and enqueue `send-welcome` on the same client between
//   BEGIN and COMMIT, so there is never a user without their welcome job, nor a job for a user who
//   was rolled back (a duplicate email, a payload the task's schema refuses, any later failure).
//   201 {userId, jobId}; 409 for an email already signed up (no job); 400 for a body that is not
//   {"email": "<address>"} or that the task refuses.
// - GET /health: picket's own health report (Supervisor.health(): the database answers, the poll
//   loop is alive, leases are confirmed), 200 when healthy and not draining, else 503. One probe
//   for a process whose HTTP side and worker stop together: it is picket's /ready.
// - GET /metrics: Prometheus text of one prom-client registry holding picket's metrics (passed to
//   the supervisor as `metrics: { registry }`) and this service's own sign-up counter.
// - SIGTERM (or SIGINT): the server stops accepting connections, the worker drains (claims
//   nothing more; running jobs get DRAIN_TIMEOUT_MS to finish, then are interrupted and released
//   for another worker), the pool is closed, exit 0. A second signal interrupts running jobs at
//   once; a shutdown that outlives the drain deadline by 10 s exits 1.
//
// In your service, import from "picket" instead of "../../src/index.ts". Tested (as a real child
// process too) in examples/http-service/service.test.ts.
import { setTimeout as sleep } from "node:timers/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import pg from "pg";
import { Counter, Registry } from "prom-client";
import {
  createLogger,
  createQueue,
  createSupervisor,
  defineTask,
  InvalidJobError,
  startEmbeddedPostgres,
  type Logger,
  type StandardSchema,
  type Supervisor,
} from "../../src/index.ts";

/** The service's own tables (a real service has migrations for these). */
export const serviceTables = `
  CREATE TABLE IF NOT EXISTS users (
    id bigserial PRIMARY KEY,
    email text NOT NULL UNIQUE,
    welcome_job_id bigint,
    created_at timestamptz NOT NULL DEFAULT now());
  -- The pretend mail provider: one row per mail sent, keyed by the job's idempotency key as a real
  -- provider's idempotency header would be, so a retried job does not send twice.
  CREATE TABLE IF NOT EXISTS welcome_mails (
    idempotency_key text PRIMARY KEY,
    user_id bigint NOT NULL,
    email text NOT NULL,
    sent_at timestamptz NOT NULL DEFAULT now());`;

export interface WelcomePayload {
  userId: string;
  email: string;
}

// The task's schema is what a welcome mail can be sent to. Mail servers refuse addresses over 254
// characters (RFC 5321), so the task refuses them at enqueue: the sign-up is rolled back with it.
const MAX_ADDRESS = 254;
const welcomePayload: StandardSchema<WelcomePayload> = {
  "~standard": {
    version: 1,
    vendor: "http-service-example",
    validate: (value) => {
      const v = value as Partial<WelcomePayload> | null;
      if (typeof v?.userId !== "string" || typeof v.email !== "string") return { issues: [{ message: "expected { userId: string, email: string }" }] };
      if (v.email.length > MAX_ADDRESS) return { issues: [{ message: `an address longer than ${MAX_ADDRESS} characters cannot receive mail`, path: ["email"] }] };
      return { value: { userId: v.userId, email: v.email } };
    },
  },
};

export const welcomeTask = (pool: pg.Pool, mailLatencyMs: number) =>
  defineTask<WelcomePayload, { sent: string }>({
    name: "send-welcome",
    schema: welcomePayload,
    timeoutMs: 60_000,
    handler: async ({ userId, email }, { idempotencyKey, signal, reportProgress }) => {
      // Shows on the job's row (and the dashboard) while the provider takes its time.
      await reportProgress("sending");
      // The provider's latency; the signal ends it at a timeout, a lost lease or a forced drain.
      if (mailLatencyMs > 0) await sleep(mailLatencyMs, undefined, { signal });
      await pool.query("INSERT INTO welcome_mails (idempotency_key, user_id, email) VALUES ($1, $2, $3) ON CONFLICT (idempotency_key) DO NOTHING", [
        idempotencyKey,
        userId,
        email,
      ]);
      return { sent: email };
    },
  });

export interface ServiceOptions {
  /** The service's pool: its own queries, the enqueue's transaction, and picket's worker. Not ended by the service. */
  pool: pg.Pool;
  logger?: Logger;
  /** How long a drain lets running jobs finish; default 30 s. */
  drainTimeoutMs?: number;
  /** How long the pretend mail provider takes to send; default 0. */
  mailLatencyMs?: number;
  /** Worker concurrency; default 5. */
  concurrency?: number;
  /** Apply picket's migrations when the worker starts; default false. */
  migrate?: boolean;
}

export interface HttpService {
  /** The HTTP server; not listening until listen(). */
  server: Server;
  supervisor: Supervisor;
  registry: Registry;
  /** Starts the worker, then listens. Resolves with the address it listens on. */
  listen(port: number, host: string): Promise<AddressInfo>;
  /**
   * Stops accepting connections and drains the worker (requests in flight finish; running jobs
   * get the drain deadline). Every caller awaits the same shutdown. The pool stays open.
   */
  shutdown(): Promise<void>;
  /** During shutdown: interrupt and release running jobs now, close every connection. */
  force(): void;
}

const BODY_LIMIT = 16 * 1024;
// Shape only: whether the address can receive mail is the task's schema's call, then the mail's.
const EMAIL = /^[^\s@]+@[^\s@]+$/;

class HttpError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

const readJson = async (req: IncomingMessage): Promise<unknown> => {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > BODY_LIMIT) throw new HttpError(413, `the body is larger than ${BODY_LIMIT} bytes; send {"email": "<address>"}`);
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new HttpError(400, 'the body is not JSON; send {"email": "<address>"} with content-type application/json');
  }
};

const parseSignup = (body: unknown): string => {
  const email = (body as { email?: unknown } | null)?.email;
  if (typeof body !== "object" || body === null || Array.isArray(body) || typeof email !== "string") {
    throw new HttpError(400, 'expected {"email": "<address>"}: "email" is missing or not a string');
  }
  const trimmed = email.trim();
  if (!EMAIL.test(trimmed)) throw new HttpError(400, `"email" must look like name@example.com (got ${JSON.stringify(email.slice(0, 100))})`);
  return trimmed;
};

export const createService = (options: ServiceOptions): HttpService => {
  const { pool } = options;
  const logger = options.logger ?? createLogger();
  const welcome = welcomeTask(pool, options.mailLatencyMs ?? 0);
  // One registry for picket's metrics and the service's own: /metrics serves both.
  const registry = new Registry();
  const signups = new Counter({ name: "http_service_signups_total", help: "Sign-up requests, by result", labelNames: ["result"], registers: [registry] });
  const supervisor = createSupervisor({
    pool,
    tasks: [welcome],
    concurrency: options.concurrency ?? 5,
    drainTimeoutMs: options.drainTimeoutMs ?? 30_000,
    migrate: options.migrate ?? false,
    metrics: { registry },
    logger,
  });
  const queue = createQueue({ pool, tasks: [welcome] });

  let stopping = false;
  const send = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
    const text = typeof body === "string" ? body : JSON.stringify(body);
    res.writeHead(status, {
      "content-type": typeof body === "string" ? "text/plain; charset=utf-8" : "application/json",
      // server.close() waits for every connection, and a kept-alive one answered during the
      // shutdown would stay open until its idle timeout: answer, then hang up.
      ...(stopping ? { connection: "close" } : {}),
      ...headers,
    });
    res.end(text);
  };

  /** The user and their welcome job, both committed or neither. */
  const signUp = async (email: string): Promise<{ userId: string; jobId: string } | "duplicate"> => {
    const client = await pool.connect();
    let broken: Error | undefined;
    try {
      await client.query("BEGIN");
      // ON CONFLICT DO NOTHING: a duplicate (even one committing concurrently) returns no row.
      const inserted = await client.query<{ id: string }>("INSERT INTO users (email) VALUES ($1) ON CONFLICT (email) DO NOTHING RETURNING id", [email]);
      const userId = inserted.rows[0]?.id;
      if (userId === undefined) {
        await client.query("ROLLBACK");
        return "duplicate";
      }
      // On the transaction's client: the job commits, or rolls back, with the user.
      const job = await queue.enqueue(welcome, { userId, email }, { client });
      await client.query("UPDATE users SET welcome_job_id = $1 WHERE id = $2", [job.id, userId]);
      await client.query("COMMIT");
      return { userId, jobId: job.id };
    } catch (error) {
      // A ROLLBACK that fails means the connection is broken: release(error) destroys it.
      await client.query("ROLLBACK").catch((e: Error) => (broken = e));
      throw error;
    } finally {
      client.release(broken);
    }
  };

  const routes = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = new URL(req.url ?? "/", "http://localhost").pathname;
    if (req.method === "POST" && path === "/signups") {
      let email: string;
      try {
        email = parseSignup(await readJson(req));
      } catch (error) {
        signups.inc({ result: "invalid" });
        throw error;
      }
      let result: Awaited<ReturnType<typeof signUp>>;
      try {
        result = await signUp(email);
      } catch (error) {
        // The task's schema refused the payload: nothing was written (the user was rolled back).
        if (error instanceof InvalidJobError) {
          signups.inc({ result: "invalid" });
          throw new HttpError(400, `this address cannot be signed up: ${error.message.replace(/^picket: /, "")}`);
        }
        signups.inc({ result: "error" });
        throw error;
      }
      if (result === "duplicate") {
        signups.inc({ result: "duplicate" });
        return send(res, 409, { error: `${email} has already signed up` });
      }
      signups.inc({ result: "created" });
      return send(res, 201, result, { location: `/users/${result.userId}` });
    }
    if (req.method === "GET" && path === "/health") {
      // picket's own checks, not a copy of them.
      const report = await supervisor.health();
      return send(res, report.healthy && report.ready ? 200 : 503, report);
    }
    if (req.method === "GET" && path === "/metrics") {
      return send(res, 200, await registry.metrics(), { "content-type": registry.contentType });
    }
    throw new HttpError(404, `no route ${req.method} ${path}: try POST /signups, GET /health, GET /metrics`);
  };

  const server = createServer((req, res) => {
    routes(req, res).catch((error: unknown) => {
      if (error instanceof HttpError) return send(res, error.status, { error: error.message });
      logger.error({ err: error, method: req.method, url: req.url }, "request failed");
      if (!res.headersSent) send(res, 500, { error: "internal error" });
      else res.destroy();
    });
  });

  let shuttingDown: Promise<void> | undefined;
  return {
    server,
    supervisor,
    registry,
    async listen(port, host) {
      await supervisor.start();
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, host, () => {
          server.off("error", reject);
          resolve();
        });
      });
      return server.address() as AddressInfo;
    },
    shutdown() {
      shuttingDown ??= (async () => {
        stopping = true;
        // No new connections; idle keep-alive ones are closed now, busy ones after their response.
        const closed = server.listening ? new Promise<void>((resolve) => server.close(() => resolve())) : Promise.resolve();
        server.closeIdleConnections();
        // The drain: claiming stops, running jobs finish (or are released at the deadline).
        await supervisor.stop();
        await closed;
      })();
      return shuttingDown;
    },
    force() {
      supervisor.force();
      server.closeAllConnections();
    },
  };
};

/** Runs the service until SIGTERM or SIGINT: the service as deployed. */
const main = async (): Promise<void> => {
  const logger = createLogger();
  const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? embedded!.url, max: 10 });
  // An idle connection the server drops must not crash the process; the next query reconnects.
  // pool.end() resolves before its connections have closed: the embedded server stopping next
  // then drops them, which is no news.
  let poolEnded = false;
  pool.on("error", (error) => poolEnded || logger.warn({ err: error }, "idle database connection lost"));
  const drainTimeoutMs = Number(process.env.DRAIN_TIMEOUT_MS ?? 30_000);
  // migrate: true keeps the example one command; a deployment may run `picket migrate` instead.
  const service = createService({ pool, logger, drainTimeoutMs, migrate: true, mailLatencyMs: Number(process.env.MAIL_LATENCY_MS ?? 0) });

  let signals = 0;
  let stopRequested!: () => void;
  const stop = new Promise<void>((resolve) => (stopRequested = resolve));
  const onSignal = (signal: NodeJS.Signals) => {
    signals++;
    if (signals === 1) {
      logger.info({ signal }, "shutting down: no new connections, draining running jobs");
      stopRequested();
      // Whatever holds the shutdown past the drain deadline, the process ends.
      setTimeout(() => {
        logger.error("still shutting down 10 s after the drain deadline; exiting");
        process.exit(1);
      }, drainTimeoutMs + 10_000).unref();
    } else {
      logger.warn({ signal }, "signal received again: interrupting and releasing running jobs");
      service.force();
      setTimeout(() => process.exit(1), 2_000).unref();
    }
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);

  let address: AddressInfo;
  try {
    await pool.query(serviceTables);
    address = await service.listen(Number(process.env.PORT ?? 3000), process.env.HOST ?? "127.0.0.1");
  } catch (error) {
    // A port in use, a database that refuses: say so, and leave nothing running behind.
    logger.error({ err: error }, "the service could not start");
    await service.shutdown().catch(() => undefined);
    poolEnded = true;
    await pool.end().catch(() => undefined);
    await embedded?.stop();
    process.exit(1);
  }
  // On stdout as one plain line, for people and for the test that starts this as a process.
  process.stdout.write(`listening on http://${address.address}:${address.port}\n`);

  await stop;
  await service.shutdown();
  poolEnded = true;
  await pool.end();
  await embedded?.stop();
  logger.info("stopped");
  process.exit(0);
};

if (import.meta.main) await main();
