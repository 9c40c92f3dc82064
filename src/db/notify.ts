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

/**
 * What one notification says: a probe's id, a processing job cancelled under a claim, or the task
 * types with work ready (all: any type).
 */
export type Wake = { probe: string } | { cancel: { id: string; token: string } } | { types: "all" | string[] };

export const parseWake = (payload: string): Wake => {
  if (payload.startsWith(PROBE_PREFIX)) return { probe: payload.slice(PROBE_PREFIX.length) };
  if (payload.startsWith(CANCEL_PREFIX)) {
    const [id = "", token = ""] = payload.slice(CANCEL_PREFIX.length).split(":");
    return { cancel: { id, token } };
  }
  if (payload === "*") return { types: "all" };
  return { types: payload.split(",").filter(Boolean) };
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
