// Model-based tests of the job machine: every simple path from claim to a final state is
// generated from the machine itself (xstate/graph), then executed against a real PostgreSQL and
// the real runtime (createJobRuntime) with a scripted handler and injected faults. After each step
// the job's row must match the machine's state; at the end every state and every transition of
// the machine must have been taken by some executed path, so a new transition cannot go untested.
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cancelJob, claimJobs, enqueueJob, renewLeases, sweepExpiredClaims, type ClaimedJob } from "../src/db/index.ts";
import { jobMachine, machineTransitions, transitionRows, type JobMachineInput } from "../src/machines/index.ts";
import { createJobRuntime } from "../src/runtime/job-runtime.ts";
import { generateJobPaths, leaseExpired, type PathEvent } from "../src/testing/job-paths.ts";
import { observeJob } from "./support/job-run.ts";
import { defineTask, PermanentError, type Task } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { want } from "./support/factory.ts";
import { captureLogs } from "./support/worker.ts";

const db = useTestDatabase();
// The runtime's own pool, apart from the test's reads: a path can tell when none of the
// runtime's statements is in flight.
let runtimePool: pg.Pool;
beforeAll(() => {
  runtimePool = new pg.Pool({ connectionString: db.url, max: 4 });
});
afterAll(() => runtimePool.end());
const runtimeIdle = () => runtimePool.totalCount === runtimePool.idleCount && runtimePool.waitingCount === 0;

// ---------------------------------------------------------------------------------------------
// Paths, from the machine

type AnyEvent = PathEvent;

const modelJob = (token: string): ClaimedJob =>
  ({ id: "1", type: "model", payload: {}, attempts: 1, maxAttempts: 3, createdAt: new Date(0), claimToken: token, leaseMs: 60_000, readyMs: 0 });

const inputs: Array<{ name: string; input: JobMachineInput }> = [
  { name: "a claimed job", input: { job: modelJob("3f0c2b52-8a8e-4f0e-9a77-0d1f1c2b3a4d"), hasHandler: true, hasSchema: true, timeoutMs: 100, slotFree: true } },
  { name: "a job of a task without a schema", input: { job: modelJob("3f0c2b52-8a8e-4f0e-9a77-0d1f1c2b3a4d"), hasHandler: true, hasSchema: false, timeoutMs: 100, slotFree: true } },
  { name: "a claim without a token", input: { job: modelJob(""), hasHandler: true, hasSchema: true, timeoutMs: 100, slotFree: true } },
  { name: "a job without a handler", input: { job: modelJob("3f0c2b52-8a8e-4f0e-9a77-0d1f1c2b3a4d"), hasHandler: false, hasSchema: false, timeoutMs: 100, slotFree: true } },
  { name: "a job claimed ahead of a slot", input: { job: modelJob("3f0c2b52-8a8e-4f0e-9a77-0d1f1c2b3a4d"), hasHandler: true, hasSchema: true, timeoutMs: 100, slotFree: false } },
  { name: "a job without a schema claimed ahead of a slot", input: { job: modelJob("3f0c2b52-8a8e-4f0e-9a77-0d1f1c2b3a4d"), hasHandler: true, hasSchema: false, timeoutMs: 100, slotFree: false } },
];

interface ModelPath {
  name: string;
  hasToken: boolean;
  hasHandler: boolean;
  hasSchema: boolean;
  slotFree: boolean;
  events: AnyEvent[];
  states: string[];
}

// Every event the runtime can send (src/testing/job-paths.ts), in every state.
const paths: ModelPath[] = generateJobPaths(inputs).map((path) => ({
  name: path.name,
  hasToken: path.input.job.claimToken !== "",
  hasHandler: path.input.hasHandler,
  hasSchema: path.input.hasSchema,
  slotFree: path.input.slotFree,
  events: path.events,
  states: path.states,
}));

// ---------------------------------------------------------------------------------------------
// Scripts: what the handler, the database and the outside world must do to take a path

