import { createRequire } from "node:module";

/** picket's version, from its package.json (two levels up from src/runtime and from dist/runtime alike). */
export const PICKET_VERSION: string = (createRequire(import.meta.url)("../../package.json") as { version: string }).version;
