// Each test file works in its own database, cloned from the migrated template, so files run in
// parallel and never see each other's rows.
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, inject } from "vitest";
import { migrate } from "../../src/db/migrate.ts";
import { withDatabase } from "./global-setup.ts";

export interface TestDatabase {
  url: string;
  name: string;
  pool: pg.Pool;
  /** A dedicated connection (for explicit interleavings); closed after the file. */
  connect(): Promise<pg.Client>;
}

const admin = async <T>(run: (client: pg.Client) => Promise<T>): Promise<T> => {
  const client = new pg.Client({ connectionString: inject("adminUrl") });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
};

/** Creates a fresh database from the template for this file; returns a handle filled in beforeAll. */
export const useTestDatabase = (options: { template?: boolean } = {}): TestDatabase => {
  const name = `picket_test_${randomBytes(6).toString("hex")}`;
  const clients: pg.Client[] = [];
  const handle = { name } as TestDatabase;
  beforeAll(async () => {
    const template = options.template === false ? "template0" : inject("templateDatabase");
    await admin((c) => c.query(`CREATE DATABASE ${name} TEMPLATE ${template}`));
    handle.url = withDatabase(inject("adminUrl"), name);
    handle.pool = new pg.Pool({ connectionString: handle.url, max: 20 });
    handle.pool.on("error", () => undefined);
    handle.connect = async () => {
      const client = new pg.Client({ connectionString: handle.url });
      client.on("error", () => undefined);
      await client.connect();
      clients.push(client);
      return client;
    };
  });
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
    await handle.pool?.end();
    await admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
  });
  return handle;
};

/** One statement as a caller's pool receives it: its text, and its name when prepared. */
export interface Statement {
  text: string;
  name: string;
}

/**
 * A caller's pool on `url` whose every query goes through `intercept` first: it may fail it, hang
 * it, or forward it to the real connection (and change what comes back). Nothing about pg is
 * faked: the pool is a real pg.Pool of real connections, and the statements that are forwarded
 * run on the real server. `end()` closes the pool.
 */
export const interceptedPool = (
  url: string,
  intercept: (statement: Statement, forward: () => Promise<pg.QueryResult>) => Promise<unknown>,
): { pool: pg.Pool; end: () => Promise<void> } => {
  class InterceptedClient extends pg.Client {
    override query(...args: unknown[]): never {
      const [config, values, callback] = args as [string | pg.QueryConfig, unknown, unknown];
      const statement = typeof config === "string" ? { text: config, name: "" } : { text: config.text, name: config.name ?? "" };
      const forward = () => (super.query as (...a: unknown[]) => Promise<pg.QueryResult>)(config, typeof values === "function" ? undefined : values);
      const result = intercept(statement, forward);
      const done = typeof values === "function" ? values : callback;
      if (typeof done === "function") {
        result.then((r) => done(null, r), (e: unknown) => done(e));
        return undefined as never;
      }
      return result as never;
    }
  }
  const pool = new pg.Pool({ connectionString: url, Client: InterceptedClient });
  pool.on("error", () => undefined);
  return { pool, end: () => pool.end() };
};

/** Makes a schema of its own for each test that asks, migrated: `${prefix}_1`, `${prefix}_2`, ... */
export const schemasFor = (db: TestDatabase, prefix: string): (() => Promise<string>) => {
  let made = 0;
  return async () => {
    const schema = `${prefix}_${++made}`;
    await migrate(db.pool, { schema });
    return schema;
  };
};

/** `url` with an application_name, so that a test can find (and kill) its workers' connections. */
export const withApplicationName = (url: string, name: string): string => {
  const named = new URL(url);
  named.searchParams.set("application_name", name);
  return named.toString();
};