interface Script {
  hasToken: boolean;
  hasHandler: boolean;
  hasSchema: boolean;
  slotFree: boolean;
  /** How a job claimed ahead of a slot stops waiting. */
  waitEnds: "start" | "release" | "drain" | "leaseLost" | "leaseExpired" | "cancel" | null;
  payloadValid: boolean;
  /** The payload check never settles, and this ends it. */
  validatorHangs: "timeout" | "leaseLost" | "drain" | "leaseExpired" | "cancel" | null;
  /** The lease cannot be proven when the payload check, or the handler, is to start. */
  lapsesAt: "validator" | "handler" | null;
  handler: "succeed" | "fail" | "permanent" | "timeout" | "leaseLost" | "drain" | "leaseExpired" | "cancel" | null;
  /**
   * abandon: the write waits on a row another session holds locked until the drain gives it up;
   * cancelled: an operator cancelled the job before its outcome was written.
   */
  write: "apply" | "fenced" | "cancelled" | "error" | "abandon";
  lastAttempt: boolean;
  /** The handler records a durable step before it does anything else. */
  step: boolean;
}

const scriptOf = (path: ModelPath): Script => {
  const script: Script = { hasToken: path.hasToken, hasHandler: path.hasHandler, hasSchema: path.hasSchema, slotFree: path.slotFree, waitEnds: null, payloadValid: true, validatorHangs: null, lapsesAt: null, handler: null, write: "apply", lastAttempt: false, step: false };
  path.events.forEach((event, i) => {
    if (path.states[i] === "waitingForSlot") {
      script.waitEnds = ({ START: "start", RELEASE: "release", DRAIN_DEADLINE: "drain", LEASE_LOST: "leaseLost", LEASE_EXPIRED: "leaseExpired", CANCEL: "cancel" } as const)[event.type as "START"];
      return;
    }
    if (path.states[i] === "checkingPayload") {
      if (event.type.startsWith("xstate.after.")) script.validatorHangs = "timeout";
      if (event.type === "LEASE_LOST") script.validatorHangs = "leaseLost";
      if (event.type === "DRAIN_DEADLINE") script.validatorHangs = "drain";
      if (event.type === "LEASE_EXPIRED") script.validatorHangs = "leaseExpired";
      if (event.type === "CANCEL") script.validatorHangs = "cancel";
      if (script.validatorHangs !== null) return;
    }
    const lapses = (event.error as { leaseLapsed?: boolean } | undefined)?.leaseLapsed === true;
    if (event.type === "xstate.error.actor.payloadCheck" && lapses) script.lapsesAt = "validator";
    else if (event.type === "xstate.error.actor.payloadCheck") script.payloadValid = false;
    if (event.type === "STEP_RECORDED") script.step = true;
    if (event.type === "xstate.done.actor.handler") script.handler = "succeed";
    if (event.type === "xstate.error.actor.handler" && lapses) script.lapsesAt = "handler";
    else if (event.type === "xstate.error.actor.handler") script.handler = (event.error as { permanent: boolean }).permanent ? "permanent" : "fail";
    if (event.type.startsWith("xstate.after.")) script.handler = "timeout";
    if (event.type === "LEASE_LOST") script.handler = "leaseLost";
    if (event.type === "DRAIN_DEADLINE") script.handler = "drain";
    if (event.type === "LEASE_EXPIRED") script.handler = "leaseExpired";
    if (event.type === "CANCEL") script.handler = "cancel";
    if (event.type === "xstate.error.actor.write") script.write = "error";
    if (event.type === "ABANDON") script.write = "abandon";
    const output = event.output as { outcome?: string; status?: string } | undefined;
    if (event.type === "xstate.done.actor.write" && output?.outcome === "fenced") script.write = "fenced";
    if (event.type === "xstate.done.actor.write" && output?.outcome === "cancelled") script.write = "cancelled";
    if (event.type === "xstate.done.actor.write" && output?.status === "dead" && path.states.includes("failing")) script.lastAttempt = true;
  });
  return script;
};

/** Another worker takes the claim over: the lease runs out, the sweep requeues, a thief claims. */
// One transaction: a row read concurrently (the per-state checks) sees the claim either still ours
// or already the thief's, never the requeued row in between (a flake Stryker's load exposed).
const steal = async (pool: pg.Pool, job: ClaimedJob): Promise<string> => {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await client.query("UPDATE picket.jobs SET lock_until = now() - interval '1 second' WHERE id = $1", [job.id]);
    await sweepExpiredClaims(client, 1000);
    await client.query("UPDATE picket.jobs SET run_at = now() WHERE id = $1", [job.id]);
    const [stolen] = await claimJobs(client, "thief", [want(job.type, { limit: 1 })]);
    if (stolen?.id !== job.id) throw new Error("steal failed");
    await client.query("COMMIT");
    return stolen.claimToken;
  } catch (error) {
    await client.query("ROLLBACK");
    throw error;
  } finally {
    client.release();
  }
};

