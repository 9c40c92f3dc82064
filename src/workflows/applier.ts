// The task that applies workflow events: a 'picket.workflow' job names an instance, and its run
// takes the instance (the hold: one applier at a time) and applies its due events one at a time,
// each in one fenced statement (src/db/workflows.ts, writeApply). Every event and timer has an
// applier job of its own; those that find the instance held end at once, and the holder applies
// their events. Each event is applied by exactly one write whatever happens to the hold (the
// instance's seq is compared and set), and a run whose claim was lost writes nothing.
import type { AnyStateMachine } from "xstate";
import { InvalidConfigError, InvalidJobError, PicketError } from "../db/errors.ts";
import type { Queryable, StatementOptions } from "../db/queryable.ts";
import { cancelWorkflow, continueApplying, dropEvent, eventsDue, holdForApply, readForApply, releaseHold, writeApply, type ApplyInput, type ApplyResult, type ApplyWrite } from "../db/workflows.ts";
import { isDataException } from "../db/errors.ts";
import { APPLIER_TASK, CHILD_CANCEL_TASK, MAX_ATTEMPTS } from "../db/job-spec.ts";
import type { JobId } from "../db/job-row.ts";
import { defineTask, type Task } from "../runtime/task.ts";
import { claimOfRun } from "../runtime/handler-context.ts";
import type { Logger } from "../runtime/logger.ts";
import type { WorkflowDefinition } from "./definition.ts";
import { machineConfig } from "../machines/diagram.ts";
import { eventStep, migrateSnapshot, startStep, WorkflowRefusal, type Step } from "./step.ts";

/** The definitions a worker runs, by name and version; new instances start on the last one given per name. */
export class WorkflowRegistry {
  private readonly byName = new Map<string, { latest: WorkflowDefinition; versions: Map<string, WorkflowDefinition> }>();

  constructor(definitions: readonly WorkflowDefinition[]) {
    for (const definition of definitions) {
      if (typeof definition !== "object" || definition === null || typeof definition.fingerprint !== "string") {
        throw new InvalidConfigError("picket: workflows must be made with defineWorkflow({ name, machine }).");
      }
      const entry = this.byName.get(definition.name) ?? { latest: definition, versions: new Map() };
      if (entry.versions.has(definition.version)) {
        throw new InvalidConfigError(`picket: workflow "${definition.name}" version ${definition.version} is given twice: give a changed machine a new version.`);
      }
      entry.versions.set(definition.version, definition);
      entry.latest = definition;
      this.byName.set(definition.name, entry);
    }
    for (const definition of definitions) {
      for (const child of definition.children.values()) {
        if (!this.byName.has(child.name)) {
          throw new InvalidConfigError(
            `picket: workflow "${definition.name}" invokes the child workflow "${child.name}", which is not among this worker's workflows: give it too (createSupervisor({ workflows })), as every worker that applies workflow events must run every workflow.`,
          );
        }
      }
    }
  }

  /**
   * Refuses a grace for missed timers that a healthy worker could not keep: a timer's job is due
   * later, so no enqueue wakes a worker for it and a poll finds it, up to pollIntervalMs late.
   */
  checkTimerGrace(pollIntervalMs: number): void {
    for (const entry of this.byName.values()) {
      for (const d of entry.versions.values()) {
        if (d.timers.missed === "skip" && d.timers.graceMs < 2 * pollIntervalMs) {
          throw new InvalidConfigError(
            `picket: workflow "${d.name}": timers.graceMs (${d.timers.graceMs} ms) is less than two of this worker's polls (pollIntervalMs ${pollIntervalMs}): ` +
              `a timer's job is found by a poll, so timers would be skipped with no downtime at all. Set graceMs to ${2 * pollIntervalMs} or more.`,
          );
        }
      }
    }
  }

  /** Each machine as the console draws it (the config machineConfig gives: states, transitions, names). */
  machines(): Array<{ name: string; version: string; fingerprint: string; definition: unknown }> {
    return [...this.byName.values()].flatMap((entry) =>
      [...entry.versions.values()].map((d) => ({ name: d.name, version: d.version, fingerprint: d.fingerprint, definition: machineConfig(d.machine as AnyStateMachine) })),
    );
  }

