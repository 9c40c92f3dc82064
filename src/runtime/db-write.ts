// A bookkeeping write as an Effect: retried on transient database errors (a restart, a dropped
// connection) for as long as the claim can still be worth writing, then left to fail (the job
// machine leaves such a job to the sweep). Never turned into a handler failure.
import { Effect, Schedule } from "effect";
import { isTransientDbError } from "../db/index.ts";

/**
 * Retries `run` on transient errors with exponential backoff (50 ms doubling, at most 1 s apart)
 * until `withinMs` has passed: past the lease, the claim is the sweep's and the write would be
 * fenced anyway.
 */
export const dbWrite = <A>(run: () => Promise<A>, withinMs: number): Effect.Effect<A, unknown> => {
  const deadline = Date.now() + withinMs;
  return Effect.tryPromise({ try: run, catch: (error) => error }).pipe(
    Effect.retry({
      schedule: Schedule.min([Schedule.exponential("50 millis", 2), Schedule.spaced("1 second")]),
      while: (error) => isTransientDbError(error) && Date.now() < deadline,
    }),
  );
};
