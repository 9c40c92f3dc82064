// The claim, the sweep and retention stay index scans however many finished rows pile up, and
// every statement that writes a batch finds its rows by primary key, however it is planned.
import type pg from "pg";
import { describe, expect, it } from "vitest";
import {
  applyBulk,
  cancelJob,
  claimJobs,
  completeJobs,
  countBulk,
  deleteFinishedJob,
  deleteFinishedJobs,
  deleteFinishedWorkflows,
  failJobs,
  migrate,
  openPool,
  holdForApply,
  readForApply,
  releaseHold,
  releaseJobs,
  renewLeases,
  sendToWorkflow,
  cancelWorkflow,
  startWorkflow,
  sweepExpiredClaims,
  workflowHistory,
  writeApply,
} from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { want } from "./support/factory.ts";

const db = useTestDatabase();

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  Alias?: string;
  Plans?: PlanNode[];
}

/** A node of an EXPLAIN ANALYZE plan, with what it did. */
interface PlanWithCounts extends PlanNode {
  "Actual Rows": number;
  "Actual Loops": number;
  "Rows Removed by Filter"?: number;
  "Rows Removed by Join Filter"?: number;
}

/** A value as EXECUTE takes it: literals only (names, numbers, JSON text, arrays of ids, tokens, numbers and NULLs). */
const literal = (value: unknown) =>
  Array.isArray(value) ? `{${value.map((e) => (e === null ? "NULL" : JSON.stringify(String(e)))).join(",")}}` : String(value);

const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

/** The indexes through which a plan reaches the rows it writes (the statements alias them `j`). */
// (A statement that writes the table twice, as the deleting completion does, has aliases j and j_1.)
const writtenThrough = (plan: PlanNode[]) => plan.filter((n) => /^j(_\d+)?$/.test(n.Alias ?? "") && /Scan/.test(n["Node Type"])).map((n) => n["Index Name"]);

type Run = (q: { query: (c: { text: string; values?: unknown[] }) => Promise<never> }) => Promise<unknown>;

/**
 * Keeps autovacuum from analyzing a test schema's tables while the test fills them: these tests are
 * about plans made without statistics, and an autovacuum that came in between (as it did in CI,
 * once the table had 102,000 rows) would plan with them.
 */
const withoutAutovacuum = async (pool: pg.Pool, schema: string) => {
  for (const table of ["jobs", "workflows", "workflow_events"]) await pool.query(`ALTER TABLE ${schema}.${table} SET (autovacuum_enabled = false)`);
};

/** The text and values of the next statement a function sends, captured instead of sent. */
const capture = async (run: Run) => {
  let captured: { text: string; values?: unknown[] } | undefined;
  await run({
    query: async (config) => {
      captured = config;
      throw new Error("captured");
    },
  }).catch(() => undefined);
  return captured!;
};

/**
 * EXPLAINs the next statement a function sends, with its values. `generic` plans it as a named
 * statement is planned after its first executions: without looking at the values.
 */
const explain = async (run: Run, { generic = false } = {}) => {
  const { text, values } = await capture(run);
  const client = await db.pool.connect();
  try {
    await client.query("BEGIN");
    let plan;
    if (generic) {
      await client.query(`PREPARE probe AS ${text}`);
      await client.query("SET LOCAL plan_cache_mode = force_generic_plan");
      // EXECUTE's arguments cannot be bound parameters: they go in as literals.
      const args = values!.map((value) => (value === null ? "NULL" : client.escapeLiteral(literal(value)))).join(", ");
      ({ rows: [plan] } = await client.query(`EXPLAIN (FORMAT JSON) EXECUTE probe(${args})`));
    } else {
      ({ rows: [plan] } = await client.query({ text: `EXPLAIN (FORMAT JSON) ${text}`, values }));
    }
    return nodes(plan["QUERY PLAN"][0].Plan as PlanNode);
  } finally {
    await client.query("ROLLBACK");
    // Only the probe: pg remembers which named statements this pooled connection has prepared.
    if (generic) await client.query("DEALLOCATE probe").catch(() => undefined);
    client.release();
  }
};

