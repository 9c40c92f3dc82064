// The order saga checked on every path, without a worker: each task succeeding, failing or timing
// out, the shipping deadline firing, SHIPPED, CANCEL, RESOLVED and a NOTE arriving in any state. In an app:
// import { workflowPaths } from "picket/testing".
import { expect, it } from "vitest";
import { createMachine } from "xstate";
import { defineWorkflow } from "../../src/index.ts";
import { formatWorkflowPaths, workflowPaths, type WorkflowState } from "../../src/testing/index.ts";
import { orderSaga } from "./saga.ts";

const input = { orderId: "o-1", amount: 120, shipWithinMs: 7 * 86_400_000 };
const outputs = {
  "reserve-stock": () => ({ reservation: "res-1" }),
  "charge-card": () => ({ receipt: "rcpt-1" }),
  "refund-payment": () => ({ refund: "ref-1" }),
  "release-stock": () => ({ released: true }),
};
// The saga's promises, as invariants on every configuration reached.
const invariants = {
  // Money is refunded only if it was taken, and stock released only if it was reserved.
  "a refund follows a charge": (s: WorkflowState) => !s.matches({ compensating: "refunding" }) || s.context.receipt !== null,
  "a release follows a reservation": (s: WorkflowState) => !s.matches({ compensating: "releasing" }) || s.context.reservation !== null,
  // A saga that ended shipped was charged and never compensated.
  "shipped means charged": (s: WorkflowState) => !s.matches("shipped") || (s.context.receipt !== null && s.context.outcome === "shipped"),
  // A saga that failed after taking money passed through the refund.
  "failed after a charge means refunded": (s: WorkflowState) => !s.matches("failed") || s.context.receipt === null || s.context.outcome !== "declined",
};

// Every event in every state; a NOTE once per path (each one adds to the context: unbounded otherwise).
const events = (s: WorkflowState) => [{ type: "SHIPPED" }, { type: "CANCEL" }, { type: "RESOLVED" }, ...(s.context.notes.length === 0 ? [{ type: "NOTE", text: "call me" }] : [])];

it("every state is reachable, every path ends, and the saga's promises hold on all of them", () => {
  const report = workflowPaths(orderSaga, { input, outputs, invariants, events });
  expect(report.ok, formatWorkflowPaths(report)).toBe(true);
  expect(report.unreachable).toEqual([]);
  // Both endings are reached, each with its outcome.
  expect(new Set(report.finals.map((f) => JSON.stringify([f.state, (f.output as { outcome: string }).outcome])))).toEqual(
    new Set([["shipped", "shipped"], ["failed", "out of stock"], ["failed", "declined"], ["failed", "cancelled"], ["failed", "not shipped"]].map((x) => JSON.stringify(x))),
  );
});

it("finds what is wrong: a state no path reaches without its event, a wait that never ends, a broken promise, an error no transition handles", () => {
  // Without SHIPPED or RESOLVED ever sent: shipped is unreachable, and a failed compensation waits forever.
  const report = workflowPaths(orderSaga, { input, outputs, events: [{ type: "CANCEL" }], invariants: { "never cancelled": (s) => s.context.outcome !== "cancelled" } });
  expect(report.ok).toBe(false);
  expect(report.unreachable).toEqual(["order.shipped"]);
  expect(report.neverEnd.map((n) => n.state)).toContain("needsAttention");
  expect(report.neverEnd.find((n) => n.state === "needsAttention")!.path).toEqual(["start", "reserve succeeded", "charge failed", "release failed"]);
  expect(report.violations.map((v) => v.path)).toContainEqual(["start", "reserve succeeded", "charge succeeded", "CANCEL"]);
  expect(formatWorkflowPaths(report)).toMatch(/unreachable: order\.shipped\n/);

  // The refund's error left unhandled: the machine fails on the paths where the refund fails.
  const config = orderSaga.machine.config as any;
  const refunding = config.states.compensating.states.refunding;
  const careless = createMachine(
    { ...config, states: { ...config.states, compensating: { ...config.states.compensating, states: { ...config.states.compensating.states, refunding: { invoke: { ...refunding.invoke, onError: undefined } } } } } },
    orderSaga.machine.implementations as any,
  );
  const unhandled = workflowPaths(defineWorkflow({ name: "careless-order", machine: careless }), { input, outputs, events: [{ type: "CANCEL" }, { type: "SHIPPED" }] });
  expect(unhandled.failures.length).toBeGreaterThan(0);
  expect(unhandled.failures[0]!.path.slice(-1)[0]).toMatch(/^refund (failed|timed out)$/);
  expect(formatWorkflowPaths(unhandled)).toMatch(/machine failed \(failed\): start > reserve succeeded > charge succeeded > (CANCEL|timer shipDeadline\.order\.awaitingShipment fired) > refund failed/);
});
