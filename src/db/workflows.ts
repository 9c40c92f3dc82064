// Workflows' SQL: starting an instance and sending it events (inside the caller's transaction), the
// applier's hold of an instance, its read and its one fenced write per event, cancel, retention,
// and what the console and the CLI read. The tables are migration 0018's.
import { InvalidJobError, PicketError } from "./errors.ts";
import { cancelWorkflowJobsSql, isJobId } from "./admin.ts";
import { fence } from "./fenced.ts";
import { checkOperatorName, operatorSet } from "./job-history.ts";
import { APPLIER_TASK, CHILD_CANCEL_TASK, checkTaskName, MAX_KEY_LENGTH } from "./job-spec.ts";
import type { JobId, JobStatus } from "./job-row.ts";
import { CANCEL_PREFIX, notifyChannel } from "./notify.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { isPool, runStatement } from "./statement.ts";
import { storableJson, unstorableText } from "./storable-json.ts";

/**
 * The applier's statements are prepared (named per schema), as the worker's other hot statements
 * are: planning the apply, a statement of a dozen parts, took longer than running it. Under a
 * pooler in transaction mode, runStatement sends them unnamed.
 */
const named = (what: string, sql: (schema: string) => string, options: StatementOptions, values: unknown[]) => {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  return { name: `picket_workflow_${what}_${schema}`, text: sql(schema), values };
};

/** Text for error and note: without NUL or lone surrogates (which PostgreSQL refuses), at most 4,000 characters. */
const storableText = (text: string | null | undefined): string | null =>
  text === null || text === undefined ? null : text.replaceAll("\u0000", "").toWellFormed().slice(0, 4_000);

export type WorkflowStatus = "starting" | "running" | "done" | "failed" | "cancelled";
export const WORKFLOW_STATUSES: readonly WorkflowStatus[] = ["starting", "running", "done", "failed", "cancelled"];

export interface Workflow {
  id: JobId;
  name: string;
  key: string | null;
  version: string | null;
  fingerprint: string | null;
  status: WorkflowStatus;
  /** XState's state value: "charging", or { payment: "charging", shipping: "waiting" }. */
  state: unknown;
  context: unknown;
  /** Invocation id -> the job running it, for the tasks in flight. */
  tasks: Record<string, JobId>;
  /** Invocation id -> the child workflow it started, for the children in flight. */
  children: Record<string, JobId>;
  /** The workflow that invoked this one as a child (childWorkflow), if one did. */
  parentId: JobId | null;
  seq: number;
  output: unknown;
  error: string | null;
  createdAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
}

const workflowColumns = (w: string) => `
  ${w}.id::text AS id, ${w}.name, ${w}.key, ${w}.version, ${w}.fingerprint, ${w}.status, ${w}.state,
  ${w}.snapshot -> 'context' AS context, ${w}.tasks, ${w}.children, ${w}.parent_id::text AS "parentId", ${w}.seq, ${w}.output, ${w}.error,
  ${w}.created_at AS "createdAt", ${w}.updated_at AS "updatedAt", ${w}.finished_at AS "finishedAt"`;

export class WorkflowNotFoundError extends PicketError {
  override readonly name = "WorkflowNotFoundError";
}

/** An event sent to an instance that has ended: nothing was sent. */
export class WorkflowFinishedError extends PicketError {
  override readonly name = "WorkflowFinishedError";
  readonly status: WorkflowStatus;
  constructor(id: string, status: WorkflowStatus) {
    super(`picket: workflow ${id} has finished (${status}); an event cannot change it, and none was sent.`);
    this.status = status;
  }
}

const checkWorkflowId = (id: JobId | number): string => {
  const text = String(id);
  if (!isJobId(text)) throw new InvalidJobError(`picket: workflow id must be a positive integer; got ${JSON.stringify(id)}.`);
  return text;
};

const checkKey = (key: unknown): string | null => {
  if (key === undefined || key === null) return null;
  if (typeof key !== "string" || key.length === 0 || key.length > MAX_KEY_LENGTH) {
    throw new InvalidJobError(`picket: a workflow key must be a string of 1–${MAX_KEY_LENGTH} characters; got ${JSON.stringify(key)}.`);
  }
  const why = unstorableText(key);
  if (why !== null) throw new InvalidJobError(`picket: the workflow key ${why}.`);
  return key;
};

/** An event a caller sends: an object with a type, JSON-storable; xstate.* types are XState's own and refused. */
const checkEvent = (event: unknown): string => {
  if (typeof event !== "object" || event === null || Array.isArray(event) || typeof (event as { type?: unknown }).type !== "string") {
    throw new InvalidJobError(`picket: a workflow event is an object with a string type, such as { type: "APPROVE" }; got ${JSON.stringify(event)}.`);
  }
  const type = (event as { type: string }).type;
  if (type.length === 0 || type.startsWith("xstate.")) {
    throw new InvalidJobError(`picket: event type ${JSON.stringify(type)} is not one a caller may send: "xstate.*" events come from the workflow's tasks and timers.`);
  }
  return storableJson(event, "workflow event")!;
};

// An instance, its start in its inbox, and the job that applies it: one statement. A key held by
// an instance makes it a no-op; the holder is read back by the next statement.
const startSql = perSchema(
  (schema) => `
  WITH created AS (
    INSERT INTO ${schema}.workflows (name, key) VALUES ($1::text, $2::text)
    ON CONFLICT (name, key) WHERE key IS NOT NULL DO NOTHING
    RETURNING id
  ), inbox AS (
    INSERT INTO ${schema}.workflow_events (workflow_id, kind, event)
    SELECT c.id, 'start', jsonb_build_object('input', $3::jsonb) FROM created AS c
  ), applier AS (
    INSERT INTO ${schema}.jobs (type, payload) SELECT '${APPLIER_TASK}', jsonb_build_object('workflow', c.id) FROM created AS c
  )
  SELECT id::text AS id FROM created`,
);
const byKeySql = perSchema((schema) => `SELECT id::text AS id FROM ${schema}.workflows WHERE name = $1::text AND key = $2::text`);

