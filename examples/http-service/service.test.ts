// The HTTP service example, tested two ways against a real PostgreSQL: in this process through
// createService (the sign-up's transaction, /health, /metrics), and as the service is deployed, a
// child process of its own sent SIGTERM (the drain, the exit).
import { spawn, type ChildProcess } from "node:child_process";
import { connect } from "node:net";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../src/index.ts";
import { useTestDatabase } from "../../src/testing/index.ts";
import { createService, serviceTables, type HttpService } from "./service.ts";

const SERVICE = fileURLToPath(new URL("./service.ts", import.meta.url));

// A trigger that fails the sign-up's UPDATE, after the enqueue, for addresses at doomed.test: a
// failure late in the transaction, when the job has already been written on the client.
const testTables = `${serviceTables}
  CREATE FUNCTION refuse_doomed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'refused by the test''s trigger'; END $$;
  CREATE TRIGGER refuse_doomed BEFORE UPDATE ON users FOR EACH ROW
    WHEN (NEW.email LIKE '%@doomed.test') EXECUTE FUNCTION refuse_doomed();`;

const db = useTestDatabase({ beforeAll, afterAll }, { prepare: (created) => created.pool.query(testTables) });

/** Waits for `check` to return a value other than undefined, asking every 50 ms. */
const until = async <T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> => {
  const end = performance.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (performance.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
};

const jobRow = async (id: string) =>
  (await db.pool.query<{ status: string; progress: unknown; attempts: number }>("SELECT status, progress, attempts FROM picket.jobs WHERE id = $1", [id])).rows[0];
const jobsFor = async (email: string) =>
  (await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'send-welcome' AND payload->>'email' = $1", [email])).rows[0]!.n;
const usersFor = async (email: string) => (await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM users WHERE email = $1", [email])).rows[0]!.n;
const mailsFor = async (email: string) => (await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM welcome_mails WHERE email = $1", [email])).rows[0]!.n;

const signUp = (base: string, body: unknown) =>
  fetch(`${base}/signups`, { method: "POST", headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body) });

describe("in this process (createService)", () => {
  let service: HttpService;
  let base: string;
  // Every job outcome the worker reports, and the tests waiting for one.
  const outcomes = new Map<string, string>();
  const waiting = new Map<string, (outcome: string) => void>();
  const finished = (id: string): Promise<string> =>
    outcomes.has(id) ? Promise.resolve(outcomes.get(id)!) : new Promise((resolve) => waiting.set(id, resolve));

  beforeAll(async () => {
    service = createService({ pool: db.pool, logger: createLogger({ level: "silent" }) });
    service.supervisor.onJobFinished(({ job, outcome }) => {
      outcomes.set(job.id, outcome);
      waiting.get(job.id)?.(outcome);
    });
    const address = await service.listen(0, "127.0.0.1");
    base = `http://127.0.0.1:${address.port}`;
  });
  afterAll(() => service?.shutdown());

  it("POST /signups commits the user and the welcome job together, and the worker sends the mail", async () => {
    const response = await signUp(base, { email: "ada@example.com" });
    expect(response.status).toBe(201);
    const { userId, jobId } = (await response.json()) as { userId: string; jobId: string };
    expect(await finished(jobId)).toBe("completed");
    const user = (await db.pool.query("SELECT email, welcome_job_id::text AS job FROM users WHERE id = $1", [userId])).rows[0];
    expect(user).toEqual({ email: "ada@example.com", job: jobId });
    // Completed: its row was deleted by the completion (a worker keeps completed rows only with keepCompleted).
    expect(await jobRow(jobId)).toBeUndefined();
    expect((await db.pool.query("SELECT user_id::text AS user FROM welcome_mails WHERE email = 'ada@example.com'")).rows).toEqual([{ user: userId }]);
  });

  it("a duplicate email is 409 and enqueues nothing: one user, one job", async () => {
    const first = await signUp(base, { email: "grace@example.com" });
    expect(first.status).toBe(201);
    const { jobId } = (await first.json()) as { jobId: string };
    const again = await signUp(base, { email: "grace@example.com" });
    expect(again.status).toBe(409);
    expect(await again.json()).toEqual({ error: "grace@example.com has already signed up" });
    expect(await usersFor("grace@example.com")).toBe(1);
    // The first job completes (its row deleted by its completion) and sends the one mail; a job the
    // 409 had enqueued would still be in the table, or would have sent a second mail.
    expect(await finished(jobId)).toBe("completed");
    expect(await mailsFor("grace@example.com")).toBe(1);
    expect(await jobsFor("grace@example.com")).toBe(0);
  });

  it("an address the task's schema refuses at enqueue is 400, and the user is rolled back with it", async () => {
    const email = `${"a".repeat(250)}@example.com`;
    const response = await signUp(base, { email });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: string }).error).toMatch(/payload does not match the task's schema: an address longer than 254 characters cannot receive mail/);
    expect(await usersFor(email)).toBe(0);
    expect(await jobsFor(email)).toBe(0);
  });

  it("a failure after the enqueue, before COMMIT, leaves neither the user nor the job", async () => {
    const response = await signUp(base, { email: "eve@doomed.test" });
    expect(response.status).toBe(500);
    expect(await response.json()).toEqual({ error: "internal error" });
    expect(await usersFor("eve@doomed.test")).toBe(0);
    expect(await jobsFor("eve@doomed.test")).toBe(0);
    // The connection went back to the pool clean: the next sign-up commits.
    expect((await signUp(base, { email: "after-eve@example.com" })).status).toBe(201);
  });

  it("refuses a bad body with 400 and a message that says what to send", async () => {
    const cases: Array<[unknown, RegExp]> = [
      ["{not json", /the body is not JSON; send \{"email": "<address>"\}/],
      [["ada@example.com"], /"email" is missing or not a string/],
      [{ mail: "ada@example.com" }, /"email" is missing or not a string/],
      [{ email: 42 }, /"email" is missing or not a string/],
      [{ email: "ada at example.com" }, /"email" must look like name@example.com \(got "ada at example.com"\)/],
    ];
    for (const [body, message] of cases) {
      const response = await signUp(base, body);
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect(((await response.json()) as { error: string }).error).toMatch(message);
    }
    const big = await signUp(base, { email: `${"x".repeat(20_000)}@example.com` });
    expect(big.status).toBe(413);
    expect((await fetch(`${base}/nope`)).status).toBe(404);
  });

  it("GET /metrics serves picket's metrics and the service's own, and counts a completed job", async () => {
    const completed = async () => {
      const text = await (await fetch(`${base}/metrics`)).text();
      const line = /^picket_job_outcomes_total\{[^}]*messaging_destination_name="send-welcome"[^}]*picket_outcome="completed"[^}]*\} (\d+)$/m.exec(text);
      return { text, completed: Number(line?.[1] ?? 0) };
    };
    // The jobs of earlier tests first: every one finished, so none is counted in between.
    const all = (await db.pool.query<{ id: string }>("SELECT id::text AS id FROM picket.jobs")).rows;
    await Promise.all(all.map(({ id }) => finished(id)));
    const before = await completed();
    const response = await signUp(base, { email: "metrics@example.com" });
    const { jobId } = (await response.json()) as { jobId: string };
    expect(await finished(jobId)).toBe("completed");
    const after = await completed();
    expect(after.completed).toBe(before.completed + 1);
    for (const name of ["messaging_client_consumed_messages_total", "messaging_process_duration_seconds", "picket_job_pickup_delay_seconds", "picket_queue_depth", "picket_jobs_held"]) {
      expect(after.text).toContain(`# TYPE ${name}`);
    }
    expect(after.text).toMatch(/^http_service_signups_total\{result="created"\} [1-9]\d*$/m);
    expect(after.text).toContain("# TYPE http_service_signups_total counter");
  });

  // Last in this block, with the next: they drain the worker and shut the service down.
  it("GET /health is picket's report: 200 while running, 503 once the worker drains", async () => {
    const running = await fetch(`${base}/health`);
    expect(running.status).toBe(200);
    expect(await running.json()).toMatchObject({ healthy: true, ready: true, draining: false, checks: { database: { ok: true }, poll: { ok: true }, leases: { ok: true } } });
    await service.supervisor.stop();
    const drained = await fetch(`${base}/health`);
    expect(drained.status).toBe(503);
    expect(await drained.json()).toMatchObject({ ready: false, draining: true });
  });

  it("shutdown lets a request in flight finish, hangs up its kept-alive connection, and refuses new ones", async () => {
    const socket = connect(Number(new URL(base).port), "127.0.0.1");
    let response = "";
    socket.on("data", (chunk: Buffer) => (response += chunk.toString()));
    const hungUp = new Promise<void>((resolve) => socket.on("close", () => resolve()));
    const body = JSON.stringify({ email: "in-flight@example.com" });
    const arrived = new Promise((resolve) => service.server.once("request", resolve));
    // Half the body now: the request is in flight when the shutdown starts.
    socket.write(`POST /signups HTTP/1.1\r\nhost: test\r\nconnection: keep-alive\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, 10)}`);
    await arrived;
    const shutdown = service.shutdown();
    socket.write(body.slice(10));
    await hungUp;
    expect(response).toMatch(/^HTTP\/1\.1 201 /);
    expect(response).toMatch(/\r\nconnection: close\r\n/i);
    await shutdown;
    expect(await usersFor("in-flight@example.com")).toBe(1);
    const refused = await fetch(`${base}/health`).then(
      () => "answered",
      (error: Error) => (error.cause as { code?: string })?.code,
    );
    expect(refused).toBe("ECONNREFUSED");
  });
});

