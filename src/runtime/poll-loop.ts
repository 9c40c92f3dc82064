// The poll cycle that the supervisor machine's `running` state invokes: claim, then claim again
// at once or wait for the interval, a NOTIFY or a freed slot. Plain code rather than states of the
// machine: at concurrency 10 with jobs of tens of milliseconds nearly every job's end is a poll of
// its own, and two steps of XState's interpreter and a poll actor per poll were half of what a
// worker allocated per job (docs/benchmarks.md). The machine keeps the decisions that matter to a
// drain: polling runs until STOP, and the drain begins once the poll in flight has ended.

/** What one poll did: `asked` slots offered to the claim, `claimed` jobs started. */
export interface PollOutput {
  asked: number;
  claimed: number;
}

export interface PollLoopOptions {
  intervalMs: number;
  /** One poll: claims what fits the free slots and starts a job per claim, without awaiting them. */
  poll: () => Promise<PollOutput>;
  /** A poll failed: the loop polls again after the interval. */
  pollFailed: (error: unknown) => void;
}

export class PollLoop {
  private started = false;
  private stopped = false;
  private inFlight: Promise<void> | undefined;
  /**
   * A NOTIFY arrived while a poll was in flight: its claim may have read the table before the new
   * job was committed, so the next poll starts as soon as this one ends.
   */
  private woken = false;
  /** The last poll filled every slot it offered (or had none to offer): more work may be waiting. */
  private saturated = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly options: PollLoopOptions;

  constructor(options: PollLoopOptions) {
    this.options = options;
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    this.pollNow();
  }

  /** A NOTIFY named work for this worker: poll now, or as soon as the poll in flight ends. */
  wake(): void {
    if (this.inFlight) this.woken = true;
    else if (this.started) this.pollNow();
  }

  /**
   * A slot freed, or an outcome's write ended (writes in flight hold the claim back): claim into
   * the room now when the last poll left work behind, rather than at the next interval. (With no
   * work left behind, the next poll waits for the interval or a NOTIFY, or it would spin.)
   */
  roomMade(): void {
    if (!this.inFlight && this.saturated && this.started) this.pollNow();
  }

  /** Polls no more. Resolves once the poll in flight, if any, has ended (its claims reach their jobs). */
  stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    return this.inFlight ?? Promise.resolve();
  }

  private pollNow(): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.woken = false;
    this.inFlight = this.options.poll().then(
      ({ asked, claimed }) => {
        this.saturated = claimed === asked;
        // A full batch means more is probably waiting: claim again at once.
        this.ended(asked > 0 && claimed === asked);
      },
      (error: unknown) => {
        this.options.pollFailed(error);
        this.ended(false);
      },
    );
  }

  private ended(full: boolean): void {
    this.inFlight = undefined;
    if (this.stopped) return;
    if (this.woken || full) this.pollNow();
    else this.timer = setTimeout(() => this.pollNow(), this.options.intervalMs);
  }
}
