// Coalesces fenced writes into one statement: those made in the same turn of the event loop, or,
// with a gather window, within that many milliseconds of the first. Each claim still gets its own
// fenced result: the statement is the same fenced write, for many rows. Measured
// (bench/throughput.ts, 20,000 no-op jobs): one statement per completion spent ~14% of the worker's
// CPU in socket writes alone.
import { isTransientDbError, type Claim, type FencedResult } from "../db/index.ts";
import { isAborted, type SignalSource } from "./signal-source.ts";

/**
 * Writes `item` with the others of this turn. Once `abort` has aborted (the machine gave the
 * write up: the drain's time ran out), an item not yet sent is never sent: no outcome may be
 * written after the worker reported it given up.
 */
export type BatchedWrite<T extends Claim> = (item: T, abort?: SignalSource) => Promise<FencedResult>;

/** Most writes in one statement. */
export const MAX_WRITE_BATCH = 1_000;

export const createWriteBatcher = <T extends Claim>(
  write: (items: T[]) => Promise<FencedResult[]>,
  maxBatch = MAX_WRITE_BATCH,
  /**
   * How long the first write of a batch waits for others (0: until the end of this turn). Each
   * batch is sent on its own, so a slow statement delays only its own writes.
   */
  gatherMs = 0,
): BatchedWrite<T> => {
  type Entry = { item: T; abort: SignalSource | undefined; resolve: (r: FencedResult) => void; reject: (e: unknown) => void };
  let queue: Entry[] = [];
  let scheduled = false;
  const send = (batch: Entry[]) =>
    write(batch.map((entry) => entry.item)).then(
      (results) => batch.forEach((entry, i) => entry.resolve(results[i]!)),
      (error: unknown) => {
        // A statement that failed for a reason of its own (a connection lost, a timeout) fails
        // every write in it, and each caller retries its own. Any other failure may belong to one
        // item (a value the database refuses): each is written alone, so only that one fails.
        if (batch.length === 1 || isTransientDbError(error)) batch.forEach((entry) => entry.reject(error));
        else batch.forEach((entry) => void send([entry]));
      },
    );
  const flush = () => {
    scheduled = false;
    // Checked here rather than by a listener on each signal, which every write would pay for.
    const live: Entry[] = [];
    for (const entry of queue) {
      if (entry.abort !== undefined && isAborted(entry.abort)) entry.reject(entry.abort.signal.reason);
      else live.push(entry);
    }
    queue = live;
    if (queue.length === 0) return;
    const batch = queue.slice(0, maxBatch);
    queue = queue.slice(batch.length);
    if (queue.length > 0) schedule();
    void send(batch);
  };
  const schedule = () => {
    if (scheduled) return;
    scheduled = true;
    if (gatherMs > 0) setTimeout(flush, gatherMs);
    else setImmediate(flush);
  };
  return (item, abort) =>
    new Promise<FencedResult>((resolve, reject) => {
      queue.push({ item, abort, resolve, reject });
      schedule();
    });
};