describe("query plans on a table of 100,000 finished and 1,000 pending rows", () => {
  it("claim, sweep and retention use their partial indexes, never a sequential scan of the job table", async () => {
    await db.pool.query(`
      INSERT INTO picket.jobs (type, status, finished_at, created_at)
      SELECT 'type-' || (g % 10), CASE WHEN g % 7 = 0 THEN 'dead' ELSE 'completed' END, now(), now()
      FROM generate_series(1, 100000) g`);
    await db.pool.query(`INSERT INTO picket.jobs (type) SELECT 'type-' || (g % 10) FROM generate_series(1, 1000) g`);
    await db.pool.query(`
      UPDATE picket.jobs SET status = 'processing', claim_token = gen_random_uuid(), lock_until = now() + interval '1 minute'
      WHERE id IN (SELECT id FROM picket.jobs WHERE status = 'pending' LIMIT 50)`);
    await db.pool.query("ANALYZE picket.jobs");

    const claim: Run = (q) => claimJobs(q as never, "w", [want("type-1", { limit: 10 }), want("type-2", { limit: 10 })]);
    const sweep: Run = (q) => sweepExpiredClaims(q as never, 100);
    const retention: Run = (q) => deleteFinishedJobs(q as never, { olderThanMs: 0, batchSize: 100 });

    // Planned with the values, and as picket's own connections plan them: once, without them.
    for (const [name, plan, index] of [
      ["claim", await explain(claim), "jobs_claim_idx"],
      ["sweep", await explain(sweep), "jobs_sweep_idx"],
      ["claim (generic plan)", await explain(claim, { generic: true }), "jobs_claim_idx"],
      ["sweep (generic plan)", await explain(sweep, { generic: true }), "jobs_sweep_idx"],
      ["retention", await explain(retention), "jobs_finished_idx"],
      ["retention (generic plan)", await explain(retention, { generic: true }), "jobs_finished_idx"],
    ] as const) {
      const scans = plan.filter((n) => n["Relation Name"] === "jobs" && /Scan/.test(n["Node Type"]));
      expect(scans.length, `${name} plan scans the job table`).toBeGreaterThan(0);
      expect(scans.filter((n) => n["Node Type"] === "Seq Scan"), `${name} plan: ${JSON.stringify(scans)}`).toEqual([]);
      expect(scans.some((n) => n["Index Name"] === index), `${name} uses ${index}`).toBe(true);
      // Retention deletes its batch by primary key, not by reading the whole table to join it.
      if (name.startsWith("retention")) expect(writtenThrough(plan), `${name}: ${JSON.stringify(scans)}`).toEqual(["jobs_pkey"]);
    }
  });
});

describe("claims and fenced writes, planned as the prepared statements they are", () => {
  // The rows a statement writes must be looked up by primary key. When the planner was offered a
  // partial index on status = 'processing' (the fence's own predicate) and statistics taken
  // before any row was processing, a fenced write's generic plan scanned that index and compared
  // every processing row with every claim in the batch: quadratic, 45 µs per completed job at 200.
  // The claim's generic plan, guessing the picked set large, read every pending row to join it.
  it("a claim finds the rows it picked by primary key, even from a deep backlog of one type", async () => {
    // A table holding nothing else (other tests' rows here would make the whole-table scan
    // look dear to the planner and hide the regression).
    await db.pool.query("TRUNCATE picket.jobs CASCADE");
    await db.pool.query(`INSERT INTO picket.jobs (type) SELECT 'backlog' FROM generate_series(1, 20000)`);
    await db.pool.query("ANALYZE picket.jobs");
    const plan = await explain((q) => claimJobs(q as never, "w", [want("backlog", { limit: 10 })]), { generic: true });
    expect(writtenThrough(plan), JSON.stringify(plan)).toEqual(["jobs_pkey"]);
  });

  it("fenced writes find each claim by primary key, whatever the statistics say about processing rows", async () => {
    await db.pool.query("TRUNCATE picket.jobs CASCADE");
    await db.pool.query(`INSERT INTO picket.jobs (type) SELECT 'fenced' FROM generate_series(1, 20000)`);
    await db.pool.query("ANALYZE picket.jobs");
    const { rows: claimed } = await db.pool.query<{ id: string; token: string }>(`
      UPDATE picket.jobs SET status = 'processing', claim_token = gen_random_uuid(), lock_until = now() + interval '1 minute'
      WHERE id IN (SELECT id FROM picket.jobs ORDER BY id LIMIT 2000)
      RETURNING id, claim_token AS token`);
    const batch = claimed.slice(0, 200);

    for (const [name, run, writes] of [
      // Deleting: the DELETE of keyless rows and the UPDATE of keyed ones (or flows'), and the
      // UPDATE that parks a flow's job waiting for its children.
      ["complete", (q) => completeJobs(q as never, batch), ["jobs_pkey", "jobs_pkey", "jobs_pkey"]],
      ["complete, keeping completed rows", (q) => completeJobs(q as never, batch, { keepCompleted: true }), ["jobs_pkey", "jobs_pkey"]],
      ["renew", (q) => renewLeases(q as never, batch.map((c) => ({ ...c, leaseMs: 1000 }))), ["jobs_pkey"]],
    ] as [string, Run, string[]][]) {
      const plan = await explain(run, { generic: true });
      expect(writtenThrough(plan), `${name}: ${JSON.stringify(plan)}`).toEqual(writes);
    }
  });
});

