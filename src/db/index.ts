// The database half of picket: every SQL statement, its row types, migrations and the pool.
export * from "./admin.ts";
export * from "./claim.ts";
export * from "./embedded.ts";
export * from "./enqueue.ts";
export * from "./errors.ts";
export * from "./fenced.ts";
export * from "./job-row.ts";
export * from "./job-spec.ts";
export * from "./migrate.ts";
export * from "./notify.ts";
export * from "./pool.ts";
export type { Queryable, StatementOptions } from "./queryable.ts";
export * from "./retention.ts";
export { checkSchemaName, DEFAULT_SCHEMA } from "./schema-name.ts";
export * from "./statement.ts";
export * from "./storable-json.ts";
export * from "./sweep.ts";
export * from "./stats.ts";
