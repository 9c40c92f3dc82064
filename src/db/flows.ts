// Flows (migration 0017): jobs that wait for other jobs. A flow is enqueued in one statement, in
// the caller's transaction if it likes; a running job adds children under its claim. Whether a
// waiting job may go is decided by the trigger on the statement that finishes its dependencies,
// never here: this module writes flows and reads them.
import { InvalidJobError } from "./errors.ts";
import { fence, type Claim } from "./fenced.ts";
import { checkOperatorName } from "./job-history.ts";
import { type Job, type JobId, type JobStatus, jobColumns } from "./job-row.ts";
import { checkJobSpec, type CheckedJobSpec, type JobSpec } from "./job-spec.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";
import { unstorableText } from "./storable-json.ts";
import { cancelFlowSql, isJobId } from "./admin.ts";

/**
 * What a dependency's failure (it ended dead, or cancelled) does to the job that depends on it:
 * - "fail" (default): the dependent is cancelled, its reason naming the dependency, and so is
 *   what depends on it, down the graph.
 * - "ignore": the dependent runs once its other dependencies resolve, and sees the failure in
 *   ctx.dependencies().
 * - "wait": the dependent keeps waiting until an operator retries the dead dependency and it
 *   completes. (A cancelled dependency cancels it: a cancel is never retried.)
 */
export type DependencyFailurePolicy = "fail" | "ignore" | "wait";
export const DEPENDENCY_FAILURE_POLICIES: readonly DependencyFailurePolicy[] = ["fail", "ignore", "wait"];

/** A dependency by name within the flow, with its own failure policy when it differs from the job's. */
export type DependencySpec = string | { name: string; onFailure?: DependencyFailurePolicy };

/** One job of a flow: a job spec without a dedupe key (the flow has one), its name, and what it waits for. */
export interface FlowJobSpec extends Omit<JobSpec, "key" | "dedupe"> {
  /** Its name within the flow: 1–128 characters, unique in the flow. ctx.dependencies() is keyed by it. */
  name: string;
  /** The jobs of the same flow this one waits for, by name. */
  dependsOn?: readonly DependencySpec[];
  /** The failure policy of each of its dependencies that does not name its own. Default "fail". */
  onDependencyFailure?: DependencyFailurePolicy;
}

export interface FlowSpec {
  /** What the flow is, for people: `picket flows list` and the dashboard show it. 1–128 characters. */
  name: string;
  /** Dedupe key: while a flow with this key is running, enqueueing another returns it. */
  key?: string;
  jobs: readonly FlowJobSpec[];
}

export type FlowStatus = "running" | "completed" | "failed" | "cancelled";

export interface Flow {
  id: JobId;
  name: string;
  key: string | null;
  /** running while any of its jobs is live; then completed (all completed), failed (some dead) or cancelled. */
  status: FlowStatus;
  /** Its jobs (children added since included), and how many are live, dead, cancelled. */
  total: number;
  live: number;
  dead: number;
  cancelled: number;
  createdAt: Date;
  finishedAt: Date | null;
}

/** The most jobs one flow enqueue may hold. */
export const MAX_FLOW_JOBS = 100_000;
export const MAX_FLOW_NAME_LENGTH = 128;

const describe = (value: unknown): string => (typeof value === "string" ? JSON.stringify(value.slice(0, 60)) : String(value));

/** A flow's or a flow job's name: 1–128 characters PostgreSQL stores unchanged. */
const checkName = (name: unknown, what: string): string => {
  if (typeof name !== "string" || name.length === 0 || name.length > MAX_FLOW_NAME_LENGTH) {
    throw new InvalidJobError(`picket: ${what} must be a string of 1 to ${MAX_FLOW_NAME_LENGTH} characters (got ${describe(name)}); nothing was enqueued.`);
  }
  const why = unstorableText(name);
  if (why !== null) throw new InvalidJobError(`picket: ${what} ${JSON.stringify(name)} ${why}; nothing was enqueued.`);
  return name;
};

