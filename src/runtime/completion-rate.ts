// Jobs a worker completed per second, by task, between two heartbeats: what the dashboard shows
// as the completion rate, since completed rows are deleted at completion by default.

export class CompletionRate {
  private counts = new Map<string, number>();
  private since: number;

  constructor(now: number) {
    this.since = now;
  }

  completed(type: string): void {
    this.counts.set(type, (this.counts.get(type) ?? 0) + 1);
  }

  /** Per second since the previous take (or the start), by task; counting starts again. */
  take(now: number): Record<string, number> {
    const seconds = Math.max(now - this.since, 1) / 1000;
    const rates: Record<string, number> = {};
    for (const [type, n] of this.counts) rates[type] = n / seconds;
    this.counts = new Map();
    this.since = now;
    return rates;
  }
}
