// picket's public API: the queue's statements, the runtime, and the machines. The dashboard is
// picket/dashboard and the testing kit picket/testing, so that a worker loads neither.
export * from "./db/index.ts";
export * from "./machines/index.ts";
export * from "./runtime/index.ts";