export interface StartedWorkflow {
  id: JobId;
  /** false: an instance with this key existed, and is returned. */
  created: boolean;
}

/**
 * Starts an instance of workflow `name` with `input` (its machine's input), in the caller's
 * transaction when `db` is a client inside one. A worker that runs the workflow applies the start:
 * the instance pins the version that worker runs. With a `key`, at most one instance of the name
 * holds it, as long as the instance is kept: a second start returns the first.
 */
export const startWorkflow = async (
  db: Queryable,
  workflow: string | { name: string },
  input?: unknown,
  options: StatementOptions & { key?: string } = {},
): Promise<StartedWorkflow> => {
  const name = checkTaskName(typeof workflow === "string" ? workflow : workflow?.name, "workflow");
  const key = checkKey(options.key);
  const json = storableJson(input ?? null, "workflow input");
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const { rows } = await runStatement<{ id: JobId }>(db, { text: startSql(schema), values: [name, key, json] }, options);
  if (rows[0] !== undefined) return { id: rows[0].id, created: true };
  const held = await runStatement<{ id: JobId }>(db, { text: byKeySql(schema), values: [name, key] }, options);
  if (held.rows[0] === undefined) {
    throw new PicketError(`picket: workflow "${name}" with key ${JSON.stringify(key)} was not started because another instance holds the key, and it could not be read back; retry the transaction.`);
  }
  return { id: held.rows[0].id, created: false };
};

// The event goes to the inbox of a live instance, with a job to apply it. Nothing for a finished
// or missing one: the status says which.
// The job may be one already waiting ($4, see sendToWorkflow): an applier job of the instance, due
// and unclaimed, applies every event due when it runs, this one too if it runs after this send
// commits. The send locks it (FOR SHARE) until then, and a claim passes over a locked row (SKIP
// LOCKED), so it does. A row being claimed is locked too, and passed over here (SKIP LOCKED): the
// send enqueues its own; one claimed since this statement began is no longer pending when locked
// (PostgreSQL checks the newest version), so the send enqueues its own then too. Never joined: a
// timer's job, which goes when its timer is cancelled (by an apply, or a cancel of the instance
// that cannot see this event yet, which would leave it with no job at all); and a job that ran
// before, which may fail again and wait out a backoff, or die, with the event behind it. A send
// that joins inserts no job, so the enqueue trigger wakes no worker: it says so itself (a worker
// woken by the job's insert may have passed over it while this send held it). (`joined` is selected
// so that the notify runs: PostgreSQL runs a CTE only as far as something reads it.)
const sendSql = perSchema(
  (schema) => `
  WITH target AS (SELECT w.id, w.status FROM ${schema}.workflows AS w WHERE w.id = $1::bigint), live AS (
    SELECT t.id FROM target AS t WHERE t.status IN ('starting', 'running')
  ), inbox AS (
    INSERT INTO ${schema}.workflow_events (workflow_id, kind, event, by) SELECT l.id, 'send', $2::jsonb, $3::text FROM live AS l RETURNING id
  ), waiting AS (
    SELECT a.id FROM live AS l CROSS JOIN LATERAL (
      SELECT j.id FROM ${schema}.jobs AS j
      WHERE $4::boolean AND j.type = '${APPLIER_TASK}' AND j.status = 'pending' AND (j.payload -> 'workflow') = to_jsonb(l.id) AND j.run_at <= now()
        AND j.attempts = 0 AND NOT j.payload ? 'timer'
      LIMIT 1
      FOR SHARE SKIP LOCKED
    ) AS a
  ), applier AS (
    INSERT INTO ${schema}.jobs (type, payload) SELECT '${APPLIER_TASK}', jsonb_build_object('workflow', l.id) FROM live AS l
    WHERE NOT EXISTS (SELECT FROM waiting)
  ), told AS (
    SELECT pg_notify('${notifyChannel(schema)}', '${APPLIER_TASK}') FROM waiting
  )
  SELECT t.status, (SELECT i.id::text FROM inbox AS i) AS event, EXISTS (SELECT FROM told) AS joined FROM target AS t`,
);

/**
 * Sends `event` to instance `id`, in the caller's transaction when `db` is a client inside one;
 * `by` (who sent it) is kept in the instance's history. Events are applied one at a time, in the
 * order they were sent (a timer at its due time). Throws WorkflowNotFoundError for an unknown id and WorkflowFinishedError for
 * an instance that has ended (nothing is sent). An event that commits as the instance ends (a
 * cancel, a final state) is recorded as dropped.
 *
 * Sent on a pool (a transaction of its own), the event joins an applier job of the instance that is
 * due and not yet claimed, if there is one, holding it only while the statement runs. Sent on a
 * caller's client, it always brings a job of its own: the hold would last the caller's transaction,
 * and keep the events already waiting for that job from being applied until it ended.
 */
export const sendToWorkflow = async (
  db: Queryable,
  id: JobId | number,
  event: { type: string } & Record<string, unknown>,
  options: StatementOptions & { by?: string } = {},
): Promise<{ eventId: JobId }> => {
  const workflowId = checkWorkflowId(id);
  const json = checkEvent(event);
  const by = checkOperatorName(options.by);
  const { rows } = await runStatement<{ status: WorkflowStatus; event: JobId | null }>(
    db,
    { text: sendSql(options.schema ?? DEFAULT_SCHEMA), values: [workflowId, json, by, isPool(db)] },
    options,
  );
  const row = rows[0];
  if (row === undefined) throw new WorkflowNotFoundError(`picket: no workflow ${workflowId}.`);
  if (row.event === null) throw new WorkflowFinishedError(workflowId, row.status);
  return { eventId: row.event };
};

/** What the applier reads: the instance, and its next due event. */
export interface ApplyInput {
  id: JobId;
  name: string;
  version: string | null;
  fingerprint: string | null;
  status: WorkflowStatus;
  snapshot: unknown;
  tasks: Record<string, JobId>;
  /** The child workflows in flight: invocation id -> instance id. */
  children: Record<string, JobId>;
  seq: number;
  eventId: JobId | null;
  kind: "start" | "send" | "task" | "timer" | "cancel" | "child" | null;
  event: Record<string, unknown> | null;
  jobId: JobId | null;
  /** How long after it was due the event was read, in milliseconds (a timer's lateness: TimerPolicy). */
  lateMs: number | null;
}

