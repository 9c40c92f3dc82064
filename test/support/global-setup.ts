// Starts one real PostgreSQL for the run (embedded, or DATABASE_URL's server), migrates a
// template database once, and hands its name to the test files, which each clone their own.
import pg from "pg";
import type { TestProject } from "vitest/node";
import { migrate, startEmbeddedPostgres, type EmbeddedPostgres } from "../../src/db/index.ts";

declare module "vitest" {
  export interface ProvidedContext {
    adminUrl: string;
    templateDatabase: string;
  }
}

export const withDatabase = (url: string, database: string): string => {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
};

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let server: EmbeddedPostgres | undefined;
  let adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) {
    // Throwaway data: durability settings off, as the tests never survive a server crash.
    server = await startEmbeddedPostgres({
      settings: { fsync: "off", synchronous_commit: "off", full_page_writes: "off" },
    });
    adminUrl = server.url;
  }
  const templateDatabase = `picket_template_${process.pid}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  if (server) {
    // Every connection authenticates with SCRAM, whose client side derives the key with as many
    // PBKDF2 rounds as the stored password was hashed with (4,096). The suite opens thousands of
    // connections, so on this throwaway server the password is re-hashed with one round.
    await admin.query("SET scram_iterations = 1");
    await admin.query(`ALTER ROLE postgres PASSWORD '${decodeURIComponent(new URL(server.url).password)}'`);
  }
  await admin.query(`DROP DATABASE IF EXISTS ${templateDatabase}`);
  await admin.query(`CREATE DATABASE ${templateDatabase}`);
  const template = new pg.Client({ connectionString: withDatabase(adminUrl, templateDatabase) });
  await template.connect();
  await migrate(template);
  await template.end();
  project.provide("adminUrl", adminUrl);
  project.provide("templateDatabase", templateDatabase);
  // picket/testing's databases (test/testing-kit.test.ts, examples/testing) find the server here.
  process.env.PICKET_TEST_ADMIN_URL = adminUrl;
  process.env.PICKET_TEST_TEMPLATE = templateDatabase;
  return async () => {
    await admin.query(`DROP DATABASE IF EXISTS ${templateDatabase} WITH (FORCE)`);
    await admin.end();
    await server?.stop();
  };
}
