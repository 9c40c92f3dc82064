// Enqueues a batch in which some spec asks for "replace" or a window. Each spec goes through the
// SQL function add_job (migration 0008), the one definition of the modes (a "live" or unkeyed
// spec in the batch gets add_job's "live" rule, the same as enqueueJobs' own statement), which
// serialises the enqueues of a key with an advisory lock; see the migration for why that holds.
import { type Job, jobColumns } from "./job-row.ts";
import type { CheckedJobSpec } from "./job-spec.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

/** A checked spec, and whether its priority and maxAttempts were given (a replace keeps the job's own otherwise). */
export interface ModalSpec {
  spec: CheckedJobSpec;
  priorityGiven: boolean;
  maxAttemptsGiven: boolean;
}

// One statement for the batch. The specs are taken in the order of their keys' locks (hash of
// the key, then the mode: advisory locks, and the live-key index's waits), so two batches lock
// keys in one order and cannot deadlock each other; a key given twice in one mode keeps the order given. Each call sees the effects of
// the calls before it (add_job is VOLATILE), so a key repeated in a batch resolves to one job.
const addJobs = perSchema(
  (schema) => `
  SELECT i.n::int AS n, ${jobColumns("r")}
  FROM (
    SELECT * FROM unnest($1::text[], $2::jsonb[], $3::timestamptz[], $4::float8[], $5::int[], $6::int[], $7::text[], $8::text[], $9::float8[], $10::text[])
         WITH ORDINALITY AS u(type, payload, run_at, delay_ms, priority, max_attempts, key, mode, window_ms, queue, n)
    ORDER BY hashtext(u.key), u.mode, u.n
  ) AS i
  CROSS JOIN LATERAL ${schema}.add_job(
    i.type, i.payload, coalesce(i.run_at, now() + i.delay_ms * interval '1 millisecond'), i.priority, i.max_attempts, i.key,
    job_queue => i.queue, dedupe => i.mode, dedupe_window => i.window_ms * interval '1 millisecond'
  ) AS r`,
);

/** Enqueues the specs in one statement; returns their jobs in the order given. */
export const enqueueWithDedupeModes = async (db: Queryable, specs: readonly ModalSpec[], options: StatementOptions = {}): Promise<Job[]> => {
  if (specs.length === 0) return [];
  const { rows } = await runStatement<Job & { n: number }>(
    db,
    {
      text: addJobs(options.schema ?? DEFAULT_SCHEMA),
      values: [
        specs.map((s) => s.spec.type),
        specs.map((s) => s.spec.payloadJson),
        specs.map((s) => s.spec.runAt),
        specs.map((s) => s.spec.delayMs),
        specs.map((s) => (s.priorityGiven ? s.spec.priority : null)),
        specs.map((s) => (s.maxAttemptsGiven ? s.spec.maxAttempts : null)),
        specs.map((s) => s.spec.key),
        specs.map((s) => s.spec.dedupe),
        specs.map((s) => s.spec.windowMs),
        specs.map((s) => s.spec.queue),
      ],
    },
    options,
  );
  const jobs: Job[] = new Array(specs.length);
  for (const { n, ...job } of rows) jobs[n - 1] = job;
  return jobs;
};
