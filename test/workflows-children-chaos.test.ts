// @module-tag spawns: every test here runs worker processes.
// Child workflows under crashes: 150 parents, each invoking a child workflow that runs a task
// (test/fixtures/family-workflows.ts), on three worker processes (test/fixtures/family-worker.ts)
// while the driver SIGKILLs one every 1.5–4 s (a fresh one takes its place), restarts PostgreSQL
// once, and cancels a third of the parents as they go. Afterwards:
// - every parent ended: done with its child's result (twice its number), or cancelled;
// - every parent started exactly one child, however often the apply that starts it was retried;
// - every child of a done parent is done, its end applied to the parent exactly once; every child
//   of a cancelled parent ended too (cancelled, or done if it finished first): none left running;
// - every child that ran its task ran it for its own number (the side table, outside picket's).
// It starts its own embedded PostgreSQL (it restarts the server under the workers).
import { spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { migrate, startEmbeddedPostgres, type EmbeddedPostgres } from "../src/db/index.ts";
import { cancelWorkflow, startWorkflow } from "../src/db/workflows.ts";
import { parent } from "./fixtures/family-workflows.ts";

const WORKER = fileURLToPath(new URL("./fixtures/family-worker.ts", import.meta.url));
const PARENTS = 150;

interface Worker {
  child: ChildProcess;
  ready: Promise<void>;
  isReady: boolean;
  killedAt: number | null;
}

const between = (min: number, max: number) => Math.round(min + Math.random() * (max - min));

describe("child workflows under SIGKILLs and a PostgreSQL restart", () => {
  it("150 parents end; each started one child, heard its end once, or cancelled it with itself", async () => {
    const tempDir = await mkdtemp(path.join(tmpdir(), "picket-family-"));
    await chmod(tempDir, 0o755);
    const settings = { fsync: "off", synchronous_commit: "off", full_page_writes: "off" };
    let server: EmbeddedPostgres = await startEmbeddedPostgres({ dataDir: path.join(tempDir, "pgdata"), settings });
    const pool = new pg.Pool({ connectionString: server.url, max: 4 });
    pool.on("error", () => undefined);
    const workers: Worker[] = [];
    let generation = 0;
    const spawnWorker = (): Worker => {
      const id = `w${++generation}`;
      const child = spawn(process.execPath, [WORKER], { env: { ...process.env, DATABASE_URL: server.url, FAMILY_WORKER_ID: id }, stdio: ["ignore", "pipe", "inherit"] });
      const ready = new Promise<void>((resolve, reject) => {
        child.stdout!.on("data", (chunk: Buffer) => chunk.toString().includes("ready") && resolve());
        child.on("exit", (code) => reject(new Error(`worker ${id} exited with ${code} before it was ready`)));
      });
      const worker: Worker = { child, ready, isReady: false, killedAt: null };
      ready.then(() => (worker.isReady = true)).catch(() => undefined);
      workers.push(worker);
      return worker;
    };
    try {
      await migrate(pool);
      await pool.query("CREATE TABLE runs (job_id bigint PRIMARY KEY, n int NOT NULL, worker text NOT NULL)");
      for (let i = 0; i < 3; i++) spawnWorker();
      await Promise.all(workers.map((w) => w.ready));

      const t0 = Date.now();
      // Started in waves, so that kills and the restart land among starts, child starts and ends.
      const parents: Array<{ id: string; n: number; cancelAt: number | null; cancelled?: boolean }> = [];
      const plan = Array.from({ length: PARENTS }, (_, n) => ({ n, startAt: t0 + Math.floor(n / 15) * 800, cancel: n % 3 === 0 }));
      const kills: number[] = [];
      let restarted = false;
      let nextKill = t0 + between(1_500, 4_000);
      const live = async () => {
        try {
          return (await pool.query("SELECT count(*)::int AS n FROM picket.workflows WHERE status IN ('starting', 'running')")).rows[0].n as number;
        } catch {
          return Number.POSITIVE_INFINITY;
        }
      };
      const attempt = async (what: () => Promise<unknown>): Promise<boolean> => {
        try {
          await what();
          return true;
        } catch {
          // The server is away (restarting): try again on the next round.
          return false;
        }
      };
      for (;;) {
        if (Date.now() - t0 > 150_000) throw new Error(`families still running after 150 s: ${await live()} live, ${kills.length} kills, restarted ${restarted}`);
        while (parents.length < plan.length && plan[parents.length]!.startAt <= Date.now()) {
          const { n, cancel } = plan[parents.length]!;
          let id: string | undefined;
          // Keyed, so that a start whose answer was lost is not made twice when tried again.
          if (!(await attempt(async () => (id = (await startWorkflow(pool, parent, { n }, { key: `p-${n}` })).id)))) break;
          parents.push({ id: id!, n, cancelAt: cancel ? Date.now() + between(0, 1_500) : null });
        }
        for (const p of parents) {
          if (p.cancelAt !== null && !p.cancelled && p.cancelAt <= Date.now()) {
            if (await attempt(() => cancelWorkflow(pool, p.id, { by: "driver" }))) p.cancelled = true;
          }
        }
        if (parents.length === plan.length && parents.every((p) => p.cancelAt === null || p.cancelled) && (await live()) === 0) break;
        if (!restarted && Date.now() - t0 > 4_000) {
          await Promise.all(workers.filter((w) => w.killedAt === null).map((w) => w.ready));
          await server.stop();
          await sleep(1_000);
          server = await startEmbeddedPostgres({ dataDir: server.dataDir, port: server.port, settings });
          restarted = true;
          nextKill = Math.max(nextKill, Date.now() + 1_000);
        }
        const ready = workers.filter((w) => w.killedAt === null && w.isReady);
        if (Date.now() >= nextKill && ready.length > 0 && Date.now() - t0 < 20_000) {
          const victim = ready[Math.floor(Math.random() * ready.length)]!;
          victim.killedAt = Date.now();
          victim.child.kill("SIGKILL");
          kills.push(victim.killedAt);
          spawnWorker();
          nextKill = Date.now() + between(1_500, 4_000);
        }
        await sleep(50);
      }

      const { rows } = await pool.query<{ id: string; status: string; output: { result: number } | null; children: number; ends: number; child_status: string | null; child_output: { doubled: number } | null }>(
        `SELECT p.id::text, p.status, p.output,
                (SELECT count(*) FROM picket.workflows AS c WHERE c.parent_id = p.id)::int AS children,
                (SELECT count(*) FROM picket.workflow_events AS e WHERE e.workflow_id = p.id AND e.kind = 'child' AND e.outcome = 'applied')::int AS ends,
                (SELECT c.status FROM picket.workflows AS c WHERE c.parent_id = p.id ORDER BY c.id LIMIT 1) AS child_status,
                (SELECT c.output FROM picket.workflows AS c WHERE c.parent_id = p.id ORDER BY c.id LIMIT 1) AS child_output
         FROM picket.workflows AS p WHERE p.name = 'family.parent'`,
      );
      expect(rows).toHaveLength(PARENTS);
      const byId = new Map(rows.map((r) => [r.id, r]));
      let done = 0;
      let cancelled = 0;
      for (const p of parents) {
        const row = byId.get(p.id)!;
        const where = `parent ${p.id} (n ${p.n}, ${p.cancelAt === null ? "left to end" : "cancelled by the driver"})`;
        // Never more than one child for the one invocation, whatever was retried.
        expect(row.children, where).toBeLessThanOrEqual(1);
        if (row.status === "done") {
          done++;
          expect(row.output, where).toEqual({ result: 2 * p.n });
          expect([row.children, row.ends, row.child_status], where).toEqual([1, 1, "done"]);
          expect(row.child_output, where).toEqual({ doubled: 2 * p.n });
        } else {
          cancelled++;
          expect([row.status, p.cancelAt !== null], where).toEqual(["cancelled", true]);
          // Its child, if it had one, ended: cancelled with it, or done before the cancel.
          if (row.children === 1) expect(["cancelled", "done"], where).toContain(row.child_status);
          expect(row.ends, where).toBe(0);
        }
      }
      // Every run recorded was its own child's task, for its own number.
      const { rows: mismatched } = await pool.query(
        `SELECT r.job_id FROM runs AS r JOIN picket.jobs AS j ON j.id = r.job_id JOIN picket.workflows AS c ON c.id = j.workflow_id
         WHERE (c.snapshot -> 'context' ->> 'n')::int <> r.n`,
      );
      expect(mismatched).toEqual([]);
      expect(await live()).toBe(0);
      expect(kills.length).toBeGreaterThanOrEqual(3);
      expect(done).toBeGreaterThan(PARENTS / 2);
      console.log(`workflows-children-chaos: ${PARENTS} parents (${done} done, ${cancelled} cancelled), ${kills.length} kills, PostgreSQL restarted; ${Math.round((Date.now() - t0) / 1000)} s`);
    } finally {
      for (const w of workers) if (w.killedAt === null && w.child.exitCode === null) w.child.kill("SIGKILL");
      await pool.end().catch(() => undefined);
      await server.stop().catch(() => undefined);
      await rm(tempDir, { recursive: true, force: true });
    }
  }, 240_000);
});
