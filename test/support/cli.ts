// The `picket` command run as a user runs it: a real process, its exit code and its output.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

export const CLI = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

export const picket = (
  args: string[],
  options: { env?: Record<string, string | undefined>; cwd?: string; detached?: boolean; onStart?: (pid: number, output: () => string) => void } = {},
): Promise<Run> =>
  new Promise((resolve) => {
    const env = { ...process.env, ...options.env };
    for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k];
    const child = spawn(process.execPath, [CLI, ...args], { env, cwd: options.cwd ?? process.cwd(), stdio: ["ignore", "pipe", "pipe"], detached: options.detached ?? false });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    options.onStart?.(child.pid!, () => stdout + stderr);
    child.on("exit", (code) => resolve({ code, stdout, stderr }));
  });
