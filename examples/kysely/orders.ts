// An app's own tables written with Kysely, and a job enqueued in the same transaction: an order is
// saved, its fulfilment enqueued and its stock reserved, all three or none. In an app this file
// imports from "picket".
import { Schema } from "effect";
import type { Generated, Kysely } from "kysely";
import type pg from "pg";
import { createQueue, defineTask } from "../../src/index.ts";
import { kyselyQueryable } from "./queryable.ts";

export interface Database {
  orders: { id: Generated<string>; sku: string; qty: number; status: Generated<string> };
  stock: { sku: string; available: number };
}

/** The app's tables (a migration of its own in a real app). */
export const orderTables = `
  CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL, qty int NOT NULL, status text NOT NULL DEFAULT 'placed');
  CREATE TABLE stock (sku text PRIMARY KEY, available int NOT NULL CHECK (available >= 0));`;

export class OutOfStockError extends Error {
  override readonly name = "OutOfStockError";
}

/** Ships an order. Its payload schema is checked when it is enqueued through createQueue, before anything is written. */
export const fulfilOrder = (db: Kysely<Database>) =>
  defineTask({
    name: "fulfil-order",
    schema: Schema.Struct({ orderId: Schema.String, sku: Schema.String.check(Schema.isPattern(/^SKU-[0-9]+$/)) }),
    handler: async ({ orderId }) => {
      const shipped = await db.updateTable("orders").set({ status: "shipped" }).where("id", "=", orderId).where("status", "=", "placed").returning("id").executeTakeFirst();
      return { shipped: shipped !== undefined };
    },
  });

/** The shop: its task, its queue (which checks the task's name and payload), and placing an order. */
export const createShop = (db: Kysely<Database>, pool: pg.Pool) => {
  const fulfil = fulfilOrder(db);
  const queue = createQueue({ pool, tasks: [fulfil] });

  /**
   * Saves the order, enqueues its fulfilment and reserves its stock in ONE Kysely transaction. If
   * anything throws (picket refusing the job, the stock running short), Kysely rolls back and
   * neither the order nor the job exists; once the transaction commits, both do.
   */
  const placeOrder = (order: { sku: string; qty: number }) =>
    db.transaction().execute(async (trx) => {
      const { id } = await trx.insertInto("orders").values(order).returning("id").executeTakeFirstOrThrow();
      const job = await queue.enqueue(fulfil, { orderId: id, sku: order.sku }, { client: kyselyQueryable(trx), key: `fulfil-order:${id}` });
      const reserved = await trx
        .updateTable("stock")
        .set((eb) => ({ available: eb("available", "-", order.qty) }))
        .where("sku", "=", order.sku)
        .where("available", ">=", order.qty)
        .executeTakeFirst();
      if (reserved.numUpdatedRows === 0n) throw new OutOfStockError(`fewer than ${order.qty} of ${order.sku} in stock`);
      return { orderId: id, jobId: job.id };
    });

  return { tasks: [fulfil], queue, placeOrder };
};
