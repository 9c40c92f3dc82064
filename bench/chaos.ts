// The chaos run: real worker processes claim jobs while the driver SIGKILLs a random worker every
// few seconds (and starts a replacement), freezes one now and then (SIGSTOP past its lease), holds
// a lock on a random running job's row for several leases from a session of its own, pauses
// PostgreSQL (SIGSTOP of the whole server) for longer than a lease and, once, restarts it. When
// the system has settled it checks, from the job rows, an audit of every claim, the handler's own
// record of its executions and the workers' logs, that no job was lost or completed twice, that
// every duplicate execution is explained by a lost claim whose late writes were fenced or by a
// lease that expired on the worker's own clock, that no two runs of a job overlapped on workers
// whose event loops respond, that retries kept the backoff, and how long a killed worker's jobs
// took to complete elsewhere.
//
//   node bench/chaos.ts --workers 4 --jobs 5000 --duration 120 --lease-ms 2000
//
// Exit code 1 when a check fails. test/chaos.test.ts runs a reduced version through runChaos().
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { chmod, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";
import { enqueueJobs, migrate, startEmbeddedPostgres, type EmbeddedPostgres } from "../src/db/index.ts";

const CLI = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
const TASKS = fileURLToPath(new URL("../test/fixtures/chaos-tasks.ts", import.meta.url));

export interface ChaosOptions {
  /** Worker processes kept running. */
  workers: number;
  /** Jobs enqueued (one statement); their run_at is spread over the chaos window. */
  jobs: number;
  /** Length of the chaos window: kills (and the restart) happen in it. */
  durationMs: number;
  /** The chaos task's lease. */
  leaseMs: number;
  /** Mean time between SIGKILLs (each gap drawn from ½–1½ of it); default 3000. */
  killEveryMs?: number;
  /**
   * The window is stretched, with kills only, until at least this many SIGKILLs were made: on a
   * loaded machine the pause, the restart and slow worker starts can take most of a short window.
   * Default 0.
   */
  minKills?: number;
  /**
   * Likewise for row locks: the window is stretched (kills go on) until at least this many rows
   * were locked and released, at most by another durationMs. Default 0.
   */
  minRowLocks?: number;
  /**
   * Mean time between freezes: a random worker is SIGSTOPped for 1–2 leases, then SIGCONTed,
   * so it resumes as a stalled owner whose claims were reclaimed meanwhile. 0: none. Default 10000.
   */
  freezeEveryMs?: number;
  /**
   * Mean time between row locks: a session of its own (not picket's) takes `SELECT ... FOR UPDATE`
   * on a random `processing` row and holds it for `rowLockLeases` leases, then commits. Its owner's
   * renewals and outcome writes find the row busy meanwhile, and every sweep skips it. One lock at
   * a time; none that would outlast the chaos window. 0: none. Default 8000.
   */
  rowLockEveryMs?: number;
  /** How long each row lock is held, in leases, drawn uniformly from [min, max]; default [2, 4]. */
  rowLockLeases?: [number, number];
  /**
   * PostgreSQL pauses: SIGSTOP of the whole embedded server (the postmaster and every process it
   * forked: backends, checkpointer, WAL writer, ...) for `pgPauseLeases` leases, then SIGCONT.
   * Connections stay open and every statement simply stops being answered. Spread over the
   * window (at 20 %, 75 %, 40 %, 90 % ... of it). Impossible with databaseUrl. Default 2.
   */
  pgPauses?: number;
  /** How long each pause lasts, in leases, drawn uniformly from [min, max]; default [1.5, 3]. */
  pgPauseLeases?: [number, number];
  /** The workers' statementTimeoutMs (their client-side bound on every statement); default picket's. */
  statementTimeoutMs?: number;
  /**
   * How soon after its SIGCONT a frozen worker's run must stop when another worker took its job
   * meanwhile; default a fifth of the lease (the margin picket's own lease deadline keeps).
   */
  wakeStopMs?: number;
  /** Default min(500, lease / 2). */
  sweepIntervalMs?: number;
  /** Default 100 (delayed jobs are found by polling, not NOTIFY). */
  pollIntervalMs?: number;
  /** Jobs per worker; default 10. */
  concurrency?: number;
  /** The handler's sleep, drawn uniformly from [min, max] ms; default [50, 500]. */
  jobMs?: [number, number];
  /**
   * One job in this many (of those ready in the first `longJobsWithin` of the window) runs for
   * `longJobLeases` leases instead (its duration is in its payload), so some handlers are still
   * running when their lease cannot be renewed (a locked row, a paused server): only then does
   * the worker's own lease deadline have to interrupt them, and only then can two runs of a job
   * overlap. 0: none. Default 40.
   */
  longJobEvery?: number;
  /** A long job's duration in leases, drawn per job from [min, max]; default [2, 4]. */
  longJobLeases?: [number, number];
  /** The part of the window (0–1) whose jobs may be long; default 0.5. */
  longJobsWithin?: number;
  /** Default 100 and 5000 ms. */
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /** Attempts per job; default 25 (a job can be caught by several kills). */
  maxAttempts?: number;
  /** Restart PostgreSQL once, in the middle; default true. Impossible with databaseUrl. */
  restartPostgres?: boolean;
  /** Use this server (a fresh database is created on it and dropped after) instead of an embedded one. */
  databaseUrl?: string;
  /** How long the workers may take, after the chaos window, to finish every job; default 60 s. */
  settleTimeoutMs?: number;
  /** Settings for the embedded server. */
  pgSettings?: Record<string, string>;
  /** Progress lines; default none. */
  log?: (line: string) => void;
  /** Aborting ends the run early (everything is still cleaned up) and rejects. */
  signal?: AbortSignal;
}

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

export interface KillRecord {
  atMs: number;
  workerId: string;
  pid: number;
  held: string[];
  /**
   * Kill → last held job completed elsewhere, over the jobs of ordinary length it held; null when
   * it held none or one never completed. (A long job's own time is in longRecoveryMs.)
   */
  recoveryMs: number | null;
  /** Kill → last held long job (longJobEvery) completed elsewhere; null when it held none. */
  longRecoveryMs?: number | null;
}

export interface FreezeRecord {
  atMs: number;
  /** The SIGCONT; null when the worker was SIGKILLed while frozen (its killedAt ends the freeze). */
  resumedAtMs: number | null;
  workerId: string;
  held: number;
}

export interface RowLockRecord {
  /** When the lock was taken, and when it was released (commit, or its session lost). */
  atMs: number;
  releasedAtMs: number | null;
  holdMs: number;
  jobId: string;
  token: string;
  worker: string | null;
  /** The lock's session failed (a PostgreSQL restart ends it, and the lock with it). */
  error: string | null;
}

export interface PauseRecord {
  atMs: number;
  resumedAtMs: number | null;
  postmasterPid: number;
  /** Processes stopped: the postmaster and each of its children (backends, checkpointer, ...). */
  processes: number;
  forMs: number;
}

export interface Report {
  ok: boolean;
  checks: Check[];
  /** Findings that are not checks (they do not fail the run). */
  notes: string[];
  kills: KillRecord[];
  freezes: FreezeRecord[];
  rowLocks: RowLockRecord[];
  pauses: PauseRecord[];
  /** The readable summary (what the CLI prints). */
  text: string;
  stats: Record<string, number | string | null>;
}

interface LogLine {
  level: number;
  msg: string;
  claim_token?: string;
  [field: string]: unknown;
}

/** The chaos handler's "chaos run ended" line: one per run that ended before its process died. */
interface RunLine {
  job_id: string | number;
  claim_token: string;
  attempt: number;
  run_started_ms: number;
  run_ended_ms: number;
  run_end: "returned" | "aborted" | "failed";
}

interface WorkerProcess {
  slot: number;
  id: string;
  pid: number;
  child: ChildProcess;
  spawnedAt: number;
  startedAt: number | null;
  started: Promise<void>;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  exitedAt: number | null;
  exitInfo: { code: number | null; signal: NodeJS.Signals | null } | null;
  killedAt: number | null;
  stopping: boolean;
  lines: LogLine[];
  runs: RunLine[];
  /** Resolves when its stdout and stderr are closed: every line it wrote has been read. */
  closed: Promise<void>;
  stderr: string;
}

interface Restart {
  stopAt: number;
  downAt: number;
  upAt: number;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, ms)));