describe("as a process of its own, sent SIGTERM", () => {
  let child: ChildProcess | undefined;
  afterEach(() => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  });

  const start = async (env: Record<string, string>) => {
    const process_ = spawn(process.execPath, [SERVICE], {
      env: { ...process.env, DATABASE_URL: db.url, PORT: "0", HOST: "127.0.0.1", PICKET_LOG_LEVEL: "info", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child = process_;
    let output = "";
    const exited = new Promise<{ code: number | null; at: number }>((resolve) => process_.on("exit", (code) => resolve({ code, at: performance.now() })));
    const base = await new Promise<string>((resolve, reject) => {
      process_.stdout.on("data", (chunk: Buffer) => {
        output += chunk.toString();
        const listening = /^listening on (http:\/\/\S+)$/m.exec(output);
        if (listening) resolve(listening[1]!);
      });
      process_.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
      void exited.then(({ code }) => reject(new Error(`the service exited (${code}) before listening:\n${output}`)));
    });
    return { process: process_, base, exited, output: () => output };
  };

  /** Signs up and waits until the welcome job's handler is running (its progress says so). */
  const signUpAndWaitForSending = async (base: string, email: string): Promise<string> => {
    const response = await signUp(base, { email });
    expect(response.status).toBe(201);
    const { jobId } = (await response.json()) as { jobId: string };
    await until("the welcome job's handler to start", async () => ((await jobRow(jobId))?.progress === "sending" ? true : undefined));
    return jobId;
  };

  it("drains: a slow job running at SIGTERM completes, new connections are refused, and the process exits 0", { tags: ["spawns"], timeout: 90_000 }, async () => {
    const service = await start({ MAIL_LATENCY_MS: "3000", DRAIN_TIMEOUT_MS: "60000" });
    const jobId = await signUpAndWaitForSending(service.base, "slow@example.com");
    const health = await fetch(`${service.base}/health`);
    expect(health.status).toBe(200);
    // At least this one (a job the tests before left pending runs here too).
    expect(((await health.json()) as { inFlight: Record<string, number> }).inFlight["send-welcome"]).toBeGreaterThanOrEqual(1);

    const signalled = performance.now();
    service.process.kill("SIGTERM");
    // While the job still runs, the server is closed: a new connection is refused. (A request
    // before the signal is handled gets 200, one on a connection accepted just before the close 503.)
    const seen: unknown[] = [];
    const refusedWhileAlive = await until("a new connection to be refused", async () => {
      const status = await fetch(`${service.base}/health`, { headers: { connection: "close" } }).then(
        (r) => r.status,
        (error: Error) => (error.cause as { code?: string })?.code ?? error.message,
      );
      seen.push(status);
      return status === "ECONNREFUSED" ? service.process.exitCode === null : undefined;
    });
    expect(refusedWhileAlive, `answers seen: ${seen.join(", ")}`).toBe(true);

    const exit = await service.exited;
    expect(exit.code, service.output()).toBe(0);
    expect(exit.at - signalled).toBeLessThan(30_000);
    // The drain let the job finish: completed, so its row is gone, and its one mail was sent.
    expect(await jobRow(jobId)).toBeUndefined();
    expect(await mailsFor("slow@example.com")).toBe(1);
    expect(service.output()).toMatch(/"msg":"worker stopped"/);
  });

  it("at the drain deadline, a job still running is released for another worker and the process exits 0", { tags: ["spawns"], timeout: 90_000 }, async () => {
    const service = await start({ MAIL_LATENCY_MS: "600000", DRAIN_TIMEOUT_MS: "1000" });
    const jobId = await signUpAndWaitForSending(service.base, "deadline@example.com");
    const signalled = performance.now();
    service.process.kill("SIGTERM");
    const exit = await service.exited;
    expect(exit.code, service.output()).toBe(0);
    expect(exit.at - signalled).toBeLessThan(20_000);
    expect(await jobRow(jobId)).toMatchObject({ status: "pending" });
    expect(await mailsFor("deadline@example.com")).toBe(0);
  });

  it("a second SIGTERM interrupts the running job and the process exits at once", { tags: ["spawns"], timeout: 90_000 }, async () => {
    const service = await start({ MAIL_LATENCY_MS: "600000", DRAIN_TIMEOUT_MS: "600000" });
    const jobId = await signUpAndWaitForSending(service.base, "impatient@example.com");
    service.process.kill("SIGTERM");
    await until("the drain to start", async () => (/draining: claiming stopped/.test(service.output()) ? true : undefined));
    const signalled = performance.now();
    service.process.kill("SIGTERM");
    const exit = await service.exited;
    expect(exit.at - signalled).toBeLessThan(15_000);
    expect(exit.code, service.output()).toBe(0);
    expect(await jobRow(jobId)).toMatchObject({ status: "pending" });
    expect(await mailsFor("impatient@example.com")).toBe(0);
  });
});
