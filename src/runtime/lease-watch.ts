// The worker's own view of its leases. The database grants a lease from the moment it writes the
// claim or the renewal (lock_until = clock_timestamp() + lease), which is after the worker sent the
// statement; so, on the worker's monotonic clock, a lease confirmed by a statement sent at t holds
// at least until t + lease. The worker counts it lost a margin earlier and interrupts the handler
// then, before any other worker's sweep may reclaim the job (it needs the server's now() past
// lock_until). So two executions of one job never overlap while both event loops respond.

/** A fifth of the lease: room for timers that fire late and a handler that takes a moment to stop. */
export const leaseMarginMs = (leaseMs: number): number => leaseMs / 5;

/** When (performance.now()) a lease confirmed by a statement sent at `confirmedAt` stops being provable. */
export const localDeadline = (confirmedAt: number, leaseMs: number): number => confirmedAt + leaseMs - leaseMarginMs(leaseMs);

/**
 * One timer for every claim of a worker: `check` runs no later than the earliest deadline it was
 * told of, is told how late it runs (a blocked event loop makes it late), and returns the next
 * deadline (Infinity: none). Deadlines only move later when leases are confirmed, so a check that
 * finds nothing due simply re-arms.
 */
export class LeaseWatch {
  private timer: NodeJS.Timeout | undefined;
  private at = Infinity;
  private readonly check: (lateMs: number) => number;

  constructor(check: (lateMs: number) => number) {
    this.check = check;
  }

  /** Makes sure a check runs at `at` (performance.now()) or earlier. */
  schedule(at: number): void {
    if (at >= this.at) return;
    clearTimeout(this.timer);
    this.at = at;
    this.timer = setTimeout(this.run, Math.max(0, at - performance.now()));
    this.timer.unref();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.at = Infinity;
  }

  private readonly run = () => {
    const lateMs = Math.max(0, performance.now() - this.at);
    this.timer = undefined;
    this.at = Infinity;
    const next = this.check(lateMs);
    if (next < Infinity) this.schedule(next);
  };
}
