// @module-tag spawns: the CLI tests run picket in a child process.
// `picket flows list|show|cancel` as an operator runs it, and a flow run to its end by two workers
// through PgBouncer in transaction mode (enqueued through it too), children and all.
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimJobs, enqueueFlow, flowGraph, getFlow, openPool } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { picket } from "./support/cli.ts";
import { useTestDatabase } from "./support/db.ts";
import { want } from "./support/factory.ts";
import { startPgBouncer, type PgBouncer } from "./support/pgbouncer.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();
let bouncer: PgBouncer;
let bounced: pg.Pool;
beforeAll(async () => {
  bouncer = await startPgBouncer(db.url);
  bounced = await openPool({ connectionString: bouncer.url, transactionPooling: true, max: 4 });
});
afterAll(async () => {
  await bounced?.end();
  await bouncer?.stop();
});

describe("picket flows", () => {
  it("lists flows, shows one's jobs with what each waits for, and cancels one, running job included", async () => {
    const env = { env: { DATABASE_URL: db.url } };
    expect((await picket(["flows", "list"], env)).stdout).toBe("(no flows: enqueue one with enqueueFlow(db, { name, jobs }))\n");
    const { flow, jobs } = await enqueueFlow(db.pool, {
      name: "album",
      key: "album-9",
      jobs: [
        { name: "resize-1", type: "cli-flow.resize" },
        { name: "resize-2", type: "cli-flow.resize" },
        { name: "album", type: "cli-flow.album", dependsOn: ["resize-1", { name: "resize-2", onFailure: "ignore" }] },
      ],
    });
    const [running] = await claimJobs(db.pool, "w", [want("cli-flow.resize", { limit: 1 })]);

    const list = await picket(["flows", "list"], env);
    expect(list.code).toBe(0);
    const lines = list.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^id\s+name\s+status\s+jobs\s+live\s+dead\s+cancelled\s+started\s+finished$/);
    expect(lines[1]).toMatch(new RegExp(`^${flow.id}\\s+album\\s+running\\s+3\\s+3\\s+0\\s+0\\s+\\d+s ago\\s+—$`));
    expect(JSON.parse((await picket(["flows", "list", "--json", "--status", "running"], env)).stdout)).toEqual([expect.objectContaining({ id: flow.id, status: "running" })]);
    expect((await picket(["flows", "list", "--status", "done"], env)).stderr).toMatch(/--status must be one of running, completed, failed, cancelled/);

    const show = await picket(["flows", "show", flow.id], env);
    expect(show.stdout.split("\n")[0]).toBe(`flow ${flow.id} "album" key "album-9": running, 3 jobs (3 live, 0 dead, 0 cancelled)`);
    expect(show.stdout).toMatch(new RegExp(`\\n${jobs["album"]!.id}\\s+album\\s+cli-flow.album\\s+waiting\\s+0\\s+resize-1, resize-2 \\(ignore\\)\\s*\\n`));
    expect(show.stdout).toMatch(new RegExp(`\\n${running!.id}\\s+resize-\\d\\s+cli-flow.resize\\s+processing\\s+1\\s+—`));
    expect((await picket(["flows", "show", "999999"], env)).stderr).toMatch(/no flow 999999/);

    const cancel = await picket(["flows", "cancel", flow.id, "--by", "alice"], env);
    expect(cancel).toMatchObject({ code: 0, stdout: `flow ${flow.id}: cancelled 3 jobs and what depended on them; workers stop those that were running\n` });
    const graph = (await flowGraph(db.pool, flow.id))!;
    expect(graph.flow).toMatchObject({ status: "cancelled", live: 0, cancelled: 3 });
    expect(graph.jobs.map((j) => j.errors.at(-1))).toEqual(graph.jobs.map(() => expect.objectContaining({ operator: "cancel", by: "alice" })));
    expect((await picket(["flows", "cancel", flow.id], env)).stdout).toBe(`flow ${flow.id} has no live job to cancel (it is cancelled)\n`);
  }, 60_000);

  it("runs a flow to its end through PgBouncer in transaction mode: a fan-out, its fan-in, and children", async () => {
    const seen: string[] = [];
    const part = defineTask<{ n: number }, number>({ name: "pgb-flow.part", handler: (p) => (seen.push(`part-${p.n}`), p.n) });
    const sum = defineTask({
      name: "pgb-flow.sum",
      handler: async (_p, ctx) => {
        const deps = await ctx.dependencies();
        const children = Object.values(deps).filter((d) => d.type === "pgb-flow.part" && d.name.startsWith("job-"));
        if (children.length === 0) {
          await ctx.enqueueChildren([{ type: "pgb-flow.part", payload: { n: 100 } }]);
          seen.push("sum-1");
          return null;
        }
        seen.push("sum-2");
        return Object.values(deps).reduce((total, d) => total + (d.result as number), 0);
      },
    });
    const options = { connectionString: bouncer.url, transactionPooling: true, listenConnectionString: db.url, tasks: [part, sum], concurrency: 4 };
    const a = await startWorker(options);
    const b = await startWorker(options);
    const { flow, jobs } = await enqueueFlow(
      bounced,
      {
        name: "bounced",
        jobs: [...Array.from({ length: 20 }, (_, i) => ({ name: `p${i}`, type: "pgb-flow.part", payload: { n: i } })), { name: "sum", type: "pgb-flow.sum", dependsOn: Array.from({ length: 20 }, (_, i) => `p${i}`) }],
      },
      { preparedStatements: false },
    );
    await expect.poll(async () => (await getFlow(db.pool, flow.id))!.status, { timeout: 30_000, interval: 100 }).toBe("completed");
    const graph = (await flowGraph(db.pool, flow.id))!;
    expect(graph.flow).toMatchObject({ total: 22, live: 0, dead: 0, cancelled: 0 });
    expect(graph.jobs.find((j) => j.id === jobs["sum"]!.id)).toMatchObject({ status: "completed", result: 190 + 100 });
    // The sum ran after every part, twice: before its child and after it.
    expect(seen.filter((s) => s.startsWith("sum"))).toEqual(["sum-1", "sum-2"]);
    expect(seen.indexOf("sum-1")).toBeGreaterThan(Math.max(...Array.from({ length: 20 }, (_, i) => seen.indexOf(`part-${i}`))));
    expect(seen.indexOf("sum-2")).toBeGreaterThan(seen.indexOf("part-100"));
    expect([...a.outcomes, ...b.outcomes].every((o) => o.outcome === "completed")).toBe(true);
  }, 60_000);
});