// The instance's next due event: the soonest due, then the first sent. A send is due when it was
// sent (its transaction's start); a timer waits in the inbox until it is due, and after a downtime
// goes before what was sent after its time.
const nextDue = (schema: string, workflow: string, except = "") => `
    SELECT e.id, e.kind, e.event, e.job_id, e.due_at FROM ${schema}.workflow_events AS e
    WHERE e.workflow_id = ${workflow} AND e.applied_at IS NULL AND e.due_at <= now()${except}
    ORDER BY e.due_at, e.id LIMIT 1`;
const nextEvent = (schema: string, w: string) => `LEFT JOIN LATERAL (${nextDue(schema, `${w}.id`)}) AS e ON true`;
const applyColumns = (w: string) => `${w}.id::text AS id, ${w}.name, ${w}.version, ${w}.fingerprint, ${w}.status, ${w}.snapshot, ${w}.tasks, ${w}.children, ${w}.seq,
         e.id::text AS "eventId", e.kind, e.event, e.job_id::text AS "jobId", (extract(epoch FROM now() - e.due_at) * 1000)::float8 AS "lateMs"`;

const readSql = perSchema((schema) => `SELECT ${applyColumns("w")} FROM ${schema}.workflows AS w ${nextEvent(schema, "w")} WHERE w.id = $1::bigint`);

/** The instance and its next due event, read by the applier that holds it. */
export const readForApply = async (db: Queryable, id: JobId, options: StatementOptions = {}): Promise<ApplyInput | null> =>
  (await runStatement<ApplyInput>(db, named("read", readSql, options, [id]), options)).rows[0] ?? null;

// THE HOLD. An applier takes the instance before it applies anything: the hold names its job and
// claim token, and is taken when free, when already its own, or when its holder's claim is no longer
// live (the holder died; its job was swept, cancelled or finished). One statement, under the
// applier's own fence; with the hold, the instance and its next due event. Two appliers taking it at
// once: the second waits for the first's row lock and, re-checking, finds it held. The holder's claim
// is read by a scalar subquery, a probe of the primary key (as NOT EXISTS it was planned as an
// anti-join reading the whole job table).
const holdSql = perSchema(
  (schema) => `
  WITH me AS (
    SELECT j.id FROM ${schema}.jobs AS j WHERE j.id = $2::bigint AND ${fence("j", "$3::uuid")} FOR SHARE OF j
  ), held AS (
    UPDATE ${schema}.workflows AS w SET applier_job = $2::bigint, applier_token = $3::uuid
    FROM me
    WHERE w.id = $1::bigint AND (
      w.applier_job IS NULL OR (w.applier_job = $2::bigint AND w.applier_token = $3::uuid)
      OR NOT coalesce((SELECT ${fence("h", "w.applier_token")} FROM ${schema}.jobs AS h WHERE h.id = w.applier_job), false)
    )
    RETURNING w.*
  )
  SELECT (SELECT count(*) FROM me)::int AS claimed, (SELECT count(*) FROM ${schema}.workflows WHERE id = $1::bigint)::int AS found, ${applyColumns("w")}
  FROM (SELECT 1) AS one LEFT JOIN held AS w ON true ${nextEvent(schema, "w")}`,
);

export type Hold = { outcome: "held"; row: ApplyInput } | { outcome: "busy" | "fenced" | "missing" };

/** Takes the instance for the applier `claim` (see THE HOLD): held, with the instance and its next due event; or why not. */
export const holdForApply = async (db: Queryable, id: JobId, claim: { id: JobId; token: string }, options: StatementOptions = {}): Promise<Hold> => {
  const { rows } = await runStatement<ApplyInput & { claimed: number; found: number }>(
    db,
    named("hold", holdSql, options, [id, claim.id, claim.token]),
    options,
  );
  const { claimed, found, ...row } = rows[0]!;
  if (claimed === 0) return { outcome: "fenced" };
  if (found === 0) return { outcome: "missing" };
  return row.id === null ? { outcome: "busy" } : { outcome: "held", row };
};

const releaseSql = perSchema(
  (schema) => `UPDATE ${schema}.workflows SET applier_job = NULL, applier_token = NULL WHERE id = $1::bigint AND applier_job = $2::bigint AND applier_token = $3::uuid`,
);
const dueSql = perSchema(
  (schema) => `SELECT EXISTS (SELECT 1 FROM ${schema}.workflow_events AS e WHERE e.workflow_id = $1::bigint AND e.applied_at IS NULL AND e.due_at <= now()) AS due`,
);
const continueSql = perSchema((schema) => `INSERT INTO ${schema}.jobs (type, payload) VALUES ('${APPLIER_TASK}', jsonb_build_object('workflow', $1::bigint))`);

/**
 * Lets go of the instance, then says whether an event is due. Two statements, in that order: an
 * event that committed before the release is seen by the second; one that commits after finds the
 * instance free when its own applier runs. (An applier that found the instance held ended, leaving
 * its event to the holder: this is how the holder sees it.) An apply that found no next event let
 * go in its own write: after it, only the second statement is run (eventsDue).
 */
export const releaseHold = async (db: Queryable, id: JobId, claim: { id: JobId; token: string }, options: StatementOptions = {}): Promise<{ due: boolean }> => {
  await runStatement(db, named("release", releaseSql, options, [id, claim.id, claim.token]), options);
  return eventsDue(db, id, options);
};

/** Whether an event of the instance is due, read after the hold was let go (releaseHold). */
export const eventsDue = async (db: Queryable, id: JobId, options: StatementOptions = {}): Promise<{ due: boolean }> => {
  const { rows } = await runStatement<{ due: boolean }>(db, named("due", dueSql, options, [id]), options);
  return { due: rows[0]!.due };
};

