// picket/testing: a real database per test file, running jobs inside a test, assertions on what
// was enqueued, and model-based checks of a task's handler. Test-only code: never imported by
// picket's main entry.
export {
  createTestDatabase,
  startTestServer,
  useTestDatabase,
  withDatabase,
  TEST_ADMIN_URL_ENV,
  TEST_TEMPLATE_ENV,
  type SuiteHooks,
  type TestDatabase,
  type TestDatabaseOptions,
  type TestServer,
  type TestServerOptions,
} from "./database.ts";
export { runUntilIdle, type JobRunResult, type RunUntilIdleOptions } from "./run-jobs.ts";
export { expectEnqueued, matchesPartially, type ExpectEnqueuedOptions } from "./expect-enqueued.ts";
export { expectFlow, type ExpectFlowOptions } from "./expect-flow.ts";
export { formatWorkflowPaths, workflowPaths, type WorkflowPathsOptions, type WorkflowPathsReport, type WorkflowState } from "./workflow-paths.ts";
export {
  checkTask,
  formatReport,
  judgePath,
  type CheckedJob,
  type CheckTaskOptions,
  type CheckTaskReport,
  type EffectSeen,
  type PathObservation,
  type PathReport,
  type PathRun,
} from "./check-task.ts";
export type { RunningFault } from "./path-scenarios.ts";
export { generateJobPaths, type JobPath, type PathVocabulary } from "./job-paths.ts";
