// An app's own tables written with Drizzle, and a job enqueued in the same transaction: an order
// is saved, its fulfilment enqueued and its stock reserved, all three or none. In an app this file
// imports from "picket".
import { and, eq, gte, sql } from "drizzle-orm";
import { drizzle, type NodePgDatabase } from "drizzle-orm/node-postgres";
import { integer, pgTable, serial, text } from "drizzle-orm/pg-core";
import { Schema } from "effect";
import type pg from "pg";
import { createQueue, defineTask } from "../../src/index.ts";

export const orders = pgTable("orders", {
  id: serial("id").primaryKey(),
  sku: text("sku").notNull(),
  qty: integer("qty").notNull(),
  status: text("status").notNull().default("placed"),
});
export const stock = pgTable("stock", { sku: text("sku").primaryKey(), available: integer("available").notNull() });

/** The app's tables (drizzle-kit's migration in a real app). */
export const orderTables = `
  CREATE TABLE orders (id serial PRIMARY KEY, sku text NOT NULL, qty int NOT NULL, status text NOT NULL DEFAULT 'placed');
  CREATE TABLE stock (sku text PRIMARY KEY, available int NOT NULL CHECK (available >= 0));`;

export class OutOfStockError extends Error {
  override readonly name = "OutOfStockError";
}

/** Ships an order. Its payload schema is checked when it is enqueued through createQueue, before anything is written. */
export const fulfilOrder = (db: NodePgDatabase) =>
  defineTask({
    name: "fulfil-order",
    schema: Schema.Struct({ orderId: Schema.Number, sku: Schema.String.check(Schema.isPattern(/^SKU-[0-9]+$/)) }),
    handler: async ({ orderId }) => {
      const shipped = await db
        .update(orders)
        .set({ status: "shipped" })
        .where(and(eq(orders.id, orderId), eq(orders.status, "placed")))
        .returning({ id: orders.id });
      return { shipped: shipped.length === 1 };
    },
  });

/** The shop: its task, its queue (which checks the task's name and payload), and placing an order. */
export const createShop = (db: NodePgDatabase, pool: pg.Pool) => {
  const fulfil = fulfilOrder(db);
  const queue = createQueue({ pool, tasks: [fulfil] });

  /**
   * Saves the order, enqueues its fulfilment and reserves its stock in ONE Drizzle transaction. If
   * anything throws (picket refusing the job, the stock running short), Drizzle rolls back and
   * neither the order nor the job exists; once the transaction commits, both do.
   *
   * The recipe: check out a pg client and run the Drizzle transaction on it (drizzle-orm's
   * node-postgres driver keeps a transaction on the client it is given), then hand picket that same
   * client. No adapter: picket writes with pg as on its own pool, and can cancel its statement on the
   * server when it passes picket's time bound, since it holds the connection.
   */
  const placeOrder = async (order: { sku: string; qty: number }) => {
    const client = await pool.connect();
    try {
      return await drizzle({ client }).transaction(async (tx) => {
        const [{ id }] = (await tx.insert(orders).values(order).returning({ id: orders.id })) as [{ id: number }];
        const job = await queue.enqueue(fulfil, { orderId: id, sku: order.sku }, { client, key: `fulfil-order:${id}` });
        const reserved = await tx
          .update(stock)
          .set({ available: sql`${stock.available} - ${order.qty}` })
          .where(and(eq(stock.sku, order.sku), gte(stock.available, order.qty)))
          .returning({ sku: stock.sku });
        if (reserved.length === 0) throw new OutOfStockError(`fewer than ${order.qty} of ${order.sku} in stock`);
        return { orderId: id, jobId: job.id };
      });
    } finally {
      client.release();
    }
  };

  return { tasks: [fulfil], queue, placeOrder };
};