// Invariant 14: a hot statement's work grows with the rows it touches, whatever the statistics.
// A new service's table is never analyzed, and picket's pool plans each statement once per
// connection: at its first call, perhaps on the empty table. So each statement is prepared on a
// picket pool (its own session settings) while the table is empty, then run, still never analyzed,
// on 100,000 rows, touching 400; and again on the analyzed table. Its work (rows produced by every
// plan node over all loops, plus rows filtered away) must stay within a small multiple of the 400:
// a nested loop that rescans the batch per row, or a scan of the table, costs hundreds of times that.
describe("hot statements on a never-analyzed table, planned while it was empty (invariant 14)", () => {
  const TOUCHED = 400;
  const WORK_PER_ROW = 30;
  const planWork = (plan: PlanWithCounts[]) =>
    plan.reduce((sum, n) => sum + n["Actual Rows"] * n["Actual Loops"] + (n["Rows Removed by Filter"] ?? 0) + (n["Rows Removed by Join Filter"] ?? 0), 0);

  it("claim, complete (deleting or keeping the row), renew, fail, release and sweep do work in proportion to the rows they touch", async () => {
    const schema = "fresh_plans";
    const pool = await openPool({ connectionString: db.url, max: 2 });
    try {
      await migrate(pool, { schema });
      await withoutAutovacuum(pool, schema);
      const options = { schema };
      const noop = want("noop", { limit: TOUCHED, leaseMs: 60_000 });
      let claims: { id: string; token: string }[] = Array.from({ length: TOUCHED }, (_, i) => ({ id: String(i + 1), token: "00000000-0000-4000-8000-000000000000" }));
      const statements: Record<string, Run> = {
        claim: (q) => claimJobs(q as never, "w", [noop], options),
        complete: (q) => completeJobs(q as never, claims, options),
        complete_kept: (q) => completeJobs(q as never, claims, { ...options, keepCompleted: true }),
        renew: (q) => renewLeases(q as never, claims.map((c) => ({ ...c, leaseMs: 60_000 })), options),
        fail: (q) => failJobs(q as never, claims.map((c) => ({ ...c, error: "e" })), options),
        release: (q) => releaseJobs(q as never, claims, options),
        sweep: (q) => sweepExpiredClaims(q as never, TOUCHED, options),
      };
      const client = await pool.connect();
      try {
        const prepare = async (suffix: string) => {
          for (const [name, run] of Object.entries(statements)) {
            const { text, values } = await capture(run);
            await client.query(`PREPARE ${name}_${suffix} AS ${text}`);
            // Run once, as the first poll does: picket's pool plans it now, once, for good.
            await client.query("BEGIN");
            await client.query(`EXECUTE ${name}_${suffix}(${values!.map((v) => client.escapeLiteral(literal(v))).join(", ")})`);
            await client.query("ROLLBACK");
          }
        };
        const measure = async (suffix: string) => {
          const work: Record<string, { touched: number; work: number; seqScans: number }> = {};
          for (const [name, run] of Object.entries(statements)) {
            const { values } = await capture(run);
            await client.query("BEGIN");
            const { rows } = await client.query(
              `EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) EXECUTE ${name}_${suffix}(${values!.map((v) => client.escapeLiteral(literal(v))).join(", ")})`,
            );
            await client.query("ROLLBACK");
            const plan = nodes(rows[0]["QUERY PLAN"][0].Plan) as PlanWithCounts[];
            work[name] = { touched: plan[0]!["Actual Rows"], work: planWork(plan), seqScans: plan.filter((n) => n["Node Type"] === "Seq Scan").length };
          }
          return work;
        };
        const load = async () => {
          await pool.query(`INSERT INTO ${schema}.jobs (type) SELECT 'noop' FROM generate_series(1, 100000)`);
          // Leases that ran out, for the sweep; then a live claim of 400, for the writes.
          await pool.query(
            `UPDATE ${schema}.jobs SET status = 'processing', claim_token = gen_random_uuid(), lock_until = now() - interval '1 minute'
             WHERE id > 99000 AND id <= 99000 + ${TOUCHED}`,
          );
          claims = (await claimJobs(pool, "w", [noop], options)).map((job) => ({ id: job.id, token: job.claimToken }));
          expect(claims).toHaveLength(TOUCHED);
        };

        await prepare("empty");
        await load();
        const { rows: [stats] } = await pool.query(`SELECT reltuples FROM pg_class WHERE oid = '${schema}.jobs'::regclass`);
        expect(stats.reltuples, "the table must never have been analyzed").toBe(-1);
        const fresh = await measure("empty");
        await pool.query(`ANALYZE ${schema}.jobs`);
        await prepare("analyzed");
        const analyzed = await measure("analyzed");
        for (const [when, work] of [["planned on the empty table", fresh], ["planned on the analyzed table", analyzed]] as const) {
          for (const [name, w] of Object.entries(work)) {
            expect(w.touched, `${name}, ${when}: rows touched`).toBe(TOUCHED);
            expect(w.seqScans, `${name}, ${when}: sequential scans`).toBe(0);
            expect(w.work, `${name}, ${when}: work ${w.work} for ${TOUCHED} rows`).toBeLessThanOrEqual(WORK_PER_ROW * TOUCHED);
          }
        }
      } finally {
        client.release();
      }
    } finally {
      await pool.end();
    }
  });
});

