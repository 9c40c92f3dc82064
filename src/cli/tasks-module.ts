// Loads the module named by `picket worker --tasks`. It exports its tasks as `tasks` (an array of
// defineTask results) or as the default export (one task or an array), and may export `workflows`
// (defineWorkflow results the worker applies) and `options`, extra supervisor options (concurrency,
// leases, health, ...).
import { existsSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { InvalidConfigError } from "../db/index.ts";
import type { SupervisorOptions } from "../runtime/config.ts";
import type { Task } from "../runtime/task.ts";
import { explainLoadError } from "./module-load-error.ts";

const isTask = (value: unknown): value is Task =>
  typeof value === "object" && value !== null && typeof (value as Task).name === "string" && "leaseMs" in value && "timeoutMs" in value;

const HOW = "`export const tasks = [defineTask({ name, handler }), ...]` (or as the default export: one task, or an array of them)";

/** What is wrong with a module's export of its tasks, said so that the fix is plain; undefined when nothing is. */
const wrongExport = (file: string, mod: Record<string, unknown>): string | undefined => {
  const name = mod.tasks !== undefined ? "tasks" : "default";
  const exported = mod.tasks ?? mod.default;
  if (isTask(exported)) return undefined;
  if (exported === undefined) {
    // Naming what it does export catches `export const task = ...` or a misspelt `tasks`.
    const names = Object.keys(mod).filter((k) => k !== "options" && k !== "workflows");
    const found = names.length === 0 ? "it exports nothing" : `it exports only ${names.map((k) => `\`${k}\``).join(", ")}`;
    return `picket: ${file} must export its tasks as ${HOW}; ${found}.`;
  }
  if (!Array.isArray(exported)) return `picket: ${file} must export its tasks as ${HOW}; its \`${name}\` export is not a task or an array.`;
  if (exported.length === 0) return `picket: ${file} exports an empty \`${name}\` array: put at least one defineTask({ name, handler }) in it.`;
  const bad = exported.findIndex((t) => !isTask(t));
  if (bad >= 0) {
    return `picket: ${file}: ${name}[${bad}] is not a task: make each one with defineTask({ name, handler }) (from picket), not a plain object.`;
  }
  return undefined;
};

export const loadTasksModule = async (file: string): Promise<{ tasks: Task[]; options: Partial<SupervisorOptions> }> => {
  const resolved = path.resolve(file);
  // Node's own message for a missing file names picket's loader as the importer, which misleads.
  if (!existsSync(resolved)) {
    throw new InvalidConfigError(`picket: could not load the tasks module ${file}: there is no file ${resolved} (resolved from ${process.cwd()}): check the path.`);
  }
  const url = pathToFileURL(resolved).href;
  let mod: Record<string, unknown>;
  try {
    mod = (await import(url)) as Record<string, unknown>;
  } catch (error) {
    throw new InvalidConfigError(explainLoadError(file, resolved, error), { cause: error });
  }
  const wrong = wrongExport(file, mod);
  if (wrong !== undefined) throw new InvalidConfigError(wrong);
  const exported = mod.tasks ?? mod.default;
  // `export default defineTask(...)`: a module with one task need not wrap it in an array.
  const tasks = (isTask(exported) ? [exported] : exported) as Task[];
  const options = (mod.options as Partial<SupervisorOptions> | undefined) ?? {};
  return { tasks, options: mod.workflows === undefined ? options : { ...options, workflows: mod.workflows as SupervisorOptions["workflows"] } };
};
