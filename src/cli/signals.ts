// Signals are handled in one place: the first SIGTERM or SIGINT starts the drain, a second one
// forces it (running jobs are interrupted and released at once).
export const onShutdownSignals = (handlers: { drain: () => void; force: () => void }): (() => void) => {
  let received = 0;
  const handle = (signal: NodeJS.Signals) => {
    received++;
    if (received === 1) {
      process.stderr.write(`picket: ${signal} received, draining (send it again to stop running jobs now)\n`);
      handlers.drain();
    } else {
      process.stderr.write(`picket: ${signal} received again, interrupting and releasing running jobs\n`);
      handlers.force();
    }
  };
  process.on("SIGTERM", handle);
  process.on("SIGINT", handle);
  return () => {
    process.off("SIGTERM", handle);
    process.off("SIGINT", handle);
  };
};
