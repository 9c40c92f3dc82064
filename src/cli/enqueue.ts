import type { Command } from "commander";
import { checkTaskName, enqueueJobWithOutcome, handlerCoverage, InvalidJobError, LIVE_WORKER_MS, type DedupeMode } from "../db/index.ts";
import { integerOption, statementOptions, withDatabaseOptions, withPool, type DatabaseOptions } from "./shared.ts";

interface EnqueueOptions extends DatabaseOptions {
  runAt?: string;
  delay?: number;
  priority?: number;
  maxAttempts?: number;
  key?: string;
  queue?: string;
  allowUnknown?: boolean;
  dedupe?: string;
  dedupeWindow?: number;
}

/** The spec's dedupe mode from --dedupe and --dedupe-window; the spec's own check then wants a key. */
const dedupeMode = (options: EnqueueOptions): DedupeMode | undefined => {
  const { dedupe, dedupeWindow } = options;
  // Said here in the command's own words: the spec's check would say `Add key: "..."`, an API name.
  if ((dedupe !== undefined || dedupeWindow !== undefined) && options.key === undefined) {
    const given = dedupeWindow !== undefined ? `--dedupe-window ${dedupeWindow}` : `--dedupe ${dedupe}`;
    throw new Error(`${given} needs --key <key>: the dedupe mode says what another enqueue of the same key does`);
  }
  if (dedupeWindow !== undefined) {
    if (dedupe !== undefined && dedupe !== "window") {
      throw new Error(`--dedupe-window goes with --dedupe window (or alone), not --dedupe ${dedupe}`);
    }
    return { windowMs: dedupeWindow };
  }
  if (dedupe === "window") throw new Error("--dedupe window needs --dedupe-window <ms>: how long after a job with the key completed no other is created");
  if (dedupe !== undefined && dedupe !== "live" && dedupe !== "replace") {
    throw new Error(`--dedupe must be live, replace or window (got "${dedupe}")`);
  }
  return dedupe;
};

/**
 * A refusal of the job spec in this command's terms: the spec's check names the API's options
 * (`delayMs`, `maxAttempts`), which someone typing `--delay` and `--max-attempts` never wrote.
 */
const API_OPTIONS: Record<string, string> = { runAt: "--run-at", delayMs: "--delay", maxAttempts: "--max-attempts" };
const inFlagTerms = (message: string): string =>
  message
    .replace(/\b(runAt|delayMs|maxAttempts)\b/g, (name) => API_OPTIONS[name]!)
    // "job "t": priority must be ...", "job "t": key "..." contains ...": the option the sentence is about.
    .replace(/(job "[^"]*": )(priority|key|queue)\b/, "$1--$2");

export const enqueueCommand = (program: Command): void => {
  withDatabaseOptions(
    program
      .command("enqueue")
      .description("add a job; prints it as JSON")
      .argument("<task>", "task name")
      .argument("[payload]", "payload as JSON", "{}")
      .option("--run-at <iso>", "earliest time to run, ISO 8601 (e.g. 2030-01-01T09:00:00Z)")
      .option("--delay <ms>", "run no earlier than this many milliseconds from now", integerOption("--delay"))
      .option("--priority <n>", "higher runs first, -1000..1000", (v) => Number(v))
      .option("--max-attempts <n>", "attempts before the job is dead (default: the task's maxAttempts)", (v) => Number(v))
      .option("--queue <name>", "a serial queue: its jobs run one at a time across all workers, oldest first")
      .option("--allow-unknown", "enqueue even when no live worker has a handler for the task")
      .option("--key <key>", "dedupe key: while a job with this key is pending or running, return it instead")
      .option("--dedupe <mode>", "with --key: live (default), replace (the pending job with the key takes this one's payload and run time), or window")
      .option("--dedupe-window <ms>", "with --key: also return a job with the key that completed less than this many milliseconds ago", integerOption("--dedupe-window", 1)),
  ).action(async (task: string, payloadText: string, options: EnqueueOptions) => {
    const dedupe = dedupeMode(options);
    let payload: unknown;
    try {
      payload = JSON.parse(payloadText);
    } catch (error) {
      throw new Error(`payload is not valid JSON (${(error as Error).message}); quote it for your shell, e.g. '{"to":"a@example.com"}'`);
    }
    const outcome = await withPool(options, async (pool) => {
      // A typo in a task name would make a job no worker ever runs: the live workers' heartbeats
      // say which names they handle. With no live worker there is nothing to check against.
      checkTaskName(task);
      const { liveWorkers, handled } = await handlerCoverage(pool, statementOptions(options));
      if (!options.allowUnknown && !handled.includes(task)) {
        if (liveWorkers > 0) {
          throw new Error(
            `no live worker has a handler for task "${task}" (the ${liveWorkers} live worker(s) run: ${handled.join(", ") || "no tasks"}); nothing was enqueued. ` +
              `Check the name, or pass --allow-unknown to enqueue it anyway (it waits for a worker that runs "${task}").`,
          );
        }
        process.stderr.write(`picket: warning: no worker is live (no heartbeat in the last ${LIVE_WORKER_MS / 1000} s), so task "${task}" could not be checked; enqueueing it.\n`);
      }
      return enqueueJobWithOutcome(
        pool,
        {
          type: task,
          payload,
          ...(options.runAt !== undefined ? { runAt: options.runAt } : {}),
          ...(options.delay !== undefined ? { delayMs: options.delay } : {}),
          ...(options.priority !== undefined ? { priority: options.priority } : {}),
          ...(options.maxAttempts !== undefined ? { maxAttempts: options.maxAttempts } : {}),
          ...(options.key !== undefined ? { key: options.key } : {}),
          ...(options.queue !== undefined ? { queue: options.queue } : {}),
          ...(dedupe !== undefined ? { dedupe } : {}),
        },
        statementOptions(options),
      ).catch((error: unknown) => {
        if (error instanceof InvalidJobError) error.message = inFlagTerms(error.message);
        throw error;
      });
    });
    // stdout stays the job's JSON either way (scripts read it); a dedupe hit is said on stderr.
    if (!outcome.created) {
      const { job } = outcome;
      process.stderr.write(
        dedupe === "replace" && job.status === "pending"
          ? `picket: job ${job.id} already holds key ${JSON.stringify(job.key)} (pending): it takes this payload and run time; nothing new was enqueued\n`
          : `picket: job ${job.id} already holds key ${JSON.stringify(job.key)} (${job.status}); nothing new was enqueued\n`,
      );
    }
    process.stdout.write(`${JSON.stringify(outcome.job)}\n`);
  });
};
