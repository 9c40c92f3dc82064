// picket/dashboard: the dashboard's handler and server, apart from the main entry because the
// HTTP stack they bring (effect/http) is about 7 MB of a worker's heap and 20 MB of its RSS, which
// a service that only runs jobs should not carry (docs/benchmarks.md, issue 28).
export { createDashboardHandler, createDashboardNodeHandler, dashboardRoutes, serveDashboard, type DashboardOptions } from "./server.ts";
