// Starts the machine for one claimed job, with the runtime's Effects as its actors.
import { Effect } from "effect";
import type pg from "pg";
import { createActor, fromPromise, type Actor } from "xstate";
import {
  completeJobs,
  deadLetterJobs,
  failJobs,
  releaseJobs,
  reportProgress,
  type ClaimedJob,
  type FencedResult,
} from "../db/index.ts";
import { jobMachine, type HandlerFailure, type JobError, type WriteInput } from "../machines/job-machine.ts";
import { dbWrite } from "./db-write.ts";
import { jobLogger, type Logger } from "./logger.ts";
import { runHandler } from "./run-handler.ts";
import { checkPayload, type HandlerContext, type Task } from "./task.ts";

export type JobActor = Actor<typeof jobMachine>;

export interface JobActorDeps {
  pool: pg.Pool;
  schema: string;
  logger: Logger;
  logPayloads: boolean;
  inspect?: (event: unknown) => void;
  /** Counts a fenced write (metrics); called once per fenced job. */
  onFenced: (job: ClaimedJob) => void;
}

/** Runs an Effect under the actor's signal, so leaving the state interrupts it. */
const runUnder = <A, E>(effect: Effect.Effect<A, E>, signal: AbortSignal): Promise<A> =>
  Effect.runPromise(Effect.result(effect), { signal }).then((result) => {
    if (result._tag === "Failure") throw result.failure;
    return result.success;
  });

const errorText = (error: JobError | null): string => (error === null ? "unknown error" : `${error.kind}: ${error.message}`);

export const startJobActor = (deps: JobActorDeps, job: ClaimedJob, task: Task | undefined): JobActor => {
  const { pool, schema } = deps;
  const log = jobLogger(deps.logger, job, { logPayload: deps.logPayloads });
  const claim = { id: job.id, token: job.claimToken };
  let actor: JobActor;

  const idempotencyKey = `picket:${schema}:${job.id}`;
  const ctx: Omit<HandlerContext, "signal"> = {
    job: { id: job.id, task: job.type, attempt: job.attempts, maxAttempts: job.maxAttempts, enqueuedAt: job.createdAt },
    logger: log,
    idempotencyKey,
    stepKey: (step) => `${idempotencyKey}:${step}`,
    // Progress is telemetry: a failed write is logged, never thrown into the handler. A fenced
    // one means the claim is gone, so the handler is interrupted like on a fenced renewal.
    reportProgress: async (progress) => {
      try {
        const [result] = await reportProgress(pool, [{ ...claim, progress }], { schema });
        if (result?.outcome === "fenced") actor.send({ type: "LEASE_LOST" });
      } catch (error) {
        log.warn({ err: error }, "progress write failed; the job goes on");
      }
    },
  };

  const write = (run: (input: WriteInput) => Promise<FencedResult[]>) =>
    fromPromise<FencedResult, WriteInput>(({ input, signal }) =>
      runUnder(dbWrite(() => run(input), task?.leaseMs ?? 30_000), signal).then((results) => results[0]!),
    );

  const machine = jobMachine.provide({
    actors: {
      validatePayload: fromPromise(async () => {
        if (task !== undefined) await checkPayload(task, job.payload);
      }),
      runHandler: fromPromise<unknown, { job: ClaimedJob }>(({ signal }) => {
        log.debug("handler started");
        return runUnder<unknown, HandlerFailure>(runHandler(task!, job.payload, ctx), signal);
      }),
      writeCompletion: write(({ result }) => completeJobs(pool, [{ ...claim, result }], { schema })),
      writeFailure: write(({ error }) => failJobs(pool, [{ ...claim, error: errorText(error) }], { schema })),
      writeDeadLetter: write(({ error }) => deadLetterJobs(pool, [{ ...claim, error: errorText(error) }], { schema })),
      writeRelease: write(() => releaseJobs(pool, [claim], { schema })),
    },
    actions: {
      reportFenced: ({ context }) => {
        deps.onFenced(job);
        log.warn(
          { intended: context.intended, error: context.error?.message },
          `claim lost: job ${job.id} (claim ${job.claimToken}) was reclaimed or finished elsewhere; nothing written for it`,
        );
      },
      reportAbandoned: ({ context }) =>
        log.error(
          { intended: context.intended, write_error: context.writeError },
          `could not record the outcome (${context.intended}) of job ${job.id}; it stays processing and the sweep retries it after its lease`,
        ),
      reportRefused: () => log.error(`job ${job.id} has no claim token; refused, never run unfenced`),
    },
  });
  actor = createActor(machine, {
    input: { job, hasHandler: task !== undefined, timeoutMs: task?.timeoutMs ?? 1 },
    ...(deps.inspect ? { inspect: deps.inspect } : {}),
  });
  return actor;
};