const median = (values: number[]): number | null => {
  if (values.length === 0) return null;
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

const secs = (ms: number | null) => (ms === null ? "n/a" : `${(ms / 1000).toFixed(2)} s`);

/** The one backoff's lower bound for a retry after `attempt`: min(max, base·2^(attempt−1)) / 2. */
export const minBackoffMs = (attempt: number, baseMs: number, maxMs: number): number =>
  Math.min(maxMs, baseMs * 2 ** (Math.min(Math.max(attempt, 1), 64) - 1)) / 2;

// The audit: one row per change of a job's status or claim token, written in the same
// transaction as the change, so the run's history does not depend on the bounded error history.
const SETUP_SQL = `
  CREATE TABLE executions (
    job_id bigint, worker text, pid int, attempt int, claim_token uuid,
    started_wall_ms float8, started_at timestamptz, finished_at timestamptz
  );
  CREATE TABLE chaos_transitions (
    job_id bigint, at timestamptz, stmt_at timestamptz,
    old_status text, new_status text, old_token uuid, new_token uuid,
    attempts int, locked_by text, old_locked_by text, locked_at timestamptz, run_at timestamptz, last_error text
  );
  CREATE FUNCTION chaos_audit() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO chaos_transitions VALUES (NEW.id, clock_timestamp(), now(), OLD.status, NEW.status,
      OLD.claim_token, NEW.claim_token, NEW.attempts, NEW.locked_by, OLD.locked_by, NEW.locked_at, NEW.run_at, NEW.last_error);
    RETURN NULL;
  END $$;
  CREATE TRIGGER chaos_audit AFTER UPDATE ON picket.jobs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.claim_token IS DISTINCT FROM NEW.claim_token)
    EXECUTE FUNCTION chaos_audit();
`;

const ms = (column: string, alias = column) => `extract(epoch FROM ${column})::float8 * 1000 AS ${alias}`;

interface JobRow {
  id: string;
  /** One of the long jobs (its payload names its duration). */
  long: boolean;
  status: string;
  attempts: number;
  claim_token: string | null;
  locked_by: string | null;
  finished_ms: number | null;
  backoff_base_ms: number;
  backoff_max_ms: number;
  errors: Array<{ at: string; attempt: number; message: string }>;
  result: { worker?: string; claim_token?: string } | null;
}

interface ExecutionRow {
  job_id: string;
  worker: string;
  pid: number;
  attempt: number;
  claim_token: string | null;
  started_ms: number;
  /** The handler's start on the worker's clock (the row's started_at is when the row was written). */
  started_wall_ms: number;
}

interface TransitionRow {
  job_id: string;
  at_ms: number;
  stmt_ms: number;
  old_status: string;
  new_status: string;
  old_token: string | null;
  new_token: string | null;
  attempts: number;
  locked_by: string | null;
  locked_ms: number | null;
  run_ms: number;
  last_error: string | null;
}

interface Claim {
  jobId: string;
  token: string;
  attempt: number;
  worker: string;
  claimedMs: number;
  end: TransitionRow | undefined;
  how: "completed" | "swept" | "failed" | "released" | "dead" | "open";
}

export const runChaos = async (options: ChaosOptions): Promise<Report> => {
  const o: Resolved = {
    workers: options.workers,
    jobs: options.jobs,
    durationMs: options.durationMs,
    leaseMs: options.leaseMs,
    killEveryMs: options.killEveryMs ?? 3_000,
    minKills: options.minKills ?? 0,
    minRowLocks: options.minRowLocks ?? 0,
    freezeEveryMs: options.freezeEveryMs ?? 10_000,
    rowLockEveryMs: options.rowLockEveryMs ?? 8_000,
    rowLockLeases: options.rowLockLeases ?? [2, 4],
    pgPauses: options.databaseUrl ? 0 : (options.pgPauses ?? 2),
    pgPauseLeases: options.pgPauseLeases ?? [1.5, 3],
    statementTimeoutMs: options.statementTimeoutMs ?? 0,
    wakeStopMs: options.wakeStopMs ?? options.leaseMs / 5,
    sweepIntervalMs: options.sweepIntervalMs ?? Math.min(500, Math.floor(options.leaseMs / 2)),
    pollIntervalMs: options.pollIntervalMs ?? 100,
    concurrency: options.concurrency ?? 10,
    jobMs: options.jobMs ?? [50, 500],
    longJobEvery: options.longJobEvery ?? 40,
    longJobLeases: options.longJobLeases ?? [2, 4],
    longJobsWithin: options.longJobsWithin ?? 0.5,
    backoffBaseMs: options.backoffBaseMs ?? 100,
    backoffMaxMs: options.backoffMaxMs ?? 5_000,
    maxAttempts: options.maxAttempts ?? 25,
    restartPostgres: (options.restartPostgres ?? true) && !options.databaseUrl,
    databaseUrl: options.databaseUrl,
    settleTimeoutMs: options.settleTimeoutMs ?? 60_000,
    pgSettings: options.pgSettings ?? {},
    log: options.log ?? (() => undefined),
    signal: options.signal,
    pgPausesSkipped: options.databaseUrl ? (options.pgPauses ?? 2) : 0,
  };
  const restartPostgres = o.restartPostgres;
  const runStart = Date.now();
  let t0: number | null = null;
  const say = (line: string) => o.log(`[${t0 === null ? " setup  " : `${((Date.now() - t0) / 1000).toFixed(1).padStart(6)} s`}] ${line}`);
  const aborted = () => {
    if (o.signal?.aborted) throw new Error("chaos run aborted");
  };

  let server: EmbeddedPostgres | undefined;
  let tempDir: string | undefined;
  let dataDir: string | undefined;
  let adminUrl: string | undefined;
  let dbName: string | undefined;
  let url: string;
  let pool: pg.Pool | undefined;
  const processes: WorkerProcess[] = [];
  const slots: WorkerProcess[] = [];
  const generation: number[] = [];
  let phase: "chaos" | "settling" | "stopping" = "chaos";
  let postgresDown = false;
  /** The server's processes while they are SIGSTOPped, so cleanup can SIGCONT them whatever happens. */
  let pausedServer: number[] | null = null;
  const rowLocks: RowLockRecord[] = [];
  let rowLocker: Promise<void> = Promise.resolve();
  let rowLockClient: pg.Client | null = null;

  try {
    // --- the database -----------------------------------------------------------------------
    if (o.databaseUrl) {
      adminUrl = o.databaseUrl;
      dbName = `picket_chaos_${randomBytes(5).toString("hex")}`;
      const admin = new pg.Client({ connectionString: adminUrl });
      await admin.connect();
      await admin.query(`CREATE DATABASE ${dbName}`);
      await admin.end();
      const parsed = new URL(adminUrl);
      parsed.pathname = `/${dbName}`;
      url = parsed.toString();
      say(`using DATABASE_URL's server (database ${dbName}); PostgreSQL restart and pauses skipped: this run cannot stop a server it does not own`);
    } else {
      tempDir = await mkdtemp(path.join(tmpdir(), "picket-chaos-"));
      // Reachable by the postgres user when this runs as root, so the data stays in tempDir.
      await chmod(tempDir, 0o755);
      dataDir = path.join(tempDir, "pgdata");
      server = await startEmbeddedPostgres({ dataDir, settings: o.pgSettings });
      url = server.url;
      say(`embedded PostgreSQL on port ${server.port}, data in ${server.dataDir}`);
    }
    pool = new pg.Pool({ connectionString: url, max: 4, connectionTimeoutMillis: 5_000 });
    pool.on("error", () => undefined);
    await migrate(pool);
    await pool.query(SETUP_SQL);

    // --- worker processes -------------------------------------------------------------------
    const spawnWorker = (slot: number): WorkerProcess => {
      generation[slot] = (generation[slot] ?? 0) + 1;
      const id = `w${slot + 1}.${generation[slot]}`;
      const child = spawn(process.execPath, [CLI, "worker", "--tasks", TASKS], {
        env: {
          ...process.env,
          DATABASE_URL: url,
          PICKET_LOG_LEVEL: "info",
          CHAOS_WORKER_ID: id,
          CHAOS_LEASE_MS: String(o.leaseMs),
          CHAOS_SWEEP_MS: String(o.sweepIntervalMs),
          CHAOS_POLL_MS: String(o.pollIntervalMs),
          CHAOS_CONCURRENCY: String(o.concurrency),
          CHAOS_JOB_MIN_MS: String(o.jobMs[0]),
          CHAOS_JOB_MAX_MS: String(o.jobMs[1]),
          CHAOS_BACKOFF_BASE_MS: String(o.backoffBaseMs),
          CHAOS_BACKOFF_MAX_MS: String(o.backoffMaxMs),
          CHAOS_STATEMENT_TIMEOUT_MS: String(o.statementTimeoutMs),
        },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let markStarted: () => void = () => undefined;
      const proc: WorkerProcess = {
        slot,
        id,
        pid: child.pid ?? -1,
        child,
        spawnedAt: Date.now(),
        startedAt: null,
        started: new Promise<void>((resolve) => (markStarted = resolve)),
        exit: new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal }))),
        exitedAt: null,
        exitInfo: null,
        killedAt: null,
        stopping: false,
        lines: [],
        runs: [],
        closed: new Promise((resolve) => child.once("close", () => resolve())),
        stderr: "",
      };
      let buffer = "";
      child.stdout!.on("data", (chunk: Buffer) => {
        buffer += chunk.toString("utf8");
        const parts = buffer.split("\n");
        buffer = parts.pop() ?? "";
        for (const text of parts) {
          if (!text.trim()) continue;
          let line: LogLine;
          try {
            line = JSON.parse(text) as LogLine;
          } catch {
            line = { level: 50, msg: `(not JSON) ${text}` };
          }
          if (line.msg === "worker started" && proc.startedAt === null) {
            proc.startedAt = Date.now();
            markStarted();
          }
          if (line.msg === "chaos run ended") proc.runs.push(line as unknown as RunLine);
          else if (line.level >= 40 || /sweep|worker st/.test(line.msg)) proc.lines.push(line);
        }
      });
      child.stderr!.on("data", (chunk: Buffer) => (proc.stderr = (proc.stderr + chunk.toString("utf8")).slice(-8_000)));
      void proc.exit.then((info) => {
        proc.exitedAt = Date.now();
        proc.exitInfo = info;
        markStarted();
        if (proc.killedAt === null && !proc.stopping) {
          say(`worker ${id} (pid ${proc.pid}) exited on its own (${info.signal ?? `code ${info.code}`}): ${proc.stderr.trim().split("\n").slice(-3).join(" | ")}`);
        }
      });
      processes.push(proc);
      slots[slot] = proc;
      return proc;
    };
    const alive = () => slots.filter((p) => p.exitInfo === null);
    // A worker that exited on its own (a check failure) is replaced, unless PostgreSQL is down.
    const respawnCrashed = () => {
      if (postgresDown || phase === "stopping") return;
      for (const p of slots) if (p.exitInfo !== null && p.killedAt === null && !p.stopping) spawnWorker(p.slot);
    };
    const allStarted = async (timeoutMs: number) =>
      Promise.race([Promise.all(alive().map((p) => p.started)), sleep(timeoutMs)]);

    for (let slot = 0; slot < o.workers; slot++) spawnWorker(slot);
    await allStarted(60_000);
    say(`${alive().filter((p) => p.startedAt !== null).length} of ${o.workers} workers started`);
    aborted();

    // --- the jobs: one statement, run_at spread over the chaos window (database clock) --------
    await enqueueJobs(
      pool,
      Array.from({ length: o.jobs }, (_, i) => ({
        type: "chaos",
        // Long jobs only early in the window, so they do not hold the settle up.
        payload:
          o.longJobEvery > 0 && i % o.longJobEvery === Math.floor(o.longJobEvery / 2) && i < o.longJobsWithin * o.jobs
            ? { i, ms: Math.round(o.leaseMs * (o.longJobLeases[0] + Math.random() * (o.longJobLeases[1] - o.longJobLeases[0]))) }
            : { i },
        delayMs: Math.floor((i / o.jobs) * o.durationMs),
        maxAttempts: o.maxAttempts,
      })),
    );
    t0 = Date.now();
    say(`enqueued ${o.jobs} jobs, ready over the next ${o.durationMs / 1000} s`);

    // --- chaos: kills, freezes, row locks, PostgreSQL pauses and one restart -----------------
    const kills: KillRecord[] = [];
    const freezes: FreezeRecord[] = [];
    const frozen = new Map<WorkerProcess, { timer: NodeJS.Timeout; record: FreezeRecord }>();
    const thaw = (p: WorkerProcess) => {
      const f = frozen.get(p);
      if (!f) return;
      clearTimeout(f.timer);
      frozen.delete(p);
      if (p.exitInfo === null) p.child.kill("SIGCONT");
      f.record.resumedAtMs = Date.now();
    };
    let restart: Restart | null = null;
    const end = t0 + o.durationMs;
    const restartAt = restartPostgres ? t0 + o.durationMs / 2 : Infinity;
    const pauses: PauseRecord[] = [];
    const pauseAt = PAUSE_AT.slice(0, o.pgPauses)
      .concat(Array.from({ length: Math.max(0, o.pgPauses - PAUSE_AT.length) }, () => Math.random()))
      .sort((a, b) => a - b)
      .map((f) => t0! + f * o.durationMs);

    // The row locks run beside the loop below, one at a time, from a session of their own.
    const lockOneRow = async (hold: number): Promise<RowLockRecord | null> => {
      let holdMs = hold;
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
      client.on("error", () => undefined);
      rowLockClient = client;
      let record: RowLockRecord | null = null;
      try {
        await client.connect();
        await client.query("BEGIN");
        const { rows } = await client.query<{ id: string; claim_token: string; locked_by: string | null }>(
          "SELECT id, claim_token, locked_by FROM picket.jobs WHERE status = 'processing' ORDER BY random() LIMIT 1 FOR UPDATE SKIP LOCKED",
        );
        if (rows.length === 0) {
          await client.query("COMMIT");
          return null;
        }
        const row = rows[0]!;
        // Taken late (the server was paused meanwhile): still within the window, if it can be.
        holdMs = Math.min(holdMs, Math.max(end - Date.now(), o.leaseMs * o.rowLockLeases[0]));
        record = { atMs: Date.now(), releasedAtMs: null, holdMs, jobId: row.id, token: row.claim_token, worker: row.locked_by, error: null };
        rowLocks.push(record);
        say(`row lock on job ${row.id} (claim ${row.claim_token.slice(0, 8)} by ${row.locked_by}) for ${(holdMs / 1000).toFixed(1)} s`);
        await sleep(holdMs);
        await client.query("COMMIT");
        record.releasedAtMs = Date.now();
        return record;
      } catch (error) {
        // The session is gone (a restart, or the run ends): its lock went with it.
        if (record) {
          record.error = (error as Error).message;
          record.releasedAtMs = Date.now();
        }
        return record;
      } finally {
        rowLockClient = null;
        await client.end().catch(() => undefined);
      }
    };
    const lockRows = async () => {
      if (o.rowLockEveryMs <= 0) return;
      let gap = o.rowLockEveryMs * (0.5 + Math.random());
      for (;;) {
        for (const until = Date.now() + gap; Date.now() < until && phase === "chaos"; ) await sleep(Math.min(250, until - Date.now()));
        if (phase !== "chaos" || o.signal?.aborted) return;
        let holdMs = Math.round(o.leaseMs * (o.rowLockLeases[0] + Math.random() * (o.rowLockLeases[1] - o.rowLockLeases[0])));
        // Not across the restart, which would end the lock's session early: wait until it is over.
        if (restart === null && restartAt !== Infinity && Date.now() + holdMs > restartAt - 250) {
          gap = 250;
          continue;
        }
        // Within the chaos window: shortened to the time left, if that is still the shortest hold.
        // Until enough rows were locked, the window is stretched for them (see rowLocksDone).
        const room = (rowLocks.length < o.minRowLocks ? end + o.durationMs : end) - Date.now();
        if (room < o.leaseMs * o.rowLockLeases[0]) return;
        holdMs = Math.min(holdMs, Math.floor(room));
        // No row processing right now: look again shortly.
        gap = (await lockOneRow(holdMs)) ? o.rowLockEveryMs * (0.5 + Math.random()) : 200;
      }
    };
    rowLocker = lockRows();
    // Enough rows locked, each released (a lock is held for whole leases), or the stretch is over.
    const rowLocksDone = (now: number) =>
      now >= end + o.durationMs || (rowLocks.length >= o.minRowLocks && rowLocks.every((lock) => lock.releasedAtMs !== null));
    const nextGap = () => o.killEveryMs * (0.5 + Math.random());
    const nextFreezeGap = () => (o.freezeEveryMs > 0 ? o.freezeEveryMs * (0.5 + Math.random()) : Infinity);
    let nextKill = t0 + nextGap();
    let nextFreeze = t0 + nextFreezeGap();
    let nextStatus = t0 + 10_000;
    for (;;) {
      aborted();
      respawnCrashed();
      const now = Date.now();
      if (now >= end && kills.length >= o.minKills && rowLocksDone(now)) break;
      if (restart === null && now >= restartAt) {
        // No worker may be starting (a start with the database down fails, by design).
        await allStarted(30_000);
        const stopAt = Date.now();
        say("stopping PostgreSQL");
        postgresDown = true;
        await server!.stop();
        const downAt = Date.now();
        await sleep(1_000);
        server = await startEmbeddedPostgres({ dataDir: dataDir!, port: server!.port, settings: o.pgSettings });
        postgresDown = false;
        restart = { stopAt, downAt, upAt: Date.now() };
        say(`PostgreSQL back after ${((restart.upAt - stopAt) / 1000).toFixed(1)} s (stopped in ${((downAt - stopAt) / 1000).toFixed(1)} s)`);
        nextKill = Math.max(nextKill, Date.now() + nextGap());
        nextFreeze = Math.max(nextFreeze, Date.now() + nextFreezeGap());
        continue;
      }
      if (pauses.length < pauseAt.length && now >= pauseAt[pauses.length]!) {
        // The loop waits out the pause: no kill or freeze starts during it. A worker still starting
        // waits with everyone else (its connection attempt is answered when the server resumes,
        // well within picket's 10 s connection timeout), unlike across the restart, when a start
        // is refused.
        const postmasterPid = await readPostmasterPid(server!.dataDir);
        const forMs = Math.round(o.leaseMs * (o.pgPauseLeases[0] + Math.random() * (o.pgPauseLeases[1] - o.pgPauseLeases[0])));
        pausedServer = await stopServer(postmasterPid);
        // The pause counts from when the last of its processes stopped.
        const record: PauseRecord = { atMs: Date.now(), resumedAtMs: null, postmasterPid, processes: pausedServer.length, forMs };
        pauses.push(record);
        say(`SIGSTOP PostgreSQL (postmaster ${postmasterPid} and ${pausedServer.length - 1} children) for ${(forMs / 1000).toFixed(1)} s`);
        await sleep(forMs);
        continueServer(pausedServer);
        pausedServer = null;
        record.resumedAtMs = Date.now();
        say(`SIGCONT PostgreSQL after ${((record.resumedAtMs - record.atMs) / 1000).toFixed(1)} s`);
        nextKill = Math.max(nextKill, Date.now() + nextGap());
        nextFreeze = Math.max(nextFreeze, Date.now() + nextFreezeGap());
        continue;
      }
      if (now >= nextFreeze && now < end) {
        const candidates = alive().filter((p) => !frozen.has(p) && p.startedAt !== null);
        const victim = candidates[Math.floor(Math.random() * candidates.length)];
        if (victim) {
          const { rows } = await pool.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM picket.jobs WHERE status = 'processing' AND locked_by = $1",
            [victim.id],
          );
          const forMs = Math.round(o.leaseMs * (1 + Math.random()));
          const record: FreezeRecord = { atMs: Date.now(), resumedAtMs: null, workerId: victim.id, held: rows[0]!.n };
          victim.child.kill("SIGSTOP");
          frozen.set(victim, { timer: setTimeout(() => thaw(victim), forMs), record });
          freezes.push(record);
          say(`SIGSTOP ${victim.id} (pid ${victim.pid}) holding ${record.held} job(s), for ${(forMs / 1000).toFixed(1)} s`);
        }
        nextFreeze = Date.now() + nextFreezeGap();
        continue;
      }
      if (now >= nextKill) {
        const candidates = alive();
        const victim = candidates[Math.floor(Math.random() * candidates.length)];
        if (victim) {
          if (frozen.has(victim)) {
            clearTimeout(frozen.get(victim)!.timer);
            frozen.delete(victim);
          }
          victim.killedAt = Date.now();
          victim.child.kill("SIGKILL");
          await victim.exit;
          // Nothing can change these rows now: their owner is dead and their leases still run.
          const { rows } = await pool.query<{ id: string }>(
            "SELECT id FROM picket.jobs WHERE status = 'processing' AND locked_by = $1 ORDER BY id",
            [victim.id],
          );
          kills.push({ atMs: victim.killedAt, workerId: victim.id, pid: victim.pid, held: rows.map((r) => r.id), recoveryMs: null });
          const next = spawnWorker(victim.slot);
          say(`SIGKILL ${victim.id} (pid ${victim.pid}) holding ${rows.length} job(s); started ${next.id}`);
        }
        nextKill = Date.now() + nextGap();
        continue;
      }
      if (now >= nextStatus) {
        nextStatus += 10_000;
        const { rows } = await pool
          .query<{ status: string; n: number }>("SELECT status, count(*)::int AS n FROM picket.jobs GROUP BY status ORDER BY status")
          .catch(() => ({ rows: [] as { status: string; n: number }[] }));
        say(`jobs: ${rows.map((r) => `${r.n} ${r.status}`).join(", ")}`);
      }
      await sleep(
        Math.min(nextKill, now < end ? nextFreeze : Infinity, restart === null ? restartAt : Infinity, pauseAt[pauses.length] ?? Infinity, now < end ? end : Infinity, nextStatus, now + 250) -
          Date.now(),
      );
    }
    for (const p of [...frozen.keys()]) thaw(p);
    const chaosEnd = Date.now();
    phase = "settling";
    await rowLocker;

    // --- settle: let the workers finish every job ------------------------------------------
    say(`chaos over (${kills.length} kills); waiting for every job to finish (at most ${o.settleTimeoutMs / 1000} s)`);
    const settleDeadline = Date.now() + o.settleTimeoutMs;
    let settled = false;
    while (Date.now() < settleDeadline) {
      aborted();
      respawnCrashed();
      const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM picket.jobs WHERE status IN ('pending', 'processing')");
      if (rows[0]!.n === 0) {
        settled = true;
        break;
      }
      await sleep(250);
    }
    const settledAt = Date.now();
    say(settled ? `settled ${((settledAt - chaosEnd) / 1000).toFixed(1)} s after the chaos window` : "settle timeout: jobs are still pending or processing");

    // --- stop the workers: SIGTERM, drain, exit ----------------------------------------------
    phase = "stopping";
    // A worker still starting has no signal handlers yet; SIGTERM is for a running worker.
    await allStarted(60_000);
    const finals = alive();
    for (const p of finals) {
      p.stopping = true;
      p.child.kill("SIGTERM");
    }
    const stuck: string[] = [];
    await Promise.all(
      finals.map(async (p) => {
        const done = await Promise.race([p.exit.then(() => true), sleep(30_000).then(() => false)]);
        if (!done) {
          stuck.push(p.id);
          p.child.kill("SIGKILL");
          await p.exit;
        }
      }),
    );
    // Every line they wrote is read before the logs are looked at.
    await Promise.all(processes.map((p) => Promise.race([p.closed, sleep(5_000)])));
    say(`workers stopped`);

    // --- collect --------------------------------------------------------------------------
    const jobs = (
      await pool.query<JobRow>(
        `SELECT id, (payload ? 'ms') AS long, status, attempts, claim_token, locked_by, ${ms("finished_at", "finished_ms")}, backoff_base_ms, backoff_max_ms, errors, result
         FROM picket.jobs ORDER BY id`,
      )
    ).rows;
    const executions = (
      await pool.query<ExecutionRow>(
        `SELECT job_id, worker, pid, attempt, claim_token, ${ms("started_at", "started_ms")}, started_wall_ms
         FROM executions ORDER BY job_id, started_at`,
      )
    ).rows;
    const transitions = (
      await pool.query<TransitionRow>(
        `SELECT job_id, ${ms("at", "at_ms")}, ${ms("stmt_at", "stmt_ms")}, old_status, new_status, old_token, new_token, attempts, locked_by,
                ${ms("locked_at", "locked_ms")}, ${ms("run_at", "run_ms")}, last_error
         FROM chaos_transitions ORDER BY job_id, at`,
      )
    ).rows;

    const report = analyse({
      o,
      jobs,
      executions,
      transitions,
      processes,
      finals,
      stuck,
      kills,
      freezes,
      rowLocks,
      pauses,
      restart,
      t0,
      chaosEnd,
      settled,
      settledAt,
      runStart,
      databaseLabel: o.databaseUrl ? "DATABASE_URL (fresh database; restart and pauses skipped)" : "embedded",
    });
    return report;
  } finally {
    if (pausedServer !== null) continueServer(pausedServer);
    phase = "stopping";
    // (Set and cleared by the row locker; TypeScript cannot see that from here.)
    await (rowLockClient as pg.Client | null)?.end().catch(() => undefined);
    await rowLocker.catch(() => undefined);
    for (const p of processes) if (p.exitInfo === null) p.child.kill("SIGKILL");
    await Promise.all(processes.map((p) => p.exit));
    await pool?.end().catch(() => undefined);
    if (server) await server.stop().catch(() => undefined);
    if (tempDir) await rm(tempDir, { recursive: true, force: true });
    if (server && dataDir && server.dataDir !== dataDir) await rm(server.dataDir, { recursive: true, force: true });
    if (adminUrl && dbName) {
      const admin = new pg.Client({ connectionString: adminUrl });
      await admin.connect().then(
        () => admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).finally(() => admin.end()),
        () => undefined,
      );
    }
  }
};