// Invariant 14 for workflows: the applier's hold, read, write and release, a send, a start with a key, the history
// and retention, each prepared on an empty schema (as a new service's first instance plans them),
// then run, never analyzed, on 2,000 instances with 50 events each and 20,000 task jobs. Each reads
// one instance's rows: its work stays bounded, and no statement scans a whole table.
describe("workflow statements on a never-analyzed table, planned while it was empty (invariant 14)", () => {
  const planWork = (plan: PlanWithCounts[]) =>
    plan.reduce((sum, n) => sum + n["Actual Rows"] * n["Actual Loops"] + (n["Rows Removed by Filter"] ?? 0) + (n["Rows Removed by Join Filter"] ?? 0), 0);

  it("hold, read, apply, release, send, start, history and retention touch one instance's rows, however many there are", async () => {
    const schema = "fresh_workflows";
    const pool = await openPool({ connectionString: db.url, max: 2 });
    try {
      await migrate(pool, { schema });
      await withoutAutovacuum(pool, schema);
      const options = { schema };
      // The instance every statement is about; filled in after the load.
      const target = { id: "1", seq: 0, event: "1", task: "1", child: "2", claim: { id: "1", token: "00000000-0000-4000-8000-000000000000" } };
      // An apply that starts a task and a timer, stops a task and cancels a timer, starts a child and stops one.
      const write = () => ({
        workflowId: target.id,
        seq: target.seq,
        eventId: target.event,
        claim: target.claim,
        snapshot: { value: "b" },
        state: "b",
        status: "running" as const,
        version: "1",
        fingerprint: "f",
        outcome: "applied" as const,
        note: null,
        startTasks: [{ invokeId: "t", type: "task", payload: {} }],
        stopTasks: [{ invokeId: "s", jobId: target.task }],
        startTimers: [{ sendId: "x", event: { type: "x" }, delayMs: 1000 }],
        cancelTimers: ["y"],
        startChildren: [{ invokeId: "c", name: "w", input: {} }],
        stopChildren: [{ invokeId: "d", workflowId: target.child, ended: false }],
      });
      const statements: Record<string, Run> = {
        hold: (q) => holdForApply(q as never, target.id, target.claim, options),
        read: (q) => readForApply(q as never, target.id, options),
        release: (q) => releaseHold(q as never, target.id, target.claim, options),
        // Without a child started or stopped: the statement without the children's parts.
        apply: (q) => writeApply(q as never, { ...write(), startChildren: [], stopChildren: [] }, options),
        applyChildren: (q) => writeApply(q as never, write(), options),
        send: (q) => sendToWorkflow(q as never, target.id, { type: "GO" }, options),
        // The cancel's first statement: the instance ended, its parent told, its children's cancels enqueued.
        cancel: (q) => cancelWorkflow(q as never, target.id, options),
        // Sent on a pool ($4): the send looks for the instance's applier job waiting to be claimed.
        sendJoining: async (q) => {
          const { text, values } = await capture((c) => sendToWorkflow(c as never, target.id, { type: "GO" }, options));
          return q.query({ text, values: [...values!.slice(0, 3), true] });
        },
        start: (q) => startWorkflow(q as never, "w", null, { ...options, key: "k-1" }),
        history: (q) => workflowHistory(q as never, target.id, { ...options, limit: 20 }),
        retention: (q) => deleteFinishedWorkflows(q as never, { olderThanMs: 3_600_000, batchSize: 10 }, options),
      };
      const client = await pool.connect();
      try {
        for (const [name, run] of Object.entries(statements)) {
          const { text, values } = await capture(run);
          await client.query(`PREPARE wf_${name} AS ${text}`);
          await client.query("BEGIN");
          await client.query(`EXECUTE wf_${name}(${values!.map((v) => client.escapeLiteral(literal(v))).join(", ")})`);
          await client.query("ROLLBACK");
        }
        await pool.query(`INSERT INTO ${schema}.workflows (name, key, status, seq, finished_at) SELECT 'w', 'k-' || i, 'running', 50, NULL FROM generate_series(1, 2000) AS i`);
        await pool.query(
          `INSERT INTO ${schema}.workflow_events (workflow_id, kind, event, applied_at, seq, outcome)
           SELECT w, 'send', '{"type":"GO"}', now() - interval '1 hour', s, 'applied' FROM generate_series(1, 2000) AS w, generate_series(1, 50) AS s`,
        );
        await pool.query(`INSERT INTO ${schema}.workflow_events (workflow_id, kind, event) SELECT w, 'send', '{"type":"GO"}' FROM generate_series(1, 2000) AS w`);
        await pool.query(`INSERT INTO ${schema}.jobs (type, workflow_id) SELECT 'task', w FROM generate_series(1, 2000) AS w, generate_series(1, 10)`);
        // Each instance's applier job, waiting to be claimed.
        await pool.query(`INSERT INTO ${schema}.jobs (type, payload) SELECT 'picket.workflow', jsonb_build_object('workflow', w) FROM generate_series(1, 2000) AS w`);
        // Beside them, a backlog: 20,000 pending jobs and 2,000 running ones, timers' wake-ups among them.
        await pool.query(`INSERT INTO ${schema}.jobs (type) SELECT 'other' FROM generate_series(1, 20000)`);
        await pool.query(`INSERT INTO ${schema}.jobs (type, status, claim_token, lock_until) SELECT 'other', 'processing', gen_random_uuid(), now() + interval '1 hour' FROM generate_series(1, 2000)`);
        const { rows: [applier] } = await pool.query(
          `INSERT INTO ${schema}.jobs (type, status, claim_token, lock_until, payload) VALUES ('picket.workflow', 'processing', gen_random_uuid(), now() + interval '1 minute', '{"workflow":1000}') RETURNING id::text, claim_token::text AS token`,
        );
        const { rows: [event] } = await pool.query(`SELECT id::text FROM ${schema}.workflow_events WHERE workflow_id = 1000 AND applied_at IS NULL`);
        // A timer of the instance, the one the apply cancels, with its pending wake-up job.
        const { rows: [wake] } = await pool.query(`INSERT INTO ${schema}.jobs (type, run_at) VALUES ('picket.workflow', now() + interval '1 hour') RETURNING id::text`);
        await pool.query(`INSERT INTO ${schema}.workflow_events (workflow_id, kind, event, due_at, send_id, wake_job) VALUES (1000, 'timer', '{"type":"y"}', now() + interval '1 hour', 'y', $1)`, [wake.id]);
        // A child of another instance, with a child of its own in flight.
        await pool.query(`UPDATE ${schema}.workflows SET parent_id = 7, parent_invoke = 'c', children = '{"d": "2"}' WHERE id = 1000`);
        const { rows: [task] } = await pool.query(`SELECT id::text FROM ${schema}.jobs WHERE workflow_id = 1000 LIMIT 1`);
        Object.assign(target, { id: "1000", seq: 50, event: event.id, task: task.id, claim: { id: applier.id, token: applier.token } });
        const { rows: [stats] } = await pool.query(`SELECT reltuples FROM pg_class WHERE oid = '${schema}.workflow_events'::regclass`);
        expect(stats.reltuples, "the table must never have been analyzed").toBe(-1);

        const measure = async (prefix: string, when: string) => {
          for (const [name, run] of Object.entries(statements)) {
            const { values } = await capture(run);
            await client.query("BEGIN");
            const { rows } = await client.query(`EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) EXECUTE ${prefix}_${name}(${values!.map((v) => client.escapeLiteral(literal(v))).join(", ")})`);
            await client.query("ROLLBACK");
            const plan = nodes(rows[0]["QUERY PLAN"][0].Plan) as PlanWithCounts[];
            const seqScans = plan.filter((n) => n["Node Type"] === "Seq Scan" && ["workflows", "workflow_events", "jobs"].includes(n["Relation Name"] ?? ""));
            expect(seqScans.map((n) => n["Relation Name"]), `${name}, ${when}: sequential scans`).toEqual([]);
            // One instance has 52 events and 10 jobs: a few hundred rows of work at most, against 102,000 events and 42,000 jobs in all.
            expect(planWork(plan), `${name}, ${when}: work ${JSON.stringify(plan.map((n) => [n["Node Type"], n["Index Name"], n["Actual Rows"], n["Rows Removed by Filter"]]))}`).toBeLessThanOrEqual(500);
          }
        };
        await measure("wf", "planned on the empty table");
        await pool.query(`ANALYZE ${schema}.jobs, ${schema}.workflows, ${schema}.workflow_events`);
        for (const [name, run] of Object.entries(statements)) {
          const { text } = await capture(run);
          await client.query(`PREPARE analyzed_${name} AS ${text}`);
        }
        await measure("analyzed", "planned on the analyzed tables");
        // The apply did its work: the instance written, the task cancelled, the timer's wake-up gone.
        await client.query("BEGIN");
        const { values } = await capture(statements.apply!);
        const { rows } = await client.query(`EXECUTE wf_apply(${values!.map((v) => client.escapeLiteral(literal(v))).join(", ")})`);
        // Written (the instance as written comes back), and no other event is due.
        expect(rows[0]).toMatchObject({ id: "1000", seq: 51, claimed: 1, eventId: null });
        expect((await client.query(`SELECT status FROM ${schema}.jobs WHERE id = $1`, [target.task])).rows).toEqual([{ status: "cancelled" }]);
        expect((await client.query(`SELECT count(*)::int AS n FROM ${schema}.workflow_events WHERE workflow_id = 1000 AND send_id = 'y'`)).rows).toEqual([{ n: 0 }]);
        await client.query("ROLLBACK");
      } finally {
        client.release();
      }
    } finally {
      await pool.end();
    }
  });
});

