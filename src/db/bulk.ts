// Bulk actions over a filter, as an operator runs them during an incident: retry every dead job of
// a task, cancel the scheduled jobs of a queue, delete completed jobs finished before a time.
//
// First the count (countBulk), which the operator confirms; then the action (applyBulk) runs the
// same admin statement a single job's action runs (admin.ts), on batches of ids read in the
// state's index order, each batch its own short transaction, and stops at the count confirmed:
// jobs that came to match since are not touched unasked. Each job's history records the action
// (but a deleted job's, which is gone), as a single job's action would.
import { ADMIN_STATEMENTS, appliesLiveWorkflow, retryDeadJob, type AdminAction } from "./admin.ts";
import { InvalidJobError, isUniqueViolation } from "./errors.ts";
import { checkOperatorName } from "./job-history.ts";
import { STATES, type BrowseState } from "./job-browser.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

/** The jobs a bulk action takes: a state's, of a task or queue, whose state's time is before `before`. */
export interface BulkFilter {
  state: BrowseState;
  task?: string;
  queue?: string;
  before?: Date;
}

/** The states each action can change: what the single job's action would refuse is not offered. */
export const BULK_STATES: Record<AdminAction, readonly BrowseState[]> = {
  retry: ["dead"],
  cancel: ["ready", "scheduled", "retrying", "waiting", "running"],
  "run-now": ["scheduled", "retrying"],
  delete: ["dead", "completed", "cancelled"],
};

export const BULK_BATCH = 500;

export interface BulkResult {
  /** Jobs the action changed. */
  applied: number;
  /** Jobs it found but left: another session changed them first, or (retry) their key is held by a live job. */
  skipped: number;
  batches: number;
}

// $1 task, $2 queue, $3 before; `leaves` (a parameter's number) is true for the actions that leave
// the jobs applying a live workflow's events (cancel; delete of dead jobs): neither counted nor taken.
const filterSql = (schema: string, q: (typeof STATES)[BrowseState], leaves: string) =>
  `${q.where}${q.also ? ` AND ${q.also}` : ""} AND ($1::text IS NULL OR j.type = $1::text) AND ($2::text IS NULL OR j.queue = $2::text)
   AND ${q.time} < coalesce($3::timestamptz, 'infinity') AND NOT (${leaves}::boolean AND ${appliesLiveWorkflow(schema, "j")})`;

const countSql = perSchema((schema) =>
  Object.fromEntries(Object.entries(STATES).map(([state, q]) => [state, `SELECT count(*)::int AS n FROM ${schema}.jobs AS j WHERE ${filterSql(schema, q, "$4")}`])),
);

// A batch: the next ids in the state's index order after the previous batch's last ($4, $5: its
// time to the microsecond and its id), so a job left by a batch is never read again.
const batchSql = perSchema((schema) =>
  Object.fromEntries(
    Object.entries(STATES).map(([state, q]) => [
      state,
      `SELECT j.id, to_char(${q.time} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at FROM ${schema}.jobs AS j
       WHERE ${filterSql(schema, q, "$7")} AND (${q.time}, j.id) > (coalesce($4::timestamptz, '-infinity'), coalesce($5::bigint, 0))
       ORDER BY ${q.time}, j.id LIMIT $6::int`,
    ]),
  ),
);

/** Whether the action leaves a live workflow's applier jobs, as the single job's cancel and delete (of a dead one) do. */
const leavesAppliers = (action: AdminAction, state: BrowseState): boolean => action === "cancel" || (action === "delete" && state === "dead");

const checked = (action: AdminAction, filter: BulkFilter): [string | null, string | null, Date | null] => {
  const allowed = BULK_STATES[action];
  if (allowed === undefined) throw new InvalidJobError(`picket: a bulk action is one of ${Object.keys(BULK_STATES).join(", ")} (got ${JSON.stringify(action)}).`);
  if (!allowed.includes(filter.state)) {
    throw new InvalidJobError(`picket: ${action} applies to ${allowed.join(", ")} jobs, not ${JSON.stringify(filter.state)} ones.`);
  }
  for (const name of ["task", "queue"] as const) {
    const value = filter[name];
    if (value !== undefined && (typeof value !== "string" || value === "" || value.length > 200)) {
      throw new InvalidJobError(`picket: bulk filter ${name} must be a name of 1 to 200 characters (got ${JSON.stringify(value)}).`);
    }
  }
  if (filter.before !== undefined && (!(filter.before instanceof Date) || Number.isNaN(filter.before.getTime()))) {
    throw new InvalidJobError(`picket: bulk filter before must be a valid Date (got ${String(filter.before)}).`);
  }
  return [filter.task ?? null, filter.queue ?? null, filter.before ?? null];
};

/** How many jobs a bulk action over `filter` would take now: the number the operator confirms. */
export const countBulk = async (db: Queryable, action: AdminAction, filter: BulkFilter, options: StatementOptions = {}): Promise<number> => {
  const values = checked(action, filter);
  const { rows } = await runStatement<{ n: number }>(db, { text: countSql(options.schema ?? DEFAULT_SCHEMA)[filter.state]!, values: [...values, leavesAppliers(action, filter.state)] }, options);
  return rows[0]!.n;
};

/**
 * Runs `action` on at most `expected` jobs matching `filter` (the count the operator confirmed), in
 * batches of `batchSize`, each batch one statement of the single job's action. Returns how many it
 * changed and how many it found but left.
 */
export const applyBulk = async (
  db: Queryable,
  action: AdminAction,
  filter: BulkFilter,
  options: StatementOptions & { expected: number; by?: string; batchSize?: number },
): Promise<BulkResult> => {
  const values = checked(action, filter);
  const by = checkOperatorName(options.by);
  const batchSize = options.batchSize ?? BULK_BATCH;
  if (!Number.isInteger(options.expected) || options.expected < 0) throw new InvalidJobError(`picket: a bulk action's expected count must be an integer ≥ 0 (got ${String(options.expected)}).`);
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) throw new InvalidJobError(`picket: a bulk action's batch size must be an integer from 1 to 10000 (got ${String(batchSize)}).`);
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const statement = ADMIN_STATEMENTS[action];
  const result: BulkResult = { applied: 0, skipped: 0, batches: 0 };
  let after: [string | null, string | null] = [null, null];
  let found = 0;
  while (found < options.expected) {
    const { rows: batch } = await runStatement<{ id: string; at: string }>(
      db,
      { text: batchSql(schema)[filter.state]!, values: [...values, ...after, Math.min(batchSize, options.expected - found), leavesAppliers(action, filter.state)] },
      options,
    );
    if (batch.length === 0) break;
    found += batch.length;
    after = [batch.at(-1)!.at, batch.at(-1)!.id];
    const ids = batch.map((row) => row.id);
    let changed: number;
    try {
      changed = (await runStatement(db, { text: statement.sql(schema), values: statement.recordsWho ? [ids, by] : [ids] }, options)).rows.length;
    } catch (error) {
      // A retried job whose key a live job holds fails the whole batch's statement: the batch is
      // retried one job at a time, and the jobs whose key is taken are left dead.
      if (action !== "retry" || !isUniqueViolation(error)) throw error;
      changed = 0;
      for (const id of ids) if ((await retryDeadJob(db, id, { ...options, ...(by === null ? {} : { by }) })).outcome === "applied") changed += 1;
    }
    result.applied += changed;
    result.skipped += ids.length - changed;
    result.batches += 1;
  }
  return result;
};