type Resolved = Required<Omit<ChaosOptions, "databaseUrl" | "signal">> &
  Pick<ChaosOptions, "databaseUrl" | "signal"> & {
    /** Pauses asked for but skipped (databaseUrl: the server is not this run's to pause). */
    pgPausesSkipped?: number;
  };

/** How soon after a SIGKILL a statement the killed worker sent before it may still begin on the server. */
const IN_FLIGHT_MS = 1_000;

/** Where in the chaos window the PostgreSQL pauses fall, in order (away from the restart at 50 %). */
const PAUSE_AT = [0.2, 0.75, 0.4, 0.9, 0.1, 0.6, 0.3, 0.85];

/**
 * Pauses a PostgreSQL server: SIGSTOP to the postmaster, then to each of its children. Signalling
 * the postmaster's process group is not enough: every child PostgreSQL forks (each backend, the
 * checkpointer, the WAL writer, ...) calls setsid() as it starts and leads a process group of its
 * own, so `kill(-postmaster, SIGSTOP)` would stop the postmaster alone, which only holds up new
 * connections. The postmaster is stopped first, so no child is forked after the list is read.
 * Linux: the children are found in /proc. Returns every pid stopped, the postmaster's first.
 */
const stopServer = async (postmasterPid: number): Promise<number[]> => {
  process.kill(postmasterPid, "SIGSTOP");
  const stopped = [postmasterPid];
  const pids = (await readdir("/proc")).filter((entry) => /^\d+$/.test(entry));
  const stats = await Promise.all(pids.map((pid) => readFile(`/proc/${pid}/stat`, "utf8").catch(() => "")));
  pids.forEach((pid, i) => {
    const stat = stats[i]!;
    // pid (comm) state ppid ...: comm may hold spaces or parentheses, so read after the last ")".
    if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) !== postmasterPid) return;
    try {
      process.kill(Number(pid), "SIGSTOP");
      stopped.push(Number(pid));
    } catch {
      // it exited meanwhile
    }
  });
  return stopped;
};

