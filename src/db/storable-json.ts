// What PostgreSQL's jsonb refuses that JavaScript strings can hold: the NUL character, and a lone
// UTF-16 surrogate (half of an emoji, as `str.slice` can leave it). JSON.stringify writes both as
// \u escapes, which jsonb rejects (22P05, 22P02), failing the whole statement they are sent in.
// Such values are refused before they reach a statement, with the path that holds them.
import { InvalidJobError } from "./errors.ts";

/** Largest result or progress value, as UTF-8 JSON text; the same bound as a payload. */
export const MAX_VALUE_BYTES = 1024 * 1024;

// A high surrogate not followed by a low one, or a low one not preceded by a high one.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Why jsonb cannot hold this string, or null when it can. */
export const unstorableText = (text: string): string | null => {
  if (text.includes("\u0000")) return "contains a NUL character (\\u0000), which PostgreSQL cannot store";
  if (LONE_SURROGATE.test(text)) {
    return "contains a lone UTF-16 surrogate (half of a character such as an emoji, e.g. cut by slice), which PostgreSQL cannot store";
  }
  return null;
};

/** The first string or key in a parsed JSON value that jsonb cannot hold, with its path. */
const findUnstorable = (value: unknown, path: string): string | null => {
  if (typeof value === "string") {
    const why = unstorableText(value);
    return why === null ? null : `${path} ${why}`;
  }
  if (typeof value !== "object" || value === null) return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const bad = findUnstorable(value[i], `${path}[${i}]`);
      if (bad !== null) return bad;
    }
    return null;
  }
  for (const [key, child] of Object.entries(value)) {
    const why = unstorableText(key);
    if (why !== null) return `the key ${JSON.stringify(key)} of ${path} ${why}`;
    const bad = findUnstorable(child, `${path}.${key}`);
    if (bad !== null) return bad;
  }
  return null;
};

// Cheap test of the JSON text: every NUL and lone surrogate is written as one of these escapes. A
// match may also be an escaped backslash followed by "u0000" in the text; the walk tells them apart.
const SUSPECT_ESCAPE = /\\u(?:0000|d[89a-f][0-9a-f]{2})/i;

/**
 * JSON text for a value picket records on a job (a handler's result, progress), as JSON.stringify
 * writes it (toJSON applies; bigints become strings); null for undefined. Throws an
 * InvalidJobError naming `what` and the offending path when PostgreSQL could not store it: a
 * cycle, a NUL character or lone surrogate in a string or key, or more than 1 MiB.
 */
export const storableJson = (value: unknown, what: string): string | null => {
  if (value === undefined) return null;
  let json: string | undefined;
  try {
    json = JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v));
  } catch (error) {
    throw new InvalidJobError(`picket: the ${what} cannot be stored as JSON: ${(error as Error).message}.`);
  }
  if (json === undefined) return null;
  if (SUSPECT_ESCAPE.test(json)) {
    const bad = findUnstorable(JSON.parse(json), `the ${what}`);
    if (bad !== null) throw new InvalidJobError(`picket: ${bad}.`);
  }
  const bytes = Buffer.byteLength(json);
  if (bytes > MAX_VALUE_BYTES) {
    throw new InvalidJobError(
      `picket: the ${what} is ${bytes} bytes as JSON; the limit is ${MAX_VALUE_BYTES} bytes (1 MiB). Store large data elsewhere and return a reference.`,
    );
  }
  return json;
};
