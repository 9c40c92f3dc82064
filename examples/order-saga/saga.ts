// An order saga as a durable workflow: reserve stock, charge the card, wait (up to a deadline) for
// the warehouse to say the parcel shipped. A declined card releases the stock; a cancel or a missed
// deadline after the charge refunds it and releases the stock; a compensation that fails for good
// waits for a person. Draw it: paste `machineJson(orderSaga.machine)`
// into Stately's editor, or open a running instance in `picket dashboard`.
//
// The machine is plain XState. What makes it durable is picket: each task() invocation runs as a
// picket job (retried, fenced, visible), the `after` deadline is a timer in the database, and every
// event (the warehouse's SHIPPED, a customer's CANCEL, a task's result) is applied exactly once.
import { assign, setup } from "xstate";
import { defineTask, defineWorkflow, PermanentError, task } from "../../src/index.ts";

export interface Order {
  orderId: string;
  amount: number;
  /** How long the warehouse has to ship, in milliseconds (a week in real life). */
  shipWithinMs: number;
}

export const reserveStock = task<{ orderId: string }, { reservation: string }>("reserve-stock");
export const chargeCard = task<{ orderId: string; amount: number }, { receipt: string }>("charge-card");
export const refundPayment = task<{ orderId: string; receipt: string }, { refund: string }>("refund-payment");
export const releaseStock = task<{ orderId: string; reservation: string }, { released: true }>("release-stock");

export const orderMachine = setup({
  types: {} as {
    input: Order;
    context: Order & { reservation: string | null; receipt: string | null; notes: string[]; outcome: "shipped" | "out of stock" | "declined" | "cancelled" | "not shipped" | null };
    events: { type: "SHIPPED" } | { type: "CANCEL" } | { type: "NOTE"; text: string } | { type: "RESOLVED" };
  },
  actors: { reserveStock, chargeCard, refundPayment, releaseStock },
  delays: { shipDeadline: ({ context }) => context.shipWithinMs },
}).createMachine({
  id: "order",
  context: ({ input }) => ({ ...input, reservation: null, receipt: null, notes: [], outcome: null }),
  initial: "reserving",
  // A note (from support, say) is kept in any state.
  on: { NOTE: { actions: assign({ notes: ({ context, event }) => [...context.notes, event.text] }) } },
  states: {
    reserving: {
      invoke: {
        id: "reserve",
        src: "reserveStock",
        input: ({ context }) => ({ orderId: context.orderId }),
        onDone: { target: "charging", actions: assign({ reservation: ({ event }) => event.output.reservation }) },
        onError: { target: "failed", actions: assign({ outcome: "out of stock" }) },
      },
    },
    charging: {
      invoke: {
        id: "charge",
        src: "chargeCard",
        input: ({ context }) => ({ orderId: context.orderId, amount: context.amount }),
        onDone: { target: "awaitingShipment", actions: assign({ receipt: ({ event }) => event.output.receipt }) },
        onError: { target: "compensating.releasing", actions: assign({ outcome: "declined" }) },
      },
    },
    awaitingShipment: {
      on: {
        SHIPPED: { target: "shipped", actions: assign({ outcome: "shipped" }) },
        CANCEL: { target: "compensating", actions: assign({ outcome: "cancelled" }) },
      },
      after: { shipDeadline: { target: "compensating", actions: assign({ outcome: "not shipped" }) } },
    },
    compensating: {
      initial: "refunding",
      states: {
        refunding: {
          invoke: {
            id: "refund",
            src: "refundPayment",
            input: ({ context }) => ({ orderId: context.orderId, receipt: context.receipt! }),
            onDone: "releasing",
            onError: "#order.needsAttention",
          },
        },
        releasing: {
          invoke: {
            id: "release",
            src: "releaseStock",
            input: ({ context }) => ({ orderId: context.orderId, reservation: context.reservation! }),
            onDone: "released",
            onError: "#order.needsAttention",
          },
        },
        released: { type: "final" },
      },
      onDone: "failed",
    },
    // A compensation that failed for good (its job dead after all its attempts) waits for a person,
    // who fixes it by hand and sends RESOLVED.
    needsAttention: { on: { RESOLVED: "failed" } },
    shipped: { type: "final" },
    failed: { type: "final" },
  },
  output: ({ context }) => ({ orderId: context.orderId, outcome: context.outcome }),
});

export const orderSaga = defineWorkflow({ name: "order", version: 1, machine: orderMachine });

/**
 * Task handlers for the demo: a card whose amount ends in 7 is declined. A real service calls its
 * payment provider here with ctx.idempotencyKey, so that a retried job is recognised there.
 */
export const sagaTasks = (
  record: (kind: string, orderId: string, jobId: string) => Promise<void> = async () => undefined,
  options: { leaseMs?: number; maxAttempts?: number; backoff?: { baseMs?: number; maxMs?: number } } = {},
) => [
  defineTask({
    ...options,
    name: "reserve-stock",
    handler: async (input: { orderId: string }, ctx) => {
      await record("reserve", input.orderId, ctx.job.id);
      return { reservation: `res-${input.orderId}` };
    },
  }),
  defineTask({
    maxAttempts: 3,
    ...options,
    name: "charge-card",
    // A declined card is final (PermanentError): not retried.
    handler: async (input: { orderId: string; amount: number }, ctx) => {
      if (input.amount % 10 === 7) throw new PermanentError(`card declined for order ${input.orderId}`);
      await record("charge", input.orderId, ctx.job.id);
      return { receipt: `rcpt-${input.orderId}` };
    },
  }),
  defineTask({
    ...options,
    name: "refund-payment",
    handler: async (input: { orderId: string; receipt: string }, ctx) => {
      await record("refund", input.orderId, ctx.job.id);
      return { refund: `refund-${input.receipt}` };
    },
  }),
  defineTask({
    ...options,
    name: "release-stock",
    handler: async (input: { orderId: string; reservation: string }, ctx) => {
      await record("release", input.orderId, ctx.job.id);
      return { released: true as const };
    },
  }),
];
