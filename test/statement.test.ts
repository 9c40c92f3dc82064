// runStatement, the one way picket talks to the server, against a real one: every statement ends
// within its bound, a lock wait or an abort is cancelled on the server, a pool's connection that
// saw a cancel is not reused, and a caller's own connection is left usable.
import { mkdtempSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { checkOut, runStatement } from "../src/db/statement.ts";
import { InvalidConfigError, StatementTimeoutError } from "../src/db/errors.ts";
import { useTestDatabase } from "./support/db.ts";

const db = useTestDatabase();

/** A session holding an ACCESS EXCLUSIVE lock on a table of its own until `release()`. */
const lockedTable = async (name: string) => {
  await db.pool.query(`CREATE TABLE IF NOT EXISTS ${name} (n int)`);
  const holder = await db.connect();
  await holder.query("BEGIN");
  await holder.query(`LOCK TABLE ${name} IN ACCESS EXCLUSIVE MODE`);
  return { release: () => holder.query("COMMIT") };
};

/** Statements of sessions named `app` that are still waiting or running on the server. */
const activeOf = async (app: string): Promise<number> =>
  (await db.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'", [app])).rows[0].n;

const pidOf = async (client: pg.Pool | pg.ClientBase): Promise<number> => (await client.query("SELECT pg_backend_pid() AS pid")).rows[0].pid;

describe("runStatement on a pool", () => {
  it("ends a lock wait at its bound: a StatementTimeoutError naming the statement, cancelled on the server, the connection not reused", async () => {
    const app = "stmt-pool-lock";
    const pool = new pg.Pool({ connectionString: `${db.url}?application_name=${app}`, max: 1 });
    const lock = await lockedTable("stmt_pool_lock");
    try {
      const before = await pidOf(pool);
      const started = performance.now();
      const error = await runStatement(pool, { name: "picket_test_read", text: "SELECT count(*) FROM stmt_pool_lock" }, { timeoutMs: 300 }).catch((e: unknown) => e);
      const took = performance.now() - started;
      expect(error).toBeInstanceOf(StatementTimeoutError);
      expect((error as Error).message).toBe(
        "picket: statement picket_test_read did not finish within 300 ms (a lock held by another session, or a slow, paused or unreachable server); it was cancelled.",
      );
      // Answered at the bound, not once the cancel went through.
      expect(took).toBeGreaterThanOrEqual(290);
      expect(took).toBeLessThan(1_500);
      await expect.poll(() => activeOf(app), { timeout: 3_000 }).toBe(0);
      // The pool's one connection was closed, not handed out again.
      await expect.poll(async () => pidOf(pool), { timeout: 3_000 }).not.toBe(before);
    } finally {
      await lock.release();
      await pool.end();
    }
  });

  it("names an unnamed statement by its first words", async () => {
    const lock = await lockedTable("stmt_unnamed");
    try {
      await expect(runStatement(db.pool, { text: "  SELECT count(*)\n FROM stmt_unnamed" }, { timeoutMs: 100 })).rejects.toThrow(
        /^picket: statement SELECT count\(\*\) FROM did not finish within 100 ms/,
      );
    } finally {
      await lock.release();
    }
  });

  it("waits for a connection within the same bound, never runs the statement on one that comes late, and gives that one back", async () => {
    await db.pool.query("CREATE TABLE IF NOT EXISTS stmt_late_connection (n int)");
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const held = await pool.connect();
      const started = performance.now();
      await expect(runStatement(pool, { text: "INSERT INTO stmt_late_connection VALUES (1)" }, { timeoutMs: 200 })).rejects.toThrow(/did not finish within 200 ms/);
      expect(performance.now() - started).toBeLessThan(1_500);
      held.release();
      // The connection that became free after the bound went back to the pool, not to the gone caller.
      await expect.poll(() => pool.idleCount, { timeout: 2_000 }).toBe(1);
      expect((await db.pool.query("SELECT count(*)::int AS n FROM stmt_late_connection")).rows[0].n).toBe(0);
      expect((await runStatement(pool, { text: "SELECT 1 AS one" }, { timeoutMs: 1_000 })).rows).toEqual([{ one: 1 }]);
    } finally {
      await pool.end();
    }
  });

  it("runs nothing when its signal has already aborted", async () => {
    await db.pool.query("CREATE TABLE IF NOT EXISTS stmt_aborted (n int)");
    const controller = new AbortController();
    controller.abort();
    await expect(runStatement(db.pool, { text: "INSERT INTO stmt_aborted VALUES (1)" }, { signal: controller.signal })).rejects.toThrow(
      "picket: statement INSERT INTO stmt_aborted was abandoned: its caller stopped waiting; it was cancelled.",
    );
    expect((await db.pool.query("SELECT count(*)::int AS n FROM stmt_aborted")).rows[0].n).toBe(0);
  });

  it("ends a statement at once when its signal aborts while it waits, and cancels it on the server", async () => {
    const app = "stmt-pool-abort";
    const pool = new pg.Pool({ connectionString: `${db.url}?application_name=${app}` });
    const lock = await lockedTable("stmt_pool_abort");
    try {
      const controller = new AbortController();
      const pending = runStatement(pool, { text: "INSERT INTO stmt_pool_abort VALUES (1)" }, { signal: controller.signal, timeoutMs: 60_000 }).catch((e: unknown) => e);
      await expect.poll(() => activeOf(app), { timeout: 3_000 }).toBe(1);
      controller.abort();
      expect(await pending).toBeInstanceOf(StatementTimeoutError);
      await expect.poll(() => activeOf(app), { timeout: 3_000 }).toBe(0);
      await lock.release();
      // Cancelled, so it cannot commit once the lock is gone.
      expect((await db.pool.query("SELECT count(*)::int AS n FROM stmt_pool_abort")).rows[0].n).toBe(0);
    } finally {
      await lock.release().catch(() => undefined);
      await pool.end();
    }
  });

  it("ends a wait for a connection when its signal aborts", async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const held = await pool.connect();
      const controller = new AbortController();
      const pending = runStatement(pool, { text: "SELECT 1" }, { signal: controller.signal, timeoutMs: 60_000 }).catch((e: unknown) => e);
      controller.abort();
      expect(await pending).toBeInstanceOf(StatementTimeoutError);
      held.release();
      await expect.poll(() => pool.idleCount, { timeout: 2_000 }).toBe(1);
    } finally {
      await pool.end();
    }
  });

  it("gives back the connections of twenty thousand abandoned waits without a stack overflow, and the next statement runs", async () => {
    // A forced drain of a worker holding 10,000 jobs abandoned that many waits at once (bench/memory.ts):
    // each connection handed to an abandoned wait was released inside pg-pool's hand-over, which
    // handed it to the next wait, one stack frame deeper each time.
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const held = await pool.connect();
      const controller = new AbortController();
      const pending = Array.from({ length: 20_000 }, () => runStatement(pool, { text: "SELECT 1" }, { signal: controller.signal, timeoutMs: 60_000 }).catch((e: unknown) => e));
      controller.abort();
      expect((await Promise.all(pending)).every((e) => e instanceof StatementTimeoutError)).toBe(true);
      held.release();
      expect((await runStatement(pool, { text: "SELECT 1 AS one" })).rows).toEqual([{ one: 1 }]);
    } finally {
      await pool.end();
    }
  });

  it("passes on the pool's own error when it cannot connect", async () => {
    const pool = new pg.Pool({ connectionString: db.url.replace(/\/[^/?]+(\?|$)/, "/picket_no_such_database$1") });
    pool.on("error", () => undefined);
    try {
      await expect(runStatement(pool, { text: "SELECT 1" })).rejects.toMatchObject({ code: "3D000" });
    } finally {
      await pool.end();
    }
  });

  it("keeps a connection whose statement failed with an ordinary error out of the pool", async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const before = await pidOf(pool);
      await expect(runStatement(pool, { text: "SELECT 1/0" })).rejects.toMatchObject({ code: "22012" });
      expect(await pidOf(pool)).not.toBe(before);
      // A statement that succeeded leaves its connection in the pool.
      const now = await pidOf(pool);
      await runStatement(pool, { text: "SELECT 1" });
      expect(await pidOf(pool)).toBe(now);
    } finally {
      await pool.end();
    }
  });
});