/** One more applier job for the instance: a run that stops with events due (its bound, a drain) leaves them to it. */
export const continueApplying = async (db: Queryable, id: JobId, options: StatementOptions = {}): Promise<void> => {
  await runStatement(db, { text: continueSql(options.schema ?? DEFAULT_SCHEMA), values: [id] }, options);
};

/** One event's effects, as the applier computed them from the machine. */
export interface ApplyWrite {
  workflowId: JobId;
  /** The seq read: the write applies only if no other write came between. */
  seq: number;
  eventId: JobId;
  claim: { id: JobId; token: string };
  snapshot: unknown;
  state: unknown;
  status: "running" | "done" | "failed";
  output?: unknown;
  error?: string | null;
  version: string;
  fingerprint: string;
  outcome: "applied" | "dropped";
  note: string | null;
  startTasks: Array<{ invokeId: string; type: string; payload: unknown; priority?: number; queue?: string; maxAttempts?: number }>;
  /** Invocations stopped: their ids, and the jobs that ran them. */
  stopTasks: Array<{ invokeId: string; jobId: JobId }>;
  startTimers: Array<{ sendId: string; event: unknown; delayMs: number }>;
  cancelTimers: string[];
  /** Child workflows started: the invocation, the workflow's name, its input. */
  startChildren: Array<{ invokeId: string; name: string; input: unknown }>;
  /** Child workflows no longer in flight: their invocations and instances, each cancelled by a job unless it has ended (its end is this event). */
  stopChildren: Array<{ invokeId: string; workflowId: JobId; ended: boolean }>;
}

// THE APPLY. One statement: the claim of the applier job is checked and held (FOR SHARE: a sweep or
// a cancel of it waits until this commits, and one that came first makes the fence fail), the
// instance moves from the seq read to the next (compare-and-set: a concurrent applier that wrote
// first makes this one write nothing), and only then, each reading the instance's row: the event is
// consumed, the tasks started are enqueued (ids drawn first, so the instance's task map names them),
// the tasks stopped are cancelled (a processing one told at commit, as cancelJob tells it), timers
// set (an inbox row due later and the job that applies it then) and cancelled (both deleted),
// child workflows started (the instance, ids drawn first as the tasks' are, its start and its job)
// and stopped (a job cancels each). A child's end is told to its parent by a trigger
// (workflow_child_ended, migration 0020), whatever statement ends it.
// Invariant 14: each part reaches its rows by a key the statement is given ($1, the instance; job
// ids probed one by one through the primary key, as the fenced writes do), gated on the instance's
// write by a one-time EXISTS: planned on an empty table, a join to the written row put a scan of the
// whole inbox first, and a job id list beside a status test drew the planner to the pending index.
// It returns the instance as written with its next due event (nxt), so that a run applying a
// backlog does not read again between events; with none, it lets go of the hold (the run's release,
// in the same write: the run then only looks for events due, in a statement after this commits).
// The hold is the writer's: an applier applies only while holding, and a hold moves only from a
// claim that is no longer live, whose writes the fence refuses.
// That event is read with the statement's snapshot, in which the event consumed and the timers
// deleted here are still there: both are left out.
const cancelledTimer = (e: string) => `${e}.kind = 'timer' AND (${e}.send_id = ANY ($25::text[]) OR $8::text <> 'running')`;
// Two variants of one statement: with the child workflows' parts only when the write starts or
// stops one. Each INSERT part costs its table's indexes opened even when it inserts nothing, and
// most applies touch no child (bench/workflows.ts, events sent, one run each: 1,265 µs of
// PostgreSQL CPU per event with the child parts always there, 1,108 µs with them left out when
// unused, 1,056 µs before child workflows).
const applyStatement = (schema: string, children: boolean) => `
  WITH claim AS (
    SELECT j.id FROM ${schema}.jobs AS j WHERE j.id = $3::bigint AND ${fence("j", "$4::uuid")} FOR SHARE OF j
  ), nxt AS (${nextDue(schema, "$1::bigint", ` AND e.id <> $5::bigint AND NOT (${cancelledTimer("e")})`)}
  ), ids AS (
    SELECT ARRAY(SELECT nextval(pg_get_serial_sequence('${schema}.jobs', 'id')) FROM generate_series(1, cardinality($15::text[]) + cardinality($22::text[]))) AS a
  ),${children ? ` kid_ids AS (
    SELECT ARRAY(SELECT nextval(pg_get_serial_sequence('${schema}.workflows', 'id')) FROM generate_series(1, cardinality($27::text[]))) AS a
  ),` : ""} wf AS (
    UPDATE ${schema}.workflows AS w
    SET snapshot = $6::jsonb, state = $7::jsonb, status = $8::text, output = $9::jsonb, error = $10::text, version = $11::text, fingerprint = $12::text,
        seq = w.seq + 1, updated_at = now(), finished_at = CASE WHEN $8::text IN ('done', 'failed') THEN now() END,
        tasks = (w.tasks - $21::text[]) || coalesce((
          SELECT jsonb_object_agg(t.invoke, t.id::text) FROM unnest($15::text[], (SELECT a[1:cardinality($15::text[])] FROM ids)) AS t(invoke, id)
        ), '{}'::jsonb),
${children ? `        children = (w.children - $30::text[]) || coalesce((
          SELECT jsonb_object_agg(k.invoke, k.id::text) FROM unnest($27::text[], (SELECT a FROM kid_ids)) AS k(invoke, id)
        ), '{}'::jsonb),
