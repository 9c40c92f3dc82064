// The worker's metrics, read the two ways users collect them: Prometheus text scraped from the
// health server's /metrics, and an OpenTelemetry SDK's in-memory reader. After a mixed workload
// (completions, retries, dead jobs, a timeout) each counter must equal what the database itself
// says happened.
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader, type ResourceMetrics } from "@opentelemetry/sdk-metrics";
import { readFileSync } from "node:fs";
import { Histogram, Registry } from "prom-client";
import { beforeEach, describe, expect, it } from "vitest";
import { enqueueJobs } from "../src/db/index.ts";
import { JobHistogram } from "../src/runtime/job-histogram.ts";
import { defineTask, PermanentError } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { freePort } from "./support/ports.ts";
import { parse, total } from "./support/prometheus.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

// A mixed workload: "ok" completes; "flaky" fails its first attempt and completes its second;
// "broken" fails both of its two attempts and goes dead; "refused" is permanent at once; "slow"
// times out once, then completes.
const workload = () => {
  const tries = new Map<string, number>();
  const attempt = (id: string) => {
    const n = (tries.get(id) ?? 0) + 1;
    tries.set(id, n);
    return n;
  };
  const quick = { backoff: { baseMs: 1, maxMs: 1 } };
  return [
    defineTask({ name: "ok", ...quick, handler: async () => "fine" }),
    defineTask({ name: "flaky", ...quick, handler: async (_p, { job }) => (attempt(job.id) === 1 ? Promise.reject(new Error("first try")) : "second") }),
    defineTask({ name: "broken", ...quick, maxAttempts: 2, handler: async () => Promise.reject(new Error("never")) }),
    defineTask({
      name: "refused",
      ...quick,
      handler: async () => {
        throw new PermanentError("no");
      },
    }),
    defineTask({
      name: "slow",
      ...quick,
      timeoutMs: 100,
      // The first attempt never settles, abort or not: its duration is counted to its interruption.
      handler: (_p, { job }) => (attempt(job.id) === 1 ? new Promise(() => undefined) : Promise.resolve("late")),
    }),
  ];
};

const enqueueWorkload = () =>
  enqueueJobs(db.pool, [
    ...Array.from({ length: 20 }, () => ({ type: "ok" })),
    ...Array.from({ length: 5 }, () => ({ type: "flaky" })),
    ...Array.from({ length: 3 }, () => ({ type: "broken", maxAttempts: 2 })),
    ...Array.from({ length: 2 }, () => ({ type: "refused" })),
    { type: "slow" },
  ]);

/** What the database says happened: finished jobs by type and status, attempts made, failed attempts recorded. */
const databaseCounts = async () => {
  const { rows } = await db.pool.query(`
    SELECT type, status, count(*)::int AS jobs, sum(attempts)::int AS attempts, sum(jsonb_array_length(errors))::int AS failures
    FROM picket.jobs GROUP BY type, status`);
  return rows as Array<{ type: string; status: string; jobs: number; attempts: number; failures: number }>;
};