// ---------------------------------------------------------------------------------------------
// What the row must look like in each state

interface Row {
  status: string;
  claim_token: string | null;
  attempts: number;
  result: unknown;
  last_error: string | null;
  run_at: Date;
  updated_at: Date;
}

interface Claim {
  token: string;
  attempts: number;
  thief: string | null;
  /** An operator cancelled the job under our claim. */
  cancelled: boolean;
  claimedRow: Row;
  /** The runtime keeps completed rows (keepCompleted), else its completion deletes the row. */
  keepCompleted: boolean;
}

const ours = (row: Row, c: Claim) => row.claim_token === c.token;
const heldByOwner = (row: Row | undefined, c: Claim) =>
  row !== undefined &&
  ((row.status === "processing" && (ours(row, c) || (c.thief !== null && row.claim_token === c.thief))) || (c.cancelled && row.status === "cancelled" && ours(row, c)));

/** The row in a state the machine passes through (a write may land at any moment within it). */
const rowMatchesTransient = (state: string, row: Row | undefined, c: Claim): boolean => {
  switch (state) {
    case "claimed":
    case "waitingForSlot":
    case "checkingPayload":
    case "running":
      return heldByOwner(row, c);
    case "completing":
      return heldByOwner(row, c) || (c.keepCompleted ? row?.status === "completed" && ours(row, c) : row === undefined);
    case "failing":
      return heldByOwner(row, c) || (row?.status === "pending" && row.claim_token === null) || (row?.status === "dead" && ours(row, c));
    case "deadLettering":
      return heldByOwner(row, c) || (row?.status === "dead" && ours(row, c));
    case "releasing":
      return heldByOwner(row, c) || (row?.status === "pending" && row.attempts === c.attempts - 1);
    default:
      return true;
  }
};

/** The row once the machine has ended. */
const expectFinalRow = (outcome: string, row: Row | undefined, c: Claim, script: Script) => {
  switch (outcome) {
    case "completed":
      // Deleted by the completion, or kept completed under our claim with the handler's result.
      if (c.keepCompleted) expect(row).toMatchObject({ status: "completed", claim_token: c.token, result: "result" });
      else expect(row).toBeUndefined();
      break;
    case "retried":
      expect(row).toMatchObject({ status: "pending", claim_token: null, attempts: c.attempts });
      expect(row!.run_at.getTime()).toBeGreaterThan(Date.now() + 20_000); // the backoff, not "now"
      break;
    case "dead":
      expect(row).toMatchObject({ status: "dead", claim_token: c.token, attempts: c.attempts });
      expect(row!.last_error).toMatch(/^(permanent|no_handler|invalid_payload|error|timeout|lease_expired): /);
      break;
    case "released":
      expect(row).toMatchObject({ status: "pending", claim_token: null, attempts: c.attempts - 1 });
      break;
    case "fenced":
      // Nothing was written with our token: the thief's claim is intact.
      expect(row).toMatchObject({ status: "processing", claim_token: c.thief });
      break;
    case "abandoned":
      // The outcome could not be written: the row is exactly as claimed, left for the sweep.
      expect(row).toEqual(c.claimedRow);
      break;
    case "cancelled":
      // The cancel was the last write: our token stays on the row, and nothing of ours followed it.
      expect(c.cancelled).toBe(true);
      expect(row).toMatchObject({ status: "cancelled", claim_token: c.token, attempts: c.attempts, result: null, last_error: null });
      break;
    case "refused":
      expect(row).toEqual(c.claimedRow);
      expect(script.hasToken).toBe(false);
      break;
    default:
      throw new Error(`unknown outcome ${outcome}`);
  }
};

// ---------------------------------------------------------------------------------------------
// Execution

/** The row, or undefined once a completion deleted it. */
const readRow = async (pool: pg.Pool, id: string): Promise<Row | undefined> =>
  (await pool.query<Row>("SELECT status, claim_token, attempts, result, last_error, run_at, updated_at FROM picket.jobs WHERE id = $1", [id])).rows[0];

/** Each way a completion is written that a path ended in: kept, deleted. */
const completedModes = new Set<string>();

