// picket/testing's server and databases, driven from this process (the spawned node:test runs in
// test/testing-kit.test.ts show the same from outside): the template a run migrates, the
// environment it hands on, the server a file starts for itself when no set-up did, and the
// clean-up on every way out. Each test puts the run's environment back as it found it.
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { InvalidConfigError } from "../src/db/index.ts";
import { createTestDatabase, startTestServer, TEST_ADMIN_URL_ENV, TEST_TEMPLATE_ENV, useTestDatabase as useKitDatabase, withDatabase } from "../src/testing/database.ts";
import { useTestDatabase } from "./support/db.ts";
import { rejectionOf } from "./support/errors.ts";

const db = useTestDatabase();
const runAdmin = process.env[TEST_ADMIN_URL_ENV]!;
const runTemplate = process.env[TEST_TEMPLATE_ENV]!;
const runDatabaseUrl = process.env.DATABASE_URL;

afterEach(() => {
  process.env[TEST_ADMIN_URL_ENV] = runAdmin;
  process.env[TEST_TEMPLATE_ENV] = runTemplate;
  if (runDatabaseUrl === undefined) delete process.env.DATABASE_URL;
  else process.env.DATABASE_URL = runDatabaseUrl;
});

const databases = async (like: string): Promise<string[]> =>
  (await db.pool.query<{ datname: string }>("SELECT datname FROM pg_database WHERE datname LIKE $1 ORDER BY datname", [like])).rows.map((r) => r.datname);

describe("startTestServer on a server it is given", () => {
  it("migrates a template in the schema asked for, runs prepare on it, and drops it on stop(); the environment is left alone when asked", async () => {
    const prepared: string[] = [];
    const server = await startTestServer({
      url: runAdmin,
      schema: "kit_server",
      exportEnv: false,
      prepare: async (client) => void prepared.push((await client.query("SELECT current_database() AS name")).rows[0].name),
    });
    expect(server.adminUrl).toBe(runAdmin);
    expect(server.template).toMatch(new RegExp(`^picket_template_${process.pid}_[0-9a-f]{6}$`));
    expect(prepared).toEqual([server.template]);
    const template = new pg.Client({ connectionString: withDatabase(runAdmin, server.template) });
    await template.connect();
    try {
      expect((await template.query("SELECT to_regclass('kit_server.jobs') IS NOT NULL AS kit, to_regclass('picket.jobs') IS NOT NULL AS picket")).rows[0]).toEqual({ kit: true, picket: false });
    } finally {
      await template.end();
    }
    expect([process.env[TEST_ADMIN_URL_ENV], process.env[TEST_TEMPLATE_ENV]]).toEqual([runAdmin, runTemplate]);
    await server.stop();
    expect(await databases(server.template)).toEqual([]);
    // The run's own variables were not its, and stay.
    expect([process.env[TEST_ADMIN_URL_ENV], process.env[TEST_TEMPLATE_ENV]]).toEqual([runAdmin, runTemplate]);
  });

  it("hands its server and template on through the environment by default, and takes them back on stop()", async () => {
    const server = await startTestServer({ url: runAdmin });
    expect([process.env[TEST_ADMIN_URL_ENV], process.env[TEST_TEMPLATE_ENV]]).toEqual([runAdmin, server.template]);
    // A database made now is cloned from that template.
    const made = await createTestDatabase();
    try {
      expect((await made.pool.query("SELECT to_regclass('picket.jobs') IS NOT NULL AS migrated")).rows[0]).toEqual({ migrated: true });
    } finally {
      await made.drop();
    }
    await server.stop();
    expect([process.env[TEST_ADMIN_URL_ENV], process.env[TEST_TEMPLATE_ENV]]).toEqual([undefined, undefined]);
    expect(await databases(server.template)).toEqual([]);
  });

  it("uses DATABASE_URL when no url is given, and refuses an empty one, saying what to do", async () => {
    process.env.DATABASE_URL = runAdmin;
    const server = await startTestServer({ exportEnv: false });
    expect(server.adminUrl).toBe(runAdmin);
    await server.stop();
    process.env.DATABASE_URL = " ";
    const error = await rejectionOf(startTestServer({ exportEnv: false }));
    expect(error).toBeInstanceOf(InvalidConfigError);
    expect((error as Error).message).toBe(
      "picket/testing: DATABASE_URL is set but empty. Unset it to let the tests start an embedded PostgreSQL, or set it to a server the tests may create databases on.",
    );
  });

  it("drops the template it made when prepare fails, and rethrows prepare's error", async () => {
    const before = await databases(`picket_template_${process.pid}_%`);
    const error = await rejectionOf(
      startTestServer({
        url: runAdmin,
        exportEnv: false,
        prepare: async () => {
          throw new Error("seed data refused");
        },
      }),
    );
    expect((error as Error).message).toBe("seed data refused");
    expect(await databases(`picket_template_${process.pid}_%`)).toEqual(before);
    expect([process.env[TEST_ADMIN_URL_ENV], process.env[TEST_TEMPLATE_ENV]]).toEqual([runAdmin, runTemplate]);
  });

  it("refuses a schema name PostgreSQL would not take as is, before touching the server", async () => {
    const before = await databases(`picket_template_${process.pid}_%`);
    await expect(startTestServer({ url: runAdmin, schema: "Bad-Name", exportEnv: false })).rejects.toThrow(InvalidConfigError);
    expect(await databases(`picket_template_${process.pid}_%`)).toEqual(before);
  });
});

