// shop.ts: the service's logic. An order and its receipt's job are written in one transaction;
// the send-receipt task mails the receipt.
import type { Pool } from "pg";
import { createQueue, defineTask, PermanentError } from "picket";

// The service's own tables (a real service keeps them in its migrations).
export const tables = `
  CREATE TABLE IF NOT EXISTS orders (
    id bigserial PRIMARY KEY,
    email text NOT NULL,
    total_cents integer NOT NULL,
    receipt_sent_at timestamptz
  );
  -- A stand-in for a mail provider: it sends once per idempotency key, as real ones do.
  CREATE TABLE IF NOT EXISTS sent_mails (
    idempotency_key text PRIMARY KEY,
    recipient text NOT NULL,
    body text NOT NULL
  );`;

export const createShop = (db: Pool) => {
  const sendReceipt = defineTask({
    name: "send-receipt",
    timeoutMs: 30_000, // the handler's signal aborts after 30 s; the job is retried
    maxAttempts: 5,
    handler: async ({ orderId }: { orderId: string }, { idempotencyKey, logger }) => {
      const { rows } = await db.query("SELECT email, total_cents FROM orders WHERE id = $1", [orderId]);
      if (rows.length === 0) throw new PermanentError(`order ${orderId} does not exist`); // no retry
      const { email, total_cents } = rows[0];
      // A real provider takes the key as a header (with ctx.signal to cancel the request):
      // the same job, run twice, sends one mail.
      await db.query(
        "INSERT INTO sent_mails (idempotency_key, recipient, body) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        [idempotencyKey, email, `Thank you! Order ${orderId}: ${(total_cents / 100).toFixed(2)} EUR`],
      );
      await db.query("UPDATE orders SET receipt_sent_at = now() WHERE id = $1", [orderId]);
      logger.info({ order_id: orderId }, "receipt sent");
      return { sentTo: email };
    },
  });
  const queue = createQueue({ pool: db, tasks: [sendReceipt] });

  /** Records the order and enqueues its receipt in ONE transaction: both commit, or neither. */
  const placeOrder = async (order: { email: string; totalCents: number }) => {
    const client = await db.connect();
    try {
      await client.query("BEGIN");
      const { rows } = await client.query(
        "INSERT INTO orders (email, total_cents) VALUES ($1, $2) RETURNING id",
        [order.email, order.totalCents],
      );
      const orderId: string = rows[0].id;
      // On the transaction's client: the job is written in the same transaction as the order.
      const job = await queue.enqueue(sendReceipt, { orderId }, { client });
      await client.query("COMMIT");
      return { orderId, jobId: job.id };
    } catch (error) {
      await client.query("ROLLBACK");
      throw error;
    } finally {
      client.release();
    }
  };

  const getOrder = async (id: string) => {
    const { rows } = await db.query(
      `SELECT id, email, total_cents AS "totalCents", receipt_sent_at AS "receiptSentAt" FROM orders WHERE id = $1`,
      [id],
    );
    return rows[0];
  };

  return { sendReceipt, placeOrder, getOrder };
};