const checkPolicy = (policy: unknown, where: string): DependencyFailurePolicy => {
  if (policy === undefined) return "fail";
  if (!DEPENDENCY_FAILURE_POLICIES.includes(policy as DependencyFailurePolicy)) {
    throw new InvalidJobError(`picket: ${where}: onFailure must be "fail", "ignore" or "wait" (got ${describe(policy)}); nothing was enqueued.`);
  }
  return policy as DependencyFailurePolicy;
};

/** A flow's jobs checked: each spec, its name, its edges by index (dependency → dependent). */
export interface CheckedFlowJobs {
  specs: CheckedJobSpec[];
  names: string[];
  /** How many dependencies each job waits for. */
  waitsFor: number[];
  edges: { from: number; to: number; policy: DependencyFailurePolicy }[];
}

/**
 * Checks a flow's jobs before anything is written: every spec as enqueue checks it, names unique,
 * dependencies that name jobs of the flow (`outside` names those that may also be depended on but
 * are not in `jobs`: none for a new flow), and no cycle (the error names one, in order).
 */
export const checkFlowJobs = (jobs: readonly FlowJobSpec[], where: string): CheckedFlowJobs => {
  if (!Array.isArray(jobs) || jobs.length === 0) {
    throw new InvalidJobError(`picket: ${where} needs a non-empty array of jobs, each like { name: "resize-1", type: "resize", payload: {...} }.`);
  }
  if (jobs.length > MAX_FLOW_JOBS) {
    throw new InvalidJobError(`picket: ${where} has ${jobs.length} jobs; the limit is ${MAX_FLOW_JOBS}. Split it, or let a job add the rest as children.`);
  }
  const index = new Map<string, number>();
  const names = jobs.map((job, i) => {
    if (typeof job !== "object" || job === null) throw new InvalidJobError(`picket: ${where}: job ${i} must be an object (got ${describe(job)}).`);
    const name = checkName(job.name, `${where}: job ${i}'s name`);
    if (index.has(name)) throw new InvalidJobError(`picket: ${where}: two jobs are named ${JSON.stringify(name)}; names are unique within a flow.`);
    index.set(name, i);
    return name;
  });
  const specs = jobs.map((job, i) => {
    if ("key" in job || "dedupe" in job) {
      throw new InvalidJobError(
        `picket: ${where}: job ${JSON.stringify(names[i])} has a dedupe key; a flow's jobs dedupe as a flow: give the flow a key instead.`,
      );
    }
    return checkJobSpec(job as JobSpec);
  });
  const edges: CheckedFlowJobs["edges"] = [];
  const waitsFor = jobs.map(() => 0);
  const after: number[][] = jobs.map(() => []);
  jobs.forEach((job, to) => {
    const fallback = checkPolicy(job.onDependencyFailure, `${where}: job ${JSON.stringify(names[to])}`);
    if (job.dependsOn === undefined) return;
    if (!Array.isArray(job.dependsOn)) {
      throw new InvalidJobError(`picket: ${where}: job ${JSON.stringify(names[to])}: dependsOn must be an array of job names (got ${describe(job.dependsOn)}).`);
    }
    const seen = new Set<number>();
    for (const dependency of job.dependsOn) {
      const name = typeof dependency === "string" ? dependency : (dependency as { name?: unknown } | null)?.name;
      const from = typeof name === "string" ? index.get(name) : undefined;
      if (from === undefined) {
        throw new InvalidJobError(
          `picket: ${where}: job ${JSON.stringify(names[to])} depends on ${describe(name)}, which is not a job of this flow; nothing was enqueued.`,
        );
      }
      if (seen.has(from)) continue;
      seen.add(from);
      const policy = typeof dependency === "string" ? fallback : checkPolicy(dependency.onFailure ?? job.onDependencyFailure, `${where}: job ${JSON.stringify(names[to])}`);
      edges.push({ from, to, policy });
      after[from]!.push(to);
      waitsFor[to]! += 1;
    }
  });
  const cycle = findCycle(after);
  if (cycle !== null) {
    throw new InvalidJobError(
      `picket: ${where} has a cycle: ${[...cycle, cycle[0]!].map((i) => JSON.stringify(names[i])).join(" → ")} (each waits for the next); nothing was enqueued.`,
    );
  }
  return { specs, names, waitsFor, edges };
};

