// A job's outcome write as an Effect. The outcome is kept until it is written or fenced: transient
// database errors (a restart, a dropped connection, a statement past its bound) and a row another
// session holds locked ("busy") are retried for as long as it takes, while lease renewal keeps the
// claim alive. It is given up only when the machine leaves the write state: the drain's time ran
// out, or the process ends (then the sweep takes the job back). Never a handler failure.
import * as Effect from "effect/Effect";
import * as Schedule from "effect/Schedule";
import { isTransientDbError, type FencedResult } from "../db/index.ts";
import type { SignalSource } from "./signal-source.ts";

/** The row was locked by another session when the write came: it is tried again. */
class RowBusy {
  readonly _tag = "RowBusy";
}

/**
 * Retry spacing: 5 ms doubling, at most 1 s apart, jittered so a batch of writes does not retry in
 * step. The first retries come quickly because most busy rows are held for a moment only: another
 * worker's claim, scanning index entries of rows just claimed, locks them until it commits.
 */
const retrySpacing = Schedule.min([Schedule.exponential("5 millis", 2), Schedule.spaced("1 second")]).pipe(Schedule.jittered);

/**
 * Runs `run` until it reports something other than busy (applied or fenced, for an outcome; a
 * step's record too). A non-transient error (a value the database refuses, a trigger that raises)
 * fails the Effect: the machine leaves the job to the sweep.
 */
export const dbWrite = <R extends { outcome: string }>(run: () => Promise<R>): Effect.Effect<Exclude<R, { outcome: "busy" }>, unknown> =>
  Effect.tryPromise({ try: run, catch: (error) => error }).pipe(
    Effect.flatMap((result) => (result.outcome === "busy" ? Effect.fail(new RowBusy()) : Effect.succeed(result as Exclude<R, { outcome: "busy" }>))),
    Effect.retry({ schedule: retrySpacing, while: (error) => error instanceof RowBusy || isTransientDbError(error) }),
  );

/**
 * The outcome write as a job's machine runs it, under the write state's signal (read only for a retry). The first attempt
 * is a plain promise: most writes need no other, and an Effect run per write cost ~12 µs of a
 * job's CPU. A row found busy or a transient error hands the write to dbWrite's retries, after
 * the first spacing. Leaving the write state (ABANDON) aborts the signal, which interrupts them.
 */
export const writeOutcome = (run: () => Promise<FencedResult>, abort: SignalSource): Promise<FencedResult> => {
  const retry = () =>
    Effect.runPromise(Effect.result(Effect.flatMap(Effect.sleep("5 millis"), () => dbWrite(run))), { signal: abort.signal }).then((result) => {
      if (result._tag === "Failure") throw result.failure;
      return result.success;
    });
  return run().then(
    (result) => (result.outcome === "busy" ? retry() : result),
    (error: unknown) => (isTransientDbError(error) ? retry() : Promise.reject(error)),
  );
};
