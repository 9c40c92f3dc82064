// Every background loop has one shape: one iteration as an Effect (which tests can run on its
// own), its failures caught and logged inside the loop, repeated on a schedule with jitter.
import * as Effect from "effect/Effect";
import * as Schedule from "effect/Schedule";
import type { Logger } from "./logger.ts";

export const loop = (name: string, everyMs: number, iteration: Effect.Effect<void, unknown>, logger: Logger): Effect.Effect<never> =>
  iteration.pipe(
    Effect.catch((error) => Effect.sync(() => logger.error({ err: error, loop: name }, `${name} failed; it will run again`))),
    Effect.repeat(Schedule.spaced(everyMs).pipe(Schedule.jittered)),
    Effect.andThen(Effect.never),
  );