/** SIGCONT to every process stopServer stopped. */
const continueServer = (pids: number[]): void => {
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGCONT");
    } catch {
      // gone
    }
  }
};

/** The postmaster's pid: the first line of postmaster.pid in its data folder. */
const readPostmasterPid = async (dataDir: string): Promise<number> => {
  const text = await readFile(path.join(dataDir, "postmaster.pid"), "utf8");
  const pid = Number(text.split("\n")[0]);
  if (!Number.isInteger(pid) || pid <= 1) throw new Error(`chaos: no postmaster pid in ${dataDir}/postmaster.pid`);
  return pid;
};

interface AnalysisInput {
  o: Resolved;
  jobs: JobRow[];
  executions: ExecutionRow[];
  transitions: TransitionRow[];
  processes: WorkerProcess[];
  finals: WorkerProcess[];
  stuck: string[];
  kills: KillRecord[];
  freezes: FreezeRecord[];
  rowLocks: RowLockRecord[];
  pauses: PauseRecord[];
  restart: Restart | null;
  t0: number;
  chaosEnd: number;
  settled: boolean;
  settledAt: number;
  runStart: number;
  databaseLabel: string;
}

const group = <T>(rows: T[], key: (row: T) => string): Map<string, T[]> => {
  const map = new Map<string, T[]>();
  for (const row of rows) {
    const k = key(row);
    const list = map.get(k);
    if (list) list.push(row);
    else map.set(k, [row]);
  }
  return map;
};

const sample = (items: string[], n = 5) => (items.length === 0 ? "" : ` e.g. ${items.slice(0, n).join("; ")}${items.length > n ? ` (+${items.length - n} more)` : ""}`);

