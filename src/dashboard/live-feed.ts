// The live stream's one reader. However many pages are open (a reload opens a new stream before
// the old one is gone, an incident brings several people), the snapshot is read once per interval
// and every open stream is sent that same message; with no stream open, nothing is read.
//
// A snapshot is the whole picture, not a change: a stream whose page reads slowly is sent only the
// newest message it has not had, never a backlog.

const encoder = new TextEncoder();

interface Viewer {
  /** The newest message this viewer has not been sent yet. */
  pending: Uint8Array | undefined;
  /** Set while the viewer's stream waits for a message. */
  wake: (() => void) | undefined;
}

export class LiveFeed {
  private readonly viewers = new Set<Viewer>();
  /** The last message read, while the loop runs: a stream opened between two reads starts with it. */
  private latest: Uint8Array | undefined;
  private running = false;
  /** The next message (it must not reject: a failed read is a message too). */
  private readonly read: () => Promise<string>;
  /** The pause between one read's end and the next read. */
  private readonly intervalMs: number;

  constructor(read: () => Promise<string>, intervalMs: number) {
    this.read = read;
    this.intervalMs = intervalMs;
  }

  /** How many streams are open. */
  get size(): number {
    return this.viewers.size;
  }

  /**
   * One page's stream: the last message at once when there is one, then each new one. Closing it
   * (`return()`, which Effect's stream calls when the page goes) takes it off the feed at once.
   */
  open(): AsyncIterableIterator<Uint8Array> {
    const viewer: Viewer = { pending: this.latest, wake: undefined };
    this.viewers.add(viewer);
    if (!this.running) void this.loop();
    const done: IteratorResult<Uint8Array> = { value: undefined, done: true };
    const take = (): IteratorResult<Uint8Array> => {
      if (!this.viewers.has(viewer)) return done;
      const value = viewer.pending!;
      viewer.pending = undefined;
      return { value, done: false };
    };
    const iterator: AsyncIterableIterator<Uint8Array> = {
      next: () =>
        viewer.pending !== undefined || !this.viewers.has(viewer)
          ? Promise.resolve(take())
          : new Promise((resolve) => {
              viewer.wake = () => {
                viewer.wake = undefined;
                resolve(take());
              };
            }),
      return: () => {
        this.viewers.delete(viewer);
        viewer.wake?.();
        return Promise.resolve(done);
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  private async loop(): Promise<void> {
    this.running = true;
    try {
      while (this.viewers.size > 0) {
        const message = encoder.encode(await this.read());
        this.latest = message;
        for (const viewer of this.viewers) {
          viewer.pending = message;
          viewer.wake?.();
        }
        // Unref'd: an open stream's connection is what keeps a process up, not this pause.
        await new Promise((resolve) => setTimeout(resolve, this.intervalMs).unref());
      }
    } finally {
      // A stream opened after this sees no message older than its own first read.
      this.latest = undefined;
      this.running = false;
    }
  }
}