` : ""}        applier_job = CASE WHEN EXISTS (SELECT 1 FROM nxt) THEN w.applier_job END, applier_token = CASE WHEN EXISTS (SELECT 1 FROM nxt) THEN w.applier_token END
    FROM claim
    WHERE w.id = $1::bigint AND w.seq = $2::int AND w.status IN ('starting', 'running')
    RETURNING w.*
  ), consumed AS (
    -- Unconsumed: the seq read proves it (every write that consumes an event of a live instance moves its seq).
    UPDATE ${schema}.workflow_events AS e SET applied_at = now(), seq = wf.seq, outcome = $13::text, note = $14::text, state = $7::jsonb
    FROM wf WHERE e.id = $5::bigint
  ), started AS (
    INSERT INTO ${schema}.jobs (id, type, payload, priority, queue, max_attempts, workflow_id) OVERRIDING SYSTEM VALUE
    SELECT t.id, t.type, t.payload, coalesce(t.priority, 0), t.queue, t.max_attempts, wf.id
    FROM wf, unnest((SELECT a[1:cardinality($15::text[])] FROM ids), $16::text[], $17::jsonb[], $18::int[], $19::text[], $20::int[])
      AS t(id, type, payload, priority, queue, max_attempts)
  ), stopped AS (
    UPDATE ${schema}.jobs AS j
    SET status = 'cancelled', finished_at = now(), lock_until = NULL, ${operatorSet(schema, "cancel", "'workflow'")}, updated_at = now()
    WHERE j.id = ANY (ARRAY(
      SELECT p.id FROM unnest($26::bigint[]) AS s(id)
      JOIN LATERAL (
        SELECT p.id FROM ${schema}.jobs AS p WHERE p.id = s.id AND p.workflow_id = $1::bigint AND p.status IN ('pending', 'processing') FOR UPDATE
      ) AS p ON true
      WHERE EXISTS (SELECT 1 FROM wf)
    ))
    RETURNING j.id, j.claim_token
  ), told AS (
    SELECT pg_notify('${notifyChannel(schema)}', '${CANCEL_PREFIX}' || s.id || ':' || s.claim_token) FROM stopped AS s WHERE s.claim_token IS NOT NULL
  ), wakes AS (
    -- Marked as a timer's: a send never joins it (sendSql).
    INSERT INTO ${schema}.jobs (id, type, payload, run_at) OVERRIDING SYSTEM VALUE
    SELECT t.id, '${APPLIER_TASK}', jsonb_build_object('workflow', wf.id, 'timer', true), now() + t.delay_ms * interval '1 millisecond'
    FROM wf, unnest((SELECT a[cardinality($15::text[]) + 1:] FROM ids), $24::float8[]) AS t(id, delay_ms)
  ), timers AS (
    INSERT INTO ${schema}.workflow_events (workflow_id, kind, event, due_at, send_id, wake_job)
    SELECT wf.id, 'timer', t.event, now() + t.delay_ms * interval '1 millisecond', t.send_id, t.id
    FROM wf, unnest((SELECT a[cardinality($15::text[]) + 1:] FROM ids), $22::text[], $23::jsonb[], $24::float8[]) AS t(id, send_id, event, delay_ms)
  ), unset AS (
    DELETE FROM ${schema}.workflow_events AS e
    WHERE e.workflow_id = $1::bigint AND e.applied_at IS NULL AND ${cancelledTimer("e")} AND e.id <> $5::bigint
      AND EXISTS (SELECT 1 FROM wf)
    RETURNING e.id, e.wake_job
  ),${children ? ` kids AS (
    INSERT INTO ${schema}.workflows (id, name, parent_id, parent_invoke) OVERRIDING SYSTEM VALUE
    SELECT k.id, k.name, wf.id, k.invoke FROM wf, unnest((SELECT a FROM kid_ids), $27::text[], $28::text[]) AS k(id, invoke, name)
  ), kid_starts AS (
    INSERT INTO ${schema}.workflow_events (workflow_id, kind, event)
    SELECT k.id, 'start', jsonb_build_object('input', k.input) FROM wf, unnest((SELECT a FROM kid_ids), $29::jsonb[]) AS k(id, input)
  ), kid_jobs AS (
    INSERT INTO ${schema}.jobs (type, payload)
    SELECT '${APPLIER_TASK}', jsonb_build_object('workflow', k.id) FROM wf, unnest((SELECT a FROM kid_ids)) AS k(id)
    UNION ALL
    -- A child stopped is cancelled by a job of its own, as cancelWorkflow cancels it.
    SELECT '${CHILD_CANCEL_TASK}', jsonb_build_object('workflow', s.id, 'parent', wf.id) FROM wf, unnest($31::bigint[]) AS s(id)
  ),` : ""} unwoken AS (
    DELETE FROM ${schema}.jobs AS j WHERE j.id = ANY (ARRAY(
      SELECT p.id FROM unset AS u JOIN LATERAL (SELECT p.id FROM ${schema}.jobs AS p WHERE p.id = u.wake_job AND p.status = 'pending' FOR UPDATE) AS p ON true
    ))
  )
  SELECT (SELECT count(*) FROM claim)::int AS claimed, (SELECT count(*) FROM told)::int AS told, ${applyColumns("w")}
  FROM (SELECT 1) AS one LEFT JOIN wf AS w ON true LEFT JOIN nxt AS e ON w.id IS NOT NULL`;
const applySql = perSchema((schema) => applyStatement(schema, false));
const applyWithChildrenSql = perSchema((schema) => applyStatement(schema, true));

/**
 * What an apply did: "applied"; "fenced", the applier's claim was lost (nothing written, and the
 * run must stop); "raced", another applier wrote the instance first (read it again).
 */
export type ApplyOutcome = "applied" | "fenced" | "raced";

/**
 * What an apply did and, when applied, the instance as written with its next due event (none:
 * eventId null, and the apply let go of the hold).
 */
export interface ApplyResult {
  outcome: ApplyOutcome;
  next: ApplyInput | null;
}