/** One cycle of the graph (`after[i]`: the jobs waiting for i), as indices in order, or null. Iterative: a 100,000-long chain must not overflow the stack. */
const findCycle = (after: number[][]): number[] | null => {
  const state = new Uint8Array(after.length); // 0 unseen, 1 on the path, 2 done
  const parent = new Int32Array(after.length).fill(-1);
  for (let root = 0; root < after.length; root++) {
    if (state[root] !== 0) continue;
    const stack: [number, number][] = [[root, 0]];
    state[root] = 1;
    while (stack.length > 0) {
      const top = stack[stack.length - 1]!;
      const [node, next] = top;
      if (next === after[node]!.length) {
        state[node] = 2;
        stack.pop();
        continue;
      }
      top[1] = next + 1;
      const child = after[node]![next]!;
      if (state[child] === 1) {
        const cycle = [child];
        for (let at = node; at !== child; at = parent[at]!) cycle.push(at);
        // Walked back from node to child: reversed, it reads in dependency order from child.
        return [cycle[0]!, ...cycle.slice(1).reverse()];
      }
      if (state[child] === 0) {
        state[child] = 1;
        parent[child] = node;
        stack.push([child, 0]);
      }
    }
  }
  return null;
};

const flowColumns = (alias: string) =>
  `${alias}.id, ${alias}.name, ${alias}.key, ${alias}.status, ${alias}.total, ${alias}.live, ${alias}.dead, ${alias}.cancelled, ` +
  `${alias}.created_at AS "createdAt", ${alias}.finished_at AS "finishedAt"`;

/**
 * The jobs of a flow (or a parent's children) and their edges, inserted by one statement whose
 * parts all read the ids drawn at its start ($ids: one per job, by position): the edges and the
 * waits name jobs by position in that array, so nothing joins the new rows to each other (a
 * 10,000-job fan-in is 10,000 array reads, not a join planned without statistics).
 * $1 types, $2 payloads, $3 run_at, $4 delay_ms, $5 priority, $6 max_attempts, $7 queue, $8 names,
 * $9 waits-for counts, $10 edge from, $11 edge to, $12 edge policy (positions 1-based), $13 the
 * number of jobs. `flow` is a relation with the flow's id as `id`, one row (none: nothing inserted).
 */
const insertFlowJobs = (schema: string, flow: string) => `
  ids AS (
    SELECT ARRAY(SELECT nextval(pg_get_serial_sequence('${schema}.jobs', 'id')) FROM generate_series(1, $13::int)) AS a
  ), inserted AS (
    INSERT INTO ${schema}.jobs AS j (id, type, payload, run_at, priority, max_attempts, queue, status, flow_id, flow_node)
    OVERRIDING SYSTEM VALUE
    SELECT ids.a[i.n], i.type, i.payload, coalesce(i.run_at, now() + i.delay_ms * interval '1 millisecond'), i.priority, i.max_attempts, i.queue,
           CASE WHEN i.waits > 0 THEN 'waiting' ELSE 'pending' END, ${flow}.id, coalesce(i.node, 'job-' || ids.a[i.n])
    FROM ${flow}, ids,
         unnest($1::text[], $2::jsonb[], $3::timestamptz[], $4::float8[], $5::int[], $6::int[], $7::text[], $8::text[], $9::int[])
         WITH ORDINALITY AS i(type, payload, run_at, delay_ms, priority, max_attempts, queue, node, waits, n)
    ORDER BY i.n
    RETURNING ${jobColumns("j")}
  ), edges AS (
    INSERT INTO ${schema}.job_dependencies (dependency_id, dependent_id, on_failure)
    SELECT ids.a[e.from_n], ids.a[e.to_n], e.policy FROM ${flow}, ids, unnest($10::int[], $11::int[], $12::text[]) AS e(from_n, to_n, policy)
  ), waits AS (
    INSERT INTO ${schema}.job_waits (job_id, remaining)
    SELECT ids.a[w.n], w.waits FROM ${flow}, ids, unnest($9::int[]) WITH ORDINALITY AS w(waits, n) WHERE w.waits > 0
  )`;

