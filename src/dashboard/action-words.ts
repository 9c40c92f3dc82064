// What an operator is told after an action, in words a person reads at 3 a.m.: what happened to
// the job or the queue, and when nothing did, why and what to do instead. The API's answers carry
// these as `message` beside the outcome a script reads.
import type { AdminAction, AdminResult, BulkResult, PauseResult, PauseTarget, ResumeResult } from "../db/index.ts";

const DONE: Record<AdminAction, string> = {
  retry: "will run again, with fresh attempts",
  cancel: "is cancelled (if it was running, its handler is being stopped)",
  "run-now": "is due now: the next free worker takes it",
  delete: "is deleted, with its recorded steps",
};

// What each action needs the job to be, and what to do otherwise.
const ONLY: Record<AdminAction, string> = {
  retry: "only a dead job can be retried",
  cancel: "only a pending or running job can be cancelled",
  "run-now": "only a pending job can be made due now",
  delete: "only a finished job (completed, dead or cancelled) can be deleted: cancel it first",
};

const STATUS_WORDS: Record<string, string> = {
  pending: "pending",
  processing: "running",
  completed: "already completed",
  dead: "dead (it failed for good)",
  cancelled: "already cancelled",
};

export const jobActionMessage = (action: AdminAction, id: string, result: AdminResult): string => {
  switch (result.outcome) {
    case "applied":
      return `job ${id} ${DONE[action]}`;
    case "not_found":
      return `job ${id} no longer exists (workers delete completed jobs unless they keep them, and retention removes old ones): nothing was done`;
    case "wrong_status":
      return `job ${id} is ${STATUS_WORDS[result.status] ?? result.status}, so nothing was done: ${ONLY[action]}`;
    case "in_flow":
      return `job ${id} is part of flow ${result.flowId}, so nothing was done: a flow's jobs are deleted with their flow, by retention once it has finished`;
    case "applies_workflow":
      return (
        `job ${id} applies the events of workflow ${result.workflowId}, which has not ended, so nothing was done: ${action === "delete" ? "deleted" : "cancelled"} alone, it would leave an event waiting for good. ` +
        (action === "delete" ? "Retry it, or cancel the workflow" : "Cancel the workflow instead")
      );
    case "key_taken":
      return `job ${id} cannot run again yet: its key ${JSON.stringify(result.key)} is held by job ${result.heldBy}, which is ${STATUS_WORDS[result.heldByStatus] ?? result.heldByStatus}. Let that job finish (or cancel it), then retry this one`;
  }
};

const named = (target: PauseTarget): string => ("queue" in target ? `queue ${target.queue}` : `task ${target.task}`);

export const pauseMessage = (target: PauseTarget, result: PauseResult): string =>
  result.outcome === "applied"
    ? `${named(target)} paused: no worker claims its jobs until it is resumed (running jobs finish)`
    : `${named(target)} was already paused, since ${result.paused.pausedAt.toISOString()}${result.paused.pausedBy === null ? "" : ` by ${result.paused.pausedBy}`}`;

export const resumeMessage = (target: PauseTarget, result: ResumeResult): string =>
  result.outcome === "applied" ? `${named(target)} resumed: workers claim its jobs again` : `${named(target)} was not paused: nothing changed`;

const BULK_DONE: Record<AdminAction, string> = { retry: "will run again", cancel: "cancelled", "run-now": "made due now", delete: "deleted" };
const jobs = (n: number) => `${n.toLocaleString("en-US")} job${n === 1 ? "" : "s"}`;

export const bulkMessage = (action: AdminAction, result: BulkResult): string =>
  `${jobs(result.applied)} ${BULK_DONE[action]}` +
  (result.skipped > 0 ? `; ${jobs(result.skipped)} left as they were (changed meanwhile${action === "retry" ? ", or their key is held by a live job" : ""})` : "") +
  ` (${result.batches} batch${result.batches === 1 ? "" : "es"})`;

export const scheduleMessage = (action: "pause" | "resume" | "trigger", name: string, outcome: string, job: string | null): string => {
  if (outcome === "not_found") return `there is no schedule ${JSON.stringify(name)}: nothing was done`;
  if (action === "trigger") return `schedule ${name} triggered: job ${job} made now, as a tick would make it`;
  if (action === "pause") return outcome === "applied" ? `schedule ${name} paused: it fires no tick until resumed` : `schedule ${name} was already paused`;
  return outcome === "applied" ? `schedule ${name} resumed: it fires from its next tick (the ticks while it was paused are skipped)` : `schedule ${name} was not paused`;
};

const taskJobs = (n: number) => `${n} task job${n === 1 ? "" : "s"}`;

export const workflowCancelMessage = (id: string, result: { outcome: string; status?: string; tasks: number }): string =>
  result.outcome === "applied"
    ? `workflow ${id} cancelled: nothing more is applied, its inbox is dropped${result.tasks > 0 ? `, and ${taskJobs(result.tasks)} in flight cancelled (a running one's handler is being stopped)` : ""}`
    : `workflow ${id} has already finished (${result.status}): nothing was done`;

export const workflowSendMessage = (id: string, type: string, result: { outcome: string; status?: string; eventId?: string }): string =>
  result.outcome === "applied"
    ? `${type} sent to workflow ${id} (event ${result.eventId}): a worker that runs it applies it next`
    : `workflow ${id} has finished (${result.status}): an event cannot change it, and ${type} was not sent`;