describe("operator actions that leave a live workflow's appliers (invariant 14)", () => {
  it("cancel, delete and the bulk actions' count and batches look up each applier's workflow by primary key, empty or analyzed", async () => {
    const schema = "fresh_operator";
    const pool = await openPool({ connectionString: db.url, max: 2 });
    try {
      await migrate(pool, { schema });
      await withoutAutovacuum(pool, schema);
      const options = { schema };
      const statements: Record<string, Run> = {
        cancel: (q) => cancelJob(q as never, "1", options),
        delete: (q) => deleteFinishedJob(q as never, "1", options),
        "bulk count": (q) => countBulk(q as never, "cancel", { state: "ready" }, options),
        "bulk batch": (q) => applyBulk(q as never, "cancel", { state: "ready" }, { ...options, expected: 500 }),
        "bulk delete count": (q) => countBulk(q as never, "delete", { state: "dead" }, options),
      };
      // Every read of the workflows table is one primary-key lookup: no hashed subplan that reads
      // every live workflow, however the statistics say few or many.
      const workflowReads = async () => {
        const reads: Record<string, Array<string | undefined>> = {};
        for (const [name, run] of Object.entries(statements)) {
          for (const generic of [false, true]) {
            reads[`${name}${generic ? " (generic)" : ""}`] = (await explain(run, { generic })).filter((n) => n["Relation Name"] === "workflows").map((n) => n["Index Name"]);
          }
        }
        return reads;
      };
      const each = (index: string) => Object.fromEntries(Object.keys(statements).flatMap((name) => [[name, [index]], [`${name} (generic)`, [index]]]));
      expect(await workflowReads()).toEqual(each("workflows_pkey"));
      await pool.query(`INSERT INTO ${schema}.workflows (name, status) SELECT 'w', CASE WHEN g % 2 = 0 THEN 'running' ELSE 'done' END FROM generate_series(1, 100000) AS g`);
      await pool.query(`INSERT INTO ${schema}.jobs (type, payload) SELECT 'picket.workflow', jsonb_build_object('workflow', g) FROM generate_series(1, 50000) AS g`);
      await pool.query(`ANALYZE ${schema}.workflows, ${schema}.jobs`);
      expect(await workflowReads()).toEqual(each("workflows_pkey"));
    } finally {
      await pool.end();
    }
  });
});