describe("metrics", () => {
  // The tests share the file's database: each starts from an empty table, so the database's
  // counts are this test's.
  beforeEach(async () => {
    await db.pool.query("DELETE FROM picket.jobs");
  });

  it("/metrics after a mixed workload: every counter equals the database's own count", async () => {
    await enqueueWorkload();
    const port = await freePort();
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: workload(), health: { port, host: "127.0.0.1" } });
    await expect.poll(() => outcomes.filter((o) => o.outcome !== "retried").length, { timeout: 15_000 }).toBe(31);

    const response = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    const samples = parse(await response.text());
    const rows = await databaseCounts();
    const db_ = (type: string, pick: (r: (typeof rows)[number]) => number, status?: string) =>
      rows.filter((r) => r.type === type && (status === undefined || r.status === status)).reduce((sum, r) => sum + pick(r), 0);

    for (const type of ["ok", "flaky", "broken", "refused", "slow"]) {
      const labels = { messaging_system: "picket", messaging_destination_name: type };
      // Every attempt is one claim; every failed attempt one retried or dead outcome.
      expect(total(samples, "messaging_client_consumed_messages_total", labels), `${type} claimed`).toBe(db_(type, (r) => r.attempts));
      expect(total(samples, "picket_job_outcomes_total", { ...labels, picket_outcome: "completed" }), `${type} completed`).toBe(db_(type, (r) => r.jobs, "completed"));
      expect(total(samples, "picket_job_outcomes_total", { ...labels, picket_outcome: "dead" }), `${type} dead`).toBe(db_(type, (r) => r.jobs, "dead"));
      expect(total(samples, "picket_job_outcomes_total", { ...labels, picket_outcome: "retried" }), `${type} retried`).toBe(
        db_(type, (r) => r.failures) - db_(type, (r) => r.jobs, "dead"),
      );
      // Each attempt that ran has one handler duration, its failures labelled by kind.
      expect(total(samples, "messaging_process_duration_seconds_count", labels), `${type} handler runs`).toBe(db_(type, (r) => r.attempts));
      expect(total(samples, "picket_job_pickup_delay_seconds_count", labels), `${type} starts`).toBe(db_(type, (r) => r.attempts));
    }
    expect(total(samples, "messaging_process_duration_seconds_count", { messaging_destination_name: "slow", error_type: "timeout" })).toBe(1);
    expect(total(samples, "messaging_process_duration_seconds_count", { messaging_destination_name: "refused", error_type: "permanent" })).toBe(2);
    // The timed-out attempt ran its 100 ms before it was interrupted.
    expect(total(samples, "messaging_process_duration_seconds_sum", { messaging_destination_name: "slow", error_type: "timeout" })).toBeGreaterThanOrEqual(0.1);
    // Statement latencies: the claims and the outcome writes.
    expect(total(samples, "messaging_client_operation_duration_seconds_count", { messaging_operation_name: "claim" })).toBeGreaterThan(0);
    expect(total(samples, "messaging_client_operation_duration_seconds_count", { messaging_operation_name: "complete" })).toBeGreaterThan(0);
    expect(total(samples, "messaging_client_operation_duration_seconds_count", { messaging_operation_name: "fail" })).toBeGreaterThan(0);
    expect(total(samples, "messaging_client_operation_duration_seconds_count", { messaging_operation_name: "dead_letter" })).toBe(2);
    // Nothing is live any more: no depth rows, no held jobs.
    expect(samples.filter((s) => s.name === "picket_queue_depth")).toEqual([]);
    expect(total(samples, "picket_jobs_held")).toBe(0);
  });

  it("gauges: jobs held by the worker, and the queue's depth by task and state from the database, in both collectors", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const task = defineTask<{ quick?: boolean }>({ name: "held", concurrency: 2, handler: (payload) => (payload.quick ? Promise.resolve() : gate) });
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 60_000 });
    const meterProvider = new MeterProvider({ readers: [reader] });
    // Quick jobs first: the worker learns the task turns over fast, and buffers its jobs ahead.
    await enqueueJobs(db.pool, Array.from({ length: 50 }, () => ({ type: "held", payload: { quick: true } })));
    const port = await freePort();
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], health: { port, host: "127.0.0.1" }, metrics: { meterProvider } });
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(50);
    await enqueueJobs(db.pool, Array.from({ length: 8 }, () => ({ type: "held" })));
    await enqueueJobs(db.pool, [{ type: "elsewhere" }, { type: "elsewhere" }]);
    const scrape = async () => parse(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text());
    const processing = async () => (await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'held' AND status = 'processing'")).rows[0].n;
    await expect.poll(async () => total(await scrape(), "picket_jobs_held", { picket_state: "running" }), { timeout: 5_000 }).toBe(2);
    await expect.poll(processing, { timeout: 5_000 }).toBeGreaterThan(2);
    const claimed = await processing();
    const samples = await scrape();
    expect(total(samples, "picket_queue_depth", { messaging_destination_name: "held", picket_state: "processing" })).toBe(claimed);
    expect(total(samples, "picket_queue_depth", { messaging_destination_name: "held", picket_state: "ready" })).toBe(8 - claimed);
    expect(total(samples, "picket_queue_depth", { messaging_destination_name: "elsewhere", picket_state: "ready" })).toBe(2);
    // Claimed but not running: waiting in the buffer for one of the task's two slots.
    expect(total(samples, "picket_jobs_held", { picket_state: "waiting" })).toBe(claimed - 2);

    await reader.forceFlush();
    const exported = exporter.getMetrics().at(-1) as ResourceMetrics;
    const gauge = (name: string, attributes: Record<string, string>) =>
      (exported.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === name)?.dataPoints ?? [])
        .filter((p) => Object.entries(attributes).every(([k, v]) => p.attributes[k] === v))
        .reduce((n, p) => n + (p.value as number), 0);
    expect(gauge("picket.jobs.held", { "messaging.destination.name": "held", "picket.state": "running" })).toBe(2);
    expect(gauge("picket.jobs.held", { "messaging.destination.name": "held", "picket.state": "waiting" })).toBe(claimed - 2);
    expect(gauge("picket.queue.depth", { "messaging.destination.name": "held", "picket.state": "processing" })).toBe(claimed);
    expect(gauge("picket.queue.depth", { "messaging.destination.name": "elsewhere", "picket.state": "ready" })).toBe(2);
    release();
    await supervisor.stop();
    await meterProvider.shutdown();
  });

  it("the Grafana dashboard in docs/ asks only for metrics and labels a worker exports", async () => {
    // The workload, and live jobs for the gauges: one running until the end, one nobody takes.
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    await enqueueWorkload();
    await enqueueJobs(db.pool, [{ type: "gated" }, { type: "elsewhere" }]);
    const port = await freePort();
    const tasks = [...workload(), defineTask({ name: "gated", handler: () => gate })];
    const { outcomes } = await startWorker({ connectionString: db.url, tasks, health: { port, host: "127.0.0.1" } });
    await expect.poll(() => outcomes.filter((o) => o.outcome !== "retried").length, { timeout: 15_000 }).toBe(31);
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    release();
    const exported = new Set(parse(text).map((s) => s.name));
    const labels = new Set(parse(text).flatMap((s) => Object.keys(s.labels)));
    expect(exported).toContain("picket_queue_depth");
    expect(exported).toContain("picket_jobs_held");
    const dashboard = JSON.parse(readFileSync(new URL("../docs/grafana-dashboard.json", import.meta.url), "utf8"));
    const exprs: string[] = dashboard.panels.flatMap((panel: { targets: Array<{ expr: string }> }) => panel.targets.map((t) => t.expr));
    expect(exprs.length).toBeGreaterThanOrEqual(8);
    for (const expr of exprs) {
      const names = [...expr.matchAll(/\b((?:picket|messaging)_[a-z_]+)\b/g)].map((m) => m[1]!);
      expect(names.length, expr).toBeGreaterThan(0);
      for (const name of names) if (!exported.has(name) && !labels.has(name)) expect.fail(`${name} in "${expr}" is neither a metric nor a label the worker exports`);
    }
  });

  it("an OpenTelemetry SDK's reader sees the same numbers", async () => {
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 60_000 });
    const meterProvider = new MeterProvider({ readers: [reader] });
    await enqueueWorkload();
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: workload(), metrics: { meterProvider } });
    await expect.poll(() => outcomes.filter((o) => o.outcome !== "retried").length, { timeout: 15_000 }).toBe(31);
    await reader.forceFlush();
    const exported = exporter.getMetrics().at(-1) as ResourceMetrics;
    const points = (name: string) => exported.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === name)?.dataPoints ?? [];
    const sum = (name: string, attributes: Record<string, string>) =>
      points(name)
        .filter((p) => Object.entries(attributes).every(([k, v]) => p.attributes[k] === v))
        .reduce((n, p) => n + (typeof p.value === "number" ? p.value : (p.value as { count: number }).count), 0);
    const rows = await databaseCounts();
    for (const type of ["ok", "flaky", "broken", "refused", "slow"]) {
      const attempts = rows.filter((r) => r.type === type).reduce((n, r) => n + r.attempts, 0);
      const completed = rows.find((r) => r.type === type && r.status === "completed")?.jobs ?? 0;
      const dead = rows.find((r) => r.type === type && r.status === "dead")?.jobs ?? 0;
      const dest = { "messaging.system": "picket", "messaging.destination.name": type };
      expect(sum("messaging.client.consumed.messages", dest), `${type} claimed`).toBe(attempts);
      expect(sum("picket.job.outcomes", { ...dest, "picket.outcome": "completed" }), `${type} completed`).toBe(completed);
      expect(sum("picket.job.outcomes", { ...dest, "picket.outcome": "dead" }), `${type} dead`).toBe(dead);
      expect(sum("messaging.process.duration", dest), `${type} handler runs`).toBe(attempts);
    }
    expect(sum("messaging.process.duration", { "messaging.destination.name": "slow", "error.type": "timeout" })).toBe(1);
    expect(sum("messaging.client.operation.duration", { "messaging.operation.name": "claim" })).toBeGreaterThan(0);
    await meterProvider.shutdown();
  });
});

