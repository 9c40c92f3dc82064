// A bookkeeping write as an Effect: retried on transient database errors, then left to fail
// (the job machine leaves such a job to the sweep). Never turned into a handler failure.
import { Effect, Schedule } from "effect";
import { isTransientDbError } from "../db/index.ts";

export const WRITE_RETRIES = 4;

export const dbWrite = <A>(run: () => Promise<A>): Effect.Effect<A, unknown> =>
  Effect.tryPromise({ try: run, catch: (error) => error }).pipe(
    Effect.retry({
      schedule: Schedule.exponential("50 millis", 2),
      times: WRITE_RETRIES,
      while: isTransientDbError,
    }),
  );