  /**
   * The machine an instance runs: its pinned version with the same fingerprint; or, for a version
   * this worker no longer runs, a newer one with a migration from it. Anything else is refused,
   * saying why: a snapshot is never read by a machine it was not written by or migrated to.
   */
  resolve(row: Pick<ApplyInput, "id" | "name" | "version" | "fingerprint">): { definition: WorkflowDefinition; migrateFrom?: string } {
    const entry = this.byName.get(row.name);
    if (entry === undefined) {
      throw new PicketError(`picket: workflow ${row.id} is a "${row.name}", which this worker does not run: give every worker that runs workflows all of them (createSupervisor({ workflows })).`);
    }
    if (row.version === null) return { definition: entry.latest };
    const pinned = entry.versions.get(row.version);
    if (pinned !== undefined) {
      if (pinned.fingerprint === row.fingerprint) return { definition: pinned };
      throw new PicketError(
        `picket: workflow ${row.id} ("${row.name}" version ${row.version}) started on a machine whose definition differs from this worker's version ${row.version} ` +
          `(fingerprint ${row.fingerprint} here ${pinned.fingerprint}): its snapshot is not reinterpreted. Give the changed machine a new version, keep this one deployed as it was, ` +
          `or migrate: defineWorkflow({ version: "2", migrations: { "${row.version}": (old) => ... } }).`,
      );
    }
    const migrating = [...entry.versions.values()].reverse().find((definition) => Object.hasOwn(definition.migrations, row.version!));
    if (migrating !== undefined) return { definition: migrating, migrateFrom: row.version };
    throw new PicketError(
      `picket: workflow ${row.id} runs "${row.name}" version ${row.version}, which this worker does not run (it has ${[...entry.versions.keys()].join(", ")}) and none of them migrates from. ` +
        `Keep version ${row.version} deployed until its instances finish, or add migrations: { "${row.version}": (old) => ... } to the newer one.`,
    );
  }
}

/** The registry of a worker's options, or undefined when it runs no workflow. */
export const workflowRegistry = (options: { workflows?: readonly WorkflowDefinition[] }): WorkflowRegistry | undefined => {
  if (options?.workflows === undefined) return undefined;
  if (!Array.isArray(options.workflows)) throw new InvalidConfigError("picket: workflows must be an array of defineWorkflow(...) results.");
  return options.workflows.length === 0 ? undefined : new WorkflowRegistry(options.workflows);
};

/** What the applier needs of the worker: its pool, its statements' options, its logger. */
export interface ApplierDeps {
  db: Queryable;
  statements: StatementOptions & { schema: string };
  logger: Logger;
  /** Told of every event applied (the inspector's feed). */
  applied?: (workflow: { id: JobId; name: string; machine: AnyStateMachine }, event: unknown, snapshot: unknown) => void;
}

/** Most events one run applies before it ends (the events left have jobs of their own). */
const EVENTS_PER_RUN = 200;
/** Compare-and-set failures in a row before the run gives up (another applier keeps writing first: only after a lapsed hold). */
const LOST_RACES = 50;

type TaskEvent = { status: "completed" | "dead" | "cancelled"; result: unknown; error: string | null };
type ChildEvent = { workflow: string | number; status: "done" | "failed" | "cancelled"; output: unknown; error: string | null };

/** What an invocation's end says, by what ran it: a task's job (reported by workflow_report) or a child workflow (workflow_child_ended). */
const ENDS = {
  task: {
    inFlight: (row: ApplyInput) => row.tasks,
    ended: (row: ApplyInput) => row.jobId!,
    named: (id: string) => `job ${id}`,
    done: "completed",
    output: (reported: unknown) => (reported as TaskEvent).result,
    cancelled: "the task's job was cancelled",
    failed: "the task's job ended dead",
    ref: "job",
  },
  child: {
    inFlight: (row: ApplyInput) => row.children,
    ended: (row: ApplyInput) => String((row.event as ChildEvent).workflow),
    named: (id: string) => `child workflow ${id}`,
    done: "done",
    output: (reported: unknown) => (reported as ChildEvent).output,
    cancelled: "the child workflow was cancelled",
    failed: "the child workflow failed",
    ref: "workflow",
  },
} as const;

/**
 * The XState event an invocation's end is (xstate.done.actor.<id> or xstate.error.actor.<id>), or
 * why it is dropped: the invocation it answered was stopped, even if the same id runs again.
 */
