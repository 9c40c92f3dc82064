// Per-job costs of a drain: what the worker process and the PostgreSQL server spent on it, and how
// many statements, commits and WAL bytes it took. A Meter is one connection of the benchmark's own
// (the "monitor"), which also runs the benchmark's polling of the queue, so that its own work can
// be left out of every figure:
//   worker CPU       process.cpuUsage() of this process (user + system), the worker's process;
//   PostgreSQL CPU   utime + stime of every process of the server: the postmaster's live children
//                    (backends, walwriter, checkpointer, autovacuum, ...) plus the postmaster's
//                    cutime + cstime, where the time of children that exited meanwhile lands once
//                    the postmaster has reaped them; minus the monitor's own backend. Needs the
//                    postmaster's pid (BENCH_POSTMASTER_PID, set by bench/run.ts for its embedded
//                    server) and its /proc: otherwise null ("not measured", never 0);
//   statements       pg_stat_statements calls in this database, top-level only (what clients sent,
//                    BEGIN/COMMIT and SET included), minus the monitor's; null when the server has
//                    not preloaded pg_stat_statements;
//   commits          pg_stat_database.xact_commit of this database, minus the monitor's;
//   WAL bytes        pg_current_wal_insert_lsn() difference (the whole server's WAL).
// Backends report their commit counts to pg_stat_database lazily (when idle, at most every second,
// and when they exit), so both ends of the window wait until no other client of this database is
// connected: start() after the enqueue's connections are closed, stop() after the worker stopped.
// The window is therefore worker start → worker stopped: the drain with the worker's start-up and
// shutdown, never the enqueue.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import pg from "pg";

export interface Costs {
  workerCpuUsPerJob: number;
  pgCpuUsPerJob: number | null;
  statementsPerJob: number | null;
  commitsPerJob: number;
  walBytesPerJob: number;
}

export interface Meter {
  /** A query on the monitor's connection (the benchmark's polling): counted, so it is left out. */
  query<R extends pg.QueryResultRow = any>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>>;
  /**
   * Opens the window, once no other client of this database is connected; with `othersConnected`
   * at once (workers started before it, idle: their few unreported commits are counted in it).
   */
  start(options?: { othersConnected?: boolean }): Promise<void>;
  /** Closes the window, once the worker has stopped and its connections are gone: costs per job. */
  stop(jobs: number): Promise<Costs>;
  end(): Promise<void>;
}

/** Clock ticks per second of /proc/<pid>/stat's times (usually 100: 10 ms resolution). */
export const clockTicks = (() => {
  let ticks: number | undefined;
  return () => (ticks ??= Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100);
})();

/** Fields of /proc/<pid>/stat after the command name (which may hold spaces and parentheses). */
const statFields = (pid: number): string[] | undefined => {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    return text.slice(text.lastIndexOf(")") + 2).split(" ");
  } catch {
    return undefined; // exited meanwhile
  }
};
// Indexes into statFields: the man page's fields 4 (ppid), 14–17 (utime, stime, cutime, cstime) less 3.
const PPID = 1;
const UTIME = 11;
const STIME = 12;
const CUTIME = 13;
const CSTIME = 14;

const ownTicks = (f: string[]) => Number(f[UTIME]) + Number(f[STIME]);

/** The server's CPU so far, in ticks: the postmaster, its reaped children, its live children. */
const serverTicks = (postmaster: number): number => {
  const own = statFields(postmaster);
  if (own === undefined) throw new Error(`postmaster ${postmaster} is gone`);
  let ticks = ownTicks(own) + Number(own[CUTIME]) + Number(own[CSTIME]);
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    const f = statFields(pid);
    if (f !== undefined && Number(f[PPID]) === postmaster) ticks += ownTicks(f);
  }
  return ticks;
};

const childrenOf = (postmaster: number): number[] =>
  readdirSync("/proc")
    .map(Number)
    .filter((pid) => Number.isInteger(pid) && Number(statFields(pid)?.[PPID]) === postmaster);

