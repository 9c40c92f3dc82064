// Notices an event loop that was blocked: a timer every `everyMs` that fired late by more than
// `minMs` reports how long the loop could not run. While it is blocked nothing else runs either:
// no lease renewal, no lease deadline, no abort signal.

export const watchEventLoop = (everyMs: number, minMs: number, onStall: (stalledMs: number) => void): (() => void) => {
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    const stalled = now - last - everyMs;
    last = now;
    if (stalled >= minMs) onStall(stalled);
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
};
