import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { DatabaseUnreachableError, openPool } from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";

const db = useTestDatabase();

const closedPort = async (): Promise<number> =>
  new Promise((resolve) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });

describe("connecting", () => {
  it("says where and why when nothing listens, and what to do", async () => {
    const port = await closedPort();
    const attempt = openPool({ connectionString: `postgres://u:secret@127.0.0.1:${port}/app` });
    await expect(attempt).rejects.toThrow(DatabaseUnreachableError);
    await expect(attempt).rejects.toThrow(
      new RegExp(`cannot connect to PostgreSQL at 127\\.0\\.0\\.1:${port}/app \\(.*ECONNREFUSED.*\\)\\. Check DATABASE_URL`),
    );
    await expect(attempt).rejects.not.toThrow(/secret/);
  });

  it("names a missing database and a malformed URL", async () => {
    const missing = new URL(db.url);
    missing.pathname = "/no_such_database";
    await expect(openPool({ connectionString: missing.toString() })).rejects.toThrow(/that database does not exist/);
    await expect(openPool({ connectionString: "not a url" })).rejects.toThrow(/not a URL \(expected postgres:\/\//);
  });

  it("opens a working pool when the server is there", async () => {
    const pool = await openPool({ connectionString: db.url, max: 3 });
    try {
      expect((await pool.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
      // Every connection of picket's own pool plans its statements once (see pool.ts).
      const clients = await Promise.all([pool.connect(), pool.connect(), pool.connect()]);
      for (const client of clients) expect((await client.query("SHOW plan_cache_mode")).rows[0].plan_cache_mode).toBe("force_generic_plan");
      clients.forEach((client) => client.release());
    } finally {
      await pool.end();
    }
  });
});