/** The postmaster's pid from BENCH_POSTMASTER_PID, if it is this server's (the monitor's backend is its child). */
const localPostmaster = (backendPid: number): number | undefined => {
  const pid = Number(process.env.BENCH_POSTMASTER_PID);
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  return Number(statFields(backendPid)?.[PPID]) === pid ? pid : undefined;
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Snapshot {
  cpu: NodeJS.CpuUsage;
  serverTicks: number | undefined;
  monitorTicks: number | undefined;
  commits: number;
  statements: number | null;
  wal: string;
  /** Queries the monitor had run before this snapshot's reading (all of them counted in it). */
  monitorQueries: number;
}

export const openMeter = async (url: string): Promise<Meter> => {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  let monitorQueries = 0;
  const query = <R extends pg.QueryResultRow>(sql: string, params?: unknown[]) => {
    monitorQueries++;
    return client.query<R>(sql, params);
  };
  const { rows: [me] } = await query<{ pid: number; db: string }>("SELECT pg_backend_pid() AS pid, current_database() AS db");
  const postmaster = localPostmaster(me!.pid);
  // pg_stat_statements counts only where the server preloaded it; the view needs the extension in
  // this database.
  const statementsCounted = await query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    .then(() => query("SELECT 1 FROM pg_stat_statements LIMIT 1"))
    .then(() => true, () => false);

  // Clients of this database other than the monitor. Locally, from the backends' process titles
  // ("postgres: <user> <db> <host>(<port>) ..."), which last until the backend has exited and so
  // until it has reported its counts; otherwise from pg_stat_activity, then a moment's grace for
  // the exiting backends' reports.
  const title = new RegExp(`^postgres: \\S+ ${me!.db} `);
  const otherClients = async (): Promise<number> => {
    if (postmaster !== undefined) {
      return childrenOf(postmaster).filter((pid) => {
        if (pid === me!.pid) return false;
        try {
          return title.test(readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " "));
        } catch {
          return false;
        }
      }).length;
    }
    const { rows } = await query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
    );
    return rows[0]!.n;
  };
  const settle = async (): Promise<void> => {
    const deadline = Date.now() + 20_000;
    while ((await otherClients()) > 0) {
      if (Date.now() > deadline) {
        process.stderr.write("costs: other clients of the database stayed connected; their unreported commits are missed\n");
        break;
      }
      await sleep(20);
    }
    if (postmaster === undefined) await sleep(500);
  };

  const snapshot = async (wait = true): Promise<Snapshot> => {
    if (wait) await settle();
    // The monitor's own counts reach pg_stat_database at the end of this statement.
    await query("SELECT pg_stat_force_next_flush()");
    const before = monitorQueries;
    const { rows: [s] } = await query<{ commits: string; statements: string | null; wal: string }>(
      `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits,
              ${statementsCounted ? "(SELECT sum(calls) FROM pg_stat_statements WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database()))" : "NULL"} AS statements,
              pg_current_wal_insert_lsn() AS wal`,
    );
    const monitor = postmaster === undefined ? undefined : statFields(me!.pid);
    return {
      cpu: process.cpuUsage(),
      serverTicks: postmaster === undefined ? undefined : serverTicks(postmaster),
      monitorTicks: monitor === undefined ? undefined : ownTicks(monitor),
      commits: Number(s!.commits),
      statements: s!.statements === null ? null : Number(s!.statements),
      wal: s!.wal,
      monitorQueries: before,
    };
  };

  let first: Snapshot | undefined;
  return {
    query,
    start: async (options = {}) => {
      first = await snapshot(options.othersConnected !== true);
    },
    stop: async (jobs) => {
      const last = await snapshot();
      const a = first!;
      // Every monitor query between the two readings is one statement and one commit (autocommit).
      const ours = last.monitorQueries - a.monitorQueries;
      const { rows: [w] } = await query<{ bytes: string }>("SELECT pg_wal_lsn_diff($1, $2) AS bytes", [last.wal, a.wal]);
      const per = (x: number) => (jobs > 0 ? x / jobs : NaN);
      const cpuUs = last.cpu.user + last.cpu.system - a.cpu.user - a.cpu.system;
      const ticks =
        last.serverTicks === undefined || a.serverTicks === undefined
          ? undefined
          : last.serverTicks - a.serverTicks - (last.monitorTicks! - a.monitorTicks!);
      return {
        workerCpuUsPerJob: per(cpuUs),
        pgCpuUsPerJob: ticks === undefined ? null : per((ticks * 1e6) / clockTicks()),
        statementsPerJob: last.statements === null || a.statements === null ? null : per(last.statements - a.statements - ours),
        commitsPerJob: per(last.commits - a.commits - ours),
        walBytesPerJob: per(Number(w!.bytes)),
      };
    },
    end: () => client.end(),
  };
};
