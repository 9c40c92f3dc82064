import { type Job, jobColumns } from "./job-row.ts";
import { PicketError } from "./errors.ts";
import { enqueueWithDedupeModes } from "./dedupe.ts";
import { checkJobSpec, type CheckedJobSpec, type JobSpec } from "./job-spec.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { runStatement } from "./statement.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";

// One INSERT for any number of jobs. A live job (pending or processing) holding a spec's dedupe
// key makes that spec a no-op; the statement-level trigger sends one NOTIFY at commit. A NULL
// max_attempts means the task's: the first claim writes it.
const insertJobs = perSchema(
  (schema) => `
  INSERT INTO ${schema}.jobs AS j (type, payload, run_at, priority, max_attempts, key, queue)
  SELECT i.type, i.payload, coalesce(i.run_at, now() + i.delay_ms * interval '1 millisecond'),
         i.priority, i.max_attempts, i.key, i.queue
  FROM unnest($1::text[], $2::jsonb[], $3::timestamptz[], $4::float8[], $5::int[], $6::int[], $7::text[], $8::text[])
       WITH ORDINALITY AS i(type, payload, run_at, delay_ms, priority, max_attempts, key, queue, n)
  ORDER BY i.n
  ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('pending', 'processing') DO NOTHING
  RETURNING ${jobColumns("j")}`,
);

// A separate statement (a fresh snapshot under READ COMMITTED) finds the live jobs that won the
// keys: a job committed by a concurrent enqueue while the INSERT waited is visible only here.
const selectLiveByKey = perSchema(
  (schema) => `
  SELECT ${jobColumns("j")} FROM ${schema}.jobs AS j
  WHERE j.key = ANY($1::text[]) AND j.status IN ('pending', 'processing')`,
);

/**
 * Enqueues jobs in one statement and returns them in the order given. Pass your own pg client
 * inside a transaction to make the jobs commit or roll back with your other writes. A spec whose
 * key is held by a live job returns that job instead of creating one; a spec's `dedupe` chooses
 * other rules (DedupeMode). Either way a batch is one statement (plus look-ups of live keys'
 * holders that changed hands meanwhile, in the default mode).
 */
export const enqueueJobs = async (
  db: Queryable,
  specs: readonly JobSpec[],
  options: StatementOptions = {},
): Promise<Job[]> => {
  const checked = specs.map(checkJobSpec);
  if (checked.every((spec) => spec.dedupe === "live")) return enqueueLive(db, checked, options);
  // Any other mode sends the whole batch through add_job (src/db/dedupe.ts): one statement, so the
  // batch commits or fails as a whole, as the common path does.
  return enqueueWithDedupeModes(
    db,
    checked.map((spec, i) => ({ spec, priorityGiven: specs[i]!.priority !== undefined, maxAttemptsGiven: specs[i]!.maxAttempts !== undefined })),
    options,
  );
};

/** Specs in the "live" mode (or without a key): one INSERT, and look-ups only for keys already held. */
const enqueueLive = async (db: Queryable, checked: CheckedJobSpec[], options: StatementOptions): Promise<Job[]> => {
  if (checked.length === 0) return [];
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const insert = async (batch: CheckedJobSpec[]) =>
    (
      await runStatement<Job>(
        db,
        {
          text: insertJobs(schema),
          values: [
            batch.map((s) => s.type),
            batch.map((s) => s.payloadJson),
            batch.map((s) => s.runAt),
            batch.map((s) => s.delayMs),
            batch.map((s) => s.priority),
            batch.map((s) => s.maxAttempts),
            batch.map((s) => s.key),
            batch.map((s) => s.queue),
          ],
        },
        options,
      )
    ).rows;
  const byKey = new Map<string, Job>();
  const unkeyed: Job[] = [];
  const take = (rows: Job[]) => {
    for (const row of rows) {
      if (row.key === null) unkeyed.push(row);
      else byKey.set(row.key, row);
    }
  };
  take(await insert(checked));
  // A key held by a live job resolves to that job. If the holder finished between the INSERT and
  // the lookup, the key is free again: insert those specs once more (a bounded number of rounds).
  let unresolved = checked.filter((s) => s.key !== null && !byKey.has(s.key));
  for (let round = 0; unresolved.length > 0 && round < 3; round++) {
    const live = await runStatement<Job>(db, { text: selectLiveByKey(schema), values: [unresolved.map((s) => s.key)] }, options);
    take(live.rows);
    unresolved = unresolved.filter((s) => !byKey.has(s.key!));
    if (unresolved.length > 0) take(await insert(unresolved));
    unresolved = unresolved.filter((s) => !byKey.has(s.key!));
  }
  if (unresolved.length > 0) {
    // Only reachable when the key's holder is invisible to the caller's snapshot (REPEATABLE READ
    // or SERIALIZABLE) or keeps finishing and reappearing; the caller's transaction decides.
    throw new PicketError(
      `picket: job "${unresolved[0]!.type}" with key ${JSON.stringify(unresolved[0]!.key)} was not created because another job holds that key, ` +
        `and that job could not be read back. If you enqueue inside a REPEATABLE READ or SERIALIZABLE transaction, retry the transaction.`,
    );
  }
  let next = 0;
  return checked.map((spec) => (spec.key === null ? unkeyed[next++]! : byKey.get(spec.key)!));
};

/** Enqueues one job; see enqueueJobs. */
export const enqueueJob = async (db: Queryable, spec: JobSpec, options: StatementOptions = {}): Promise<Job> =>
  (await enqueueJobs(db, [spec], options))[0]!;
