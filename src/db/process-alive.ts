// Whether a process still runs, for the embedded server's files (src/db/embedded.ts) and the CLI's
// start lock: a pid left in a file by a killed process must read as gone.
import { readFileSync } from "node:fs";

/** Whether a process exists: one of another user (EPERM) does; a zombie nobody reaped does not. */
export const isAlive = (pid: number): boolean => {
  // kill(0) and kill(-n) signal process groups, the caller's own for 0: a pid of 0 (a process that
  // never started, a field never filled) must read as gone, not as this very process group.
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  return !isZombie(pid);
};

/** A server whose parent exited is reaped by PID 1, which in some containers never reaps. */
const isZombie = (pid: number): boolean => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) === "Z";
  } catch {
    return false; // no /proc (macOS) or gone: kill(0) answered
  }
};
