// Why a tasks module could not be loaded, in words that say where and what to do: a syntax error
// with its file, line and column (Node's dynamic import of a .js module gives none), and a .ts
// module on a Node that cannot strip types.
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { withoutPrefix } from "./error-message.ts";

/** Node runs .ts files (type stripping) from 22.6 behind a flag, and by default from 22.18 and 23.6. */
export const TYPESCRIPT_NODE = "22.18";

export interface SourceLocation {
  file: string;
  line: number;
  column: number;
}

/**
 * The location Node prints above a syntax error ("file:line", the source line, a caret under the
 * column), as it does in a TypeScript module's stack and in `node --check`'s output.
 */
export const locationIn = (text: string): SourceLocation | undefined => {
  const lines = text.split("\n");
  const at = lines.findIndex((l) => /^(?:file:\/\/)?\/.*:\d+$/.test(l.trim()));
  if (at < 0) return undefined;
  const header = lines[at]!.trim();
  const colon = header.lastIndexOf(":");
  const caret = lines.slice(at + 1, at + 4).find((l) => /^\s*\^+\s*$/.test(l));
  return {
    file: header.slice(0, colon).replace(/^file:\/\//, ""),
    line: Number(header.slice(colon + 1)),
    column: caret === undefined ? 1 : caret.indexOf("^") + 1,
  };
};

/** Asks `node --check` where the syntax error is: only on the failure path, so its cost does not matter. */
const checkSyntax = (file: string): SourceLocation | undefined => {
  const check = spawnSync(process.execPath, ["--check", file], { encoding: "utf8", timeout: 10_000 });
  return check.status === 0 ? undefined : locationIn(check.stderr ?? "");
};

const nodeMajorMinor = (version: string): [number, number] => {
  const [major = 0, minor = 0] = version.replace(/^v/, "").split(".").map(Number);
  return [major, minor];
};

/** picket's own build output: `import "picket"` resolves there, by the package's exports, even inside its repository. */
const OWN_DIST = path.resolve(fileURLToPath(import.meta.url), "../../../dist") + path.sep;

/** The message for a tasks module `file` (as given) at `resolved` that failed to import with `error`. */
export const explainLoadError = (file: string, resolved: string, error: unknown, nodeVersion: string = process.version): string => {
  const code = (error as { code?: unknown }).code;
  const message = withoutPrefix(error instanceof Error ? error.message : String(error));
  const prefix = `picket: could not load the tasks module ${file}`;
  if (code === "ERR_UNKNOWN_FILE_EXTENSION" && /\.[cm]?ts$/.test(resolved)) {
    const [major, minor] = nodeMajorMinor(nodeVersion);
    const old = major < 22 || (major === 22 && minor < 18) || (major === 23 && minor < 6);
    return (
      `${prefix}: this Node (${nodeVersion}) cannot run a .ts file${old ? "" : " (type stripping is turned off)"}. ` +
      `Use Node ${TYPESCRIPT_NODE} or later (it runs TypeScript by stripping types), or compile the module to .js and pass that.`
    );
  }
  // In a clone of picket's repository, `import ... from "picket"` resolves to dist/, which only
  // `npm run build` makes: Node's words name a dist/index.js nobody wrote.
  if (code === "ERR_MODULE_NOT_FOUND" && message.includes(OWN_DIST)) {
    return (
      `${prefix}: it imports "picket", which inside picket's own repository means the build in ${OWN_DIST} (not built). ` +
      `Import from the sources instead ("${path.join(OWN_DIST, "..", "src", "index.ts")}", as examples/ do), or run \`npm run build\` first.`
    );
  }
  if (error instanceof SyntaxError) {
    const where = locationIn(error.stack ?? "") ?? checkSyntax(resolved);
    if (where) return `${prefix}: syntax error at ${where.file}:${where.line}:${where.column}: ${message}`;
    return `${prefix}: syntax error (in the module or one it imports): ${message}`;
  }
  return `${prefix}: ${message}`;
};
