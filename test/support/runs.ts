// A side table of executions, written by the handlers themselves: each run's start and end by the
// database's clock_timestamp(), so a test can look for two runs of one job that overlapped.
import type pg from "pg";
import type { HandlerContext } from "../../src/runtime/task.ts";

export const createRunsTable = (db: pg.Pool): Promise<unknown> =>
  db.query(`CREATE TABLE IF NOT EXISTS runs (
    id serial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz, how text)`);

/**
 * A handler that records its run, then works for `ms` (or until its signal fires). The end is
 * written once the handler has stopped, so it is never earlier than the real end.
 */
export const recordedRun =
  (db: pg.Pool, ms: number) =>
  async (_payload: unknown, { job, signal }: HandlerContext): Promise<string> => {
    const { rows } = await db.query<{ id: number }>("INSERT INTO runs (job_id, attempt) VALUES ($1, $2) RETURNING id", [job.id, job.attempt]);
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(resolve, ms);
        signal.addEventListener("abort", () => (clearTimeout(timer), reject(new Error("interrupted"))), { once: true });
      });
      return "done";
    } finally {
      await db.query("UPDATE runs SET ended_at = clock_timestamp(), how = $2 WHERE id = $1", [rows[0]!.id, signal.aborted ? "interrupted" : "finished"]);
    }
  };

/** Pairs of runs of one job whose [start, end] overlapped (a run not yet ended counts as still running). */
export const overlappingRuns = async (db: pg.Pool): Promise<unknown[]> =>
  (
    await db.query(`
      SELECT a.job_id, a.id AS first, b.id AS second FROM runs a JOIN runs b ON a.job_id = b.job_id AND a.id < b.id
      WHERE tstzrange(a.started_at, coalesce(a.ended_at, 'infinity')) && tstzrange(b.started_at, coalesce(b.ended_at, 'infinity'))`)
  ).rows;
