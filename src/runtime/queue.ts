// Enqueueing through the tasks: the payload is checked against the task's schema and the job
// gets the task's max attempts, before anything is written.
import type pg from "pg";
import { enqueueJobs, InvalidJobError, type Job, type JobSpec, type Queryable } from "../db/index.ts";
import { checkPayload, type Task } from "./task.ts";

export type EnqueueOptions = Omit<JobSpec, "type" | "payload">;

export interface Queue {
  /**
   * Enqueues one job of a task. Pass `{ client }` (a pg client inside your transaction) to make
   * the job commit or roll back with your own writes.
   */
  enqueue<P>(task: Task<P, any> | string, payload: P, options?: EnqueueOptions & { client?: Queryable }): Promise<Job>;
  /** Enqueues many jobs in one statement. */
  enqueueMany(jobs: Array<{ task: Task<any, any> | string; payload: unknown } & EnqueueOptions>, options?: { client?: Queryable }): Promise<Job[]>;
}

export interface QueueOptions {
  pool: pg.Pool | Queryable;
  /** The tasks this queue enqueues: a name not among them is refused (a typo would make a job no worker runs). */
  tasks?: readonly Task<any, any>[];
  /** Accept names outside `tasks` (jobs for tasks another service defines). Default false. */
  allowUnknown?: boolean;
  schema?: string;
}

export const createQueue = (options: QueueOptions): Queue => {
  const tasks = new Map(options.tasks?.map((t) => [t.name, t as Task]));
  const toSpec = async (task: Task | string, payload: unknown, rest: EnqueueOptions): Promise<JobSpec> => {
    const known = typeof task === "string" ? tasks.get(task) : task;
    const type = typeof task === "string" ? task : task.name;
    if (known === undefined && options.tasks !== undefined && !options.allowUnknown) {
      throw new InvalidJobError(
        `picket: task ${JSON.stringify(type)} is not one of this queue's tasks (${[...tasks.keys()].join(", ") || "none"}); nothing was enqueued. ` +
          `Pass the task object, add it to createQueue({ tasks }), or set allowUnknown: true for tasks defined elsewhere.`,
      );
    }
    if (known !== undefined) {
      try {
        await checkPayload(known, payload);
      } catch (error) {
        throw new InvalidJobError(`picket: job "${type}": payload does not match the task's schema: ${(error as Error).message}`);
      }
    }
    return { type, payload, ...(known ? { maxAttempts: known.maxAttempts } : {}), ...rest };
  };
  const schemaOption = { schema: options.schema };
  return {
    async enqueue(task, payload, { client, ...rest } = {}) {
      const [job] = await enqueueJobs(client ?? options.pool, [await toSpec(task as Task | string, payload, rest)], schemaOption);
      return job!;
    },
    async enqueueMany(jobs, { client } = {}) {
      const specs = await Promise.all(jobs.map(({ task, payload, ...rest }) => toSpec(task, payload, rest)));
      return enqueueJobs(client ?? options.pool, specs, schemaOption);
    },
  };
};