const analyse = (input: AnalysisInput): Report => {
  const { o, jobs, executions, transitions, processes, kills, freezes, restart, t0 } = input;
  const checks: Check[] = [];
  const check = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });
  const jobById = new Map(jobs.map((j) => [j.id, j]));
  const execByJob = group(executions, (e) => e.job_id);
  const transByJob = group(transitions, (t) => t.job_id);
  const procById = new Map(processes.map((p) => [p.id, p]));

  // Claims, from the audit: each pending → processing change, and the change that ended it.
  const claims = new Map<string, Claim>();
  for (const t of transitions) {
    if (t.new_status === "processing" && t.new_token && t.new_token !== t.old_token) {
      claims.set(t.new_token, { jobId: t.job_id, token: t.new_token, attempt: t.attempts, worker: t.locked_by ?? "?", claimedMs: t.locked_ms ?? t.stmt_ms, end: undefined, how: "open" });
    }
  }
  for (const t of transitions) {
    if (t.old_status !== "processing" || !t.old_token) continue;
    const claim = claims.get(t.old_token);
    if (!claim || claim.end) continue;
    claim.end = t;
    claim.how =
      t.new_status === "completed"
        ? "completed"
        : t.new_status === "dead"
          ? "dead"
          : t.last_error?.startsWith(`lease expired: claim ${t.old_token}`)
            ? "swept"
            : t.attempts < claim.attempt
              ? "released"
              : "failed";
  }
  const claimList = [...claims.values()];
  const claimsByHow = group(claimList, (c) => c.how);
  const howCount = (how: Claim["how"]) => claimsByHow.get(how)?.length ?? 0;

  // 1. Nothing lost, everything completed.
  const byStatus = group(jobs, (j) => j.status);
  const statusCount = (s: string) => byStatus.get(s)?.length ?? 0;
  check(
    "every job completed, nothing lost",
    jobs.length === o.jobs && statusCount("completed") === o.jobs,
    `${statusCount("completed")}/${o.jobs} completed; rows ${jobs.length}; ` +
      ["pending", "processing", "dead", "cancelled"].map((s) => `${s} ${statusCount(s)}`).join(", "),
  );
  check(
    "nothing left processing or pending",
    statusCount("processing") === 0 && statusCount("pending") === 0,
    `processing ${statusCount("processing")}, pending ${statusCount("pending")}` +
      sample((byStatus.get("processing") ?? []).map((j) => `job ${j.id} locked by ${j.locked_by}`)),
  );

  // 2. Exactly one recorded outcome per job, written under the job's last claim.
  const onceProblems: string[] = [];
  for (const job of jobs) {
    const ts = transByJob.get(job.id) ?? [];
    const completions = ts.filter((t) => t.new_status === "completed" && t.old_status !== "completed");
    const leftCompleted = ts.filter((t) => t.old_status === "completed");
    if (completions.length !== 1) onceProblems.push(`job ${job.id}: ${completions.length} completions`);
    else if (completions[0]!.old_token !== job.claim_token) onceProblems.push(`job ${job.id}: completed under ${completions[0]!.old_token}, row shows ${job.claim_token}`);
    else if (job.result?.claim_token !== job.claim_token || job.result?.worker !== job.locked_by) {
      onceProblems.push(`job ${job.id}: outcome produced by ${job.result?.worker} under ${job.result?.claim_token}, but the claim was ${job.locked_by}'s ${job.claim_token}`);
    }
    if (leftCompleted.length > 0) onceProblems.push(`job ${job.id}: left completed ${leftCompleted.length} time(s)`);
  }
  check(
    "every job completed exactly once (audit of status changes)",
    onceProblems.length === 0 && jobs.length > 0,
    `${jobs.length - onceProblems.length} jobs with exactly one change to completed, written under their last claim's token ` +
      `with the result that claim's execution returned` + sample(onceProblems),
  );

  // 3. Executed at least once; the completing claim's execution is recorded.
  const notExecuted = jobs.filter((j) => !execByJob.has(j.id)).map((j) => `job ${j.id}`);
  const winnerMissing = jobs
    .filter((j) => j.status === "completed" && !(execByJob.get(j.id) ?? []).some((e) => e.claim_token === j.claim_token))
    .map((j) => `job ${j.id} (claim ${j.claim_token})`);
  const untokened = executions.filter((e) => !e.claim_token || !claims.has(e.claim_token)).map((e) => `job ${e.job_id} token ${e.claim_token}`);
  check(
    "every job executed at least once",
    notExecuted.length === 0 && winnerMissing.length === 0 && untokened.length === 0,
    `${jobs.length - notExecuted.length}/${jobs.length} jobs have an execution; the completing claim's execution is recorded for ` +
      `${jobs.length - winnerMissing.length}; executions not tied to an audited claim: ${untokened.length}` +
      sample([...notExecuted, ...winnerMissing, ...untokened]),
  );

  // The handler's runs, on the workers' wall clock (see 6): from each "chaos run ended" line, and
  // for a run whose process died first, from its executions row and the kill.
  interface Run {
    jobId: string;
    token: string;
    worker: string;
    startMs: number;
    endMs: number;
    end: RunLine["run_end"] | "SIGKILL" | "process exit (no line)";
  }
  const runs: Run[] = [];
  const runKeys = new Set<string>();
  let runsNotInTable = 0;
  for (const p of processes) {
    for (const r of p.runs) {
      const jobId = String(r.job_id);
      runs.push({ jobId, token: r.claim_token, worker: p.id, startMs: r.run_started_ms, endMs: r.run_ended_ms, end: r.run_end });
      runKeys.add(`${p.id}/${r.claim_token}`);
    }
  }
  let runsEndedByKill = 0;
  let runsWithoutEnd = 0;
  for (const e of executions) {
    if (!e.claim_token || runKeys.has(`${e.worker}/${e.claim_token}`)) continue;
    const proc = procById.get(e.worker);
    const endMs = proc?.killedAt ?? proc?.exitedAt ?? Infinity;
    if (proc?.killedAt != null) runsEndedByKill++;
    else runsWithoutEnd++;
    runs.push({ jobId: e.job_id, token: e.claim_token, worker: e.worker, startMs: e.started_wall_ms, endMs, end: proc?.killedAt != null ? "SIGKILL" : "process exit (no line)" });
  }
  const inTable = new Set(executions.map((e) => `${e.worker}/${e.claim_token}`));
  for (const r of runs) if (!inTable.has(`${r.worker}/${r.token}`)) runsNotInTable++;

  // 4. Every extra execution is explained: its claim was lost (swept: "lease expired: claim <its
  //    token>"), or its lease expired on its worker's own clock: the worker logged "lease not
  //    confirmed in time" naming the job, interrupted the handler and wrote the failed attempt
  //    itself ("lease_expired: ...", the attempt charged). The job's error history says so where it
  //    still holds the entry (it keeps the last 10). Any other failure is unexplained: the chaos
  //    handler never fails on its own.
  const extra = executions.filter((e) => e.claim_token !== jobById.get(e.job_id)?.claim_token);
  const multi = [...execByJob.entries()].filter(([, es]) => es.length > 1);
  const unexplained: string[] = [];
  let extraSwept = 0;
  let extraFailed = 0;
  let historyConfirms = 0;
  let historyTooShort = 0;
  const leaseExpiryLogged = (claim: Claim): boolean =>
    (procById.get(claim.worker)?.lines ?? []).some((line) => {
      if (!line.msg.startsWith("lease not confirmed in time")) return false;
      const listed = Array.isArray(line.jobs) ? (line.jobs as unknown[]).map(String) : [];
      // The line lists at most 20 job ids; beyond that it only counts them.
      return listed.includes(claim.jobId) || Number(line.count ?? 0) > listed.length;
    });
  for (const e of extra) {
    const claim = e.claim_token ? claims.get(e.claim_token) : undefined;
    const job = jobById.get(e.job_id);
    if (!claim || (claim.how !== "swept" && claim.how !== "failed")) {
      unexplained.push(`job ${e.job_id} claim ${e.claim_token} ended ${claim?.how ?? "unknown"}`);
      continue;
    }
    if (claim.how === "failed") {
      if (!claim.end?.last_error?.startsWith("lease_expired: ")) {
        unexplained.push(`job ${e.job_id} claim ${claim.token}: attempt ${claim.attempt} failed with "${claim.end?.last_error?.slice(0, 80)}"`);
        continue;
      }
      if (!leaseExpiryLogged(claim)) {
        unexplained.push(`job ${e.job_id} claim ${claim.token}: lease_expired, but ${claim.worker} never logged "lease not confirmed in time" for it`);
        continue;
      }
    }
    if (claim.how === "swept") extraSwept++;
    else extraFailed++;
    const inHistory = (job?.errors ?? []).some(
      (entry) => entry.attempt === claim.attempt && (claim.how === "swept" ? entry.message.includes(claim.token) : entry.message.startsWith("lease_expired: ")),
    );
    if (inHistory) historyConfirms++;
    else if ((job?.errors.length ?? 0) >= 10) historyTooShort++;
    else unexplained.push(`job ${e.job_id} claim ${claim.token}: no error history entry for attempt ${claim.attempt}`);
  }
  // What made each lease expire on its worker's clock (every claim that failed so, run or not):
  // the faults under way in the lease before the worker gave up on it.
  const expiryCauses = new Map<string, number>();
  const failedOther: string[] = [];
  for (const claim of claimsByHow.get("failed") ?? []) {
    if (!claim.end?.last_error?.startsWith("lease_expired: ")) {
      failedOther.push(`job ${claim.jobId} claim ${claim.token}: "${claim.end?.last_error?.slice(0, 80)}"`);
      continue;
    }
    // The lease went unconfirmed in the lease before the worker gave up on it: when its handler
    // saw the abort, or (never run) when the failure was written. A fault over that stretch is
    // the cause; a claim answered only after a pause counts from when it was sent, so the pause
    // shows there too.
    const run = runs.find((r) => r.token === claim.token && r.end === "aborted");
    const to = run ? run.endMs : claim.end.stmt_ms;
    const from = to - o.leaseMs;
    const during = (at: number, until: number | null) => at <= to && (until ?? Infinity) >= from;
    const faults = [
      input.rowLocks.some((l) => l.token === claim.token && during(l.atMs, l.releasedAtMs)) ? "row locked" : null,
      input.pauses.some((p) => during(p.atMs, p.resumedAtMs)) ? "PostgreSQL paused" : null,
      restart && during(restart.stopAt, restart.upAt) ? "PostgreSQL restart" : null,
      freezes.some((f) => f.workerId === claim.worker && during(f.atMs, f.resumedAtMs ?? procById.get(f.workerId)?.killedAt ?? null)) ? "worker frozen" : null,
    ].filter((x) => x !== null);
    const stalled = (procById.get(claim.worker)?.lines ?? []).some(
      (l) => l.msg.startsWith("the event loop was blocked") && Number(l.time) >= from && Number(l.time) <= to + 1_000,
    );
    const cause = faults.length ? faults.join(" + ") : stalled ? "event loop blocked" : "no fault found";
    expiryCauses.set(cause, (expiryCauses.get(cause) ?? 0) + 1);
  }
  const leaseExpiries = [...expiryCauses.values()].reduce((a, b) => a + b, 0);
  check(
    "every extra execution is explained by a lost claim or a lease expired on its worker's clock",
    unexplained.length === 0 && failedOther.length === 0,
    `${multi.length} jobs ran more than once, ${extra.length} extra executions: ${extraSwept} claims lost to the sweep ` +
      `("lease expired: claim <token>"), ${extraFailed} attempts failed by their own worker when their lease went unconfirmed ` +
      `("lease_expired: ...", charged, the worker's "lease not confirmed in time" names the job); the job's error history confirms ${historyConfirms}` +
      (historyTooShort ? `, ${historyTooShort} beyond its 10 entries (audit only)` : "") +
      `. Claims failed by a lease expiry: ${leaseExpiries}` +
      (leaseExpiries ? ` (${[...expiryCauses.entries()].map(([cause, n]) => `${cause} ${n}`).join(", ")})` : "") +
      `; failed otherwise: ${failedOther.length}` +
      sample([...unexplained, ...failedOther]),
  );

  // 5. The late writes of a lost claim: a worker that lived past the sweep logged the fenced write
  //    (or gave the write up); a worker killed first could write nothing. The audit shows no
  //    status change was ever made under a lost claim's token after the sweep.
  const fenceLines = new Map<string, string[]>();
  let claimLost = 0;
  let renewalFenced = 0;
  let abandoned = 0;
  let listenLost = 0;
  let swept = 0;
  const otherWarnings = new Map<string, number>();
  for (const p of processes) {
    for (const line of p.lines) {
      if (line.msg.startsWith("claim lost")) claimLost++;
      else if (line.msg.startsWith("lease renewal fenced")) renewalFenced++;
      else if (line.msg.startsWith("could not record the outcome")) abandoned++;
      else if (line.msg.startsWith("LISTEN connection lost")) listenLost++;
      else if (line.msg.startsWith("sweep reclaimed")) swept += Number(line.requeued ?? 0) + Number(line.dead ?? 0);
      else if (line.level >= 40) {
        const key = line.msg.replace(/\d+/g, "N").slice(0, 90);
        otherWarnings.set(key, (otherWarnings.get(key) ?? 0) + 1);
      }
      const kind = /^(claim lost|lease renewal fenced)/.test(line.msg) ? "fenced" : line.msg.startsWith("could not record the outcome") ? "abandoned" : null;
      if (line.claim_token && kind) {
        const list = fenceLines.get(line.claim_token) ?? [];
        list.push(kind);
        fenceLines.set(line.claim_token, list);
      }
    }
  }
  let lostDeadFirst = 0;
  let lostFenced = 0;
  let lostAbandoned = 0;
  let lostKilledAfter = 0;
  let lostWhileFrozen = 0;
  const lostSilent: string[] = [];
  const lateWrites: string[] = [];
  for (const claim of claimsByHow.get("swept") ?? []) {
    const sweptAt = claim.end!.stmt_ms;
    const later = (transByJob.get(claim.jobId) ?? []).filter((t) => t.old_token === claim.token && t !== claim.end);
    if (later.length > 0) lateWrites.push(`job ${claim.jobId} claim ${claim.token}`);
    const proc = procById.get(claim.worker);
    const logged = fenceLines.get(claim.token) ?? [];
    if (freezes.some((f) => f.workerId === claim.worker && f.atMs <= sweptAt && (f.resumedAtMs ?? Infinity) >= sweptAt)) lostWhileFrozen++;
    if (proc?.killedAt != null && proc.killedAt <= sweptAt) lostDeadFirst++;
    else if (logged.includes("fenced")) lostFenced++;
    else if (logged.includes("abandoned")) lostAbandoned++;
    else if (proc?.killedAt != null) lostKilledAfter++;
    else lostSilent.push(`job ${claim.jobId} claim ${claim.token} by ${claim.worker}`);
  }
  check(
    "a lost claim's late writes were fenced (or never made)",
    lostSilent.length === 0 && lateWrites.length === 0,
    `${howCount("swept")} claims lost (${lostWhileFrozen} while their owner was frozen): ${lostDeadFirst} owners SIGKILLed before the sweep; ${lostFenced} owners logged the fenced write ` +
      `(claim lost / lease renewal fenced); ${lostAbandoned} owners had given the write up (database down); ` +
      `${lostKilledAfter} owners killed after the sweep; unaccounted ${lostSilent.length}; status changes under a lost token ${lateWrites.length}` +
      sample([...lostSilent, ...lateWrites]),
  );

  // 6. Overlapping executions. Every run of the handler, on the workers' shared wall clock: its
  //    start (taken by the handler as it began) and its end (when it returned, failed, or saw its
  //    abort signal), from its "chaos run ended" line; a run whose process was SIGKILLed before it
  //    ended ends at the kill. Two runs of one job overlap when each started before the other
  //    ended. Such a pair is allowed only when one run R was on a worker frozen by SIGSTOP: R began
  //    before the freeze, the other run began after the freeze did (so not while R's worker
  //    could still interrupt R), and R stopped at once when its worker woke (within wakeStopMs of
  //    the SIGCONT, or at a SIGKILL during the freeze); and R's claim had been lost to the sweep,
  //    with nothing written under its token after that. Any other overlap, between workers whose
  //    event loops respond, fails the check.
  const fmt = (t: number) => `${((t - t0) / 1000).toFixed(3)} s`;
  const describe = (r: Run) => `${r.worker} claim ${r.token.slice(0, 8)} ran ${fmt(r.startMs)}–${fmt(r.endMs)} (${r.end})`;
  const wakeOf = (f: FreezeRecord) => f.resumedAtMs ?? procById.get(f.workerId)?.killedAt ?? Infinity;
  let overlapPairs = 0;
  let frozenOverlaps = 0;
  let maxWakeStop = -Infinity;
  let maxOverlapMs = 0;
  const badFrozen: string[] = [];
  const responsive: string[] = [];
  /** Every overlapping pair, for CHAOS_DUMP. */
  const overlapJobs = new Set<string>();
  for (const [jobId, list] of group(runs, (r) => r.jobId)) {
    if (list.length < 2) continue;
    const sorted = [...list].sort((a, b) => a.startMs - b.startMs);
    for (let i = 0; i < sorted.length; i++) {
      for (let j = i + 1; j < sorted.length; j++) {
        const a = sorted[i]!;
        const b = sorted[j]!;
        const from = Math.max(a.startMs, b.startMs);
        const to = Math.min(a.endMs, b.endMs);
        if (from >= to) continue;
        overlapPairs++;
        overlapJobs.add(jobId);
        maxOverlapMs = Math.max(maxOverlapMs, to - from);
        // R: a run whose worker was frozen after R began and before the overlap did.
        let explained: { r: Run; f: FreezeRecord } | undefined;
        for (const r of [a, b]) {
          const f = freezes
            .filter((f) => f.workerId === r.worker && f.atMs >= r.startMs && f.atMs <= from)
            .sort((x, y) => y.atMs - x.atMs)[0];
          if (f) explained = { r, f };
        }
        const pair = `job ${jobId}: ${describe(a)} and ${describe(b)}`;
        if (!explained) {
          // Say what is known of a run that began after its own claim had ended.
          const late = [a, b].flatMap((r) => {
            const claim = claims.get(r.token);
            if (!claim?.end || r.startMs <= claim.end.at_ms) return [];
            const woke = freezes
              .filter((f) => f.workerId === r.worker && f.atMs >= claim.claimedMs - 1_000 && wakeOf(f) <= r.startMs)
              .sort((x, y) => wakeOf(y) - wakeOf(x))[0];
            return [
              `${r.worker}'s run began after its claim (written ${fmt(claim.claimedMs)}) had ended ${claim.how} at ${fmt(claim.end.at_ms)}` +
                (woke ? `, ${(r.startMs - wakeOf(woke)).toFixed(0)} ms after its worker woke from a SIGSTOP (${fmt(woke.atMs)}–${fmt(wakeOf(woke))})` : ""),
            ];
          });
          responsive.push(pair + (late.length ? ` (${late.join("; ")})` : ""));
          continue;
        }
        frozenOverlaps++;
        const { r, f } = explained;
        const wake = wakeOf(f);
        const stop = r.endMs - wake;
        maxWakeStop = Math.max(maxWakeStop, stop);
        const claim = claims.get(r.token);
        const logged = fenceLines.get(r.token) ?? [];
        const killed = procById.get(r.worker)?.killedAt != null;
        const lateWrite = (transByJob.get(jobId) ?? []).some((t) => t.old_token === r.token && t !== claim?.end);
        const problems = [
          stop > o.wakeStopMs ? `ran on ${stop.toFixed(0)} ms after its worker woke` : null,
          claim?.how !== "swept" ? `its claim ended ${claim?.how ?? "unknown"}, not lost to the sweep` : null,
          lateWrite ? "a status change was made under its token after the sweep" : null,
          logged.length === 0 && !killed ? "its worker logged no fenced write for it" : null,
        ].filter((x) => x !== null);
        if (problems.length > 0) badFrozen.push(`${pair}: ${r.worker} frozen ${fmt(f.atMs)}–${fmt(wake)}, ${problems.join("; ")}`);
      }
    }
  }
  check(
    "no two runs of a job overlapped on workers whose event loops respond (a frozen worker's run stopped on waking, fenced)",
    responsive.length === 0 && badFrozen.length === 0 && runsWithoutEnd === 0,
    `${runs.length} handler runs on the workers' wall clock (${runs.length - runsEndedByKill - runsWithoutEnd} with their logged start and end, ` +
      `${runsEndedByKill} ended by their process's SIGKILL, ${runsWithoutEnd} with no end; ${runs.filter((r) => r.end === "aborted").length} stopped by their abort signal, ` +
      `${runsNotInTable} before their start reached the executions table); ` +
      `${overlapPairs} pairs of runs of one job overlapped: ${frozenOverlaps} with one run on a SIGSTOPped worker ` +
      `(it began before the freeze, the other after it; ${frozenOverlaps - badFrozen.length} stopped ≤ ${o.wakeStopMs} ms after SIGCONT and were fenced` +
      (frozenOverlaps ? `, latest stop ${maxWakeStop.toFixed(0)} ms after waking` : "") +
      `), ${responsive.length} between responsive workers` +
      (overlapPairs ? `; longest overlap ${maxOverlapMs.toFixed(0)} ms` : "") +
      sample([...responsive, ...badFrozen]),
  );

  // 7. Retries kept the backoff. (a) The handler's own start times: consecutive executions of
  //    attempts a < b are at least Σ_{k=a}^{b-1} min(max, base·2^(k-1))/2 apart. (b) The audit:
  //    every requeue set run_at at least that far ahead, and no claim came before its run_at.
  //    An execution that only started after its claim was already swept (its worker stalled
  //    between the claim and the handler's first write: a SIGSTOP) is not a retry of anything;
  //    such starts are counted, and their spacing is covered by (b).
  let pairs = 0;
  let stalledStarts = 0;
  let smallestMargin = Infinity;
  const spacing: string[] = [];
  const claimOf = (e: ExecutionRow) => (e.claim_token ? claims.get(e.claim_token) : undefined);
  for (const [jobId, es] of execByJob) {
    const job = jobById.get(jobId)!;
    const sorted = [...es].sort((a, b) => (claimOf(a)?.claimedMs ?? a.started_ms) - (claimOf(b)?.claimedMs ?? b.started_ms));
    for (let i = 1; i < sorted.length; i++) {
      const a = sorted[i - 1]!;
      const b = sorted[i]!;
      if (b.attempt === a.attempt) {
        spacing.push(`job ${jobId}: two executions of attempt ${a.attempt}`);
        continue;
      }
      const aEnd = claimOf(a)?.end;
      if (aEnd && a.started_ms > aEnd.stmt_ms) {
        stalledStarts++;
        continue;
      }
      let need = 0;
      for (let k = a.attempt; k < b.attempt; k++) need += minBackoffMs(k, job.backoff_base_ms, job.backoff_max_ms);
      const gap = b.started_ms - a.started_ms;
      pairs++;
      smallestMargin = Math.min(smallestMargin, gap - need);
      if (gap < need) spacing.push(`job ${jobId}: attempts ${a.attempt}→${b.attempt} started ${gap.toFixed(1)} ms apart, backoff needs ≥ ${need} ms`);
    }
  }
  let requeues = 0;
  const auditSpacing: string[] = [];
  for (const [jobId, ts] of transByJob) {
    const job = jobById.get(jobId)!;
    for (let i = 0; i < ts.length; i++) {
      const t = ts[i]!;
      if (t.old_status !== "processing" || t.new_status !== "pending") continue;
      const claim = t.old_token ? claims.get(t.old_token) : undefined;
      if (claim?.how === "released") continue;
      requeues++;
      const need = minBackoffMs(t.attempts, job.backoff_base_ms, job.backoff_max_ms);
      if (t.run_ms - t.stmt_ms < need - 0.001) auditSpacing.push(`job ${jobId}: attempt ${t.attempts} requeued ${(t.run_ms - t.stmt_ms).toFixed(1)} ms ahead, needs ≥ ${need}`);
      const next = ts.slice(i + 1).find((n) => n.new_status === "processing");
      if (next && (next.locked_ms ?? next.stmt_ms) < t.run_ms - 0.001) auditSpacing.push(`job ${jobId}: claimed ${(t.run_ms - (next.locked_ms ?? 0)).toFixed(1)} ms before its run_at`);
    }
  }
  check(
    "retries were spaced by the backoff",
    spacing.length === 0 && auditSpacing.length === 0,
    `${pairs} pairs of consecutive executions, smallest margin over the minimum backoff ${pairs ? `${smallestMargin.toFixed(1)} ms` : "n/a"}` +
      (stalledStarts
        ? ` (${stalledStarts} executions recorded only after their claim had ended, by a frozen worker or an insert that waited out a pause or the restart: not counted)`
        : "") +
      "; " +
      `${requeues} requeues in the audit, each run_at ≥ min backoff ahead and claimed no earlier` +
      sample([...spacing, ...auditSpacing]),
  );

  // 8. Recovery after each kill: kill → every job the killed worker held completed elsewhere. The
  //    time is measured over the jobs of ordinary length; the long jobs' (several leases each, and
  //    often caught by the next kill too) is given apart, so it does not hide the first.
  //    A statement the killed worker had sent before the kill still runs on the server (it learns
  //    of the dead client only after): its completion may land after the driver read the rows the
  //    worker held. Such a job completed under the killed worker's own claim, by a statement that
  //    began within IN_FLIGHT_MS of the kill; it is counted apart, not as a recovery.
  const notRecovered: string[] = [];
  const inFlightAtKill: string[] = [];
  for (const kill of kills) {
    if (kill.held.length === 0) continue;
    const last = { short: -Infinity, long: -Infinity };
    let ok = true;
    for (const id of kill.held) {
      const job = jobById.get(id);
      if (job?.status === "completed" && job.locked_by === kill.workerId) {
        const completion = (transByJob.get(id) ?? []).find((t) => t.new_status === "completed" && t.old_status === "processing");
        const after = completion ? completion.stmt_ms - kill.atMs : Infinity;
        if (after <= IN_FLIGHT_MS) {
          inFlightAtKill.push(`job ${id} of ${kill.workerId}: its completion began ${after.toFixed(0)} ms after the kill`);
          continue;
        }
      }
      if (!job || job.status !== "completed" || job.finished_ms === null || job.locked_by === kill.workerId) {
        ok = false;
        notRecovered.push(`job ${id} of ${kill.workerId}: ${job?.status ?? "missing"}` + (job?.locked_by === kill.workerId ? ` by ${kill.workerId} itself` : ""));
      } else if (job.long) last.long = Math.max(last.long, job.finished_ms);
      else last.short = Math.max(last.short, job.finished_ms);
    }
    kill.recoveryMs = ok && last.short > -Infinity ? last.short - kill.atMs : null;
    kill.longRecoveryMs = ok && last.long > -Infinity ? last.long - kill.atMs : null;
  }
  const recoveries = kills.filter((k) => k.recoveryMs !== null).map((k) => k.recoveryMs!);
  const longRecoveries = kills.filter((k) => k.longRecoveryMs != null).map((k) => k.longRecoveryMs!);
  const heldTotal = kills.reduce((n, k) => n + k.held.length, 0);
  const heldLong = kills.reduce((n, k) => n + k.held.filter((id) => jobById.get(id)?.long).length, 0);
  const med = median(recoveries);
  const max = recoveries.length ? Math.max(...recoveries) : null;
  const longMed = median(longRecoveries);
  const longMax = longRecoveries.length ? Math.max(...longRecoveries) : null;
  check(
    "every job a killed worker held completed elsewhere",
    notRecovered.length === 0,
    `${kills.length} SIGKILLs, ${kills.filter((k) => k.held.length > 0).length} holding jobs (${heldTotal} in all, ${heldLong} of them long; ` +
      `${inFlightAtKill.length} completed by the killed worker's own write, in flight at the kill); ` +
      `recovery median ${secs(med)}, max ${secs(max)}` +
      (longRecoveries.length ? `; long jobs: median ${secs(longMed)}, max ${secs(longMax)} (n=${longRecoveries.length})` : "") +
      sample([...notRecovered, ...inFlightAtKill]),
  );

  // 9. The workers: none died on its own (a PostgreSQL restart or pause included), every survivor
  //    of the restart and of each pause claimed jobs again afterwards, and all drained and exited 0
  //    on SIGTERM.
  const crashed = processes.filter((p) => p.exitInfo !== null && p.killedAt === null && !p.stopping);
  const badExit = input.finals.filter((p) => p.exitInfo?.code !== 0).map((p) => `${p.id}: ${p.exitInfo?.signal ?? `code ${p.exitInfo?.code}`}`);
  let survivors: WorkerProcess[] = [];
  const silentSurvivors: string[] = [];
  if (restart) {
    survivors = processes.filter(
      (p) => p.spawnedAt < restart.stopAt && (p.killedAt ?? p.exitedAt ?? Infinity) > restart.upAt + 3_000 && (p.killedAt !== null || p.stopping),
    );
    for (const p of survivors) {
      const after = claimList.filter((c) => c.worker === p.id && c.claimedMs > restart.upAt).length;
      if (after === 0) silentSurvivors.push(p.id);
    }
  }
  let pauseSurvivors = 0;
  const silentAfterPause: string[] = [];
  for (const pause of input.pauses) {
    const resumed = pause.resumedAtMs ?? Infinity;
    for (const p of processes) {
      if (!(p.spawnedAt < pause.atMs && (p.killedAt ?? p.exitedAt ?? Infinity) > resumed + 3_000 && (p.killedAt !== null || p.stopping))) continue;
      pauseSurvivors++;
      if (!claimList.some((c) => c.worker === p.id && c.claimedMs > resumed)) silentAfterPause.push(`${p.id} claimed nothing after the pause at ${((pause.atMs - t0) / 1000).toFixed(1)} s`);
    }
  }
  check(
    "workers survived: no crash, carried on after the restart and the pauses, drained on SIGTERM",
    crashed.length === 0 && badExit.length === 0 && input.stuck.length === 0 && silentSurvivors.length === 0 && silentAfterPause.length === 0,
    `${processes.length} worker processes; exited on their own ${crashed.length}; ` +
      (restart
        ? `${survivors.length} lived through the PostgreSQL restart, ${survivors.length - silentSurvivors.length} of them claimed jobs after it; `
        : "no PostgreSQL restart; ") +
      (input.pauses.length
        ? `${pauseSurvivors} lived through a PostgreSQL pause (counted per pause), ${pauseSurvivors - silentAfterPause.length} of them claimed jobs after it; `
        : "no PostgreSQL pause; ") +
      `${input.finals.length} stopped by SIGTERM, exit 0: ${input.finals.length - badExit.length}` +
      (input.stuck.length ? `, did not exit in 30 s: ${input.stuck.join(", ")}` : "") +
      sample([
        ...crashed.map((p) => `${p.id} exited ${p.exitInfo?.signal ?? `code ${p.exitInfo?.code}`}: ${p.stderr.trim().split("\n").slice(-2).join(" | ")}`),
        ...badExit,
        ...silentSurvivors.map((id) => `${id} claimed nothing after the restart`),
        ...silentAfterPause,
      ]),
  );

  if (process.env.CHAOS_DUMP) {
    const dump = (token: string) => ({ claim: claims.get(token), lines: processes.flatMap((p) => p.lines.filter((l) => l.claim_token === token).map((l) => ({ w: p.id, killedAt: p.killedAt, ...l }))) });
    const tokens = new Set<string>();
    for (const p of processes) for (const l of p.lines) if (l.claim_token) tokens.add(l.claim_token);
    // Per job worth a look (it overlapped, or a lease expired on its worker's clock): its audit,
    // its runs, its executions rows, and every worker line that names it.
    const jobIds = new Set([...overlapJobs, ...(claimsByHow.get("failed") ?? []).map((c) => c.jobId)]);
    const named = (l: LogLine, id: string) =>
      String(l.job_id) === id || (Array.isArray(l.jobs) && (l.jobs as unknown[]).map(String).includes(id)) ||
      (Array.isArray(l.lost) && (l.lost as Array<{ job_id?: unknown }>).some((x) => String(x.job_id) === id));
    const jobDump = [...jobIds].map((id) => ({
      job: id,
      transitions: transByJob.get(id) ?? [],
      runs: runs.filter((r) => r.jobId === id),
      executions: execByJob.get(id) ?? [],
      lines: processes.flatMap((p) => p.lines.filter((l) => named(l, id)).map((l) => ({ w: p.id, ...l }))),
    }));
    writeFileSync(
      process.env.CHAOS_DUMP,
      JSON.stringify({ restart, t0, pauses: input.pauses, rowLocks: input.rowLocks, freezes, kills, jobs: jobDump, tokens: [...tokens].map(dump) }, null, 1),
    );
  }
  // Not one of the checks, but worth knowing: fence warnings that name a claim which was not
  // lost. A renewal that runs while the worker's own completion write commits finds the row
  // completed and reports it fenced ("was reclaimed; interrupting its handler").
  const spuriousFence: string[] = [];
  for (const [token, kinds] of fenceLines) {
    const claim = claims.get(token);
    if (claim?.how === "completed" && kinds.includes("fenced")) spuriousFence.push(`job ${claim.jobId} claim ${token} by ${claim.worker}`);
  }
  const notes: string[] = [];
  // Outcome writes a worker gave up ("could not record the outcome"): bookkeeping is kept until
  // written or fenced, so each one is worth reading (when, why, and what became of the claim).
  const givenUp: string[] = [];
  for (const p of processes) {
    for (const line of p.lines) {
      if (!line.msg.startsWith("could not record the outcome")) continue;
      const claim = line.claim_token ? claims.get(line.claim_token) : undefined;
      givenUp.push(
        `${p.id} at ${typeof line.time === "number" ? `${((line.time - t0) / 1000).toFixed(2)} s` : "?"}: job ${String(line.job_id)} ` +
          `(${String(line.intended)}) "${String(line.write_error).slice(0, 160)}"; the claim then ${claim?.how ?? "unknown"}` +
          (p.killedAt !== null ? `; worker SIGKILLed at ${((p.killedAt - t0) / 1000).toFixed(2)} s` : ""),
      );
    }
  }
  // Each attempt failed by a lease expiry on its worker's clock, with its run: how long the lease
  // had gone unconfirmed (the worker's message) and how long the handler had run by then. A
  // handler that had run for less than (unconfirmed − the deadline's 0.8 lease) was started after
  // its worker's own lease deadline had passed: its claim was answered late (it waited out a
  // pause or the restart), and the worker ran it anyway, only to fail it, charged, at once.
  const expiryRuns: string[] = [];
  const startedExpired: string[] = [];
  for (const claim of claimsByHow.get("failed") ?? []) {
    const message = claim.end?.last_error ?? "";
    if (!message.startsWith("lease_expired: ")) continue;
    const unconfirmed = Number(/for (\d+) ms/.exec(message)?.[1] ?? NaN);
    const run = runs.find((r) => r.token === claim.token);
    const ranMs = run ? run.endMs - run.startMs : null;
    const line =
      `job ${claim.jobId} attempt ${claim.attempt} on ${claim.worker}: claim written at ${fmt(claim.claimedMs)}, ` +
      (run ? `handler ran ${fmt(run.startMs)}–${fmt(run.endMs)} (${ranMs} ms, ${run.end})` : "handler never ran") +
      `, "not confirmed … for ${unconfirmed} ms", failure written at ${fmt(claim.end!.stmt_ms)}`;
    if (run && ranMs !== null && ranMs < unconfirmed - 0.8 * o.leaseMs) startedExpired.push(line);
    else expiryRuns.push(line);
  }
  if (startedExpired.length > 0) {
    notes.push(
      `${startedExpired.length} of the ${startedExpired.length + expiryRuns.length} attempts failed by a lease expiry had their handler started after ` +
        `their worker's own lease deadline had passed (the claim was answered late), then failed at once, the attempt charged` +
        sample(startedExpired, 5),
    );
  }
  if (expiryRuns.length > 0) notes.push(`${expiryRuns.length} attempt(s) failed by a lease expiry while their handler ran (or before it ran)` + sample(expiryRuns, 3));
  if (givenUp.length > 0) notes.push(`${givenUp.length} outcome write(s) given up by their worker:` + sample(givenUp, 10));
  if (spuriousFence.length > 0) {
    notes.push(
      `${spuriousFence.length} fence warning(s) named a claim that was not lost: the claim completed (its only completion, by the ` +
        `same worker) and a lease renewal racing that completion reported it "fenced … was reclaimed"` + sample(spuriousFence, 3),
    );
  }

  const ok = checks.every((c) => c.ok);
  const completedAfterRestart = restart ? claimList.filter((c) => c.how === "completed" && c.claimedMs > restart.upAt).length : 0;
  const stats = {
    workers: o.workers,
    jobs: o.jobs,
    durationMs: o.durationMs,
    leaseMs: o.leaseMs,
    kills: kills.length,
    freezes: freezes.length,
    claimsLostWhileFrozen: lostWhileFrozen,
    rowLocks: input.rowLocks.length,
    pgPauses: input.pauses.length,
    handlerRuns: runs.length,
    overlapPairs,
    overlapsWithFrozenWorker: frozenOverlaps,
    overlapsFrozenNotStoppedOrFenced: badFrozen.length,
    overlapsBetweenResponsiveWorkers: responsive.length,
    latestStopAfterWakeMs: frozenOverlaps ? maxWakeStop : null,
    leaseExpiredFailures: leaseExpiries,
    handlersStartedAfterTheirLeaseDeadline: startedExpired.length,
    executionsStartedAfterTheirClaimWasLost: stalledStarts,
    killsHoldingJobs: kills.filter((k) => k.held.length > 0).length,
    jobsHeldByKilled: heldTotal,
    recoveryMedianMs: med,
    recoveryMaxMs: max,
    longJobRecoveryMedianMs: longMed,
    longJobRecoveryMaxMs: longMax,
    executions: executions.length,
    claims: claimList.length,
    claimsLostToSweep: howCount("swept"),
    claimsFailed: howCount("failed"),
    claimsReleased: howCount("released"),
    jobsRunMoreThanOnce: multi.length,
    claimLostWarnings: claimLost,
    renewalFencedWarnings: renewalFenced,
    abandonedWrites: abandoned,
    fenceWarningsOnCompletedClaims: spuriousFence.length,
    listenLostWarnings: listenLost,
    sweptRowsLogged: swept,
    restartDowntimeMs: restart ? restart.upAt - restart.stopAt : null,
    settleMs: input.settledAt - input.chaosEnd,
    totalMs: Date.now() - input.runStart,
  };

  const lines: string[] = [];
  const pad = (label: string) => label.padEnd(13);
  lines.push(
    `picket chaos run: ${o.workers} workers × ${o.concurrency} slots, ${o.jobs} jobs ready over ${o.durationMs / 1000} s, ` +
      `lease ${o.leaseMs} ms, sweep ${o.sweepIntervalMs} ms, poll ${o.pollIntervalMs} ms, job ${o.jobMs[0]}–${o.jobMs[1]} ms` +
      (o.longJobEvery > 0
        ? ` (1 in ${o.longJobEvery} of the first ${Math.round(o.longJobsWithin * 100)} %: ${o.longJobLeases[0]}–${o.longJobLeases[1]} leases)`
        : "") +
      `, backoff ${o.backoffBaseMs} ms…${o.backoffMaxMs} ms`,
  );
  lines.push(
    `${pad("PostgreSQL:")}${input.databaseLabel}` +
      (restart
        ? `; restarted at ${((restart.stopAt - t0) / 1000).toFixed(1)} s, unavailable ${((restart.upAt - restart.stopAt) / 1000).toFixed(1)} s; ` +
          `${completedAfterRestart} jobs claimed and completed after it`
        : ""),
  );
  lines.push(
    `${pad("kills:")}${kills.length} SIGKILLs (one every ${o.killEveryMs / 1000} s on average), ${stats.killsHoldingJobs} caught running jobs (${heldTotal} jobs)`,
  );
  if (o.freezeEveryMs > 0) {
    lines.push(
      `${pad("freezes:")}${freezes.length} SIGSTOP/SIGCONT (one every ${o.freezeEveryMs / 1000} s on average, 1–2 leases each), ` +
        `${freezes.filter((f) => f.held > 0).length} caught running jobs (${freezes.reduce((n, f) => n + f.held, 0)} jobs); ${lostWhileFrozen} claims lost while frozen`,
    );
  }
  if (o.rowLockEveryMs > 0) {
    const lockEnds = group(input.rowLocks, (l) => claims.get(l.token)?.how ?? "unknown");
    const held = input.rowLocks.map((l) => (l.releasedAtMs ?? l.atMs) - l.atMs);
    lines.push(
      `${pad("row locks:")}${input.rowLocks.length} (SELECT … FOR UPDATE on a random processing row, one every ${o.rowLockEveryMs / 1000} s on average, ` +
        `${o.rowLockLeases[0]}–${o.rowLockLeases[1]} leases each` +
        (held.length ? `: held ${(Math.min(...held) / 1000).toFixed(1)}–${(Math.max(...held) / 1000).toFixed(1)} s` : "") +
        `); the locked claims then ${[...lockEnds.entries()].map(([how, ls]) => `${how} ${ls.length}`).join(", ") || "-"}` +
        (input.rowLocks.some((l) => l.error) ? `; ${input.rowLocks.filter((l) => l.error).length} lock sessions ended by the restart` : ""),
    );
  }
  lines.push(
    `${pad("pauses:")}` +
      (input.pauses.length
        ? `${input.pauses.length} SIGSTOP/SIGCONT of PostgreSQL (the postmaster and all its children, ${o.pgPauseLeases[0]}–${o.pgPauseLeases[1]} leases each): ` +
          input.pauses
            .map((p) => `at ${((p.atMs - t0) / 1000).toFixed(1)} s for ${(((p.resumedAtMs ?? p.atMs) - p.atMs) / 1000).toFixed(1)} s (${p.processes} processes)`)
            .join(", ")
        : o.pgPausesSkipped
          ? `skipped (${o.pgPausesSkipped} asked for): DATABASE_URL's server is not this run's to pause`
          : "none"),
  );
  lines.push(
    `${pad("overlaps:")}${overlapPairs} pairs of runs of one job overlapped (wall clock): ${frozenOverlaps} with one run on a SIGSTOPped worker` +
      (frozenOverlaps ? ` (stopped ≤ ${maxWakeStop.toFixed(0)} ms after waking)` : "") +
      `, ${responsive.length} between responsive workers`,
  );
  lines.push(
    `${pad("timing:")}chaos ${((input.chaosEnd - t0) / 1000).toFixed(1)} s, settled ${input.settled ? `${(stats.settleMs / 1000).toFixed(1)} s later` : "NOT (timeout)"}, whole run ${(stats.totalMs / 1000).toFixed(1)} s`,
  );
  lines.push("");
  lines.push(`${pad("jobs:")}${["completed", "pending", "processing", "dead", "cancelled"].map((s) => `${statusCount(s)} ${s}`).join(", ")}`);
  lines.push(`${pad("executions:")}${executions.length} for ${execByJob.size} jobs; ${multi.length} jobs ran more than once (${extra.length} extra executions)`);
  lines.push(
    `${pad("claims:")}${claimList.length}: ${howCount("completed")} completed, ${howCount("swept")} lost to the sweep (lease expired), ` +
      `${howCount("failed")} failed attempts, ${howCount("released")} released, ${howCount("dead")} dead, ${howCount("open")} open`,
  );
  lines.push(
    `${pad("worker logs:")}${claimLost} "claim lost", ${renewalFenced} "lease renewal fenced", ${abandoned} outcome writes given up (left to the sweep), ` +
      `${listenLost} "LISTEN connection lost", ${swept} rows reclaimed by sweeps` +
      (otherWarnings.size ? `; other warnings/errors: ${[...otherWarnings.entries()].map(([m, n]) => `${n}× "${m}"`).join(", ")}` : ""),
  );
  lines.push(
    `${pad("recovery:")}kill → last held job completed elsewhere: median ${secs(med)}, max ${secs(max)} (n=${recoveries.length}; ` +
      `lease ${o.leaseMs} ms + sweep ≤ ${o.sweepIntervalMs} ms + backoff + job)` +
      (longRecoveries.length ? `; long jobs (${heldLong} held): median ${secs(longMed)}, max ${secs(longMax)} (n=${longRecoveries.length})` : ""),
  );
  lines.push("");
  lines.push("checks:");
  for (const c of checks) lines.push(`  ${c.ok ? "PASS" : "FAIL"}  ${c.name}\n        ${c.detail}`);
  for (const n of notes) lines.push(`  NOTE  ${n}`);
  lines.push("");
  lines.push(ok ? "RESULT: PASS" : `RESULT: FAIL (${checks.filter((c) => !c.ok).length} check(s) failed)`);
  return { ok, checks, notes, kills, freezes, rowLocks: input.rowLocks, pauses: input.pauses, text: `${lines.join("\n")}\n`, stats };
};

