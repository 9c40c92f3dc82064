// picket's public API: the queue's statements, the runtime, and the machines.
export * from "./db/index.ts";
export * from "./machines/index.ts";
export * from "./runtime/index.ts";
export { createDashboardHandler, dashboardRoutes, serveDashboard, type DashboardOptions } from "./dashboard/server.ts";