/** Applies one event's effects in one statement. */
export const writeApply = async (db: Queryable, write: ApplyWrite, options: StatementOptions = {}): Promise<ApplyResult> => {
  const tasks = write.startTasks;
  const json = (value: unknown, what: string) => storableJson(value, what);
  const values: unknown[] = [
    write.workflowId,
    write.seq,
    write.claim.id,
    write.claim.token,
    write.eventId,
    json(write.snapshot, "workflow snapshot"),
    json(write.state, "workflow state"),
    write.status,
    json(write.output, "workflow output"),
    storableText(write.error),
    write.version,
    write.fingerprint,
    write.outcome,
    storableText(write.note),
    tasks.map((t) => t.invokeId),
    tasks.map((t) => t.type),
    tasks.map((t) => json(t.payload ?? null, `input of task "${t.type}"`)),
    tasks.map((t) => t.priority ?? null),
    tasks.map((t) => t.queue ?? null),
    tasks.map((t) => t.maxAttempts ?? null),
    write.stopTasks.map((t) => t.invokeId),
    write.startTimers.map((t) => t.sendId),
    write.startTimers.map((t) => json(t.event, "delayed event")),
    write.startTimers.map((t) => t.delayMs),
    write.cancelTimers,
    write.stopTasks.map((t) => t.jobId),
  ];
  const children = write.startChildren.length + write.stopChildren.length > 0;
  if (children) {
    values.push(
      write.startChildren.map((c) => c.invokeId),
      write.startChildren.map((c) => c.name),
      write.startChildren.map((c) => json(c.input ?? null, `input of child workflow "${c.name}"`)),
      write.stopChildren.map((c) => c.invokeId),
      write.stopChildren.filter((c) => !c.ended).map((c) => c.workflowId),
    );
  }
  const { rows } = await runStatement<Omit<ApplyInput, "id"> & { id: JobId | null; claimed: number; told: number }>(
    db,
    children ? named("apply_children", applyWithChildrenSql, options, values) : named("apply", applySql, options, values),
    options,
  );
  // told is selected only so that the notifications are sent (a CTE no one reads is not run).
  const { claimed, told: _told, ...next } = rows[0]!;
  if (next.id !== null) return { outcome: "applied", next: next as ApplyInput };
  return { outcome: claimed === 0 ? "fenced" : "raced", next: null };
};

// An event of a finished instance is consumed as dropped, under the applier's claim.
const dropSql = perSchema(
  (schema) => `
  WITH claim AS (
    SELECT j.id FROM ${schema}.jobs AS j WHERE j.id = $2::bigint AND ${fence("j", "$3::uuid")} FOR SHARE OF j
  ), dropped AS (
    UPDATE ${schema}.workflow_events AS e SET applied_at = now(), outcome = 'dropped', note = $4::text
    FROM claim WHERE e.id = $1::bigint AND e.applied_at IS NULL
    RETURNING e.id
  )
  SELECT (SELECT count(*) FROM dropped)::int AS written, (SELECT count(*) FROM claim)::int AS claimed`,
);

export const dropEvent = async (db: Queryable, eventId: JobId, claim: { id: JobId; token: string }, note: string, options: StatementOptions = {}): Promise<ApplyOutcome> => {
  const { rows } = await runStatement<{ written: number; claimed: number }>(
    db,
    named("drop", dropSql, options, [eventId, claim.id, claim.token, note]),
    options,
  );
  const row = rows[0]!;
  return row.written === 1 ? "applied" : row.claimed === 0 ? "fenced" : "raced";
};

// Cancel, in statements of one transaction. The first ends the instance (waiting for an apply
// in progress: the row lock), records the cancel and enqueues a cancel of each of its children in
// flight (its parent, if it is a child, is told by a trigger); from its commit on, no apply can write. The
// next ones, with snapshots taken after the first, drop the inbox, delete the timers' jobs and
// cancel the live tasks (a processing one told at commit): an apply that committed while the first
// waited is seen there, its tasks and timers with it. (In one statement, they were not: the rest of
// a statement keeps the snapshot it started with.)
const cancelSql = perSchema(
  (schema) => `
  WITH live AS (
    -- Locked first (the EXISTS below runs it before the update), so that its children are read as
    -- the last apply left them: the UPDATE's RETURNING gives only the new row. (Joined to the
    -- update instead, it was planned on an empty table as a scan of every live instance.)
    SELECT w.children FROM ${schema}.workflows AS w WHERE w.id = $1::bigint AND w.status IN ('starting', 'running') FOR UPDATE
  ), wf AS (
    UPDATE ${schema}.workflows AS w SET status = 'cancelled', finished_at = now(), updated_at = now(), tasks = '{}'::jsonb, children = '{}'::jsonb
    WHERE w.id = $1::bigint AND w.status IN ('starting', 'running') AND EXISTS (SELECT 1 FROM live)
    RETURNING w.id, (SELECT l.children FROM live AS l) AS children
  ), recorded AS (
    INSERT INTO ${schema}.workflow_events (workflow_id, kind, event, applied_at, outcome, by)
    SELECT wf.id, 'cancel', jsonb_build_object('type', 'cancel'), now(), 'applied', $2::text FROM wf
  ), stops AS (
    -- A job to cancel each child in flight (its own children after it).
    INSERT INTO ${schema}.jobs (type, payload)
    SELECT '${CHILD_CANCEL_TASK}', jsonb_build_object('workflow', c.value::bigint, 'parent', wf.id) FROM wf, jsonb_each_text(wf.children) AS c
  )
  SELECT (SELECT count(*) FROM wf)::int AS cancelled`,
);
const cancelledInboxSql = perSchema(
  (schema) => `
  WITH inbox AS (
    UPDATE ${schema}.workflow_events AS e SET applied_at = now(), outcome = 'dropped', note = 'workflow cancelled'
    WHERE e.workflow_id = $1::bigint AND e.applied_at IS NULL
    RETURNING e.wake_job
  )
  DELETE FROM ${schema}.jobs AS j WHERE j.id = ANY (ARRAY(SELECT i.wake_job FROM inbox AS i WHERE i.wake_job IS NOT NULL)) AND j.status = 'pending'`,
);
const statusSql = perSchema((schema) => `SELECT status FROM ${schema}.workflows WHERE id = $1::bigint`);

export interface CancelledWorkflow {
  outcome: "cancelled" | "not_found" | "finished";
  status?: WorkflowStatus;
  /** Task jobs cancelled with it. */
  tasks: number;
}

/**
 * Cancels a live instance: nothing more is applied, its tasks in flight are cancelled, and the
 * cancel (with `by`, who asked) is recorded in its history (the reports of the tasks it cancelled
 * follow it there, dropped).
 */
