// What a worker did between two heartbeats, by task: jobs completed, attempts failed, jobs dead,
// jobs started and their pickup delay. The heartbeat adds it to the minute's rows of job_stats
// (the dashboard's history) and reports the completions per second (its live rate), and per named
// queue the completions and failed attempts per second.
import type { TaskTally } from "../db/history.ts";
import type { QueueRate } from "../db/workers.ts";

export class JobTally {
  private tallies = new Map<string, TaskTally>();
  private queues = new Map<string, QueueRate>();
  private since: number;

  constructor(now: number) {
    this.since = now;
  }

  private of(type: string): TaskTally {
    let tally = this.tallies.get(type);
    if (tally === undefined) this.tallies.set(type, (tally = { type, completed: 0, failed: 0, dead: 0, started: 0, pickupMs: 0 }));
    return tally;
  }

  /** A job's handler started, `pickupMs` after its run_at. */
  started(type: string, pickupMs: number): void {
    const tally = this.of(type);
    tally.started += 1;
    tally.pickupMs += Math.max(0, pickupMs);
  }

  /** A job's attempt ended with `outcome` (the job machine's); `queue` is the queue it names, if any. */
  ended(type: string, outcome: string, queue: string | null): void {
    const failed = outcome === "retried" || outcome === "dead";
    if (outcome === "completed") this.of(type).completed += 1;
    if (failed) this.of(type).failed += 1;
    if (outcome === "dead") this.of(type).dead += 1;
    if (queue === null || (outcome !== "completed" && !failed)) return;
    let counts = this.queues.get(queue);
    if (counts === undefined) this.queues.set(queue, (counts = { completed: 0, failed: 0 }));
    if (failed) counts.failed += 1;
    else counts.completed += 1;
  }

  /** The counts since the previous take, and the rates per second over that time; counting starts again. */
  take(now: number): { tallies: TaskTally[]; completedPerSecond: Record<string, number>; queueRates: Record<string, QueueRate> } {
    const seconds = Math.max(now - this.since, 1) / 1000;
    const tallies = [...this.tallies.values()];
    const completedPerSecond: Record<string, number> = {};
    for (const tally of tallies) if (tally.completed > 0) completedPerSecond[tally.type] = tally.completed / seconds;
    const queueRates: Record<string, QueueRate> = {};
    for (const [queue, counts] of this.queues) queueRates[queue] = { completed: counts.completed / seconds, failed: counts.failed / seconds };
    this.tallies = new Map();
    this.queues = new Map();
    this.since = now;
    return { tallies, completedPerSecond, queueRates };
  }
}