const flowJobValues = (checked: CheckedFlowJobs, names: (string | null)[]): unknown[] => {
  const { specs } = checked;
  return [
    specs.map((s) => s.type),
    specs.map((s) => s.payloadJson),
    specs.map((s) => s.runAt),
    specs.map((s) => s.delayMs),
    specs.map((s) => s.priority),
    specs.map((s) => s.maxAttempts),
    specs.map((s) => s.queue),
    names,
    checked.waitsFor,
    checked.edges.map((e) => e.from + 1),
    checked.edges.map((e) => e.to + 1),
    checked.edges.map((e) => e.policy),
    specs.length,
  ];
};

// $14 the flow's name, $15 its key. A running flow holding the key makes the whole statement a
// no-op (`flow` is empty, so is every insert).
const enqueueFlowSql = perSchema(
  (schema) => `
  WITH flow AS (
    INSERT INTO ${schema}.flows AS f (name, key, total, live) VALUES ($14::text, $15::text, $13::int, $13::int)
    ON CONFLICT (key) WHERE key IS NOT NULL AND status = 'running' DO NOTHING
    RETURNING f.id
  ), ${insertFlowJobs(schema, "flow")}
  SELECT * FROM inserted`,
);

const flowSql = perSchema((schema) => `SELECT ${flowColumns("f")} FROM ${schema}.flows AS f WHERE f.id = $1::bigint`);
const runningFlowByKeySql = perSchema((schema) => `SELECT ${flowColumns("f")} FROM ${schema}.flows AS f WHERE f.key = $1::text AND f.status = 'running'`);
const flowJobsSql = perSchema((schema) => `SELECT ${jobColumns("j")} FROM ${schema}.jobs AS j WHERE j.flow_id = $1::bigint ORDER BY j.id`);

export interface EnqueuedFlow {
  flow: Flow;
  /** false: a running flow held the key, and is returned; nothing was written. */
  created: boolean;
  /** The flow's jobs by name. */
  jobs: Record<string, Job>;
}

const byName = (jobs: Job[]): Record<string, Job> => Object.fromEntries(jobs.map((job) => [job.flowNode!, job]));

/**
 * Enqueues a flow: its jobs, their dependencies, in one statement (pass your own client inside a
 * transaction to commit it with your other writes). Jobs without dependencies are ready at once;
 * the others wait. Everything is checked first (specs, names, dependencies, cycles): a bad flow
 * writes nothing and says what is wrong.
 */
export const enqueueFlow = async (db: Queryable, spec: FlowSpec, options: StatementOptions = {}): Promise<EnqueuedFlow> => {
  if (typeof spec !== "object" || spec === null) throw new InvalidJobError(`picket: a flow must be an object like { name: "album", jobs: [...] } (got ${describe(spec)}).`);
  const name = checkName(spec.name, "a flow's name");
  const key = spec.key === undefined || spec.key === null ? null : checkName(spec.key, `flow ${JSON.stringify(name)}'s key`);
  const checked = checkFlowJobs(spec.jobs, `flow ${JSON.stringify(name)}`);
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const { rows } = await runStatement<Job>(db, { text: enqueueFlowSql(schema), values: [...flowJobValues(checked, checked.names), name, key] }, options);
  if (rows.length > 0) {
    const flow = await getFlow(db, rows[0]!.flowId!, options);
    return { flow: flow!, created: true, jobs: byName(rows) };
  }
  // A running flow holds the key (read in a statement of its own: committed while ours waited).
  const held = (await runStatement<Flow>(db, { text: runningFlowByKeySql(schema), values: [key] }, options)).rows[0];
  if (held === undefined) {
    throw new InvalidJobError(`picket: flow ${JSON.stringify(name)}: its key ${JSON.stringify(key)} was held by a flow that has finished since; enqueue it again.`);
  }
  const jobs = (await runStatement<Job>(db, { text: flowJobsSql(schema), values: [held.id] }, options)).rows;
  return { flow: held, created: false, jobs: byName(jobs) };
};

