// What a worker did between two heartbeats, by task: jobs completed, attempts failed, jobs dead,
// jobs started and their pickup delay. The heartbeat adds it to the minute's rows of job_stats
// (the dashboard's history) and reports the completions per second (its live rate).
import type { TaskTally } from "../db/history.ts";

export class JobTally {
  private tallies = new Map<string, TaskTally>();
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

  /** A job's attempt ended with `outcome` (the job machine's). */
  ended(type: string, outcome: string): void {
    if (outcome === "completed") this.of(type).completed += 1;
    else if (outcome === "retried") this.of(type).failed += 1;
    else if (outcome === "dead") {
      const tally = this.of(type);
      tally.failed += 1;
      tally.dead += 1;
    }
  }

  /** The counts since the previous take, and the completions per second over that time; counting starts again. */
  take(now: number): { tallies: TaskTally[]; completedPerSecond: Record<string, number> } {
    const seconds = Math.max(now - this.since, 1) / 1000;
    const tallies = [...this.tallies.values()];
    const completedPerSecond: Record<string, number> = {};
    for (const tally of tallies) if (tally.completed > 0) completedPerSecond[tally.type] = tally.completed / seconds;
    this.tallies = new Map();
    this.since = now;
    return { tallies, completedPerSecond };
  }
}
