// @module-tag spawns: every test here runs picket in a child process.
// `picket queues list|pause|resume` as an operator runs it: a real process against the test
// database, directly and through PgBouncer in transaction mode.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimJobs, enqueueJob, listPaused } from "../src/db/index.ts";
import { picket } from "./support/cli.ts";
import { useTestDatabase } from "./support/db.ts";
import { want } from "./support/factory.ts";
import { startPgBouncer, type PgBouncer } from "./support/pgbouncer.ts";

const db = useTestDatabase();
let bouncer: PgBouncer;
beforeAll(async () => {
  bouncer = await startPgBouncer(db.url);
});
afterAll(async () => {
  await bouncer?.stop();
});

describe("picket queues", () => {
  it("pauses a queue and a task, lists them with their jobs, and resumes them; a second pause or resume says nothing changed", async () => {
    const env = { env: { DATABASE_URL: db.url } };
    expect((await picket(["queues", "list"], env)).stdout).toBe("(no queues have jobs and nothing is paused: a job names a queue with enqueueJob({ queue }))\n");
    await enqueueJob(db.pool, { type: "cli-mail", queue: "emails", runAt: new Date(Date.now() - 90_000) });
    await enqueueJob(db.pool, { type: "cli-mail", queue: "emails", runAt: new Date(Date.now() + 3_600_000) });

    const paused = await picket(["queues", "pause", "emails", "--by", "alice"], env);
    expect(paused).toMatchObject({ code: 0, stdout: "queue emails paused: no worker claims its jobs until picket queues resume emails\n" });
    const again = await picket(["queues", "pause", "emails"], env);
    expect(again.stdout).toMatch(/^queue emails was already paused since \d{4}-\d\d-\d\dT[\d:.]+Z by alice\n$/);
    // Without --by, the OS user at this host is named.
    expect((await picket(["queues", "pause", "--task", "cli-report"], env)).stdout).toBe("task cli-report paused: no worker claims its jobs until picket queues resume --task cli-report\n");
    expect((await listPaused(db.pool)).find((p) => p.kind === "task")?.pausedBy).toMatch(/^.+@.+$/);

    const list = await picket(["queues", "list"], env);
    expect(list.code).toBe(0);
    const lines = list.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^queue\s+ready\s+scheduled\s+processing\s+oldest ready\s+state$/);
    expect(lines[1]).toMatch(/^emails\s+1\s+1\s+0\s+1m [3-5]\ds\s+paused since \S+ by alice$/);
    expect(lines.slice(2)).toEqual(["", "paused tasks:", expect.stringMatching(/^ {2}cli-report {2}paused since \S+ by .+@.+$/)]);
    const json = JSON.parse((await picket(["queues", "list", "--json"], env)).stdout);
    expect(json).toEqual({
      queues: [
        {
          name: "emails", ready: 1, scheduled: 1, processing: 0, oldestReadyAt: expect.any(String),
          head: { id: expect.any(String), type: "cli-mail", runAt: expect.any(String) },
          paused: expect.objectContaining({ kind: "queue", name: "emails", pausedBy: "alice" }),
        },
      ],
      pausedTasks: [expect.objectContaining({ kind: "task", name: "cli-report" })],
    });

    expect((await picket(["queues", "resume", "emails"], env)).stdout).toBe("queue emails resumed: workers claim its jobs again\n");
    expect((await picket(["queues", "resume", "emails"], env)).stdout).toBe("queue emails was not paused (picket queues list shows what is)\n");
    expect((await picket(["queues", "resume", "--task", "cli-report"], env)).stdout).toBe("task cli-report resumed: workers claim its jobs again\n");
    expect(await listPaused(db.pool)).toEqual([]);
  }, 60_000);

  it("refuses a pause that names nothing, or both a queue and a task, or a name no job could have, saying what to give", async () => {
    const env = { env: { DATABASE_URL: db.url } };
    const neither = await picket(["queues", "pause"], env);
    expect(neither.code).toBe(1);
    expect(neither.stderr).toContain("picket queues pause needs a queue (picket queues pause emails) or a task (picket queues pause --task send-email)");
    const both = await picket(["queues", "resume", "emails", "--task", "x"], env);
    expect(both.code).toBe(1);
    expect(both.stderr).toContain("picket queues resume takes a queue or --task <name>, not both");
    const badTask = await picket(["queues", "pause", "--task", "has space"], env);
    expect(badTask.code).toBe(1);
    expect(badTask.stderr).toContain('picket: paused task type "has space" may contain only letters, digits and _ . : / - (no spaces).');
    expect(await listPaused(db.pool)).toEqual([]);
  }, 60_000);

  it("pauses through PgBouncer in transaction mode, and the claim keeps to it", async () => {
    const env = { env: { DATABASE_URL: undefined } };
    const through = ["--database-url", bouncer.url, "--transaction-pooling"];
    const job = await enqueueJob(db.pool, { type: "cli-bounced" });
    expect((await picket(["queues", "pause", "--task", "cli-bounced", ...through], env)).code).toBe(0);
    expect(await claimJobs(db.pool, "w", [want("cli-bounced")])).toEqual([]);
    expect((await picket(["queues", "list", ...through], env)).stdout).toMatch(/\npaused tasks:\n {2}cli-bounced {2}paused since /);
    expect((await picket(["queues", "resume", "--task", "cli-bounced", ...through], env)).code).toBe(0);
    expect((await claimJobs(db.pool, "w", [want("cli-bounced")])).map((j) => j.id)).toEqual([job.id]);
  }, 60_000);
});
