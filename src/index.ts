// picket's public API: what a service imports to define tasks and run a worker, enqueue jobs, run
// schedules, operate the queue, read the machines, and catch picket's errors. Every name here is a
// promise to users, so each is listed by hand (no `export *`): a helper added to src/db or
// src/runtime stays internal until it is added here and to docs/api.md, which
// test/public-api.test.ts holds equal to this file. The claim, the fenced writes, the sweep and
// the statement runner are the runtime's own: picket's tests and benchmarks import them from
// src/ directly. The dashboard is picket/dashboard and the testing kit picket/testing, so that a
// worker loads neither.

// --- Define tasks and run a worker -------------------------------------------------------------
export {
  defineTask,
  PermanentError,
  type Handler,
  type HandlerContext,
  type Isolation,
  type JobInfo,
  type PayloadSchema,
  type StandardSchema,
  type Task,
  type TaskDefinition,
} from "./runtime/task.ts";
export { MAX_STEP_NAME_LENGTH } from "./db/steps.ts";
// The Supervisor class is a type here: createSupervisor is how one is made.
export {
  createSupervisor,
  type JobFinishedListener,
  type Supervisor,
  type SupervisorStats,
} from "./runtime/supervisor.ts";
export type { SupervisorOptions } from "./runtime/config.ts";
export type { ClaimedJob } from "./db/job-row.ts";
export type { HealthCheck, HealthReport } from "./runtime/health-server.ts";
export { PicketWorker, workerLayer } from "./runtime/layer.ts";
export { startWorkerProcesses, type StartWorkerProcessesOptions, type WorkerProcesses } from "./runtime/worker-processes.ts";
export { createLogger, type Logger, type LoggerOptions } from "./runtime/logger.ts";
// The worker makes its own metrics (supervisor.metrics); the type names what it holds.
export type { MetricsOptions, WorkerMetrics } from "./runtime/metrics.ts";

// --- Enqueue -----------------------------------------------------------------------------------
export { createQueue, type EnqueueOptions, type Queue, type QueueOptions } from "./runtime/queue.ts";
export { enqueueJob, enqueueJobs } from "./db/enqueue.ts";
export { enqueueJobWithOutcome, enqueueJobsWithOutcome, type EnqueueOutcome } from "./db/enqueue-outcome.ts";
export {
  MAX_DEDUPE_WINDOW_MS,
  MAX_KEY_LENGTH,
  MAX_PAYLOAD_BYTES,
  MAX_PAYLOAD_DEPTH,
  MAX_QUEUE_LENGTH,
  MAX_TYPE_LENGTH,
  type DedupeMode,
  type JobSpec,
} from "./db/job-spec.ts";
export type { Queryable, StatementOptions } from "./db/queryable.ts";

// --- Recurring jobs ----------------------------------------------------------------------------
export { listSchedules, removeSchedule, upsertSchedule, type ScheduleView } from "./db/schedules.ts";
export { lastScheduledJobs, pauseSchedule, resumeSchedule, triggerSchedule, type LastScheduledJob, type ScheduleActionResult } from "./db/schedule-admin.ts";
export {
  MAX_CATCH_UP,
  MAX_SCHEDULE_NAME_LENGTH,
  type MissedPolicy,
  type ScheduleOptions,
  type ScheduleSpec,
} from "./db/schedule-spec.ts";

// --- Operate: the database, jobs, the queue ----------------------------------------------------
export { openPool, type PoolOptions } from "./db/pool.ts";
export { migrate, type MigrateResult } from "./db/migrate.ts";
export { startEmbeddedPostgres, type EmbeddedPostgres, type EmbeddedPostgresOptions } from "./db/embedded.ts";
export { cancelJob, deleteFinishedJob, getJob, retryDeadJob, runJobNow, type AdminAction, type AdminOptions, type AdminResult } from "./db/admin.ts";
export {
  cancelFlow,
  ClaimLostError,
  DEPENDENCY_FAILURE_POLICIES,
  enqueueChildren,
  enqueueFlow,
  FLOW_STATUSES,
  flowCounts,
  flowGraph,
  getFlow,
  jobDependencies,
  listFlows,
  type ChildJobSpec,
  type Dependency,
  type DependencyFailurePolicy,
  type DependencySpec,
  type EnqueuedFlow,
  type Flow,
  type FlowCount,
  type FlowEdge,
  type FlowJobSpec,
  type FlowSpec,
  type FlowStatus,
} from "./db/flows.ts";

// --- Workflows: a user's XState machine, durable -----------------------------------------------
export { childWorkflow, defineWorkflow, task, type MigratableState, type TaskRef, type TimerPolicy, type WorkflowDefinition, type WorkflowOptions } from "./workflows/definition.ts";
export {
  cancelWorkflow,
  getWorkflow,
  listWorkflows,
  sendToWorkflow,
  startWorkflow,
  WORKFLOW_STATUSES,
  workflowCounts,
  workflowHistory,
  workflowJobs,
  WorkflowFinishedError,
  WorkflowNotFoundError,
  type CancelledWorkflow,
  type StartedWorkflow,
  type Workflow,
  type WorkflowCount,
  type WorkflowEvent,
  type WorkflowHistory,
  type WorkflowJob,
  type WorkflowStatus,
} from "./db/workflows.ts";
export { JOB_STATUSES, listJobs, MAX_JOB_LIST, type JobListFilter } from "./db/job-list.ts";
export { BROWSE_STATES, browseJobs, MAX_BROWSE_PAGE, type BrowsedJob, type BrowseFilter, type BrowsePage, type BrowseState } from "./db/job-browser.ts";
export { applyBulk, BULK_STATES, countBulk, type BulkFilter, type BulkResult } from "./db/bulk.ts";
export { listPaused, listQueues, pauseClaims, resumeClaims, type PausedEntry, type PauseResult, type PauseTarget, type QueueView, type ResumeResult } from "./db/paused.ts";
export { jobSteps, type JobStep } from "./db/steps.ts";
export type { ErrorEntry, HistoryEntry, Job, JobId, JobStatus, OperatorAction, OperatorEntry } from "./db/job-row.ts";
export { queueStats, type JobState, type LiveState, type QueueStats } from "./db/stats.ts";

// --- The machines ------------------------------------------------------------------------------
export { jobMachine, type JobError, type JobErrorKind, type JobMachine, type JobOutcome } from "./machines/job-machine.ts";
export { supervisorMachine, type SupervisorMachine } from "./machines/supervisor-machine.ts";
export { machineJson, machineMermaid } from "./machines/diagram.ts";

// --- Errors a caller catches -------------------------------------------------------------------
export {
  DatabaseUnreachableError,
  InvalidConfigError,
  InvalidJobError,
  MigrationChecksumError,
  PicketError,
  SchemaNotSetUpError,
  SchemaOutOfDateError,
  StatementTimeoutError,
  UnknownMigrationError,
} from "./db/errors.ts";
export { StepFencedError } from "./runtime/steps.ts";
