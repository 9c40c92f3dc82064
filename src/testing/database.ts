// A real PostgreSQL database per test file, with no set-up: one server per test run (embedded, or
// the user's DATABASE_URL), one migrated template database on it, and a fresh database per file
// cloned from the template (a copy of a template is a file copy: milliseconds, not a migration).
//
// The server and the template are found through two environment variables, so a global set-up
// (vitest's globalSetup, node --test's --test-global-setup) started before the test files' own
// processes hands them down. Without one, the first database a process asks for starts a server
// for that process, and the last one dropped stops it.
import { randomBytes } from "node:crypto";
import pg from "pg";
import { DEFAULT_SCHEMA, checkSchemaName } from "../db/schema-name.ts";
import { InvalidConfigError } from "../db/errors.ts";
import { migrate } from "../db/migrate.ts";
import { startEmbeddedPostgres, type EmbeddedPostgres } from "../db/embedded.ts";

/** The admin connection string of the test server, set by startTestServer for the processes it starts. */
export const TEST_ADMIN_URL_ENV = "PICKET_TEST_ADMIN_URL";
/** The migrated template database on that server. */
export const TEST_TEMPLATE_ENV = "PICKET_TEST_TEMPLATE";

export interface TestServerOptions {
  /** A server of your own (needs CREATEDB); default DATABASE_URL, else an embedded PostgreSQL. */
  url?: string;
  /** picket's schema in the template; default "picket". */
  schema?: string;
  /** Runs on the template after picket's migrations: create your own tables here. */
  prepare?: (client: pg.Client) => Promise<void>;
  /** Set PICKET_TEST_ADMIN_URL and PICKET_TEST_TEMPLATE for processes started later; default true. */
  exportEnv?: boolean;
}

export interface TestServer {
  /** Connection string of a database on the server that may create and drop databases. */
  adminUrl: string;
  /** Name of the migrated template database every test database is cloned from. */
  template: string;
  /** Drops the template and stops the embedded server (if this started one). */
  stop(): Promise<void>;
}

export const withDatabase = (url: string, database: string): string => {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
};

const serverUrl = (url: string | undefined): string | undefined => {
  if (url !== undefined) return url;
  const env = process.env.DATABASE_URL;
  if (env === undefined) return undefined;
  if (env.trim() === "") {
    throw new InvalidConfigError(
      "picket/testing: DATABASE_URL is set but empty. Unset it to let the tests start an embedded PostgreSQL, or set it to a server the tests may create databases on.",
    );
  }
  return env;
};

/**
 * Starts the server for a test run and migrates a template database on it. Sets
 * PICKET_TEST_ADMIN_URL and PICKET_TEST_TEMPLATE in this process's environment, so test processes
 * started after it find them.
 */
export const startTestServer = async (options: TestServerOptions = {}): Promise<TestServer> => {
  const schema = checkSchemaName(options.schema ?? DEFAULT_SCHEMA);
  let server: EmbeddedPostgres | undefined;
  let adminUrl = serverUrl(options.url);
  if (adminUrl === undefined) {
    // Throwaway data: durability off, as no test survives a server crash.
    server = await startEmbeddedPostgres({ settings: { fsync: "off", synchronous_commit: "off", full_page_writes: "off" } });
    adminUrl = server.url;
  }
  const template = `picket_template_${process.pid}_${randomBytes(3).toString("hex")}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  try {
    await admin.connect();
    if (server !== undefined) {
      // SCRAM's client side derives its key with as many PBKDF2 rounds as the stored password was
      // hashed with (4,096 by default): tests open many connections, so on this throwaway server
      // the password is hashed again with one round.
      await admin.query("SET scram_iterations = 1");
      await admin.query(`ALTER ROLE postgres PASSWORD '${decodeURIComponent(new URL(server.url).password).replaceAll("'", "''")}'`);
    }
    await admin.query(`CREATE DATABASE ${template}`);
    const client = new pg.Client({ connectionString: withDatabase(adminUrl, template) });
    await client.connect();
    try {
      await migrate(client, { schema });
      await options.prepare?.(client);
    } finally {
      await client.end();
    }
  } catch (error) {
    await admin.query(`DROP DATABASE IF EXISTS ${template} WITH (FORCE)`).catch(() => undefined);
    await admin.end().catch(() => undefined);
    await server?.stop();
    throw error;
  }
  await admin.end();
  if (options.exportEnv !== false) {
    process.env[TEST_ADMIN_URL_ENV] = adminUrl;
    process.env[TEST_TEMPLATE_ENV] = template;
  }
  const url = adminUrl;
  return {
    adminUrl: url,
    template,
    stop: async () => {
      if (process.env[TEST_TEMPLATE_ENV] === template) {
        delete process.env[TEST_ADMIN_URL_ENV];
        delete process.env[TEST_TEMPLATE_ENV];
      }
      const client = new pg.Client({ connectionString: url });
      try {
        await client.connect();
        await client.query(`DROP DATABASE IF EXISTS ${template} WITH (FORCE)`);
      } finally {
        await client.end().catch(() => undefined);
        await server?.stop();
      }
    },
  };
};

