// picket/dashboard: the dashboard's handler and server, apart from the main entry because the
// HTTP stack they bring (@effect/platform-node, effect/http) is about 17 MB of a worker's heap
// and 40 MB of its RSS, which a service that only runs jobs should not carry.
export { createDashboardHandler, dashboardRoutes, serveDashboard, type DashboardOptions } from "./server.ts";