// Children of a running job, under its claim ($16, $17: the parent's id and token). The parent's
// row is locked (shared: its worker's own writes then wait for this one, and a reclaim or cancel
// that committed first is seen); nothing is written unless the fence holds. A parent in no flow
// starts one named after it ($14, its task): it and its children. Each child is a dependency of the
// parent; the count records this claim as the one that added them, so this run's completion parks
// the parent whatever the children have done by then, and it runs again once they resolve. The
// flow's counts grow by the children.
const enqueueChildrenSql = perSchema(
  (schema) => `
  WITH parent AS (
    SELECT p.id, p.flow_id, p.flow_node FROM ${schema}.jobs AS p
    WHERE p.id = $16::bigint AND ${fence("p", "$17::uuid")} FOR SHARE OF p
  ), started AS (
    INSERT INTO ${schema}.flows (name, total, live) SELECT $14::text, $13::int + 1, $13::int + 1 FROM parent WHERE parent.flow_id IS NULL
    RETURNING id
  ), adopted AS (
    UPDATE ${schema}.jobs AS j SET flow_id = s.id, flow_node = 'job-' || j.id FROM started AS s WHERE j.id = $16::bigint
  ), grown AS (
    UPDATE ${schema}.flows AS f SET total = f.total + $13::int, live = f.live + $13::int FROM parent WHERE f.id = parent.flow_id
  ), flow AS (
    SELECT coalesce(p.flow_id, (SELECT s.id FROM started AS s)) AS id FROM parent AS p
  ), ${insertFlowJobs(schema, "flow")}, parent_edges AS (
    INSERT INTO ${schema}.job_dependencies (dependency_id, dependent_id, on_failure)
    SELECT c.id, $16::bigint, $15::text FROM inserted AS c
  ), parent_waits AS (
    INSERT INTO ${schema}.job_waits AS w (job_id, remaining, added_by) SELECT $16::bigint, $13::int, $17::uuid FROM parent
    ON CONFLICT (job_id) DO UPDATE SET remaining = w.remaining + excluded.remaining, added_by = excluded.added_by
  )
  SELECT * FROM inserted`,
);

/** A child of a running job: a flow job whose name may be left out (then "job-<id>"). */
export type ChildJobSpec = Omit<FlowJobSpec, "name"> & { name?: string };

/** Raised when children are added under a claim that is no longer live: nothing was written. */
export class ClaimLostError extends Error {
  constructor(id: JobId) {
    super(`picket: job ${id}'s claim is no longer live (reclaimed, cancelled or finished): its children were not added.`);
    this.name = "ClaimLostError";
  }
}

/**
 * Adds children to a running job under its claim, in one statement: they run (with the
 * dependencies among them that they name), and the parent, once its run returns, waits for all of
 * them and then runs again, reading their results with ctx.dependencies(). `onFailure` is the
 * policy of each child's edge to the parent. A lost claim adds nothing and throws ClaimLostError.
 */
export const enqueueChildren = async (
  db: Queryable,
  parent: Claim & { type: string },
  children: readonly ChildJobSpec[],
  options: StatementOptions & { onFailure?: DependencyFailurePolicy } = {},
): Promise<Job[]> => {
  const where = `job ${parent.id}'s children`;
  // Unnamed children get a placeholder for the check; the statement names them by id.
  const named = (Array.isArray(children) ? children : []).map((child, i) => ({ ...child, name: child?.name ?? `\u0001${i}` }));
  const checked = checkFlowJobs(named as FlowJobSpec[], where);
  const policy = checkPolicy(options.onFailure, where);
  const names = checked.names.map((name) => (name.startsWith("\u0001") ? null : name));
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const { rows } = await runStatement<Job>(
    db,
    { text: enqueueChildrenSql(schema), values: [...flowJobValues(checked, names), parent.type, policy, parent.id, parent.token] },
    options,
  );
  if (rows.length === 0) throw new ClaimLostError(parent.id);
  return rows;
};

