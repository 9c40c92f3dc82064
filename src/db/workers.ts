// The heartbeat rows of live workers (migration 0004): written by each worker, read by the
// dashboard. The queue never reads them.
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

/** A job a worker holds, as its heartbeat shows it. */
export interface HeldJobView {
  id: string;
  type: string;
  /** Its machine's state: waitingForSlot, running, completing, ... */
  state: string;
}

/** What a worker says of itself at each beat. */
export interface WorkerBeat {
  id: string;
  host: string;
  pid: number;
  version: string;
  startedAt: Date;
  concurrency: number;
  /** The supervisor machine's state ("running.polling", "draining"). */
  state: string;
  jobs: HeldJobView[];
  running: number;
  waiting: number;
}

export interface WorkerRow extends WorkerBeat {
  lastBeat: Date;
  /** How long ago it last beat, by the server's clock. */
  silentMs: number;
}

/** Workers silent this long are forgotten (a worker killed outright never deletes its row). */
export const FORGET_SILENT_WORKERS_AFTER = "1 hour";

const beatSql = perSchema(
  (schema) => `
  WITH forgotten AS (
    DELETE FROM ${schema}.workers WHERE last_beat < now() - interval '${FORGET_SILENT_WORKERS_AFTER}' AND id <> $1
  )
  INSERT INTO ${schema}.workers AS w (id, host, pid, version, started_at, last_beat, concurrency, state, jobs, running, waiting)
  VALUES ($1, $2, $3, $4, $5, now(), $6, $7, $8, $9, $10)
  ON CONFLICT (id) DO UPDATE SET last_beat = now(), state = EXCLUDED.state, jobs = EXCLUDED.jobs,
    running = EXCLUDED.running, waiting = EXCLUDED.waiting, concurrency = EXCLUDED.concurrency`,
);

/** Writes the worker's row (and forgets workers silent for an hour). */
export const beat = async (db: Queryable, worker: WorkerBeat, options: StatementOptions = {}): Promise<void> => {
  await runStatement(
    db,
    {
      name: `picket_beat_${options.schema ?? DEFAULT_SCHEMA}`,
      text: beatSql(options.schema ?? DEFAULT_SCHEMA),
      values: [worker.id, worker.host, worker.pid, worker.version, worker.startedAt, worker.concurrency, worker.state, JSON.stringify(worker.jobs), worker.running, worker.waiting],
    },
    options,
  );
};

const removeSql = perSchema((schema) => `DELETE FROM ${schema}.workers WHERE id = $1`);

/** A worker that stops takes its row with it. */
export const removeWorker = async (db: Queryable, id: string, options: StatementOptions = {}): Promise<void> => {
  await runStatement(db, { text: removeSql(options.schema ?? DEFAULT_SCHEMA), values: [id] }, options);
};

const listSql = perSchema(
  (schema) => `
  SELECT id, host, pid, version, started_at AS "startedAt", last_beat AS "lastBeat", concurrency, state, jobs, running, waiting,
         (extract(epoch FROM now() - last_beat) * 1000)::float8 AS "silentMs"
  FROM ${schema}.workers ORDER BY host, started_at, id`,
);

export const listWorkers = async (db: Queryable, options: StatementOptions = {}): Promise<WorkerRow[]> =>
  (await runStatement<WorkerRow>(db, { text: listSql(options.schema ?? DEFAULT_SCHEMA) }, options)).rows;
