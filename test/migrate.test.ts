import pg from "pg";
import { describe, expect, it } from "vitest";
import { InvalidConfigError, MigrationChecksumError, migrate, readMigrations, SchemaOutOfDateError, UnknownMigrationError } from "../src/db/index.ts";
import { createSupervisor } from "../src/runtime/supervisor.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";

// An empty database: these tests migrate it themselves, in schemas of their own.
const db = useTestDatabase({ template: false });

describe("migrations", () => {
  it("applies every file once; running again is a no-op", async () => {
    const files = await readMigrations();
    const first = await migrate(db.pool, { schema: "twice" });
    const second = await migrate(db.pool, { schema: "twice" });
    expect(first.applied).toEqual(files.map((f) => f.name));
    expect(second.applied).toEqual([]);
    const { rows } = await db.pool.query("SELECT version, name, checksum FROM twice.migrations ORDER BY version");
    expect(rows).toEqual(files.map((f) => ({ version: f.version, name: f.name, checksum: f.checksum })));
  });

  it("upgrades a table whose finished rows still hold a lease (0002 clears it, then forbids it)", async () => {
    const [first] = await readMigrations();
    await migrate(db.pool, { schema: "upgrade", migrations: [first!] });
    const { rows } = await db.pool.query(
      "INSERT INTO upgrade.jobs (type, status, finished_at, lock_until) VALUES ('old', 'completed', now(), now()) RETURNING id",
    );
    // Every migration after 0001 applies on top of it.
    const later = (await readMigrations()).slice(1).map((f) => f.name);
    expect(later[0]).toBe("0002_sweep_index_by_lease.sql");
    expect((await migrate(db.pool, { schema: "upgrade" })).applied).toEqual(later);
    const { rows: after } = await db.pool.query("SELECT status, lock_until FROM upgrade.jobs WHERE id = $1", [rows[0].id]);
    expect(after).toEqual([{ status: "completed", lock_until: null }]);
  });

  it("marks the pending jobs of timers set before 0019, which a send must never join; other applier jobs stay as they were", async () => {
    const files = await readMigrations();
    const at = files.findIndex((f) => f.name === "0019_applier_pending.sql");
    await migrate(db.pool, { schema: "timers", migrations: files.slice(0, at) });
    const { rows: [wf] } = await db.pool.query("INSERT INTO timers.workflows (name) VALUES ('w') RETURNING id");
    const { rows: [wake, ran, plain] } = await db.pool.query(
      `INSERT INTO timers.jobs (type, payload, run_at, status) VALUES
         ('picket.workflow', jsonb_build_object('workflow', $1::bigint), now() + interval '1 hour', 'pending'),
         ('picket.workflow', jsonb_build_object('workflow', $1::bigint), now(), 'completed'),
         ('picket.workflow', jsonb_build_object('workflow', $1::bigint), now(), 'pending')
       RETURNING id`,
      [wf.id],
    );
    await db.pool.query("INSERT INTO timers.workflow_events (workflow_id, kind, event, due_at, send_id, wake_job) VALUES ($1, 'timer', '{}', now() + interval '1 hour', 'a', $2), ($1, 'timer', '{}', now(), 'b', $3)", [wf.id, wake.id, ran.id]);
    await db.pool.query("UPDATE timers.workflow_events SET applied_at = now() WHERE send_id = 'b'");
    await migrate(db.pool, { schema: "timers" });
    const { rows } = await db.pool.query("SELECT id, payload FROM timers.jobs ORDER BY id");
    expect(rows).toEqual([
      { id: wake.id, payload: { workflow: Number(wf.id), timer: true } },
      { id: ran.id, payload: { workflow: Number(wf.id) } },
      { id: plain.id, payload: { workflow: Number(wf.id) } },
    ]);
  });

  it("lets concurrent migrators queue behind one lock without conflict", async () => {
    const clients = await Promise.all(Array.from({ length: 6 }, () => db.connect()));
    const results = await Promise.all(clients.map((c) => migrate(c, { schema: "concurrent" })));
    expect(results.filter((r) => r.applied.length > 0)).toHaveLength(1);
    const { rows } = await db.pool.query("SELECT count(*)::int AS n FROM concurrent.migrations");
    expect(rows[0].n).toBe((await readMigrations()).length);
  });

  it("refuses an applied migration whose file was edited, naming the file, and changes nothing", async () => {
    const files = await readMigrations();
    await migrate(db.pool, { schema: "edited", migrations: files });
    const edited = files.map((f, i) => (i === 0 ? { ...f, checksum: "0".repeat(64), sql: `${f.sql}\n-- edited` } : f));
    const attempt = migrate(db.pool, { schema: "edited", migrations: edited });
    await expect(attempt).rejects.toThrow(MigrationChecksumError);
    await expect(attempt).rejects.toThrow(/migration 0001_jobs\.sql was changed after it was applied to schema "edited"/);
  });

  it("rolls back every file of a run when one fails, and says which", async () => {
    const files = await readMigrations();
    const broken = [...files, { version: 9999, name: "9999_broken.sql", checksum: "x", sql: "SELECT * FROM no_such_table" }];
    await expect(migrate(db.pool, { schema: "broken", migrations: broken })).rejects.toThrow(/no_such_table/);
    const { rows } = await db.pool.query("SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = 'broken'");
    expect(rows[0].n).toBe(0);
  });

  it("refuses to run against a schema migrated by a newer picket", async () => {
    const files = await readMigrations();
    await migrate(db.pool, { schema: "newer" });
    await db.pool.query("INSERT INTO newer.migrations (version, name, checksum) VALUES (9998, '9998_future.sql', 'f')");
    await expect(migrate(db.pool, { schema: "newer", migrations: files })).rejects.toThrow(UnknownMigrationError);
  });

  it("works in any valid schema name and refuses an unsafe one", async () => {
    await migrate(db.pool, { schema: "custom_jobs" });
    const { rows } = await db.pool.query("SELECT (custom_jobs.add_job('t')).status");
    expect(rows[0].status).toBe("pending");
    await expect(migrate(db.pool, { schema: 'x"; DROP TABLE y; --' })).rejects.toThrow(InvalidConfigError);
    await expect(migrate(db.pool, { schema: "Upper" })).rejects.toThrow(/schema name "Upper" is not allowed/);
  });

  it("accepts a plain client as well as a pool", async () => {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      expect((await migrate(client, { schema: "by_client" })).applied.length).toBeGreaterThan(0);
    } finally {
      await client.end();
    }
  });

  it("a worker refuses to start on a schema that lacks a migration of its version, naming it and what to do", async () => {
    const files = await readMigrations();
    await migrate(db.pool, { schema: "behind", migrations: files.slice(0, -1) });
    const supervisor = createSupervisor({ connectionString: db.url, schema: "behind", tasks: [defineTask({ name: "t", handler: async () => undefined })] });
    const refused = supervisor.start();
    await expect(refused).rejects.toThrow(SchemaOutOfDateError);
    await expect(refused).rejects.toThrow(
      `picket: the picket schema "behind" lacks migrations this version needs (${files.at(-1)!.name}): run \`picket migrate --schema behind\` (or pass migrate: true)`,
    );
    await supervisor.stop();
    // Once migrated, the same worker starts.
    await migrate(db.pool, { schema: "behind" });
    const worker = createSupervisor({ connectionString: db.url, schema: "behind", tasks: [defineTask({ name: "t", handler: async () => undefined })] });
    await worker.start();
    await worker.stop();
  });
});
