// `picket db start|url|stop`: the project-local embedded PostgreSQL (./.picket/pgdata) as a
// server of its own, which outlives the command that starts it, so that a worker, `picket stats`,
// the dashboard and psql can all use it at once. The URL goes to stdout (so that
// `export DATABASE_URL=$(picket db url)` works); what happened goes to stderr.
import { readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import path from "node:path";
import type { Command } from "commander";
import { checkSchemaName, handlerCoverage, migrate, openPool, PicketError, startEmbeddedPostgres } from "../db/index.ts";
import { findEmbeddedPostgres, stopEmbeddedPostgresIn, type RunningEmbeddedPostgres } from "../db/embedded.ts";
import { answeredForServer, localDataDir, withStartLock } from "./database.ts";
import { portOption } from "./shared.ts";

const say = (line: string) => process.stderr.write(`picket: ${line}\n`);

const startedBy = (running: RunningEmbeddedPostgres): string =>
  running.kept ? "started by `picket db start`" : `started by picket process ${running.ownerPid}, and stopped when it ends`;

// The port the last `db start` used, kept beside the data (the owner file goes with the server).
// A worker holds the URL it was started with: a server restarted on another port would leave it
// retrying a dead address forever, so `db start` takes the same port again when it is free.
const lastPortFile = (): string => path.join(path.dirname(localDataDir()), "last-port");

const portIsFree = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const probe = createServer();
    probe.once("error", () => resolve(false));
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(true)));
  });

const lastPort = async (): Promise<number | undefined> => {
  const port = Number((await readFile(lastPortFile(), "utf8").catch(() => "")).trim());
  return Number.isInteger(port) && port > 0 && port < 65_536 && (await portIsFree(port)) ? port : undefined;
};

/** How many live workers use the server at `url` (0 when that cannot be told, as on an unmigrated one). */
const liveWorkersOn = async (url: string): Promise<number> => {
  try {
    const pool = await openPool({ connectionString: url, max: 1 });
    try {
      return (await handlerCoverage(pool)).liveWorkers;
    } finally {
      await pool.end();
    }
  } catch {
    return 0;
  }
};

export const dbCommand = (program: Command): void => {
  const db = program
    .command("db")
    .description("the embedded PostgreSQL in ./.picket/pgdata, as a server every picket command run here shares");

  db.command("start")
    .description("start the embedded PostgreSQL in the background (it runs until `picket db stop`), migrate it, print its URL")
    .option("--schema <name>", "schema of picket's tables to create or update", (name: string) => checkSchemaName(name), "picket")
    .option("--port <port>", "port to listen on (default: a free one)", portOption("--port"))
    .action(async (options: { schema: string; port?: number }) => {
      // Under the start lock, as every command starts the server: one started at this instant is found.
      const outcome = await withStartLock(async () => {
        const already = answeredForServer();
        if (already) return { already };
        const port = options.port ?? (await lastPort());
        const server = await startEmbeddedPostgres({ dataDir: localDataDir(), keep: true, ...(port !== undefined ? { port } : {}) });
        await writeFile(lastPortFile(), `${server.port}\n`);
        // Migrated as the worker migrates the embedded server it starts, so that `picket enqueue`
        // and `picket stats` work on it at once.
        try {
          const pool = await openPool({ connectionString: server.url, max: 1 });
          try {
            await migrate(pool, { schema: options.schema });
          } finally {
            await pool.end();
          }
        } catch (error) {
          await stopEmbeddedPostgresIn(localDataDir());
          throw error;
        }
        return { server };
      });
      if (outcome.already) {
        say(`the embedded PostgreSQL in .picket/pgdata is already running (${startedBy(outcome.already)})`);
        process.stdout.write(`${outcome.already.url}\n`);
        return;
      }
      const server = outcome.server;
      say(`started the embedded PostgreSQL in ${server.dataDir} (schema "${options.schema}" migrated); every picket command here uses it until \`picket db stop\``);
      if (process.env.DATABASE_URL !== undefined) say("DATABASE_URL is set: picket commands use it, not this server, until you unset it");
      process.stdout.write(`${server.url}\n`);
    });

  db.command("url")
    .description("print the running embedded PostgreSQL's URL (with its password), for psql or DATABASE_URL")
    .action(() => {
      const found = answeredForServer();
      if (!found) throw new PicketError("picket: no embedded PostgreSQL is running in .picket/pgdata: start one with `picket db start`.");
      process.stdout.write(`${found.url}\n`);
    });

  db.command("stop")
    .description("stop the embedded PostgreSQL that `picket db start` started (fast shutdown: sessions are ended, data kept)")
    .action(async () => {
      const found = findEmbeddedPostgres(localDataDir());
      if (found === undefined) {
        say("no embedded PostgreSQL is running in .picket/pgdata; nothing to stop");
        return;
      }
      // A server a running worker started for itself is that worker's to stop: stopping it here
      // would pull the database from under its jobs.
      if (!found.kept && found.ownerAlive && found.ownerPid !== process.pid) {
        throw new PicketError(
          `picket: the embedded PostgreSQL in .picket/pgdata was started by picket process ${found.ownerPid} for itself and stops when it ends: stop that process (kill -TERM ${found.ownerPid}).`,
        );
      }
      // Workers on it are not stopped: they retry their connections until a server answers on its
      // port again, which the next `db start` gives them. Say so, or they look silently wedged.
      const workers = await liveWorkersOn(found.url);
      await stopEmbeddedPostgresIn(localDataDir());
      say(`stopped the embedded PostgreSQL in .picket/pgdata (process ${found.serverPid}); its data is kept`);
      if (workers > 0) {
        say(
          `${workers} live worker(s) were using it: they keep retrying (and log connection errors) until \`picket db start\` brings it back on port ${found.port}, or until you stop them`,
        );
      }
    });
};
