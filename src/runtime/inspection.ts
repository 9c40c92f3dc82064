// What an inspector attached to a supervisor sees of its jobs. Payloads and handler results are
// user data, and an inspector (the Stately visualizer, a WebSocket to another machine) is one more
// place for them to leak to: unless logPayloads is on they are replaced before the inspector gets
// the event. @statelyai/inspect reads an actor's snapshot later, from the actor itself, so an
// actor reference it is handed answers with the redacted snapshot too.
import type { ActorRefLike, AnyActorRef, InspectionEvent, Observer } from "xstate";

/** An XState inspector: a callback, or an observer such as @statelyai/inspect's `inspector.inspect`. */
export type Inspector = Observer<InspectionEvent> | ((event: InspectionEvent) => void);

export const REDACTED = "[redacted: logPayloads is off]";

type Bag = Record<string, unknown>;
const isBag = (value: unknown): value is Bag => typeof value === "object" && value !== null;

/** A context or an actor's input: the job's payload and the handler's result are replaced. */
const redactData = (value: unknown): unknown => {
  if (!isBag(value)) return value;
  let copy: Bag | undefined;
  const job = value.job;
  if (isBag(job) && "payload" in job) copy = { ...value, job: { ...job, payload: REDACTED } };
  if (value.result !== undefined) copy = { ...(copy ?? value), result: REDACTED };
  return copy ?? value;
};

/**
 * The handler's result travels as its invocation's output, in the promise actor's own resolve
 * event (`data`), and in the done event its parent gets (`output`).
 */
const HANDLER = "handler";

const redactEvent = (event: unknown, actorId: string): unknown => {
  if (!isBag(event)) return event;
  let copy: Bag = event;
  if (event.input !== undefined) copy = { ...copy, input: redactData(event.input) };
  if (event.type === `xstate.done.actor.${HANDLER}` && event.output !== undefined) copy = { ...copy, output: REDACTED };
  if (actorId === HANDLER && event.data !== undefined) copy = { ...copy, data: REDACTED };
  return copy;
};

const redactSnapshot = (snapshot: unknown, actorId: string): unknown => {
  if (!isBag(snapshot)) return snapshot;
  const copy: Bag = { ...snapshot };
  if (snapshot.context !== undefined) copy.context = redactData(snapshot.context);
  if (snapshot.input !== undefined) copy.input = redactData(snapshot.input);
  if (actorId === HANDLER && snapshot.output !== undefined) copy.output = REDACTED;
  return copy;
};

const idOf = (actorRef: ActorRefLike): string => (actorRef as { id?: string }).id ?? "";

// One stand-in per actor, so that an inspector comparing references sees the same actor.
const standIns = new WeakMap<ActorRefLike, ActorRefLike>();
const redactedRef = (actorRef: ActorRefLike): ActorRefLike => {
  let standIn = standIns.get(actorRef);
  if (standIn === undefined) {
    standIn = new Proxy(actorRef, {
      get: (target, key) => (key === "getSnapshot" ? () => redactSnapshot(target.getSnapshot(), idOf(target)) : Reflect.get(target, key)),
    });
    standIns.set(actorRef, standIn);
  }
  return standIn;
};

/**
 * Every event's actor references answer with redacted snapshots, not only the actor event's: a
 * callback inspector may read `actorRef.getSnapshot()` (or `sourceRef`'s) off any event.
 */
const withRefs = <E extends InspectionEvent>(event: E): E => {
  const sourceRef = (event as { sourceRef?: ActorRefLike }).sourceRef;
  return { ...event, actorRef: redactedRef(event.actorRef), ...(sourceRef ? { sourceRef: redactedRef(sourceRef) } : {}) };
};

const redactFields = (event: InspectionEvent): InspectionEvent => {
  switch (event.type) {
    case "@xstate.actor":
      return event;
    case "@xstate.event":
      return { ...event, event: redactEvent(event.event, idOf(event.actorRef)) as typeof event.event };
    case "@xstate.snapshot":
    case "@xstate.microstep": {
      const id = idOf(event.actorRef);
      return { ...event, event: redactEvent(event.event, id) as typeof event.event, snapshot: redactSnapshot(event.snapshot, id) as typeof event.snapshot };
    }
    case "@xstate.action":
      // An action's parameters may be the handler's result (setResult): only its name is shown.
      return { ...event, action: { ...event.action, params: event.action.params === undefined ? undefined : REDACTED } };
    default:
      return event;
  }
};

const redact = (event: InspectionEvent): InspectionEvent => withRefs(redactFields(event));

/** The inspector as the supervisor attaches it: every event redacted unless payloads may be shown. */
export const inspectorFor = (inspector: Inspector, showPayloads: boolean): Inspector => {
  if (showPayloads) return inspector;
  const next = typeof inspector === "function" ? inspector : inspector.next?.bind(inspector);
  return { next: (event) => next?.(redact(event)) };
};

/**
 * The parent a job's actor is created with, so that an inspector shows it under the supervisor:
 * the supervisor's actor in all but one thing. XState tells a parent when a child ends, and a
 * parent that gets a child's error event and has no transition for it fails; the supervisor hears
 * of its jobs through their observers instead, so what a job's actor would send it is dropped here
 * (the inspector still sees the event go out). Everything else, its system and its session id
 * included, is the supervisor's actor's own.
 */
export const parentFor = (supervisor: AnyActorRef): AnyActorRef =>
  Object.create(supervisor, { _send: { value: () => undefined } }) as AnyActorRef;
