import { type Job, jobColumns } from "./job-row.ts";
import { checkJobSpec, type JobSpec } from "./job-spec.ts";
import type { Queryable, SchemaOption } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";

// One INSERT for any number of jobs. A live job (pending or processing) holding a spec's dedupe
// key makes that spec a no-op; the statement-level trigger sends one NOTIFY at commit.
const insertJobs = perSchema(
  (schema) => `
  INSERT INTO ${schema}.jobs AS j (type, payload, run_at, priority, max_attempts, key)
  SELECT i.type, i.payload, coalesce(i.run_at, now() + i.delay_ms * interval '1 millisecond'),
         i.priority, i.max_attempts, i.key
  FROM unnest($1::text[], $2::jsonb[], $3::timestamptz[], $4::float8[], $5::int[], $6::int[], $7::text[])
       WITH ORDINALITY AS i(type, payload, run_at, delay_ms, priority, max_attempts, key, n)
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
 * key is held by a live job returns that job instead of creating one.
 */
export const enqueueJobs = async (
  db: Queryable,
  specs: readonly JobSpec[],
  options: SchemaOption = {},
): Promise<Job[]> => {
  const checked = specs.map(checkJobSpec);
  if (checked.length === 0) return [];
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const { rows } = await db.query<Job>({
    text: insertJobs(schema),
    values: [
      checked.map((s) => s.type),
      checked.map((s) => s.payloadJson),
      checked.map((s) => s.runAt),
      checked.map((s) => s.delayMs),
      checked.map((s) => s.priority),
      checked.map((s) => s.maxAttempts),
      checked.map((s) => s.key),
    ],
  });
  const byKey = new Map<string, Job>();
  const unkeyed: Job[] = [];
  for (const row of rows) {
    if (row.key === null) unkeyed.push(row);
    else byKey.set(row.key, row);
  }
  const missingKeys = checked.flatMap((s) => (s.key !== null && !byKey.has(s.key) ? [s.key] : []));
  if (missingKeys.length > 0) {
    const live = await db.query<Job>({ text: selectLiveByKey(schema), values: [missingKeys] });
    for (const row of live.rows) byKey.set(row.key!, row);
  }
  let next = 0;
  return checked.map((spec) => {
    if (spec.key === null) return unkeyed[next++]!;
    const job = byKey.get(spec.key);
    if (job === undefined) {
      // Only reachable when the winner is invisible to the caller's snapshot (REPEATABLE READ).
      throw new Error(
        `picket: job "${spec.type}" with key ${JSON.stringify(spec.key)} was not created because a live job holds that key, ` +
          `but that job is not visible in this transaction's snapshot; enqueue in a READ COMMITTED transaction.`,
      );
    }
    return job;
  });
};

/** Enqueues one job; see enqueueJobs. */
export const enqueueJob = async (db: Queryable, spec: JobSpec, options: SchemaOption = {}): Promise<Job> =>
  (await enqueueJobs(db, [spec], options))[0]!;