/** A dependency of a job, as its handler reads it; `R` its handler's result, where the caller says. */
export interface Dependency<R = unknown> {
  id: JobId;
  /** Its name in the flow. */
  name: string;
  type: string;
  /** completed, or (over an "ignore" edge) dead or cancelled. */
  status: JobStatus;
  /** Its handler's result when completed (null when it failed). */
  result: R;
  /** Its last error, when it failed. */
  error: string | null;
  onFailure: DependencyFailurePolicy;
}

const dependenciesSql = perSchema(
  (schema) => `
  SELECT d.id, d.flow_node AS name, d.type, d.status, d.result, d.last_error AS error, e.on_failure AS "onFailure"
  FROM ${schema}.job_dependencies AS e JOIN ${schema}.jobs AS d ON d.id = e.dependency_id
  WHERE e.dependent_id = $1::bigint ORDER BY d.id`,
);

/** A job's dependencies with their outcomes, by name (children included). */
export const jobDependencies = async (db: Queryable, id: JobId, options: StatementOptions = {}): Promise<Record<string, Dependency>> => {
  const { rows } = await runStatement<Dependency>(db, { text: dependenciesSql(options.schema ?? DEFAULT_SCHEMA), values: [id] }, options);
  return Object.fromEntries(rows.map((row) => [row.name, row]));
};

export const getFlow = async (db: Queryable, id: JobId | number, options: StatementOptions = {}): Promise<Flow | null> => {
  const { rows } = await runStatement<Flow>(db, { text: flowSql(options.schema ?? DEFAULT_SCHEMA), values: [checkFlowId(id)] }, options);
  return rows[0] ?? null;
};

const checkFlowId = (id: JobId | number): string => {
  const text = String(id);
  if (!isJobId(text)) throw new RangeError(`picket: flow id must be a positive integer (got ${JSON.stringify(text)}).`);
  return text;
};

/** One edge of a flow's graph, by job id. */
export interface FlowEdge {
  dependency: JobId;
  dependent: JobId;
  onFailure: DependencyFailurePolicy;
  /** How the dependency ended, once that counted for the dependent; null while it has not. */
  resolved: "completed" | "dead" | "cancelled" | null;
}

const flowEdgesSql = perSchema(
  (schema) => `
  SELECT e.dependency_id AS dependency, e.dependent_id AS dependent, e.on_failure AS "onFailure", e.resolved
  FROM ${schema}.jobs AS j JOIN ${schema}.job_dependencies AS e ON e.dependent_id = j.id
  WHERE j.flow_id = $1::bigint ORDER BY e.dependent_id, e.dependency_id`,
);

/** A flow with its jobs (in id order) and its edges: what `picket flows show` and the dashboard draw. */
export const flowGraph = async (
  db: Queryable,
  id: JobId | number,
  options: StatementOptions = {},
): Promise<{ flow: Flow; jobs: Job[]; edges: FlowEdge[] } | null> => {
  const flow = await getFlow(db, id, options);
  if (flow === null) return null;
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const jobs = (await runStatement<Job>(db, { text: flowJobsSql(schema), values: [flow.id] }, options)).rows;
  const edges = (await runStatement<FlowEdge>(db, { text: flowEdgesSql(schema), values: [flow.id] }, options)).rows;
  return { flow, jobs, edges };
};

export const FLOW_STATUSES: readonly FlowStatus[] = ["running", "completed", "failed", "cancelled"];

export interface FlowCount {
  status: FlowStatus;
  count: number;
}

// One count per status, each read from flows_status_idx (status, id).
const flowCountsSql = perSchema((schema) => `SELECT f.status, count(*)::int AS count FROM ${schema}.flows AS f GROUP BY f.status ORDER BY f.status`);