const covered = new Set<string>();
const visited = new Set<string>();

const execute = async (path: ModelPath, index: number) => {
  const script = scriptOf(path);
  const type = `model-${index}`;
  const hang = (signal: AbortSignal) => new Promise<never>((_r, reject) => signal.addEventListener("abort", () => reject(new Error("interrupted")), { once: true }));
  let onHandlerStart: () => Promise<void> = async () => undefined;
  let afterStep: () => Promise<void> = async () => undefined;
  let onValidatorHang: () => Promise<void> = async () => undefined;
  let handlerRuns = 0;
  let stepRuns = 0;
  let leaseChecks = 0;
  const task: Task = defineTask({
    name: type,
    // With a step, the faults come after the step is recorded, and the timeout must not fire before
    // they are in: the test fires it then (the event XState's own timer sends); without a step the
    // real timer does, after 100 ms.
    timeoutMs: (script.handler === "timeout" && !script.step) || script.validatorHangs === "timeout" ? 100 : 30_000,
    ...(script.hasSchema
      ? {
          schema: {
            "~standard": {
              version: 1 as const,
              vendor: "test",
              validate: (value: unknown) =>
                script.validatorHangs !== null
                  ? onValidatorHang().then(() => new Promise<never>(() => undefined))
                  : (value as { valid?: boolean }).valid
                    ? { value }
                    : { issues: [{ message: "Expected a valid payload" }] },
            },
          },
        }
      : {}),
    handler: async (_payload: unknown, { signal, step }) => {
      handlerRuns++;
      if (script.step) {
        expect(await step("one", () => ++stepRuns)).toBe(1);
        await afterStep();
        if (script.handler === "timeout") actor.send({ type: "xstate.after.jobTimeout.job.running" } as never);
      }
      await onHandlerStart();
      switch (script.handler) {
        case "succeed":
          return "result";
        case "fail":
          throw new Error("boom");
        case "permanent":
          throw new PermanentError("cannot ever work");
        default:
          return hang(signal);
      }
    },
  }) as Task;

  await enqueueJob(db.pool, { type, payload: { valid: script.payloadValid }, maxAttempts: script.lastAttempt ? 1 : 3 });
  // A minute of backoff, so "retried" is told apart from "ready now" however slow the machine.
  const [claimed] = await claimJobs(db.pool, "model-worker", [want(type, { limit: 1, backoffBaseMs: 60_000, backoffMaxMs: 60_000 })]);
  // Paths alternate between the two completions: rows kept, and deleted (a worker's default).
  const claim: Claim = {
    token: claimed!.claimToken,
    attempts: claimed!.attempts,
    thief: null,
    cancelled: false,
    claimedRow: (await readRow(db.pool, claimed!.id))!,
    keepCompleted: index % 2 === 0,
  };

  // Faults the path needs before the write: the claim lost to another worker, or a write that fails.
  // With a step they come once it is recorded (before it, they would stop the step's write).
  let holder: pg.Client | null = null;
  const injectWriteFaults = async () => {
  const losesLease = script.handler === "leaseLost" || script.validatorHangs === "leaseLost" || script.waitEnds === "leaseLost";
  if (script.write === "fenced" && !losesLease) claim.thief = await steal(db.pool, claimed!);
  // The cancel lands before the outcome is written, and nothing tells the machine: its write finds it.
  const cancelled = script.handler === "cancel" || script.validatorHangs === "cancel" || script.waitEnds === "cancel";
  if (script.write === "cancelled" && !cancelled) {
    expect(await cancelJob(db.pool, claimed!.id)).toMatchObject({ outcome: "applied" });
    claim.cancelled = true;
  }
  if (script.write === "error") {
    await db.pool.query(`
      CREATE OR REPLACE FUNCTION picket.refuse_model_write() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'write refused by the model test'; END $$`);
    await db.pool.query(
      `CREATE TRIGGER refuse_${type.replace("-", "_")} BEFORE UPDATE OR DELETE ON picket.jobs FOR EACH ROW WHEN (OLD.id = ${Number(claimed!.id)}) EXECUTE FUNCTION picket.refuse_model_write()`,
    );
  }
  if (script.write === "error" || (script.write === "fenced" && !losesLease)) {
    claim.claimedRow = (await readRow(db.pool, claimed!.id))!;
  }
  // Another session holds the row locked: the write finds it busy and tries again until abandoned.
  holder = script.write === "abandon" ? await db.connect() : null;
  if (holder !== null) {
    await holder.query("BEGIN");
    await holder.query("SELECT 1 FROM picket.jobs WHERE id = $1 FOR UPDATE", [claimed!.id]);
  }
  };
  if (script.step) afterStep = injectWriteFaults;
  else await injectWriteFaults();

  const executed: string[] = [];
  const states: string[] = [];
  const checks: Array<Promise<[string, Row | undefined]>> = [];
  const { logger } = captureLogs();
  const runtime = createJobRuntime({
    db: runtimePool,
    statements: { schema: "picket" },
    logger,
    logPayloads: false,
    keepCompleted: claim.keepCompleted,
    taskFor: (t) => (script.hasHandler && t === type ? task : undefined),
    leaseLost: () => undefined,
    cancelled: () => undefined,
    // As the supervisor does: the job's machine hears of each step recorded.
    stepRecorded: (_job, name) => actor.send({ type: "STEP_RECORDED", name }),
    handlerSettled: () => undefined,
    leaseConfirmed: () => undefined,
    // The runtime asks before the payload check (with a schema) and before the handler.
    leaseProvable: () => {
      leaseChecks++;
      return !((script.lapsesAt === "validator" && leaseChecks === 1) || (script.lapsesAt === "handler" && leaseChecks === (script.hasSchema ? 2 : 1)));
    },
    inspect: (event) => {
      const e = event as { type: string; snapshot?: { value?: unknown }; _transitions?: unknown[]; actorRef?: { id?: string } };
      if (e.type !== "@xstate.microstep" || e.snapshot === undefined) return;
      for (const t of e._transitions ?? []) {
        for (const r of transitionRows(t as never)) {
          executed.push(r.key);
          // A state left by an always-transition is entered and left in one step.
          visited.add(r.source).add(r.target);
        }
      }
      const state = String(e.snapshot.value);
      if (states.at(-1) !== state) {
        states.push(state);
        visited.add(state);
        checks.push(readRow(db.pool, claimed!.id).then((row) => [state, row]));
      }
    },
  });
  const loseLease = async () => {
    // As the renewal loop does: the claim was stolen, the renewal reports fenced, the job is told.
    claim.thief = await steal(db.pool, claimed!);
    const [renewal] = await renewLeases(db.pool, [{ id: claimed!.id, token: claimed!.claimToken, leaseMs: 30_000 }]);
    expect(renewal!.outcome).toBe("fenced");
    actor.send({ type: "LEASE_LOST" });
  };
  const cancel = async () => {
    // As an operator and the supervisor do: the row is cancelled under our claim, then the job is
    // told (by the cancel's notification, or by a renewal that finds it cancelled).
    expect(await cancelJob(db.pool, claimed!.id)).toMatchObject({ outcome: "applied" });
    claim.cancelled = true;
    const [renewal] = await renewLeases(db.pool, [{ id: claimed!.id, token: claimed!.claimToken, leaseMs: 30_000 }]);
    expect(renewal!.outcome).toBe("cancelled");
    actor.send({ type: "CANCEL" });
  };
  onValidatorHang = async () => {
    if (script.validatorHangs === "cancel") await cancel();
    if (script.validatorHangs === "leaseLost") await loseLease();
    if (script.validatorHangs === "drain") actor.send({ type: "DRAIN_DEADLINE" });
    // As the supervisor's lease watch does when a lease went unconfirmed past its deadline.
    if (script.validatorHangs === "leaseExpired") actor.send(leaseExpired as never);
  };
  onHandlerStart = async () => {
    if (script.handler === "cancel") await cancel();
    if (script.handler === "leaseLost") await loseLease();
    if (script.handler === "drain") actor.send({ type: "DRAIN_DEADLINE" });
    if (script.handler === "leaseExpired") actor.send(leaseExpired as never);
  };
  // With an inspector the job runs as an XState actor from its start, so every microstep is seen;
  // test/conformance.test.ts shows the derived path takes the same ones.
  let writeEntered: () => void;
  const inWriteState = new Promise<void>((resolve) => (writeEntered = resolve));
  const writeState = path.states.at(-2)!;
  const { run: actor, done: finished } = observeJob(runtime, script.hasToken ? claimed! : { ...claimed!, claimToken: "" }, script.slotFree, (state) => {
    if (state === writeState) writeEntered();
  });
  actor.start();
  // A job claimed ahead of a slot waits until the supervisor starts it, releases it, or its lease is lost.
  if (script.waitEnds === "start") actor.send({ type: "START" });
  if (script.waitEnds === "release") actor.send({ type: "RELEASE" });
  if (script.waitEnds === "drain") actor.send({ type: "DRAIN_DEADLINE" });
  if (script.waitEnds === "leaseLost") await loseLease();
  if (script.waitEnds === "leaseExpired") actor.send(leaseExpired as never);
  if (script.waitEnds === "cancel") await cancel();
  if (script.write === "abandon") {
    // The drain's time runs out while the write is still waiting on the locked row.
    await inWriteState;
    await new Promise((r) => setTimeout(r, 100));
    actor.send({ type: "ABANDON" });
  }
  const done = { output: await finished };
  if (script.write === "abandon") {
    // A write attempt already sent when ABANDON came still finds the row locked (and is told it is
    // busy); only then does the lock go. Nothing may be written after that.
    await expect.poll(runtimeIdle, { timeout: 10_000, interval: 5 }).toBe(true);
    await (holder as pg.Client | null)!.query("COMMIT");
  }
  const finalRow = await readRow(db.pool, claimed!.id);
  if (script.write === "error") await db.pool.query(`DROP TRIGGER refuse_${type.replace("-", "_")} ON picket.jobs`);

  // A step recorded stays in running: the path names running twice, the observed states once.
  const pathStates = path.states.filter((state, i) => state !== path.states[i - 1]);
  expect(states, "the runtime took the path the model generated").toEqual(pathStates);
  const steps = (await db.pool.query("SELECT name, attempt, claim_token FROM picket.job_steps WHERE job_id = $1", [claimed!.id])).rows;
  // (A completion that deleted the row deleted its steps with it.)
  const stepsKept = script.step && (done.output!.outcome !== "completed" || claim.keepCompleted);
  expect(steps, "a step is recorded, under the claim, exactly when the path records one").toEqual(stepsKept ? [{ name: "one", attempt: claim.attempts, claim_token: claim.token }] : []);
  expect(stepRuns).toBe(script.step ? 1 : 0);
  expect(handlerRuns, "the handler runs exactly when the machine enters running on a lease it can prove").toBe(path.states.includes("running") && script.lapsesAt !== "handler" ? 1 : 0);
  // A row read when the machine entered a state may land after the machine moved on: it must
  // match that state or one the path reaches later (the final one included).
  const finalMatches = (row: Row | undefined) => {
    try {
      expectFinalRow(done.output!.outcome, row, claim, script);
      return true;
    } catch {
      return false;
    }
  };
  for (const [i, [state, row]] of (await Promise.all(checks)).entries()) {
    const later = pathStates.slice(i);
    const ok = later.some((s) => s !== later.at(-1) && rowMatchesTransient(s, row, claim)) || finalMatches(row);
    expect(ok, `row read in ${state}: ${JSON.stringify(row)}`).toBe(true);
  }
  expectFinalRow(done.output!.outcome, finalRow, claim, script);
  if (done.output!.outcome === "completed") completedModes.add(claim.keepCompleted ? "kept" : "deleted");
  for (const key of executed) covered.add(key);
};

describe("job machine, every simple path executed against PostgreSQL and the runtime", () => {
  it("generates paths from the machine", () => {
    expect(paths.length).toBeGreaterThan(15);
  });

  paths.forEach((path, index) => {
    it(path.name, () => execute(path, index));
  });

  afterAll(() => {
    // Runs after every path: any state or transition no executed path took fails the suite, by name.
    const all = machineTransitions(jobMachine).map((t) => t.key);
    const missing = all.filter((key) => !covered.has(key));
    const unvisited = Object.keys(jobMachine.root.states).filter((s) => !visited.has(s));
    expect(missing, `transitions of the job machine that no executed path took:\n  ${missing.join("\n  ")}`).toEqual([]);
    expect(unvisited, `states of the job machine that no executed path entered: ${unvisited.join(", ")}`).toEqual([]);
    expect([...completedModes].sort(), "paths that completed with the row kept and with it deleted").toEqual(["deleted", "kept"]);
  });
});
