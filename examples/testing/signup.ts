// The code under test in the testing examples: a sign-up that saves a user and enqueues a welcome
// mail in one transaction, and the task that sends it. In an app this file imports from "picket".
import type pg from "pg";
import { createQueue, defineTask } from "../../src/index.ts";

export const welcomeTables = `
  CREATE TABLE users (id bigserial PRIMARY KEY, email text NOT NULL UNIQUE);
  -- The mail provider, as the test sees it: one row per mail it was asked to send.
  CREATE TABLE outbox (idempotency_key text PRIMARY KEY, email text NOT NULL, sent_count int NOT NULL DEFAULT 1);`;

/** The welcome mail. The send is keyed by the job's idempotency key, so a second run sends nothing. */
export const sendWelcome = (db: pg.Pool) =>
  defineTask<{ userId: string }>({
    name: "send-welcome",
    backoff: { baseMs: 30_000, maxMs: 30_000 },
    handler: async ({ userId }, ctx) => {
      const user = await ctx.step("load user", async () => (await db.query("SELECT email FROM users WHERE id = $1", [userId])).rows[0] as { email: string });
      // A real provider takes the key as a header; this one is a table with the key as its primary key.
      await db.query("INSERT INTO outbox (idempotency_key, email) VALUES ($1, $2) ON CONFLICT (idempotency_key) DO NOTHING", [ctx.idempotencyKey, user.email]);
      return { sent: user.email };
    },
  });

/** Saves the user and enqueues the welcome in one transaction: both happen, or neither. */
export const signUp = async (db: pg.Pool, email: string): Promise<string> => {
  const queue = createQueue({ pool: db, tasks: [sendWelcome(db)] });
  const client = await db.connect();
  try {
    await client.query("BEGIN");
    const { rows } = await client.query<{ id: string }>("INSERT INTO users (email) VALUES ($1) RETURNING id", [email]);
    await queue.enqueue("send-welcome", { userId: rows[0]!.id }, { client });
    await client.query("COMMIT");
    return rows[0]!.id;
  } catch (error) {
    await client.query("ROLLBACK");
    throw error;
  } finally {
    client.release();
  }
};