/** Flows by status: the metrics' picket_flows gauge. */
export const flowCounts = async (db: Queryable, options: StatementOptions = {}): Promise<FlowCount[]> =>
  (await runStatement<FlowCount>(db, { text: flowCountsSql(options.schema ?? DEFAULT_SCHEMA) }, options)).rows;

// Newest first, a page after `before` (an id); served by the primary key, or by flows_status_idx.
const listFlowsSql = perSchema(
  (schema) => `
  SELECT ${flowColumns("f")} FROM ${schema}.flows AS f
  WHERE ($1::text IS NULL OR f.status = $1::text) AND f.id < coalesce($2::bigint, 9223372036854775807)
  ORDER BY f.id DESC LIMIT $3::int`,
);

export const listFlows = async (
  db: Queryable,
  filter: { status?: FlowStatus; before?: JobId; limit?: number } = {},
  options: StatementOptions = {},
): Promise<Flow[]> => {
  if (filter.status !== undefined && !FLOW_STATUSES.includes(filter.status)) {
    throw new InvalidJobError(`picket: flow status must be one of ${FLOW_STATUSES.join(", ")} (got ${describe(filter.status)}).`);
  }
  const limit = filter.limit ?? 20;
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new InvalidJobError(`picket: a flow list's limit must be an integer from 1 to 1000 (got ${describe(limit)}).`);
  const before = filter.before === undefined ? null : checkFlowId(filter.before);
  const { rows } = await runStatement<Flow>(db, { text: listFlowsSql(options.schema ?? DEFAULT_SCHEMA), values: [filter.status ?? null, before, limit] }, options);
  return rows;
};

/**
 * Cancels every live job of a flow in one statement, running ones included (their workers are told,
 * as cancelJob tells them); what depended on them is cancelled by the same statement. Returns the
 * jobs it cancelled directly (none: the flow had finished, or does not exist).
 */
export const cancelFlow = async (db: Queryable, id: JobId | number, options: StatementOptions & { by?: string } = {}): Promise<Job[]> => {
  const by = checkOperatorName(options.by);
  const { rows } = await runStatement<Job>(db, { text: cancelFlowSql(options.schema ?? DEFAULT_SCHEMA), values: [checkFlowId(id), by] }, options);
  return rows;
};

// A finished flow goes as a whole: its jobs (their steps with them, ON DELETE CASCADE), its edges,
// its waits, then the flow, oldest finished first, at most $2 flows per statement. A failed flow
// stays, as a dead job does, until an operator deletes or retries it.
const deleteFinishedFlowsSql = perSchema(
  (schema) => `
  WITH gone AS (
    SELECT f.id FROM ${schema}.flows AS f
    WHERE f.finished_at < now() - $1::float8 * interval '1 millisecond' AND f.status IN ('completed', 'cancelled')
    ORDER BY f.finished_at LIMIT $2::int
    FOR UPDATE SKIP LOCKED
  ), jobs AS (
    DELETE FROM ${schema}.jobs AS j WHERE j.flow_id = ANY (ARRAY(SELECT id FROM gone)) RETURNING j.id
  ), edges AS (
    DELETE FROM ${schema}.job_dependencies AS e WHERE e.dependent_id = ANY (ARRAY(SELECT id FROM jobs))
  ), waits AS (
    DELETE FROM ${schema}.job_waits AS w WHERE w.job_id = ANY (ARRAY(SELECT id FROM jobs))
  )
  DELETE FROM ${schema}.flows AS f WHERE f.id = ANY (ARRAY(SELECT id FROM gone))`,
);

/** Deletes at most `batchSize` flows that finished more than `olderThanMs` ago, each with all its jobs; returns how many. */
export const deleteFinishedFlows = async (db: Queryable, args: { olderThanMs: number; batchSize: number }, options: StatementOptions = {}): Promise<number> => {
  const result = await runStatement(db, { text: deleteFinishedFlowsSql(options.schema ?? DEFAULT_SCHEMA), values: [args.olderThanMs, args.batchSize] }, options);
  return result.rowCount ?? 0;
};