describe("JobHistogram", () => {
  it("prints what prom-client's own Histogram prints for the same observations, and zeroes on reset", async () => {
    const buckets = [0.001, 0.01, 0.1, 1];
    const observations: Array<[string, number]> = [["a", 0.0005], ["a", 0.001], ["a", 0.05], ["b", 0.2], ["a", 7], ["b", 0.01], ["a", 1]];
    const theirs = new Registry();
    const ours = new Registry();
    const reference = new Histogram({ name: "h_seconds", help: "help", labelNames: ["task", "kind"], buckets, registers: [theirs] });
    const histogram = new JobHistogram<"task" | "kind">({ name: "h_seconds", help: "help", buckets, registers: [ours] });
    for (const [task, value] of observations) {
      reference.observe({ task, kind: "" }, value);
      histogram.child({ task, kind: "" }).observe(value);
    }
    expect(await ours.metrics()).toBe(await theirs.metrics());
    // As JSON too (what prom-client's cluster aggregator reads), but for prom-client's empty exemplar slots.
    const withoutExemplars = (metrics: Array<{ values: object[] }>) => metrics.map((m) => ({ ...m, values: m.values.map(({ exemplar: _, ...v }: { exemplar?: unknown }) => v) }));
    expect(withoutExemplars(await ours.getMetricsAsJSON())).toEqual(withoutExemplars(await theirs.getMetricsAsJSON()));
    ours.resetMetrics();
    expect(total(parse(await ours.metrics()), "h_seconds_count")).toBe(0);
    histogram.child({ task: "a", kind: "" }).observe(0.5);
    expect(total(parse(await ours.metrics()), "h_seconds_count", { task: "a" })).toBe(1);
  });
});