const invocationEnd = (row: ApplyInput & { kind: "task" | "child" }): { invokeId: string; event: { type: string } & Record<string, unknown> } | { dropped: string } => {
  const kind = ENDS[row.kind];
  const reported = row.event as TaskEvent | ChildEvent;
  const ended = kind.ended(row);
  const inFlight = kind.inFlight(row);
  const invokeId = Object.keys(inFlight).find((id) => inFlight[id] === ended);
  if (invokeId === undefined) {
    return { dropped: `late result: ${kind.named(ended)} (${reported.status}) answered an invocation the workflow had already stopped` };
  }
  if (reported.status === kind.done) return { invokeId, event: { type: `xstate.done.actor.${invokeId}`, output: kind.output(reported), actorId: invokeId } };
  return {
    invokeId,
    event: {
      type: `xstate.error.actor.${invokeId}`,
      error: { message: reported.error ?? (reported.status === "cancelled" ? kind.cancelled : kind.failed), status: reported.status, [kind.ref]: ended },
      actorId: invokeId,
    },
  };
};

/**
 * Applies the instance's due events while holding it (THE HOLD in src/db/workflows.ts), one per
 * statement, then lets go and looks again: events sent meanwhile whose appliers found it held are
 * applied now. An applier that finds the instance held ends at once: the holder applies its event.
 * Returns how many were applied; throws when the claim was lost (the worker then treats the run as
 * fenced). A run that stops with events due (its bound, a drain) leaves them to a new applier job.
 */
export const applyDueEvents = async (
  deps: ApplierDeps,
  registry: WorkflowRegistry,
  workflowId: JobId,
  claim: { id: JobId; token: string },
  signal: AbortSignal,
): Promise<number> => {
  const lost = () => new PicketError(`picket: workflow ${workflowId}: the claim of job ${claim.id}, which applies its events, was lost (reclaimed, cancelled or finished): nothing was applied.`);
  let applied = 0;
  for (;;) {
    const hold = await holdForApply(deps.db, workflowId, claim, deps.statements);
    if (hold.outcome === "fenced") throw lost();
    if (hold.outcome !== "held") return applied;
    let row: ApplyInput | null = hold.row;
    // Set by an apply that found no next event: it let go of the hold in its own write.
    let letGo = false;
    let raced = 0;
    while (row !== null && row.eventId !== null && applied < EVENTS_PER_RUN && !signal.aborted) {
      const finished = row.status !== "starting" && row.status !== "running";
      const write = finished ? undefined : plan(registry, row, claim);
      const result: ApplyResult =
        write === undefined ? { outcome: await dropEvent(deps.db, row.eventId, claim, `workflow ${row.status}`, deps.statements), next: null } : await writeOrFail(deps, write, row);
      if (result.outcome === "fenced") throw lost();
      if (result.outcome === "raced") {
        // The instance's seq moved since it was read (a cancel, or a write this run did not make): read again.
        // Exactly-once rests on this compare-and-set, not on the hold.
        if (++raced >= LOST_RACES) throw new PicketError(`picket: workflow ${workflowId}: ${LOST_RACES} writes in a row found the instance changed by another applier; the run ends.`);
      } else {
        applied++;
        raced = 0;
        if (write !== undefined) {
          for (const value of write.logs) deps.logger.info({ workflow_id: row.id, workflow: row.name, log: value }, "workflow log");
          deps.applied?.({ id: row.id, name: row.name, machine: write.machine }, write.xstateEvent, write.snapshot);
        }
      }
      // An apply returns the instance as written with its next event; after a drop or a race, read it.
      row = result.next ?? (await readForApply(deps.db, workflowId, deps.statements));
      letGo = result.next !== null && result.next.eventId === null;
    }
    const { due } = letGo ? await eventsDue(deps.db, workflowId, deps.statements) : await releaseHold(deps.db, workflowId, claim, deps.statements);
    if (!due) return applied;
    if (signal.aborted || applied >= EVENTS_PER_RUN) {
      await continueApplying(deps.db, workflowId, deps.statements);
      return applied;
    }
  }
};

/** The write one event makes: the machine's step, or a drop. */
type PlannedWrite = ApplyWrite & { logs: unknown[]; machine: AnyStateMachine; xstateEvent: unknown };
/** What every write of an event names: the instance, its seq, the event, the claim, the machine. */
type WriteBase = Omit<PlannedWrite, "snapshot" | "state" | "status" | "outcome" | "note" | "startTasks" | "stopTasks" | "startTimers" | "cancelTimers" | "startChildren" | "stopChildren" | "logs">;