describe("createTestDatabase", () => {
  it("gives a pool of the size asked for and dedicated connections, and drop() closes them all and drops the database once", async () => {
    const made = await createTestDatabase({ poolSize: 3 });
    expect(made.name).toMatch(/^picket_test_[0-9a-f]{12}$/);
    expect(made.url).toBe(withDatabase(runAdmin, made.name));
    expect((made.pool as unknown as { options: { max: number } }).options.max).toBe(3);
    const client = await made.connect();
    expect((await client.query("SELECT current_database() AS name")).rows[0].name).toBe(made.name);
    const dropping = made.drop();
    expect(made.drop()).toBe(dropping);
    await dropping;
    expect(await databases(made.name)).toEqual([]);
    await expect(client.query("SELECT 1")).rejects.toThrow();
    expect(made.pool.ended).toBe(true);
  });

  it("with no set-up in the environment, starts one server for the process, shared by its databases, and stops it with the last", async () => {
    delete process.env[TEST_ADMIN_URL_ENV];
    delete process.env[TEST_TEMPLATE_ENV];
    const templatesBefore = await databases("picket_template_%");
    // The server this file starts for itself: an embedded one, or DATABASE_URL's when it is set.
    const [first, second] = await Promise.all([createTestDatabase(), createTestDatabase()]);
    expect(new URL(second.url).port).toBe(new URL(first.url).port);
    expect(new URL(first.url).port === new URL(runAdmin).port).toBe(runDatabaseUrl !== undefined);
    await first.drop();
    // Still up for the second.
    expect((await second.pool.query("SELECT current_database() AS name")).rows[0].name).toBe(second.name);
    await second.drop();
    if (runDatabaseUrl === undefined) {
      const probe = new pg.Client({ connectionString: withDatabase(first.url, "postgres"), connectionTimeoutMillis: 5_000 });
      await expect(probe.connect()).rejects.toThrow(/ECONNREFUSED/);
    }
    // Its template went with it (on the caller's server, the only trace it could leave).
    expect(await databases("picket_template_%")).toEqual(templatesBefore);
    // Made again after the last drop: a new server (or template) for the process.
    const again = await createTestDatabase();
    expect((await again.pool.query("SELECT to_regclass('picket.jobs') IS NOT NULL AS migrated")).rows[0]).toEqual({ migrated: true });
    await again.drop();
  }, 120_000);
});

