// What picket says when input is wrong, word for word where the words carry the fix, plus the
// read-only statements operators use (queue stats, migrations read from disk). A message is part
// of the interface: "Clear errors" means a user can act on it without reading the source.
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import {
  checkJobSpec,
  deadLetterJobs,
  deleteFinishedJobs,
  enqueueJob,
  getJob,
  InvalidConfigError,
  InvalidJobError,
  migrate,
  readMigrations,
  queueStats,
} from "../src/db/index.ts";
import { describeConnection, unreachable } from "../src/db/pool.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed } from "./support/factory.ts";

const db = useTestDatabase();
const rejects = (spec: unknown, message: string) => {
  expect(() => checkJobSpec(spec as never)).toThrow(InvalidJobError);
  expect(() => checkJobSpec(spec as never)).toThrow(message);
};

describe("job spec messages", () => {
  it("names the bad value the way a person would write it", () => {
    rejects(null, 'picket: a job must be an object like { type: "send-email", payload: {...} } (got null).');
    rejects("send", 'picket: a job must be an object like { type: "send-email", payload: {...} } (got "send").');
    rejects({ type: 7n }, "picket: job type must be a non-empty string (got 7n).");
    rejects({ type: new Date(0) }, "picket: job type must be a non-empty string (got Date(1970-01-01T00:00:00.000Z)).");
    rejects({ type: new Date(Number.NaN) }, "(got Date(Invalid Date))");
    rejects({ type: new (class Mail {})() }, "(got Mail)");
    rejects({ type: Object.create(null) }, "(got object)");
    rejects({ type: "x".repeat(129) }, "picket: job type is 129 characters; the limit is 128. Use a shorter task name.");
    expect(checkJobSpec({ type: "x".repeat(128) }).type).toHaveLength(128);
    rejects({ type: `${"a b".repeat(30)}` }, `picket: job type "${"a b".repeat(30).slice(0, 60)}…" may contain only letters, digits and _ . : / - (no spaces).`);
    rejects({ type: "a b" }, 'picket: job type "a b" may contain only letters, digits and _ . : / - (no spaces).');
    // Sixty characters are shown whole; the sixty-first is cut.
    rejects({ type: "a b".repeat(20) }, `picket: job type "${"a b".repeat(20)}" may contain only letters, digits and _ . : / - (no spaces).`);
  });

  it("says which value in a payload JSON would change, and how to send it instead", () => {
    rejects({ type: "t", payload: { n: 1n } }, 'picket: job "t": payload is not JSON-serialisable: payload.n is a bigint (1n); send it as a string.');
    rejects({ type: "t", payload: { f: Symbol("s") } }, "payload.f is a symbol.");
    rejects({ type: "t", payload: { at: new Date(0) } }, "payload.at is a Date(1970-01-01T00:00:00.000Z); send value.toISOString().");
    rejects({ type: "t", payload: { m: new Map() } }, "payload.m is a Map; send a plain object.");
    const loop: unknown[] = [];
    loop.push(loop);
    rejects({ type: "t", payload: { list: loop } }, "payload.list[0] refers back to itself (a cycle).");
    // The same object twice is not a cycle, in an object or in an array.
    const shared = { a: 1 };
    const sharedList = [1];
    expect(checkJobSpec({ type: "t", payload: { x: shared, y: shared, l: [sharedList, sharedList] } }).payloadJson).toBe('{"x":{"a":1},"y":{"a":1},"l":[[1],[1]]}');
    expect(checkJobSpec({ type: "t", payload: Object.assign(Object.create(null), { k: 1 }) }).payloadJson).toBe('{"k":1}');
  });

  it("measures the payload in UTF-8 bytes, and says what to do with a large one", () => {
    const limit = 1024 * 1024;
    // Two bytes per "é" in UTF-8, one character each in JavaScript.
    const chars = Math.floor((limit - 2) / 2) + 1;
    rejects(
      { type: "t", payload: "é".repeat(chars) },
      `picket: job "t": payload is ${chars * 2 + 2} bytes as JSON; the limit is ${limit} bytes (1 MiB). Store large data elsewhere and put a reference in the payload.`,
    );
  });

  it("reads runAt from a Date or an ISO string, and nothing else", () => {
    expect(checkJobSpec({ type: "t", runAt: "2030-01-01T09:00:00Z" }).runAt).toEqual(new Date("2030-01-01T09:00:00Z"));
    const at = new Date("2031-05-05T00:00:00Z");
    expect(checkJobSpec({ type: "t", runAt: at }).runAt).toBe(at);
    rejects({ type: "t", runAt: 1_900_000_000_000 }, 'runAt must be a valid Date or an ISO 8601 string such as "2030-01-01T09:00:00Z" (got 1900000000000).');
    rejects({ type: "t", runAt: "soon" }, '(got "soon")');
  });

  it("bounds keys, priorities and attempts, naming the value", () => {
    expect(checkJobSpec({ type: "t", key: "k".repeat(512) }).key).toHaveLength(512);
    rejects({ type: "t", key: "k".repeat(513) }, 'picket: job "t": key must be a string of 1 to 512 characters (got "');
    rejects({ type: "t", key: 5 }, "key must be a string of 1 to 512 characters (got 5).");
    expect(checkJobSpec({ type: "t", key: null as never }).key).toBeNull();
    rejects({ type: "t", priority: "high" }, 'picket: job "t": priority must be an integer from -1000 to 1000 (got "high").');
    rejects({ type: "t", maxAttempts: 1.5 }, "maxAttempts must be an integer from 1 to 1000000 (got 1.5).");
  });
});