export const cancelWorkflow = async (db: Queryable, id: JobId | number, options: StatementOptions & { by?: string } = {}): Promise<CancelledWorkflow> => {
  const by = checkOperatorName(options.by);
  const workflowId = checkWorkflowId(id);
  const schema = options.schema ?? DEFAULT_SCHEMA;
  // On a pool, one connection and one transaction for both statements; a caller's client is used as
  // given (inside the caller's transaction, if any).
  const client: Queryable = isPool(db) ? await db.connect() : db;
  const own = client !== db;
  try {
    if (own) await client.query({ text: "BEGIN" });
    const { rows } = await runStatement<{ cancelled: number }>(client, { text: cancelSql(schema), values: [workflowId, by] }, options);
    let result: CancelledWorkflow;
    if (rows[0]!.cancelled === 1) {
      await runStatement(client, { text: cancelledInboxSql(schema), values: [workflowId] }, options);
      // Its live tasks, as cancelJob cancels a job (a processing one's worker told at commit).
      const { rows: stopped } = await runStatement(client, { text: cancelWorkflowJobsSql(schema), values: [workflowId, by] }, options);
      result = { outcome: "cancelled", status: "cancelled", tasks: stopped.length };
    } else {
      // Not live: its status read now (an apply that ended it while the cancel waited for its row
      // is seen only by a statement that starts after).
      const status = (await runStatement<{ status: WorkflowStatus }>(client, { text: statusSql(schema), values: [workflowId] }, options)).rows[0]?.status;
      result = status === undefined ? { outcome: "not_found", tasks: 0 } : { outcome: "finished", status, tasks: 0 };
    }
    if (own) await client.query({ text: "COMMIT" });
    return result;
  } catch (error) {
    if (own) await client.query({ text: "ROLLBACK" }).catch(() => undefined);
    throw error;
  } finally {
    if (own) (client as unknown as { release(): void }).release();
  }
};

// --- What the console and the CLI read ---------------------------------------------------------

const getSql = perSchema((schema) => `SELECT ${workflowColumns("w")} FROM ${schema}.workflows AS w WHERE w.id = $1::bigint`);

export const getWorkflow = async (db: Queryable, id: JobId | number, options: StatementOptions = {}): Promise<Workflow | null> =>
  (await runStatement<Workflow>(db, { text: getSql(options.schema ?? DEFAULT_SCHEMA), values: [checkWorkflowId(id)] }, options)).rows[0] ?? null;

const listSql = perSchema(
  (schema) => `
  SELECT ${workflowColumns("w")} FROM ${schema}.workflows AS w
  WHERE ($1::text IS NULL OR w.name = $1::text) AND ($2::text IS NULL OR w.status = $2::text) AND ($3::bigint IS NULL OR w.id < $3::bigint)
  ORDER BY w.id DESC LIMIT $4::int`,
);

/** Newest first; `before` pages on (the last id of the previous page). */
export const listWorkflows = async (
  db: Queryable,
  filter: { name?: string; status?: WorkflowStatus; before?: JobId; limit?: number } = {},
  options: StatementOptions = {},
): Promise<Workflow[]> => {
  if (filter.status !== undefined && !WORKFLOW_STATUSES.includes(filter.status)) {
    throw new InvalidJobError(`picket: workflow status must be one of ${WORKFLOW_STATUSES.join(", ")}; got ${JSON.stringify(filter.status)}.`);
  }
  const limit = filter.limit ?? 50;
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new InvalidJobError(`picket: a workflow list's limit must be an integer from 1 to 1000 (got ${String(limit)}).`);
  const before = filter.before === undefined ? null : checkWorkflowId(filter.before);
  return (await runStatement<Workflow>(db, { text: listSql(options.schema ?? DEFAULT_SCHEMA), values: [filter.name ?? null, filter.status ?? null, before, limit] }, options)).rows;
};

export interface WorkflowCount {
  name: string;
  status: WorkflowStatus;
  state: unknown;
  count: number;
}

const countSql = perSchema(
  (schema) => `
  SELECT w.name, w.status, w.state, count(*)::int AS count FROM ${schema}.workflows AS w
  WHERE w.status IN ('starting', 'running') GROUP BY w.name, w.status, w.state
  UNION ALL
  SELECT w.name, w.status, NULL, count(*)::int FROM ${schema}.workflows AS w
  WHERE w.status IN ('done', 'failed', 'cancelled') GROUP BY w.name, w.status
  ORDER BY 1, 2`,
);

/** Instances by workflow and status, and the live ones by state too. */
export const workflowCounts = async (db: Queryable, options: StatementOptions = {}): Promise<WorkflowCount[]> =>
  (await runStatement<WorkflowCount>(db, { text: countSql(options.schema ?? DEFAULT_SCHEMA) }, options)).rows;

export interface WorkflowEvent {
  id: JobId;
  kind: "start" | "send" | "task" | "timer" | "cancel" | "child";
  event: unknown;
  jobId: JobId | null;
  createdAt: Date;
  dueAt: Date;
  appliedAt: Date | null;
  /** The instance's seq once applied (null for an event dropped after the instance ended). */
  seq: number | null;
  outcome: "applied" | "dropped" | null;
  note: string | null;
  /** The state value after it was applied. */
  state: unknown;
  /** Who sent it, or cancelled the instance, when the caller said. */
  by: string | null;
}

export interface WorkflowHistory {
  /** The newest `limit` events applied (or dropped), in the order they were applied. */
  history: WorkflowEvent[];
  /** How many were applied (or dropped) in all. */
  historyTotal: number;
  /** The inbox: events and timers not applied yet, the soonest due first (at most `limit`). */
  inbox: WorkflowEvent[];
  /** How many wait in all. */
  inboxTotal: number;
}

const eventColumns = `e.id::text AS id, e.kind, e.event, e.job_id::text AS "jobId", e.created_at AS "createdAt", e.due_at AS "dueAt",
         e.applied_at AS "appliedAt", e.seq, e.outcome, e.note, e.state, e.by`;

