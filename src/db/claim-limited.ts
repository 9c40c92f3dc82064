// The slow claim: jobs that name a serial queue, and jobs of tasks with cluster-wide limits. One
// round trip to claim_limited() (migration 0007), which serialises these claims on an advisory
// lock and counts processing rows and recent starts under it; the argument for why that is enough
// is written beside the function. Or to try_claim_limited() (0010), which claims only if no other
// slow claim holds the lock. The fast claim (claim.ts) never takes these jobs.
import { checkWant, type ClaimWant } from "./claim.ts";
import { InvalidConfigError } from "./errors.ts";
import { unstorableText } from "./storable-json.ts";
import { DEFAULT_MAX_ATTEMPTS } from "./job-spec.ts";
import type { ClaimedJob } from "./job-row.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

/** A task's cluster-wide limits, as the claiming worker configures them. */
export interface TaskLimits {
  /** At most this many jobs of the task processing at once across all workers. */
  clusterConcurrency?: number;
  /** At most `max` claims (starts) of the task in any window of `windowMs` (a sliding window), across all workers. */
  rateLimit?: { max: number; windowMs: number };
}

/** What one worker wants of one task type in a slow claim: a ClaimWant and the task's limits. */
export interface LimitedClaimWant extends ClaimWant, TaskLimits {}

export interface LimitedClaimOptions extends StatementOptions {
  /** Concurrency of named queues; others get `defaultQueueConcurrency`. */
  queues?: Readonly<Record<string, { concurrency: number }>>;
  /** Concurrency of a queue not named in `queues`; default 1 (serial). */
  defaultQueueConcurrency?: number;
  /** Most jobs in all; default the sum of the limits. */
  total?: number;
  /** The tokens the claim gives out, in order (drawClaimTokens(total)). */
  tokens: readonly string[];
  /**
   * Claim nothing rather than wait while another slow claim of this schema runs: the result is
   * then "busy". Default false (wait for it).
   */
  unlessBusy?: boolean;
}

/** A claimed job as the slow claim returns it: also the queue it holds, if any. */
export interface LimitedClaimedJob extends ClaimedJob {
  queue: string | null;
}

// Pauses (0012) reach the function as the worker's own settings would: a paused task's budget is
// 0 (its jobs are not taken, and a queue whose head is one of them waits, in order), and a paused
// queue's concurrency is 0 (array_position finds the paused names first). Read in the calling
// statement's snapshot, as the fast claim reads them: a claim that began before a pause committed
// may still take jobs.
const ARGS = (schema: string) => `$1::text, $2::text[],
  ARRAY(SELECT CASE WHEN paused.name IS NULL THEN w.lim ELSE 0 END
        FROM unnest($2::text[], $3::int[]) WITH ORDINALITY AS w(type, lim, ord)
        LEFT JOIN ${schema}.paused AS paused ON paused.kind = 'task' AND paused.name = w.type
        ORDER BY w.ord),
  $4::int[], $5::int[], $6::int[], $7::int[], $8::int[], $9::int[], $10::int[],
  ARRAY(SELECT name FROM ${schema}.paused WHERE kind = 'queue' ORDER BY name) || $11::text[],
  ARRAY(SELECT 0 FROM ${schema}.paused WHERE kind = 'queue' ORDER BY name) || $12::int[],
  $13::int, $14::int, $15::uuid[]`;
const OUTPUT = `o_id AS id, o_type AS type, o_payload AS payload, o_attempts AS attempts, o_max_attempts AS "maxAttempts",
         o_created_at AS "createdAt", o_claim_token AS "claimToken", o_lease_ms AS "leaseMs", o_ready_ms AS "readyMs", o_queue AS queue`;
const claimLimitedSql = perSchema((schema) => `SELECT ${OUTPUT} FROM ${schema}.claim_limited(${ARGS(schema)})`);
const tryClaimLimitedSql = perSchema((schema) => `SELECT o_busy AS busy, ${OUTPUT} FROM ${schema}.try_claim_limited(${ARGS(schema)})`);

const MAX_INT = 2_147_483_647;

const positiveInt = (what: string, value: unknown): number => {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > MAX_INT) {
    throw new InvalidConfigError(`picket: ${what} must be an integer from 1 to ${MAX_INT} (got ${String(value)}).`);
  }
  return value;
};