describe("operator statements", () => {
  it("checks retention's arguments before touching the table", async () => {
    for (const [batchSize, olderThanMs] of [[0, 1], [1.5, 1], [1, -1], [1, Number.NaN], [1, Number.POSITIVE_INFINITY]]) {
      await expect(deleteFinishedJobs(db.pool, { batchSize: batchSize!, olderThanMs: olderThanMs! })).rejects.toThrow(
        new InvalidConfigError(`picket: retention needs batchSize ≥ 1 and olderThanMs ≥ 0 (got ${batchSize}, ${olderThanMs}).`),
      );
    }
    expect(await deleteFinishedJobs(db.pool, { batchSize: 1, olderThanMs: 0 })).toBeGreaterThanOrEqual(0);
  });

  it("deletes completed and cancelled jobs by default, never dead or live ones", async () => {
    await db.pool.query(`
      INSERT INTO picket.jobs (type, status, finished_at) VALUES
        ('ret-done', 'completed', now() - interval '1 day'), ('ret-cancel', 'cancelled', now() - interval '1 day'),
        ('ret-dead', 'dead', now() - interval '1 day')`);
    await deleteFinishedJobs(db.pool, { batchSize: 100, olderThanMs: 1_000 });
    const { rows } = await db.pool.query("SELECT type FROM picket.jobs WHERE type LIKE 'ret-%'");
    expect(rows.map((r) => r.type)).toEqual(["ret-dead"]);
  });

  it("accepts job ids as whole positive integers only", async () => {
    const job = await enqueueJob(db.pool, { type: "id-check" });
    expect(await getJob(db.pool, job.id)).toMatchObject({ id: job.id });
    expect(await getJob(db.pool, Number(job.id))).toMatchObject({ id: job.id });
    for (const bad of ["0", "12abc", "abc12", "1.5", "-3", "01", "1".repeat(20), ""]) {
      await expect(getJob(db.pool, bad)).rejects.toThrow(`picket: job id must be a positive integer (got ${JSON.stringify(bad)}).`);
    }
  });

  it("reports counts per task and state, the oldest ready job's age, and the latest dead jobs", async () => {
    await db.pool.query("DELETE FROM picket.jobs");
    expect(await queueStats(db.pool)).toEqual({ counts: [], oldestReadyAgeSeconds: null, recentDead: [], handlers: { liveWorkers: 0, handled: [], unhandled: [] }, completedPerSecond: [] });
    await db.pool.query("INSERT INTO picket.jobs (type, run_at) VALUES ('st-a', now() - interval '90 seconds'), ('st-a', now()), ('st-b', now() + interval '1 hour')");
    const dead = await claimed(db.pool, "st-dead", 3);
    for (const [i, job] of dead.entries()) {
      await deadLetterJobs(db.pool, [{ id: job.id, token: job.claimToken, error: `bad ${i}` }]);
      await db.pool.query("UPDATE picket.jobs SET finished_at = now() - make_interval(secs => $2) WHERE id = $1", [job.id, 10 - i]);
    }
    const stats = await queueStats(db.pool, { deadLimit: 2 });
    expect(stats.counts).toEqual([
      { type: "st-a", state: "ready", count: 2 },
      { type: "st-b", state: "scheduled", count: 1 },
      { type: "st-dead", state: "dead", count: 3 },
    ]);
    expect(stats.oldestReadyAgeSeconds).toBeGreaterThanOrEqual(90);
    expect(stats.oldestReadyAgeSeconds).toBeLessThan(120);
    expect(stats.recentDead).toEqual([
      { id: dead[2]!.id, type: "st-dead", attempts: 1, lastError: "bad 2", finishedAt: expect.any(Date) },
      { id: dead[1]!.id, type: "st-dead", attempts: 1, lastError: "bad 1", finishedAt: expect.any(Date) },
    ]);
    expect((await queueStats(db.pool)).recentDead).toHaveLength(3);
    await migrate(db.pool, { schema: "stats_other" });
    expect(await queueStats(db.pool, { schema: "stats_other" })).toEqual({ counts: [], oldestReadyAgeSeconds: null, recentDead: [], handlers: { liveWorkers: 0, handled: [], unhandled: [] }, completedPerSecond: [] });
  });

  it("reads only numbered .sql files from a migrations folder, in order", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "picket-migrations-"));
    await writeFile(path.join(dir, "0002_second.sql"), "SELECT 2;");
    await writeFile(path.join(dir, "0001_first.sql"), "SELECT 1;");
    await writeFile(path.join(dir, "README.md"), "not a migration");
    await writeFile(path.join(dir, "0003_Bad-Name.sql"), "SELECT 3;");
    const files = await readMigrations(pathToFileURL(`${dir}/`));
    expect(files.map((f) => [f.version, f.name])).toEqual([[1, "0001_first.sql"], [2, "0002_second.sql"]]);
  });

  it("names the newer migration it does not know, and the checksums of an edited one", async () => {
    const files = await readMigrations();
    await migrate(db.pool, { schema: "msg_newer" });
    await db.pool.query("INSERT INTO msg_newer.migrations (version, name, checksum) VALUES (9998, '9998_future.sql', 'f')");
    await expect(migrate(db.pool, { schema: "msg_newer", migrations: files })).rejects.toThrow(
      'picket: schema "msg_newer" has migration 9998_future.sql, which this version of picket does not ship. A newer picket migrated this database; upgrade picket rather than running an older one against it.',
    );
    const edited = files.map((f, i) => (i === 0 ? { ...f, checksum: "abcdef0123456789".repeat(4) } : f));
    await expect(migrate(db.pool, { schema: "msg_newer", migrations: edited.slice(0, 1) })).rejects.toThrow(
      `(recorded checksum ${files[0]!.checksum.slice(0, 12)}…, file now abcdef012345…). Released migrations must not be edited: restore the file and add a new numbered migration instead.`,
    );
  });
});

