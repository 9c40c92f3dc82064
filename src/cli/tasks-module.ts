// Loads the module named by `picket worker --tasks`. It exports its tasks as `tasks` (an array of
// defineTask results) or as the default export (one task or an array), and may export `options`, extra supervisor
// options (concurrency, leases, health, ...).
import path from "node:path";
import { pathToFileURL } from "node:url";
import { InvalidConfigError } from "../db/index.ts";
import type { SupervisorOptions } from "../runtime/config.ts";
import type { Task } from "../runtime/task.ts";
import { explainLoadError } from "./module-load-error.ts";

const isTask = (value: unknown): value is Task =>
  typeof value === "object" && value !== null && typeof (value as Task).name === "string" && "leaseMs" in value && "timeoutMs" in value;

export const loadTasksModule = async (file: string): Promise<{ tasks: Task[]; options: Partial<SupervisorOptions> }> => {
  const url = pathToFileURL(path.resolve(file)).href;
  let mod: Record<string, unknown>;
  try {
    mod = (await import(url)) as Record<string, unknown>;
  } catch (error) {
    throw new InvalidConfigError(explainLoadError(file, path.resolve(file), error), { cause: error });
  }
  const exported = mod.tasks ?? mod.default;
  // `export default defineTask(...)`: a module with one task need not wrap it in an array.
  const tasks = isTask(exported) ? [exported] : exported;
  if (!Array.isArray(tasks) || tasks.length === 0 || !tasks.every(isTask)) {
    throw new InvalidConfigError(
      `picket: ${file} must export its tasks as \`export const tasks = [defineTask({ name, handler }), ...]\` (or as the default export: one task, or an array of them).`,
    );
  }
  return { tasks, options: (mod.options as Partial<SupervisorOptions> | undefined) ?? {} };
};
