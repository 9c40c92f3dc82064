// A workflow instance as an inspector (the Stately visualizer, through @statelyai/inspect) sees it:
// an actor of its own per instance, named after it, whose definition is the user's machine, an
// event and a snapshot for every event the worker applies. The instance lives in the database, not
// in this process, so the actor is a reference made for the inspector: it answers getSnapshot()
// with the last snapshot applied here. Its context and its events' data are the user's: unless
// logPayloads is on they are replaced before the inspector gets them, as a job's payload is.
import type { AnyStateMachine, InspectionEvent } from "xstate";
import type { JobId } from "../db/job-row.ts";
import { REDACTED, type Inspector } from "../runtime/inspection.ts";

interface InstanceRef {
  id: string;
  sessionId: string;
  logic: AnyStateMachine;
  snapshot: unknown;
  getSnapshot(): unknown;
  _parent: undefined;
}

/** The applier's `applied` callback that tells `inspector` of each event applied. */
export const workflowInspection = (inspector: Inspector, showPayloads: boolean) => {
  const send = typeof inspector === "function" ? inspector : (event: InspectionEvent) => inspector.next?.(event);
  const refs = new Map<string, InstanceRef>();
  const redactSnapshot = (snapshot: unknown): unknown =>
    showPayloads || typeof snapshot !== "object" || snapshot === null ? snapshot : { ...(snapshot as object), context: REDACTED };
  const redactEvent = (event: unknown): unknown =>
    showPayloads || typeof event !== "object" || event === null ? event : { type: (event as { type: string }).type, data: REDACTED };
  return (workflow: { id: JobId; name: string; machine: AnyStateMachine }, event: unknown, snapshot: unknown): void => {
    const shown = redactSnapshot(snapshot);
    let ref = refs.get(workflow.id);
    const first = ref === undefined;
    if (ref === undefined) {
      ref = { id: `${workflow.name} #${workflow.id}`, sessionId: `picket-workflow-${workflow.id}`, logic: workflow.machine, snapshot: shown, getSnapshot: () => ref!.snapshot, _parent: undefined };
      refs.set(workflow.id, ref);
    }
    ref.snapshot = shown;
    const rootId = ref.sessionId;
    const seen = redactEvent(event);
    if (first) send({ type: "@xstate.actor", actorRef: ref, rootId } as unknown as InspectionEvent);
    send({ type: "@xstate.event", actorRef: ref, sourceRef: undefined, event: seen, rootId } as unknown as InspectionEvent);
    send({ type: "@xstate.snapshot", actorRef: ref, snapshot: shown, event: seen, rootId } as unknown as InspectionEvent);
    // A finished instance gets no more events here.
    if ((snapshot as { status?: string } | null)?.status !== "active") refs.delete(workflow.id);
  };
};