describe("connection messages", () => {
  it("describes where a connection string points, without its password", () => {
    expect(describeConnection("postgres://u:secret@db.example:6543/jobs")).toBe("db.example:6543/jobs");
    expect(describeConnection("postgres://u:secret@db.example/jobs")).toBe("db.example:5432/jobs");
    expect(describeConnection("postgres:///jobs")).toBe("localhost:5432/jobs");
    expect(describeConnection("postgres://h")).toBe("h:5432/");
    expect(describeConnection("not a url")).toBe("(unparseable connection string)");
  });

  it("says what to do for a missing database, a refused login, or anything else, and keeps the cause", () => {
    const url = "postgres://u:p@h:1/d";
    const missing = unreachable(url, Object.assign(new Error("database \"d\" does not exist"), { code: "3D000" }));
    expect(missing.message).toBe('picket: cannot connect to PostgreSQL at h:1/d (database "d" does not exist). The server is up but that database does not exist: create it, or fix the name in DATABASE_URL.');
    const login = unreachable(url, Object.assign(new Error("password authentication failed"), { code: "28P01" }));
    expect(login.message).toContain("(password authentication failed). The server refused the user or password in DATABASE_URL.");
    const other = unreachable(url, "ECONNREFUSED");
    expect(other.message).toBe("picket: cannot connect to PostgreSQL at h:1/d (ECONNREFUSED). Check DATABASE_URL (or --database-url) and that the server is running and reachable.");
    expect(other.cause).toBe("ECONNREFUSED");
  });
});
