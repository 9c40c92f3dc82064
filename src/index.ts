// picket's public API.
export * from "./db/index.ts";
export { createLogger, jobLogger, type Logger, type LoggerOptions } from "./runtime/logger.ts";