// --- the command line ---------------------------------------------------------------------
if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      workers: { type: "string", default: "4" },
      jobs: { type: "string", default: "5000" },
      duration: { type: "string", default: "120" },
      "lease-ms": { type: "string", default: "2000" },
      "kill-every-ms": { type: "string", default: "3000" },
      "freeze-every-ms": { type: "string", default: "10000" },
      "row-lock-every-ms": { type: "string", default: "8000" },
      "pg-pauses": { type: "string", default: "2" },
      "statement-timeout": { type: "string", default: "" },
      "job-ms": { type: "string", default: "50-500" },
      "long-job-every": { type: "string", default: "40" },
      concurrency: { type: "string", default: "10" },
      "settle-timeout": { type: "string", default: "60" },
      "no-restart": { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(
      "node bench/chaos.ts [--workers 4] [--jobs 5000] [--duration 120 (s)] [--lease-ms 2000] [--kill-every-ms 3000]\n" +
        "                    [--freeze-every-ms 10000 (0: no SIGSTOP freezes)] [--row-lock-every-ms 8000 (0: no row locks)]\n" +
        "                    [--pg-pauses 2 (SIGSTOPs of PostgreSQL; 0: none)] [--statement-timeout <ms> (the workers'; default picket's)]\n" +
        "                    [--job-ms 50-500] [--long-job-every 40 (0: none)] [--concurrency 10] [--settle-timeout 60 (s)] [--no-restart]\n" +
        "DATABASE_URL: run on that server (in a fresh database) and skip the PostgreSQL restart and pauses.\n",
    );
    process.exit(0);
  }
  const int = (name: string, raw: string, min: number): number => {
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min) {
      process.stderr.write(`chaos: --${name} must be an integer ≥ ${min} (got ${raw})\n`);
      process.exit(2);
    }
    return n;
  };
  const jobMs = /^(\d+)-(\d+)$/.exec(values["job-ms"]);
  if (!jobMs || Number(jobMs[1]) > Number(jobMs[2])) {
    process.stderr.write(`chaos: --job-ms must be min-max in ms, e.g. 50-500 (got ${values["job-ms"]})\n`);
    process.exit(2);
  }
  const controller = new AbortController();
  process.once("SIGINT", () => {
    process.stderr.write("chaos: SIGINT, cleaning up (workers, PostgreSQL, data folder)\n");
    controller.abort();
  });
  if (process.env.DATABASE_URL) process.stderr.write("chaos: DATABASE_URL is set: using that server; the PostgreSQL restart and pauses are skipped\n");
  try {
    const report = await runChaos({
      workers: int("workers", values.workers, 1),
      jobs: int("jobs", values.jobs, 1),
      durationMs: int("duration", values.duration, 1) * 1000,
      leaseMs: int("lease-ms", values["lease-ms"], 100),
      killEveryMs: int("kill-every-ms", values["kill-every-ms"], 100),
      freezeEveryMs: int("freeze-every-ms", values["freeze-every-ms"], 0),
      rowLockEveryMs: int("row-lock-every-ms", values["row-lock-every-ms"], 0),
      pgPauses: int("pg-pauses", values["pg-pauses"], 0),
      ...(values["statement-timeout"] ? { statementTimeoutMs: int("statement-timeout", values["statement-timeout"], 1) } : {}),
      jobMs: [Number(jobMs[1]), Number(jobMs[2])],
      longJobEvery: int("long-job-every", values["long-job-every"], 0),
      concurrency: int("concurrency", values.concurrency, 1),
      settleTimeoutMs: int("settle-timeout", values["settle-timeout"], 1) * 1000,
      restartPostgres: !values["no-restart"],
      databaseUrl: process.env.DATABASE_URL || undefined,
      log: (line) => process.stderr.write(`${line}\n`),
      signal: controller.signal,
    });
    process.stdout.write(`\n${report.text}`);
    process.exit(report.ok ? 0 : 1);
  } catch (error) {
    process.stderr.write(`chaos: ${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  }
}