// One statement: the newest applied events and the soonest of the inbox, each numbered in its order
// (a UNION's rows come in no promised order) and counted before its limit.
const historySql = perSchema(
  (schema) => `
  SELECT * FROM (
    SELECT 'history' AS part, count(*) OVER ()::int AS total, row_number() OVER (ORDER BY e.applied_at DESC, e.id DESC)::int AS n, ${eventColumns}
    FROM ${schema}.workflow_events AS e WHERE e.workflow_id = $1::bigint AND e.applied_at IS NOT NULL
    ORDER BY e.applied_at DESC, e.id DESC LIMIT $2::int
  ) AS h
  UNION ALL
  SELECT * FROM (
    SELECT 'inbox' AS part, count(*) OVER ()::int AS total, row_number() OVER (ORDER BY e.due_at, e.id)::int AS n, ${eventColumns}
    FROM ${schema}.workflow_events AS e WHERE e.workflow_id = $1::bigint AND e.applied_at IS NULL
    ORDER BY e.due_at, e.id LIMIT $2::int
  ) AS i`,
);

/**
 * An instance's events: the newest `limit` applied (default 500), in the order applied, each with
 * the state after it or why it was dropped; and its inbox, the soonest due first.
 */
export const workflowHistory = async (db: Queryable, id: JobId | number, options: StatementOptions & { limit?: number } = {}): Promise<WorkflowHistory> => {
  const limit = options.limit ?? 500;
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw new InvalidJobError(`picket: a workflow history's limit must be an integer from 1 to 10000 (got ${String(limit)}).`);
  const { rows } = await runStatement<WorkflowEvent & { part: "history" | "inbox"; total: number; n: number }>(
    db,
    { text: historySql(options.schema ?? DEFAULT_SCHEMA), values: [checkWorkflowId(id), limit] },
    options,
  );
  const part = (name: "history" | "inbox") => rows.filter((row) => row.part === name);
  // The history was read newest first (the newest are kept under the limit), and is given in the order applied.
  const history = part("history").sort((a, b) => b.n - a.n);
  const inbox = part("inbox").sort((a, b) => a.n - b.n);
  const strip = ({ part: _part, total: _total, n: _n, ...event }: (typeof rows)[number]): WorkflowEvent => event;
  return { history: history.map(strip), historyTotal: history[0]?.total ?? 0, inbox: inbox.map(strip), inboxTotal: inbox[0]?.total ?? 0 };
};

export interface WorkflowJob {
  id: JobId;
  type: string;
  status: JobStatus;
  attempts: number;
  createdAt: Date;
  finishedAt: Date | null;
}

const jobsSql = perSchema(
  (schema) => `
  SELECT j.id::text AS id, j.type, j.status, j.attempts, j.created_at AS "createdAt", j.finished_at AS "finishedAt"
  FROM ${schema}.jobs AS j WHERE j.workflow_id = $1::bigint ORDER BY j.id DESC LIMIT 1000`,
);

/** The task jobs the instance started (while retention keeps them), the newest 1,000, oldest first. */
export const workflowJobs = async (db: Queryable, id: JobId | number, options: StatementOptions = {}): Promise<WorkflowJob[]> =>
  (await runStatement<WorkflowJob>(db, { text: jobsSql(options.schema ?? DEFAULT_SCHEMA), values: [checkWorkflowId(id)] }, options)).rows.reverse();

const registerSql = perSchema(
  (schema) => `
  INSERT INTO ${schema}.workflow_machines (name, fingerprint, version, definition)
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[])
  ON CONFLICT (name, fingerprint) DO UPDATE SET seen_at = now(), version = excluded.version`,
);

/** Records the machines a worker runs, so the console can draw their instances. */
export const registerWorkflowMachines = async (
  db: Queryable,
  machines: ReadonlyArray<{ name: string; fingerprint: string; version: string; definition: unknown }>,
  options: StatementOptions = {},
): Promise<void> => {
  await runStatement(
    db,
    {
      text: registerSql(options.schema ?? DEFAULT_SCHEMA),
      values: [machines.map((m) => m.name), machines.map((m) => m.fingerprint), machines.map((m) => m.version), machines.map((m) => JSON.stringify(m.definition))],
    },
    options,
  );
};

const machineSql = perSchema((schema) => `SELECT definition FROM ${schema}.workflow_machines WHERE name = $1::text AND fingerprint = $2::text`);

/** The machine an instance runs, as its worker recorded it (machineConfig: states, transitions, names), or null. */
export const workflowMachine = async (db: Queryable, name: string, fingerprint: string, options: StatementOptions = {}): Promise<unknown> =>
  (await runStatement<{ definition: unknown }>(db, { text: machineSql(options.schema ?? DEFAULT_SCHEMA), values: [name, fingerprint] }, options)).rows[0]?.definition ??
  null;

// Retention: an instance that ended done or cancelled goes with its events, oldest finished first, at
// most $2 per statement. A failed one stays, as a dead job does, until an operator deletes it. Its
// task jobs are jobs: the jobs' own retention removes them.
const deleteFinishedSql = perSchema(
  (schema) => `
  WITH gone AS (
    SELECT w.id FROM ${schema}.workflows AS w
    WHERE w.finished_at < now() - $1::float8 * interval '1 millisecond' AND w.status IN ('done', 'cancelled')
    ORDER BY w.finished_at LIMIT $2::int
    FOR UPDATE SKIP LOCKED
  ), events AS (
    DELETE FROM ${schema}.workflow_events AS e WHERE e.workflow_id = ANY (ARRAY(SELECT id FROM gone))
  )
  DELETE FROM ${schema}.workflows AS w WHERE w.id = ANY (ARRAY(SELECT id FROM gone))`,
);

/** Deletes up to `batchSize` instances that ended done or cancelled more than `olderThanMs` ago; returns how many. */
export const deleteFinishedWorkflows = async (db: Queryable, args: { olderThanMs: number; batchSize: number }, options: StatementOptions = {}): Promise<number> =>
  (await runStatement(db, { text: deleteFinishedSql(options.schema ?? DEFAULT_SCHEMA), values: [args.olderThanMs, args.batchSize] }, options)).rowCount ?? 0;