describe("runStatement on a caller's own connection", () => {
  it("cancels a lock wait at its bound and answers once it has ended there, leaving the connection usable", async () => {
    const client = await db.connect();
    const lock = await lockedTable("stmt_client_lock");
    try {
      const pid = await pidOf(client);
      const error = await runStatement(client, { text: "SELECT count(*) FROM stmt_client_lock" }, { timeoutMs: 300 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StatementTimeoutError);
      // By the time the caller hears of it, nothing runs on its connection any more, so the cancel
      // cannot hit the caller's next statement.
      // (The backend marks itself idle just before its ReadyForQuery, which pg reads after the
      // error it answers with: polled briefly.)
      await expect.poll(async () => (await db.pool.query("SELECT state FROM pg_stat_activity WHERE pid = $1", [pid])).rows, { timeout: 2_000, interval: 20 }).toEqual([{ state: "idle" }]);
      expect(await pidOf(client)).toBe(pid);
      expect((await runStatement(client, { text: "SELECT 2 AS two" })).rows).toEqual([{ two: 2 }]);
    } finally {
      await lock.release();
    }
  });

  it("cancels it when the caller's signal aborts, and answers once it has ended there", async () => {
    const client = await db.connect();
    const lock = await lockedTable("stmt_client_abort");
    try {
      const pid = await pidOf(client);
      const controller = new AbortController();
      const pending = runStatement(client, { text: "SELECT count(*) FROM stmt_client_abort" }, { signal: controller.signal, timeoutMs: 60_000 }).catch((e: unknown) => e);
      await expect.poll(async () => (await db.pool.query("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", [pid])).rows[0]?.wait_event_type, { timeout: 3_000 }).toBe("Lock");
      controller.abort();
      const error = await pending;
      expect((error as Error).message).toMatch(/was abandoned: its caller stopped waiting/);
      // pg answers on the backend's error message; the backend marks itself idle just before the
      // ReadyForQuery that follows it (seen once in CI: "active" read in between): polled briefly.
      await expect.poll(async () => (await db.pool.query("SELECT state FROM pg_stat_activity WHERE pid = $1", [pid])).rows, { timeout: 2_000, interval: 20 }).toEqual([{ state: "idle" }]);
      expect((await runStatement(client, { text: "SELECT 3 AS three" })).rows).toEqual([{ three: 3 }]);
    } finally {
      await lock.release();
    }
  });

  it("sends the cancel where the connection went: a unix socket when its host is a directory", async () => {
    // The test server listens on TCP only; a relay on a unix socket in front of it is what a
    // socket-connected client reaches, the cancel request included.
    const url = new URL(db.url);
    const dir = mkdtempSync(join(tmpdir(), "picket-socket-"));
    const relay = createServer((inbound) => {
      const outbound = createConnection(Number(url.port), url.hostname);
      inbound.pipe(outbound).pipe(inbound);
      inbound.on("error", () => outbound.destroy());
      outbound.on("error", () => inbound.destroy());
    });
    await new Promise<void>((resolve) => relay.listen(join(dir, `.s.PGSQL.${url.port}`), resolve));
    const client = new pg.Client({ host: dir, port: Number(url.port), database: url.pathname.slice(1), user: decodeURIComponent(url.username), password: decodeURIComponent(url.password) });
    await client.connect();
    const lock = await lockedTable("stmt_socket_lock");
    try {
      const started = performance.now();
      await expect(runStatement(client, { text: "SELECT count(*) FROM stmt_socket_lock" }, { timeoutMs: 200 })).rejects.toBeInstanceOf(StatementTimeoutError);
      // Answered once the server acted on the cancel, well before the 2 s it would wait for one
      // that never arrived.
      expect(performance.now() - started).toBeLessThan(1_500);
      expect((await runStatement(client, { text: "SELECT 4 AS four" })).rows).toEqual([{ four: 4 }]);
    } finally {
      await lock.release();
      await client.end();
      relay.close();
    }
  });

  it("runs nothing, and sends no cancel, when the caller's signal has already aborted", async () => {
    const client = await db.connect();
    await client.query("CREATE TABLE IF NOT EXISTS stmt_client_aborted (n int)");
    const controller = new AbortController();
    controller.abort();
    const started = performance.now();
    await expect(runStatement(client, { text: "INSERT INTO stmt_client_aborted VALUES (1)" }, { signal: controller.signal })).rejects.toThrow(/was abandoned/);
    expect(performance.now() - started).toBeLessThan(500);
    // The caller's next statement runs undisturbed: no cancel was sent that could hit it.
    expect((await runStatement(client, { text: "SELECT pg_sleep(0.3), count(*)::int AS n FROM stmt_client_aborted" })).rows).toEqual([{ pg_sleep: "", n: 0 }]);
  });

  it("reports the server's own timeout in picket's words, the server's error as its cause", async () => {
    const client = await db.connect();
    await client.query("SET statement_timeout = 50");
    try {
      const error = await runStatement(client, { text: "SELECT pg_sleep(1)" }, { timeoutMs: 5_000 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StatementTimeoutError);
      expect((error as Error).message).toMatch(/^picket: statement SELECT pg_sleep\(1\) did not finish within 5000 ms/);
      expect((error as Error).cause).toMatchObject({ code: "57014" });
    } finally {
      await client.query("RESET statement_timeout");
    }
  });
});

describe("named statements", () => {
  const prepared = async (client: pg.ClientBase) => (await client.query("SELECT name FROM pg_prepared_statements ORDER BY name")).rows.map((r) => r.name);

  it("are prepared on the connection by default, and never when preparedStatements is false", async () => {
    const client = await db.connect();
    await runStatement(client, { name: "picket_test_named", text: "SELECT $1::int AS n", values: [1] });
    expect((await runStatement(client, { name: "picket_test_no_values", text: "SELECT 1 AS one" })).rows).toEqual([{ one: 1 }]);
    await runStatement(client, { name: "picket_test_unnamed", text: "SELECT $1::int AS n", values: [1] }, { preparedStatements: false });
    expect(await prepared(client)).toEqual(["picket_test_named", "picket_test_no_values"]);
  });

  it("that the connection already holds under another's hand (a pooler) give a picket error saying what to set", async () => {
    const client = await db.connect();
    await client.query("PREPARE picket_test_clash AS SELECT 1");
    const error = await runStatement(client, { name: "picket_test_clash", text: "SELECT 1" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidConfigError);
    expect((error as Error).message).toMatch(/^picket: the prepared statement picket_test_clash was missing or already present on its connection/);
    expect((error as Error).message).toContain("Set transactionPooling: true");
    expect((error as Error).cause).toMatchObject({ code: "42P05" });
  });
});

describe("bounds that are refused", () => {
  it.each([0, -1, 1.5, 2_147_483_648, Number.NaN])("timeoutMs %s", async (timeoutMs) => {
    await expect(runStatement(db.pool, { text: "SELECT 1" }, { timeoutMs })).rejects.toThrow(
      `picket: statement timeoutMs must be an integer from 1 to 2147483647 (got ${String(timeoutMs)}).`,
    );
  });

  it("the largest bound is taken", async () => {
    expect((await runStatement(db.pool, { text: "SELECT 1 AS one" }, { timeoutMs: 2_147_483_647 })).rows).toEqual([{ one: 1 }]);
  });
});

describe("checkOut", () => {
  it("hands out a connection, or fails at its bound when none is free and gives back the one that comes late", async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const first = await checkOut(pool, 1_000);
      await expect(checkOut(pool, 150)).rejects.toThrow("picket: no database connection within 150 ms (a slow, paused or unreachable server, or a pool with no connection free).");
      first.release();
      await expect.poll(() => pool.idleCount, { timeout: 2_000 }).toBe(1);
      const again = await checkOut(pool, 1_000);
      again.release();
    } finally {
      await pool.end();
    }
  });

  it("passes on the pool's own error", async () => {
    const pool = new pg.Pool({ connectionString: db.url.replace(/\/[^/?]+(\?|$)/, "/picket_no_such_database$1"), max: 1 });
    pool.on("error", () => undefined);
    try {
      await expect(checkOut(pool, 5_000)).rejects.toMatchObject({ code: "3D000" });
    } finally {
      await pool.end();
    }
  });
});
