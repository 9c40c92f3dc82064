export * from "./diagram.ts";
export * from "./job-machine.ts";
export * from "./supervisor-machine.ts";
