// A schedule as a caller gives it, checked; and the arithmetic of its ticks. The pattern is read by
// croner (a maintained parser with time zones and seconds), never by hand.
import { Cron } from "croner";
import { InvalidConfigError, InvalidJobError } from "./errors.ts";
import { checkJobSpec, checkTaskName } from "./job-spec.ts";

/**
 * What becomes of ticks that passed while no worker ran the schedule (a deploy, an outage):
 * - "skip": none of them runs; the schedule goes on with its next tick.
 * - "latest" (the default): the most recent one runs once.
 * - `{ catchUp: N }`: the newest N of them run (0 to 1000), oldest first.
 */
export type MissedPolicy = "skip" | "latest" | { catchUp: number };

/** A schedule as declared on a task: `schedule: "0 * * * *"` or this object. */
export interface ScheduleOptions {
  /**
   * Five fields (minute hour day-of-month month day-of-week), six with seconds first
   * ("*\/10 * * * * *"), or a nickname (@hourly, @daily, ...).
   */
  cron: string;
  /** IANA time zone the pattern is read in ("Europe/Paris"); default UTC. */
  timezone?: string;
  /** A JSON object every job of the schedule gets; "scheduledAt" (the tick) is added to it. */
  payload?: Record<string, unknown>;
  /** What happens to ticks missed while no worker ran; default "latest". */
  missed?: MissedPolicy;
}

/** A schedule registered at run time (upsertSchedule): a name, the task it runs, and when. */
export interface ScheduleSpec extends ScheduleOptions {
  /** 1–200 characters of letters, digits and `_ . : / -`; a task's own schedule is named after the task. */
  name: string;
  /** The task whose jobs it makes. */
  task: string;
}

/** A spec checked and normalised, ready to be bound to the upsert statement. */
export interface CheckedSchedule {
  name: string;
  task: string;
  cron: string;
  timezone: string | null;
  payloadJson: string;
  catchUp: number;
}

/** The payload field that carries the tick's time into every job a schedule makes. */
export const TICK_FIELD = "scheduledAt";
export const MAX_CATCH_UP = 1_000;
export const MAX_SCHEDULE_NAME_LENGTH = 200;
const NAME = /^[A-Za-z0-9_.:/-]+$/;

/**
 * "latest" by default: a deploy or a short outage that spans a tick still gets that tick's job
 * (the nightly report is produced, late), and a long outage does not unleash a burst of stale
 * jobs. Ask for "skip" when a late run is worthless, or { catchUp: N } when every tick matters.
 */
export const DEFAULT_MISSED: MissedPolicy = "latest";

const fail = (where: string, message: string): never => {
  throw new InvalidConfigError(`picket: ${where}: ${message}`);
};

/** The catch-up count a policy stands for: skip 0, latest 1, { catchUp: N } N. */
export const catchUpOf = (missed: unknown, where: string): number => {
  if (missed === undefined) return catchUpOf(DEFAULT_MISSED, where);
  if (missed === "skip") return 0;
  if (missed === "latest") return 1;
  if (typeof missed === "object" && missed !== null && "catchUp" in missed) {
    const n = (missed as { catchUp: unknown }).catchUp;
    if (typeof n === "number" && Number.isInteger(n) && n >= 0 && n <= MAX_CATCH_UP) return n;
    return fail(where, `missed.catchUp must be an integer from 0 to ${MAX_CATCH_UP} (got ${JSON.stringify(n)}).`);
  }
  return fail(where, `missed must be "skip", "latest" or { catchUp: N } (got ${JSON.stringify(missed)}).`);
};

/** The policy a stored catch-up count stands for, as a caller would write it. */
export const missedPolicyOf = (catchUp: number): MissedPolicy => (catchUp === 0 ? "skip" : catchUp === 1 ? "latest" : { catchUp });

const isTimeZone = (zone: string): boolean => {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: zone });
    return true;
  } catch {
    return false;
  }
};

const crons = new Map<string, Cron>();

/** The croner evaluator of a pattern in a zone (no timer: croner starts one only for a function). */
export const cronOf = (cron: string, timezone: string | null): Cron => {
  const id = `${timezone ?? ""} ${cron}`;
  let evaluator = crons.get(id);
  if (evaluator === undefined) {
    evaluator = new Cron(cron, { mode: "5-or-6-parts", ...(timezone === null ? { timezone: "Etc/UTC" } : { timezone }) });
    if (crons.size > 10_000) crons.clear();
    crons.set(id, evaluator);
  }
  return evaluator;
};