describe("the process's own server, when no set-up gave one", () => {
  it("is not handed on through the environment; a start that failed is tried again by the next caller; only a whole set-up in the environment is used", async () => {
    delete process.env[TEST_TEMPLATE_ENV];
    // An admin URL without a template is no set-up: the process starts (here: connects to) its own.
    process.env.DATABASE_URL = "postgres://postgres:x@127.0.0.1:1/postgres";
    await expect(createTestDatabase()).rejects.toThrow(/ECONNREFUSED/);
    process.env.DATABASE_URL = runAdmin;
    const made = await createTestDatabase();
    try {
      expect([process.env[TEST_ADMIN_URL_ENV], process.env[TEST_TEMPLATE_ENV]]).toEqual([runAdmin, undefined]);
      expect((await made.pool.query("SELECT to_regclass('picket.jobs') IS NOT NULL AS migrated")).rows[0]).toEqual({ migrated: true });
    } finally {
      await made.drop();
    }
  }, 60_000);

  it("fails with the server's reason when the template cannot be cloned, and gives the server back", async () => {
    process.env[TEST_TEMPLATE_ENV] = "picket_template_that_is_not_there";
    await expect(createTestDatabase()).rejects.toThrow(/template database "picket_template_that_is_not_there" does not exist/);
  });

  it("survives the server closing its connections: a pool's idle connection and a dedicated one", async () => {
    const made = await createTestDatabase();
    try {
      await made.pool.query("SELECT 1");
      const client = await made.connect();
      await db.pool.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", [made.name]);
      // The closed connections' errors reach their handlers, not the process.
      await expect(client.query("SELECT 1")).rejects.toThrow();
      // The pool replaces its closed connection (a query that reached it before the pool heard is refused).
      await expect.poll(() => made.pool.query("SELECT 1 AS one").then((r) => r.rows[0].one, (e: Error) => e.message), { timeout: 10_000 }).toBe(1);
    } finally {
      await made.drop();
    }
  });
});

describe("useTestDatabase with node:test's hooks", () => {
  it("makes and prepares the database in before(), refuses to be read earlier, and drops it in after()", async () => {
    const before: Array<() => Promise<void>> = [];
    const after: Array<() => Promise<void>> = [];
    const prepared: string[] = [];
    const handle = useKitDatabase({ before: (fn) => before.push(fn), after: (fn) => after.push(fn) }, { prepare: (made) => void prepared.push(made.name) });
    expect([before.length, after.length]).toEqual([1, 1]);
    expect(() => handle.url).toThrow("picket/testing: the test database is made in a before-all hook; read it inside a test or a later hook, not while the file loads.");
    await before[0]!();
    expect(await handle.ready()).toMatchObject({ name: handle.name, url: handle.url });
    expect(prepared).toEqual([handle.name]);
    expect((await handle.pool.query("SELECT current_database() AS name")).rows[0].name).toBe(handle.name);
    const client = await handle.connect();
    expect((await client.query("SELECT current_database() AS name")).rows[0].name).toBe(handle.name);
    await after[0]!();
    expect(await databases(handle.name)).toEqual([]);
    await expect(client.query("SELECT 1")).rejects.toThrow();
  });

  it("takes vitest's hooks with their time limits, needs no prepare, drops through the handle, and an after() with no database does nothing", async () => {
    const hooks: Array<{ fn: () => Promise<void>; timeout: number | undefined }> = [];
    const handle = useKitDatabase({ beforeAll: (fn, timeout) => hooks.push({ fn, timeout }), afterAll: (fn, timeout) => hooks.push({ fn, timeout }) });
    expect(hooks.map((h) => h.timeout)).toEqual([120_000, 60_000]);
    // The set-up failed (or never ran): the after-all hook has nothing to drop.
    await hooks[1]!.fn();
    await hooks[0]!.fn();
    const name = handle.name;
    await handle.drop();
    expect(await databases(name)).toEqual([]);
  });
});

describe("withDatabase", () => {
  it("swaps the database of a URL and keeps the rest", () => {
    expect(withDatabase("postgres://u:p%40ss@127.0.0.1:5433/postgres?sslmode=disable", "picket_test_1")).toBe(
      "postgres://u:p%40ss@127.0.0.1:5433/picket_test_1?sslmode=disable",
    );
  });
});