/** Checks a task's limits; throws InvalidConfigError naming what is wrong. */
export const checkTaskLimits = (task: string, limits: TaskLimits): void => {
  if (limits.clusterConcurrency !== undefined) positiveInt(`task "${task}": clusterConcurrency`, limits.clusterConcurrency);
  if (limits.rateLimit !== undefined) {
    if (typeof limits.rateLimit !== "object" || limits.rateLimit === null) {
      throw new InvalidConfigError(`picket: task "${task}": rateLimit must be { max, windowMs }, e.g. { max: 10, windowMs: 1000 } (got ${String(limits.rateLimit)}).`);
    }
    positiveInt(`task "${task}": rateLimit.max`, limits.rateLimit.max);
    positiveInt(`task "${task}": rateLimit.windowMs`, limits.rateLimit.windowMs);
  }
};

/** Checks a queue name: 1 to 128 characters. */
export const checkQueueName = (queue: unknown, where: string): string => {
  if (typeof queue !== "string" || queue.length === 0 || queue.length > 128) {
    throw new InvalidConfigError(`picket: ${where}: a queue name must be a string of 1 to 128 characters (got ${JSON.stringify(queue)}).`);
  }
  // No job is ever in such a queue: enqueue refuses the name (job-spec.ts), so the setting would never apply.
  const why = unstorableText(queue);
  if (why !== null) throw new InvalidConfigError(`picket: ${where}: the queue name ${JSON.stringify(queue)} ${why}.`);
  return queue;
};

/**
 * Claims, in one round trip, the queued jobs whose queues have room (in run_at, id order within
 * each queue) and the jobs of limited tasks that their limits allow, for `workerId`. Every claim
 * of such jobs must come through here: the fast claim leaves them alone. With `unlessBusy`, claims
 * nothing and answers "busy" when another slow claim of the schema is running.
 */
export function claimLimited(db: Queryable, workerId: string, wants: readonly LimitedClaimWant[], options: LimitedClaimOptions & { unlessBusy?: false }): Promise<LimitedClaimedJob[]>;
export function claimLimited(db: Queryable, workerId: string, wants: readonly LimitedClaimWant[], options: LimitedClaimOptions): Promise<LimitedClaimedJob[] | "busy">;
export async function claimLimited(
  db: Queryable,
  workerId: string,
  wants: readonly LimitedClaimWant[],
  options: LimitedClaimOptions,
): Promise<LimitedClaimedJob[] | "busy"> {
  wants.forEach((want) => {
    checkWant(want);
    checkTaskLimits(want.type, want);
  });
  const total = options.total ?? wants.reduce((sum, want) => sum + want.limit, 0);
  if (wants.length === 0 || total <= 0) return [];
  if (options.tokens.length < total) {
    throw new InvalidConfigError(`picket: a claim of up to ${total} jobs needs as many tokens (got ${options.tokens.length}); draw them with drawClaimTokens(total).`);
  }
  const queues = Object.entries(options.queues ?? {});
  queues.forEach(([name, { concurrency }]) => positiveInt(`queue "${checkQueueName(name, "queues")}": concurrency`, concurrency));
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const unlessBusy = options.unlessBusy === true;
  const { rows } = await runStatement<LimitedClaimedJob & { busy?: boolean }>(
    db,
    {
      name: unlessBusy ? `picket_try_claim_limited_${schema}` : `picket_claim_limited_${schema}`,
      text: unlessBusy ? tryClaimLimitedSql(schema) : claimLimitedSql(schema),
      values: [
        workerId,
        wants.map((w) => w.type),
        wants.map((w) => w.limit),
        wants.map((w) => w.leaseMs),
        wants.map((w) => w.backoffBaseMs),
        wants.map((w) => w.backoffMaxMs),
        wants.map((w) => w.maxAttempts ?? DEFAULT_MAX_ATTEMPTS),
        wants.map((w) => w.clusterConcurrency ?? null),
        wants.map((w) => w.rateLimit?.max ?? null),
        wants.map((w) => w.rateLimit?.windowMs ?? null),
        queues.map(([name]) => name),
        queues.map(([, { concurrency }]) => concurrency),
        positiveInt("defaultQueueConcurrency", options.defaultQueueConcurrency ?? 1),
        total,
        options.tokens.slice(0, total),
      ],
    },
    options,
  );
  if (!unlessBusy) return rows;
  if (rows[0]?.busy === true) return "busy";
  for (const row of rows) delete row.busy;
  return rows;
}