/**
 * The write that fails the instance, with why: its snapshot as stored, its tasks in flight stopped
 * (and its timers: the apply deletes a finished instance's). What made the step fail (the machine
 * threw, a refused action, a value PostgreSQL cannot store) would fail it again on every retry.
 */
const failure = (base: WriteBase, row: ApplyInput, snapshot: unknown, notes: string[], message: string): PlannedWrite => ({
  ...base,
  snapshot,
  state: (snapshot as { value?: unknown } | null)?.value ?? null,
  status: "failed",
  error: message,
  outcome: "applied",
  note: [...notes, `failed: ${message}`].join("; "),
  startTasks: [],
  stopTasks: Object.entries(row.tasks).map(([invokeId, jobId]) => ({ invokeId, jobId })),
  startTimers: [],
  cancelTimers: [],
  startChildren: [],
  stopChildren: Object.entries(row.children).map(([invokeId, workflowId]) => ({ invokeId, workflowId, ended: false })),
  logs: [],
});

/** What a step that threw is, in words. */
const failureMessage = (error: unknown): string =>
  error instanceof WorkflowRefusal ? `the transition ${error.message}` : error instanceof Error ? error.message : String(error);

/**
 * Writes the step; a step PostgreSQL cannot store (a value it refuses: a snapshot over 1 MiB, a NUL
 * in the context, a delay past its calendar) fails the instance instead, saying why: written as it
 * was, it would be refused on every retry, and the events behind it would wait for ever.
 */
const writeOrFail = async (deps: ApplierDeps, write: PlannedWrite, row: ApplyInput): Promise<ApplyResult> => {
  try {
    return await writeApply(deps.db, write, deps.statements);
  } catch (error) {
    if (!(error instanceof InvalidJobError) && !isDataException(error)) throw error;
    const { snapshot: _snapshot, state: _state, status: _status, outcome: _outcome, note: _note, startTasks: _s, stopTasks: _t, startTimers: _u, cancelTimers: _c, startChildren: _k, stopChildren: _d, logs: _l, output: _o, error: _e, ...base } = write;
    return writeApply(deps.db, failure(base, row, row.snapshot, [], (error as Error).message), deps.statements);
  }
};

/** An event consumed without reaching the machine, with why: the instance runs on as it was. */
const dropped = (base: WriteBase, persisted: unknown, notes: string[]): PlannedWrite => ({
  ...base,
  snapshot: persisted,
  state: (persisted as { value?: unknown } | null)?.value ?? null,
  status: "running",
  outcome: "dropped",
  note: notes.join("; "),
  startTasks: [],
  stopTasks: [],
  startTimers: [],
  cancelTimers: [],
  startChildren: [],
  stopChildren: [],
  logs: [],
});

/** Why a late timer was skipped, in the history's words. */
const missedTimer = (row: ApplyInput, graceMs: number): string =>
  `missed: the timer ${(row.event as { type?: string }).type} was applied ${seconds(row.lateMs!)} after it was due, past the grace of ${seconds(graceMs)} (timers: { missed: "skip" })`;