/** Checks a pattern and a zone: the pattern parses and fires at least once from now. */
export const checkCron = (cron: unknown, timezone: unknown, where: string): { cron: string; timezone: string | null } => {
  if (typeof cron !== "string" || cron.trim().length === 0 || cron.length > 200) {
    return fail(where, `cron must be a pattern like "*/5 * * * *" (five fields, or six with seconds first), at most 200 characters (got ${JSON.stringify(cron)}).`);
  }
  let zone: string | null = null;
  if (timezone !== undefined && timezone !== null) {
    if (typeof timezone !== "string" || !isTimeZone(timezone)) {
      return fail(where, `timezone ${JSON.stringify(timezone)} is not a time zone this runtime knows; use an IANA name such as "Europe/Paris" or "America/New_York", or leave it out for UTC.`);
    }
    zone = timezone;
  }
  const pattern = cron.trim();
  let next: Date | null;
  try {
    next = cronOf(pattern, zone).nextRun(new Date());
  } catch (error) {
    return fail(
      where,
      `cron pattern ${JSON.stringify(pattern)} is not valid: ${(error as Error).message.replace(/^CronPattern: /, "").replace(/\.+$/, "")}. ` +
        `Use five fields (minute hour day-of-month month day-of-week), or six with seconds first, e.g. "*/5 * * * *".`,
    );
  }
  if (next === null) return fail(where, `cron pattern ${JSON.stringify(pattern)} never fires (a date that does not exist, such as 30 February?).`);
  return { cron: pattern, timezone: zone };
};

/** Checks a schedule spec; throws InvalidConfigError saying what is wrong. */
export const checkSchedule = (spec: ScheduleSpec): CheckedSchedule => {
  if (typeof spec !== "object" || spec === null) {
    return fail("schedule", `a schedule must be an object like { name: "nightly", task: "report", cron: "0 3 * * *" } (got ${String(spec)}).`);
  }
  const { name } = spec;
  if (typeof name !== "string" || name.length === 0 || name.length > MAX_SCHEDULE_NAME_LENGTH || !NAME.test(name)) {
    return fail("schedule", `name must be 1 to ${MAX_SCHEDULE_NAME_LENGTH} characters of letters, digits and _ . : / - (got ${JSON.stringify(name)}).`);
  }
  const where = `schedule "${name}"`;
  let task: string;
  try {
    task = checkTaskName(spec.task, "schedule's task");
  } catch (error) {
    return fail(where, (error as Error).message.replace(/^picket: /, ""));
  }
  const { cron, timezone } = checkCron(spec.cron, spec.timezone, where);
  const payload = spec.payload ?? {};
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
    return fail(where, `payload must be a JSON object (picket adds "${TICK_FIELD}" to it); got ${Array.isArray(payload) ? "an array" : typeof payload}.`);
  }
  if (Object.hasOwn(payload, TICK_FIELD)) {
    return fail(where, `payload may not hold "${TICK_FIELD}": picket sets it to the tick's time on every job of the schedule.`);
  }
  let payloadJson: string;
  try {
    payloadJson = checkJobSpec({ type: task, payload }).payloadJson;
  } catch (error) {
    if (!(error instanceof InvalidJobError)) throw error;
    return fail(where, error.message.replace(/^picket: job "[^"]*": /, ""));
  }
  return { name, task, cron, timezone, payloadJson, catchUp: catchUpOf(spec.missed, where) };
};

/** Most ticks one round fires for one schedule; the rest wait for the next round. */
export const MAX_TICKS_PER_ROUND = 1_000;

/** What a schedule's row says, as far as its ticks go. */
export interface TickState {
  cron: string;
  timezone: string | null;
  catchUp: number;
  /** Ticks at or before it are done. */
  lastTick: Date;
}

/** The ticks to fire now, oldest first, and the instant the schedule is done through. */
export interface TickPlan {
  fire: Date[];
  /** The newest due tick (fired or skipped): the schedule's next last_tick. */
  through: Date;
  /** Whether the policy dropped missed ticks. */
  skipped: boolean;
}

/**
 * The ticks due at `now` (after lastTick, at or before now). A tick less than `graceMs` old is on
 * time (a running worker sees each tick a loop interval late at most) and fires; older ones were
 * missed and the policy picks which fire: the newest `catchUp` of them. Null when nothing is due.
 */
export const planTicks = (state: TickState, now: Date, graceMs: number): TickPlan | null => {
  const cron = cronOf(state.cron, state.timezone);
  const last = state.lastTick.getTime();
  const boundary = now.getTime() - graceMs;
  const onTime: Date[] = [];
  for (let cursor = new Date(Math.max(last, boundary)); onTime.length < MAX_TICKS_PER_ROUND; ) {
    const next = cron.nextRun(cursor);
    if (next === null || next.getTime() > now.getTime()) break;
    onTime.push(next);
    cursor = next;
  }
  // croner's previousRuns are strictly before the reference: one millisecond past the boundary
  // includes a tick on it. One more than the policy keeps tells whether any was dropped.
  const missed =
    last < boundary ? cron.previousRuns(state.catchUp + 1, new Date(boundary + 1)).filter((tick) => tick.getTime() > last).reverse() : [];
  const through = onTime.at(-1) ?? missed.at(-1);
  if (through === undefined) return null;
  const kept = missed.slice(Math.max(0, missed.length - state.catchUp));
  return { fire: [...kept, ...onTime], through, skipped: kept.length < missed.length };
};

/** The schedule's next tick after `after` (its time for "next run"), or null if it never fires again. */
export const nextTick = (cron: string, timezone: string | null, after: Date): Date | null => cronOf(cron, timezone).nextRun(after);