export interface TestDatabase {
  /** The database's name (picket_test_…). */
  name: string;
  /** Its connection string. */
  url: string;
  /** A pool on it; closed by drop(). */
  pool: pg.Pool;
  /** A dedicated connection (for explicit interleavings); closed by drop(). */
  connect(): Promise<pg.Client>;
  /** Closes every connection and drops the database. */
  drop(): Promise<void>;
}

export interface TestDatabaseOptions {
  /** Most connections of `pool`; default 10. */
  poolSize?: number;
}

// Without a global set-up, one server per process, shared by its databases and stopped with the last.
let processServer: { server: Promise<TestServer>; users: number } | undefined;

const acquireServer = async (): Promise<{ adminUrl: string; template: string; release: () => Promise<void> }> => {
  const adminUrl = process.env[TEST_ADMIN_URL_ENV];
  const template = process.env[TEST_TEMPLATE_ENV];
  if (adminUrl && template) return { adminUrl, template, release: async () => undefined };
  // Not exported to the environment: the server lives only as long as this process's databases.
  processServer ??= { server: startTestServer({ exportEnv: false }), users: 0 };
  const shared = processServer;
  shared.users++;
  let server: TestServer;
  try {
    server = await shared.server;
  } catch (error) {
    if (processServer === shared) processServer = undefined;
    throw error;
  }
  return {
    adminUrl: server.adminUrl,
    template: server.template,
    release: async () => {
      if (--shared.users > 0) return;
      if (processServer === shared) processServer = undefined;
      await server.stop();
    },
  };
};

const onAdmin = async (adminUrl: string, sql: string): Promise<void> => {
  const client = new pg.Client({ connectionString: adminUrl });
  try {
    await client.connect();
    await client.query(sql);
  } finally {
    await client.end().catch(() => undefined);
  }
};

/** A fresh database cloned from the run's migrated template (the server is started if need be). */
export const createTestDatabase = async (options: TestDatabaseOptions = {}): Promise<TestDatabase> => {
  const server = await acquireServer();
  const name = `picket_test_${randomBytes(6).toString("hex")}`;
  try {
    await onAdmin(server.adminUrl, `CREATE DATABASE ${name} TEMPLATE ${server.template}`);
  } catch (error) {
    await server.release();
    throw error;
  }
  const url = withDatabase(server.adminUrl, name);
  const pool = new pg.Pool({ connectionString: url, max: options.poolSize ?? 10 });
  // A connection the server closes (the drop's FORCE) must not crash the test process.
  pool.on("error", () => undefined);
  const clients: pg.Client[] = [];
  let dropped: Promise<void> | undefined;
  return {
    name,
    url,
    pool,
    connect: async () => {
      const client = new pg.Client({ connectionString: url });
      client.on("error", () => undefined);
      await client.connect();
      clients.push(client);
      return client;
    },
    drop: () =>
      (dropped ??= (async () => {
        await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
        await pool.end().catch(() => undefined);
        try {
          await onAdmin(server.adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        } finally {
          await server.release();
        }
      })()),
  };
};

/** The hooks of the test framework: vitest's (beforeAll, afterAll) or node:test's (before, after). */
export type SuiteHooks =
  | { beforeAll: (fn: () => Promise<void>, timeout?: number) => unknown; afterAll: (fn: () => Promise<void>, timeout?: number) => unknown }
  | { before: (fn: () => Promise<void>) => unknown; after: (fn: () => Promise<void>) => unknown };

/**
 * A fresh database for the current test file (or suite): made before its tests, dropped after.
 * Pass your framework's hooks: `useTestDatabase({ beforeAll, afterAll })` with vitest,
 * `useTestDatabase({ before, after })` with node:test. The handle's fields can be read once the
 * hook has run (in tests and later hooks).
 */
export const useTestDatabase = (
  hooks: SuiteHooks,
  options: TestDatabaseOptions & {
    /**
     * Runs on the new database in the same hook (your tables, your fixtures). Prefer it to a hook of
     * your own: node:test runs a file's top-level before() hooks concurrently, not in order.
     */
    prepare?: (db: TestDatabase) => Promise<unknown> | unknown;
  } = {},
): TestDatabase & { ready: () => Promise<TestDatabase> } => {
  let database: TestDatabase | undefined;
  let made!: (db: TestDatabase) => void;
  const ready = new Promise<TestDatabase>((resolve) => (made = resolve));
  const get = (): TestDatabase => {
    if (database === undefined) {
      throw new Error("picket/testing: the test database is made in a before-all hook; read it inside a test or a later hook, not while the file loads.");
    }
    return database;
  };
  const make = async () => {
    const created = await createTestDatabase(options);
    database = created;
    await options.prepare?.(created);
    made(created);
  };
  const drop = async () => {
    await database?.drop();
  };
  // Cloning may wait for the embedded server's first start (initdb: seconds on a busy machine).
  if ("beforeAll" in hooks) {
    hooks.beforeAll(make, 120_000);
    hooks.afterAll(drop, 60_000);
  } else {
    hooks.before(make);
    hooks.after(drop);
  }
  return {
    get name() {
      return get().name;
    },
    get url() {
      return get().url;
    },
    get pool() {
      return get().pool;
    },
    connect: () => get().connect(),
    drop: () => get().drop(),
    /** Resolves once the database is made and prepared (for a hook that must run after it). */
    ready: () => ready,
  };
};
