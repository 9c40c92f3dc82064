// The embedded server's superuser password (issue 28, item 1). It listens on 127.0.0.1, which every
// local account reaches; with the one password every embedded server used to share, any of them
// could log in as superuser and run programs as the developer (`COPY ... FROM PROGRAM`). Each data
// folder now has its own, readable by its owner only; folders from before get one at their next
// start; and as root, the predictable /var/tmp folder is used only when it is safe to.
import { lstatSync, readFileSync, statSync } from "node:fs";
import { chmod, mkdir, mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { embeddedDataDir, startEmbeddedPostgres, type EmbeddedPostgres } from "../src/db/embedded.ts";

const servers: EmbeddedPostgres[] = [];
const folders: string[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) await server.stop();
  for (const folder of folders.splice(0)) await rm(folder, { recursive: true, force: true });
});

/** A project folder the postgres user can reach (as root the server runs as postgres). */
const project = async (): Promise<string> => {
  const cwd = await mkdtemp(path.join(tmpdir(), "picket-secret-"));
  await chmod(cwd, 0o755);
  folders.push(cwd);
  return path.join(cwd, ".picket", "pgdata");
};

const start = async (dataDir: string): Promise<EmbeddedPostgres> => {
  const server = await startEmbeddedPostgres({ dataDir, settings: { fsync: "off" } });
  servers.push(server);
  return server;
};

const passwordOf = (url: string): string => decodeURIComponent(new URL(url).password);

/** Logs in with `password` instead of the URL's: the error's SQLSTATE, or "connected". */
const loginWith = async (url: string, password: string): Promise<string> => {
  const target = new URL(url);
  target.password = encodeURIComponent(password);
  const client = new pg.Client({ connectionString: target.toString() });
  try {
    await client.connect();
    return "connected";
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  } finally {
    await client.end().catch(() => undefined);
  }
};

describe("the embedded server's password", () => {
  it("is each data folder's own, kept in a file only its owner can read, and the shared one no longer logs in", async () => {
    const [a, b] = await Promise.all([project(), project()]);
    const [first, second] = await Promise.all([start(a), start(b)]);
    const one = passwordOf(first.url);
    const two = passwordOf(second.url);
    expect(one).not.toBe(two);
    expect(one).toMatch(/^[A-Za-z0-9_-]{32}$/);
    for (const [server, password] of [[first, one], [second, two]] as const) {
      const file = path.join(server.dataDir, "picket-password");
      expect(readFileSync(file, "utf8").trim()).toBe(password);
      expect(statSync(file).mode & 0o777).toBe(0o600);
      expect(statSync(server.dataDir).mode & 0o777).toBe(0o700);
      expect(await loginWith(server.url, password)).toBe("connected");
      // 28P01: invalid_password.
      expect(await loginWith(server.url, "picket")).toBe("28P01");
    }
  }, 120_000);

  it("is given to a data folder made before each had its own at its next start, and the data stays", async () => {
    const dataDir = await project();
    const before = await start(dataDir);
    const admin = new pg.Client({ connectionString: before.url });
    await admin.connect();
    await admin.query("CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)");
    // The folder as an older picket left it: the shared password, and no password file.
    await admin.query("ALTER ROLE postgres PASSWORD 'picket'");
    await admin.end();
    await before.stop();
    servers.splice(servers.indexOf(before), 1);
    await rm(path.join(dataDir, "picket-password"));

    const after = await start(dataDir);
    const password = passwordOf(after.url);
    expect(password).not.toBe("picket");
    expect(readFileSync(path.join(dataDir, "picket-password"), "utf8").trim()).toBe(password);
    expect(await loginWith(after.url, "picket")).toBe("28P01");
    const client = new pg.Client({ connectionString: after.url });
    await client.connect();
    expect((await client.query("SELECT n FROM kept")).rows).toEqual([{ n: 7 }]);
    await client.end();
  }, 120_000);
});

// Only root runs the server as another user and falls back to /var/tmp; elsewhere the data folder
// is always the one asked for, and there is nothing here to test.
describe.runIf(process.getuid?.() === 0)("as root, the /var/tmp folder for a data folder the postgres user cannot reach", () => {
  /** A data folder inside a private (0700) folder, and where its data would live instead. */
  const privateProject = async () => {
    const cwd = await mkdtemp(path.join(tmpdir(), "picket-private-"));
    folders.push(cwd);
    const dataDir = path.join(cwd, "pgdata");
    const fallback = embeddedDataDir(dataDir);
    expect(fallback).toMatch(/^\/var\/tmp\/picket-pgdata-/);
    folders.push(fallback);
    return { dataDir, fallback };
  };

  it("is refused when it is a symbolic link, and the link's target keeps its owner", async () => {
    const { dataDir, fallback } = await privateProject();
    const target = await mkdtemp(path.join(tmpdir(), "picket-target-"));
    folders.push(target);
    await symlink(target, fallback);
    await expect(startEmbeddedPostgres({ dataDir })).rejects.toThrow(`picket: ${fallback} is a symbolic link, so it cannot hold the embedded database safely`);
    expect(statSync(target).uid).toBe(0);
  }, 60_000);

  it("is refused when others may write to it", async () => {
    const { dataDir, fallback } = await privateProject();
    await mkdir(fallback);
    await chmod(fallback, 0o777);
    await expect(startEmbeddedPostgres({ dataDir })).rejects.toThrow(`picket: ${fallback} is writable by other users`);
  }, 60_000);

  it("is made private when it does not exist, and holds the server", async () => {
    const { dataDir, fallback } = await privateProject();
    const server = await start(dataDir);
    expect(server.dataDir).toBe(fallback);
    const found = lstatSync(fallback);
    expect(found.isDirectory()).toBe(true);
    expect(found.mode & 0o777).toBe(0o700);
    expect(await loginWith(server.url, passwordOf(server.url))).toBe("connected");
  }, 60_000);
});