const seconds = (ms: number): string => `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;

/** The write one event makes: the machine's step, or a drop, or the instance's failure. */
const plan = (registry: WorkflowRegistry, row: ApplyInput, claim: { id: JobId; token: string }): PlannedWrite => {
  const { definition, migrateFrom } = registry.resolve(row);
  const base = {
    workflowId: row.id,
    seq: row.seq,
    eventId: row.eventId!,
    claim,
    version: definition.version,
    fingerprint: definition.fingerprint,
    machine: definition.machine as AnyStateMachine,
    xstateEvent: row.event as unknown,
  };
  let persisted = row.snapshot;
  const notes: string[] = [];
  let step: Step;
  let answered: string | undefined;
  try {
    if (migrateFrom !== undefined) {
      persisted = migrateSnapshot(definition, migrateFrom, row.snapshot as Record<string, unknown>);
      notes.push(`migrated from version ${migrateFrom} to ${definition.version}`);
    }
    if (row.kind === "start") {
      base.xstateEvent = { type: "xstate.init", input: (row.event as { input?: unknown }).input };
      step = startStep(definition, (row.event as { input?: unknown }).input ?? undefined);
    } else if (row.kind === "task" || row.kind === "child") {
      const end = invocationEnd(row as ApplyInput & { kind: "task" | "child" });
      if ("dropped" in end) return dropped(base, persisted, [...notes, end.dropped]);
      answered = end.invokeId;
      base.xstateEvent = end.event;
      step = eventStep(definition, persisted, end.event);
    } else if (row.kind === "timer" && definition.timers.missed === "skip" && row.lateMs! > definition.timers.graceMs) {
      return dropped(base, persisted, [...notes, missedTimer(row, definition.timers.graceMs)]);
    } else {
      step = eventStep(definition, persisted, row.event as { type: string });
    }
  } catch (error) {
    // The machine itself threw (a guard, an assign, a refused action), or its migration did.
    return failure(base, row, row.snapshot, notes, failureMessage(error));
  }
  const stopped = new Set(step.stopTasks);
  if (answered !== undefined) stopped.add(answered);
  // A final state stops every invocation (XState stops them with the machine).
  if (step.status !== "running") for (const invokeId of [...Object.keys(row.tasks), ...Object.keys(row.children)]) stopped.add(invokeId);
  return {
    ...base,
    snapshot: step.snapshot,
    state: step.value,
    status: step.status,
    output: step.output,
    error: step.error ?? null,
    outcome: step.unchanged ? "dropped" : "applied",
    note: [...notes, ...(step.unchanged ? ["no transition took the event"] : [])].join("; ") || null,
    startTasks: step.startTasks.map((t) => ({ invokeId: t.invokeId, type: t.task.name, payload: t.input, priority: t.task.priority, queue: t.task.queue, maxAttempts: t.task.maxAttempts })),
    stopTasks: [...stopped].filter((invokeId) => row.tasks[invokeId] !== undefined).map((invokeId) => ({ invokeId, jobId: row.tasks[invokeId]! })),
    startTimers: step.startTimers,
    cancelTimers: step.cancelTimers,
    startChildren: step.startChildren.map((c) => ({ invokeId: c.invokeId, name: c.workflow.name, input: c.input })),
    // The child whose end this event is has ended: it leaves the map, and needs no cancel.
    stopChildren: [...stopped].filter((invokeId) => row.children[invokeId] !== undefined).map((invokeId) => ({ invokeId, workflowId: row.children[invokeId]!, ended: row.kind === "child" && invokeId === answered })),
    logs: step.logs,
  };
};

/** The applier as a task the worker runs, writing under each run's claim. */
export const applierTask = (registry: WorkflowRegistry, deps: () => ApplierDeps): Task =>
  defineTask<{ workflow: JobId }, { applied: number }>({
    name: APPLIER_TASK,
    // Each run applies what is due; a failure (a worker without the instance's version, the
    // database away) is tried again, every 10 minutes at most, for as long as it takes (the most
    // attempts a job may have: 19 years of them): an applier that gave up would leave its
    // instance's events waiting for good, and the cause (a version not deployed) is one an operator
    // fixes, after which the instance moves on by itself. Its error history is bounded, as every job's.
    maxAttempts: MAX_ATTEMPTS,
    backoff: { baseMs: 1_000, maxMs: 600_000 },
    handler: async (payload, ctx) => ({ applied: await applyDueEvents(deps(), registry, String(payload.workflow), claimOfRun(ctx), ctx.signal) }),
  }) as Task;

/**
 * The task that cancels a child workflow its parent stopped (the invoking state left, the parent
 * ended, failed or was cancelled), as an operator's cancel does it, its own children after it; a
 * child that has ended meanwhile is left as it is. Retried as the applier is: a child left running
 * under a parent that stopped it would run for nothing.
 */
export const childCancelTask = (deps: () => ApplierDeps): Task =>
  defineTask<{ workflow: JobId; parent: JobId }, { cancelled: boolean }>({
    name: CHILD_CANCEL_TASK,
    maxAttempts: MAX_ATTEMPTS,
    backoff: { baseMs: 1_000, maxMs: 600_000 },
    handler: async (payload) => {
      const { db, statements } = deps();
      const { outcome } = await cancelWorkflow(db, String(payload.workflow), { ...statements, by: `workflow ${payload.parent}` });
      return { cancelled: outcome === "cancelled" };
    },
  }) as Task;
