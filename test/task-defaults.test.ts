// Issue 15, item 6: a task's maxAttempts applies to every job of its type that did not set its own,
// however the job was enqueued (enqueueJob, add_job from SQL, the CLI), not only through createQueue.
import { describe, expect, it } from "vitest";
import { claimJobs, enqueueJob, sweepExpiredClaims } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { picket } from "./support/cli.ts";
import { useTestDatabase } from "./support/db.ts";
import { expireLease, row, want } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("a task's maxAttempts, however its jobs were enqueued", () => {
  it("a job that did not set maxAttempts dies after its task's attempts; one that did keeps its own", { tags: ["spawns"] }, async () => {
    let runs = 0;
    const task = defineTask({
      name: "always-fails",
      maxAttempts: 2,
      backoff: { baseMs: 0, maxMs: 0 },
      handler: async () => {
        runs++;
        throw new Error("no");
      },
    });
    const viaLibrary = await enqueueJob(db.pool, { type: "always-fails", payload: { via: "enqueueJob" } });
    const viaSql = (await db.pool.query("SELECT (picket.add_job('always-fails', '{\"via\": \"sql\"}')).id")).rows[0].id as string;
    const cli = await picket(["enqueue", "always-fails", '{"via":"cli"}'], { env: { DATABASE_URL: db.url } });
    expect(cli.code, cli.stderr).toBe(0);
    const viaCli = JSON.parse(cli.stdout).id as string;
    const ownLimit = await enqueueJob(db.pool, { type: "always-fails", payload: { via: "own" }, maxAttempts: 3 });
    // Before any claim the row says "the task's".
    expect((await row(db.pool, viaLibrary.id)).max_attempts).toBeNull();
    expect(viaLibrary.maxAttempts).toBeNull();

    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], pollIntervalMs: 50 });
    const ids = [viaLibrary.id, viaSql, viaCli, ownLimit.id];
    await expect
      .poll(async () => (await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE status = 'dead' AND id = ANY($1::bigint[])", [ids])).rows[0].n, {
        timeout: 20_000,
      })
      .toBe(4);
    await supervisor.stop();
    for (const id of [viaLibrary.id, viaSql, viaCli]) {
      expect(await row(db.pool, id)).toMatchObject({ status: "dead", attempts: 2, max_attempts: 2 });
    }
    expect(await row(db.pool, ownLimit.id)).toMatchObject({ status: "dead", attempts: 3, max_attempts: 3 });
    expect(runs).toBe(2 + 2 + 2 + 3);
  });

  it("the claim writes the task's attempts on the row, so the sweep (any worker, any config) reads them there", async () => {
    const job = await enqueueJob(db.pool, { type: "lost-once" });
    const [claimed] = await claimJobs(db.pool, "owner", [want("lost-once", { limit: 1, maxAttempts: 1 })]);
    expect(claimed!.maxAttempts).toBe(1);
    expect((await row(db.pool, job.id)).max_attempts).toBe(1);
    // The owner dies; a sweeper knows nothing of the task: the row alone decides the job is spent.
    await expireLease(db.pool, job.id);
    const swept = await sweepExpiredClaims(db.pool, 10);
    expect(swept).toEqual([expect.objectContaining({ id: job.id, status: "dead" })]);
  });

  it("a released job keeps the attempts its first claim wrote, whatever a later claimer's task says", async () => {
    const job = await enqueueJob(db.pool, { type: "kept" });
    await claimJobs(db.pool, "first", [want("kept", { limit: 1, maxAttempts: 4 })]);
    await db.pool.query("UPDATE picket.jobs SET status = 'pending', claim_token = NULL, lock_until = NULL WHERE id = $1", [job.id]);
    const [again] = await claimJobs(db.pool, "second", [want("kept", { limit: 1, maxAttempts: 9 })]);
    expect(again!.maxAttempts).toBe(4);
  });
});
