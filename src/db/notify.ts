// The wake-up notification: its channel, its payload's format, and the probe that proves a LISTEN
// connection receives it. The enqueue trigger (migrations 0001 and 0003) writes the payload: the
// ready task types joined by commas, or '*' when there were too many to name.
import type { Queryable, StatementOptions } from "./queryable.ts";
import { checkSchemaName, DEFAULT_SCHEMA } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

/** The NOTIFY channel enqueues signal on; one per schema. */
export const notifyChannel = (schema: string): string => `picket:${checkSchemaName(schema)}`;

// Task names never contain '?', '!' or '*' (checkTaskName), so no such payload can be mistaken for one.
const PROBE_PREFIX = "?probe:";
/** A cancelled processing job: `!cancel:<id>:<claim token>` (sent by cancelJob). */
export const CANCEL_PREFIX = "!cancel:";

// Added by the trigger (0007) when some of the jobs name a serial queue.
const QUEUED_MARK = "!queued";

/**
 * What one notification says: a probe's id, a processing job cancelled under a claim, or the task
 * types with work ready (all: any type) and whether some of those jobs name a serial queue (they
 * are claimed by the slow claim).
 */
export type Wake = { probe: string } | { cancel: { id: string; token: string } } | { types: "all" | string[]; queued: boolean };

export const parseWake = (payload: string): Wake => {
  if (payload.startsWith(PROBE_PREFIX)) return { probe: payload.slice(PROBE_PREFIX.length) };
  if (payload.startsWith(CANCEL_PREFIX)) {
    const [id = "", token = ""] = payload.slice(CANCEL_PREFIX.length).split(":");
    return { cancel: { id, token } };
  }
  if (payload === "*") return { types: "all", queued: true };
  const names = payload.split(",").filter(Boolean);
  const types = names.filter((name) => name !== QUEUED_MARK);
  return { types, queued: types.length < names.length };
};

/**
 * Sends a probe on the schema's channel through `db` (the worker's own connections): a LISTEN
 * connection that does not receive it within a few seconds does not receive wake-ups either (a
 * connection through PgBouncer in transaction mode, for one).
 */
export const sendWakeProbe = async (db: Queryable, id: string, options: StatementOptions = {}): Promise<void> => {
  await runStatement(
    db,
    { text: "SELECT pg_notify($1, $2)", values: [notifyChannel(options.schema ?? DEFAULT_SCHEMA), `${PROBE_PREFIX}${id}`] },
    options,
  );
};
