// Helpers for tests that run a real supervisor against the test database.
import { Writable } from "node:stream";
import { createLogger } from "../../src/runtime/logger.ts";
import { createSupervisor, type Supervisor } from "../../src/runtime/supervisor.ts";
import type { SupervisorOptions } from "../../src/runtime/config.ts";
import type { JobOutcome } from "../../src/machines/job-machine.ts";

export interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

/** A logger whose lines the test can read. */
export const captureLogs = () => {
  const lines: LogLine[] = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      for (const line of chunk.toString().split("\n").filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  return { lines, logger: createLogger({ destination, level: "debug" }) };
};

const started: Supervisor[] = [];

/**
 * Stops (forcing) every supervisor startWorker started that the test left running, as a failed
 * test does. Run after each test by test/support/setup-file.ts.
 */
export const stopStartedWorkers = async (): Promise<void> => {
  await Promise.all(
    started.splice(0).map(async (s) => {
      s.force();
      await s.stop();
    }),
  );
};

/**
 * Starts a supervisor with fast test intervals and records every job outcome. It keeps completed
 * jobs' rows, which most tests read; test/completion.test.ts runs the default (deleted at completion).
 */
export const startWorker = async (options: Partial<SupervisorOptions> & Pick<SupervisorOptions, "tasks">) => {
  const logs = captureLogs();
  const supervisor = createSupervisor({
    pollIntervalMs: 50,
    sweepIntervalMs: 100,
    drainTimeoutMs: 5_000,
    retention: false,
    keepCompleted: true,
    logger: logs.logger,
    ...options,
  });
  const outcomes: Array<{ id: string; type: string; outcome: JobOutcome; error: string | null }> = [];
  supervisor.onJobFinished(({ job, outcome, error }) => outcomes.push({ id: job.id, type: job.type, outcome, error }));
  started.push(supervisor);
  await supervisor.start();
  return { supervisor, outcomes, logs: logs.lines };
};
