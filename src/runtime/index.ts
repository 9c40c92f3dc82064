export type { SupervisorOptions } from "./config.ts";
export { PicketWorker, workerLayer } from "./layer.ts";
export { createLogger, jobLogger, type Logger, type LoggerOptions } from "./logger.ts";
export { createQueue, type EnqueueOptions, type Queue, type QueueOptions } from "./queue.ts";
export { createSupervisor, Supervisor, type JobFinishedListener, type SupervisorStats } from "./supervisor.ts";
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
} from "./task.ts";
export type { HealthReport } from "./health-server.ts";
export { startWorkerProcesses, type StartWorkerProcessesOptions, type WorkerProcesses } from "./worker-processes.ts";
export { WorkerMetrics, type MetricsOptions } from "./metrics.ts";
