// WorkerMetrics on its own, without a worker or a database: what each instrument is called, what
// it says it measures and in which unit, how a record reaches both collectors (seconds, not
// milliseconds; an error's kind only on a failure), and how the gauges read their sources.
// test/metrics.test.ts checks the counts a real worker records against the database's own.
import { type Attributes, ValueType } from "@opentelemetry/api";
import { DataPointType, MeterProvider, MetricReader, type DataPoint, type Histogram, type MetricData } from "@opentelemetry/sdk-metrics";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import type { QueueDepthRow } from "../src/db/index.ts";
import { WorkerMetrics, type HeldCounts } from "../src/runtime/metrics.ts";
import { rejectionOf } from "./support/errors.ts";
import { parse, total } from "./support/prometheus.ts";

/** A reader the test collects from when it wants: what an SDK's exporter would be handed. */
class Reader extends MetricReader {
  protected async onShutdown(): Promise<void> {}
  protected async onForceFlush(): Promise<void> {}
}

const setup = () => {
  const reader = new Reader();
  const registry = new Registry();
  const metrics = new WorkerMetrics({ meterProvider: new MeterProvider({ readers: [reader] }), registry });
  const otel = async () => {
    const { resourceMetrics, errors } = await reader.collect();
    expect(errors).toEqual([]);
    return resourceMetrics.scopeMetrics;
  };
  /** The data points of one OpenTelemetry instrument, from a fresh collection. */
  const points = async (name: string): Promise<Array<DataPoint<unknown>>> =>
    ((await otel()).flatMap((s) => s.metrics).find((m) => m.descriptor.name === name)?.dataPoints ?? []) as Array<DataPoint<unknown>>;
  const prom = async () => parse(await registry.metrics());
  return { metrics, reader, registry, otel, points, prom };
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const withAttributes = <T>(points: Array<DataPoint<T>>, attributes: Attributes) =>
  points.filter((p) => Object.entries(attributes).every(([k, v]) => p.attributes[k] === v));
const histogramOf = (point: DataPoint<unknown> | undefined) => point?.value as Histogram;

describe("WorkerMetrics' instruments", () => {
  it("each has its name, unit, description and kind; Prometheus's HELP says what OpenTelemetry's description says; the buckets are the same", async () => {
    const { metrics, otel, registry, prom } = setup();
    // One record in each, so that every instrument has a point to export.
    metrics.claimed("t", 1);
    metrics.started("t", 5);
    metrics.finished("t", "completed", 5, undefined);
    metrics.statement("claim", 1, undefined);
    metrics.observeHeld(() => ({ running: new Map([["t", 1]]), waiting: new Map() }));
    metrics.observeDepth(async () => [{ type: "t", state: "ready", count: 1 }]);
    metrics.observeFlows(async () => [{ status: "running", count: 1 }]);

    const scopes = await otel();
    expect(scopes.map((s) => s.scope.name)).toEqual(["picket"]);
    const exported = new Map(scopes.flatMap((s) => s.metrics).map((m): [string, MetricData] => [m.descriptor.name, m]));
    const help = new Map([...(await registry.metrics()).matchAll(/^# HELP (\S+) (.*)$/gm)].map((m) => [m[1]!, m[2]!]));
    const instruments: Array<[otel: string, prometheus: string, unit: string, kind: DataPointType, valueType: ValueType, description: string]> = [
      ["messaging.client.consumed.messages", "messaging_client_consumed_messages_total", "{message}", DataPointType.SUM, ValueType.INT, "Jobs claimed"],
      ["picket.job.outcomes", "picket_job_outcomes_total", "{job}", DataPointType.SUM, ValueType.INT, "Jobs whose attempt ended, by outcome"],
      ["messaging.process.duration", "messaging_process_duration_seconds", "s", DataPointType.HISTOGRAM, ValueType.DOUBLE, "How long a job's handler ran"],
      ["picket.job.pickup_delay", "picket_job_pickup_delay_seconds", "s", DataPointType.HISTOGRAM, ValueType.DOUBLE, "From a job's run_at to its start in a worker"],
      ["messaging.client.operation.duration", "messaging_client_operation_duration_seconds", "s", DataPointType.HISTOGRAM, ValueType.DOUBLE, "How long picket's claim and outcome statements took"],
      ["picket.jobs.held", "picket_jobs_held", "{job}", DataPointType.GAUGE, ValueType.INT, "Jobs this worker holds: running, or waiting in its buffer for a slot"],
      ["picket.queue.depth", "picket_queue_depth", "{job}", DataPointType.GAUGE, ValueType.INT, "Live jobs in the table, by task and state: ready, scheduled, retrying, waiting, processing"],
      ["picket.flows", "picket_flows", "{flow}", DataPointType.GAUGE, ValueType.INT, "Flows in the table, by state: running, completed, failed, cancelled (finished ones until retention removes them)"],
    ];
    expect([...exported.keys()].sort()).toEqual(instruments.map(([name]) => name).sort());
    expect([...help.keys()].sort()).toEqual(instruments.map(([, name]) => name).sort());
    for (const [name, promName, unit, kind, valueType, description] of instruments) {
      const metric = exported.get(name)!;
      expect({ name, unit: metric.descriptor.unit, kind: metric.dataPointType, valueType: metric.descriptor.valueType, description: metric.descriptor.description }).toEqual({ name, unit, kind, valueType, description });
      expect(help.get(promName), promName).toBe(description);
    }

    // A duration's buckets, in seconds from half a millisecond to five minutes, are the same in both.
    const samples = await prom();
    for (const [name, promName, , kind] of instruments) {
      if (kind !== DataPointType.HISTOGRAM) continue;
      const les = samples.filter((s) => s.name === `${promName}_bucket` && s.labels.le !== "+Inf").map((s) => Number(s.labels.le));
      const boundaries = histogramOf(exported.get(name)!.dataPoints[0]).buckets.boundaries;
      expect(boundaries, name).toEqual([...new Set(les)]);
      expect([boundaries[0], boundaries.at(-1)]).toEqual([0.0005, 300]);
    }
  });

  it("durations reach both collectors in seconds: a pickup delay (never below zero), a handler's run, a statement", async () => {
    const { metrics, points, prom } = setup();
    metrics.started("t", 1_500);
    // A run_at a little in the worker's future (clocks differ): no delay, not a negative one.
    metrics.started("t", -20);
    metrics.finished("t", "completed", 250, undefined);
    metrics.finished("t", "retried", 100, "timeout");
    // An attempt whose handler never ran (lost before it started) is counted, but has no run time.
    metrics.finished("t", "dead", undefined, "lost");
    metrics.statement("claim", 40, undefined);
    metrics.statement("complete", 5, "57P01");

    const pickup = histogramOf((await points("picket.job.pickup_delay"))[0]);
    expect({ sum: pickup.sum, count: pickup.count, min: pickup.min }).toEqual({ sum: 1.5, count: 2, min: 0 });
    const processed = await points("messaging.process.duration");
    expect(processed.map((p) => [p.attributes, histogramOf(p).sum])).toEqual([
      [{ "messaging.system": "picket", "messaging.destination.name": "t" }, 0.25],
      [{ "messaging.system": "picket", "messaging.destination.name": "t", "error.type": "timeout" }, 0.1],
    ]);
    const outcomes = await points("picket.job.outcomes");
    expect(outcomes.map((p) => [p.attributes["picket.outcome"], p.value])).toEqual([["completed", 1], ["retried", 1], ["dead", 1]]);
    const operations = await points("messaging.client.operation.duration");
    expect(operations.map((p) => [p.attributes, histogramOf(p).sum])).toEqual([
      [{ "messaging.system": "picket", "messaging.operation.name": "claim" }, 0.04],
      [{ "messaging.system": "picket", "messaging.operation.name": "complete", "error.type": "57P01" }, 0.005],
    ]);

    const samples = await prom();
    const t = { messaging_system: "picket", messaging_destination_name: "t" };
    expect([total(samples, "picket_job_pickup_delay_seconds_sum", t), total(samples, "picket_job_pickup_delay_seconds_count", t)]).toEqual([1.5, 2]);
    expect(total(samples, "messaging_process_duration_seconds_sum", { ...t, error_type: "" })).toBe(0.25);
    expect(total(samples, "messaging_process_duration_seconds_sum", { ...t, error_type: "timeout" })).toBe(0.1);
    expect(total(samples, "messaging_process_duration_seconds_count", t)).toBe(2);
    expect(total(samples, "messaging_client_operation_duration_seconds_sum", { messaging_operation_name: "claim", error_type: "" })).toBe(0.04);
    expect(total(samples, "messaging_client_operation_duration_seconds_sum", { messaging_operation_name: "complete", error_type: "57P01" })).toBe(0.005);
    expect(total(samples, "picket_job_outcomes_total", { ...t, picket_outcome: "dead" })).toBe(1);
  });

  it("timed: a statement's time whether it succeeds or fails, and a failure's type from its code, else its name, else 'error'", async () => {
    const { metrics, points } = setup();
    expect(await metrics.timed("claim", async () => (await sleep(30), 7))).toBe(7);
    const refused = Object.assign(new Error("deadlock detected"), { code: "40P01" });
    expect(await rejectionOf(metrics.timed("complete", async () => (await sleep(30), Promise.reject(refused))))).toBe(refused);
    expect(await rejectionOf(metrics.timed("renew", async () => Promise.reject(new TypeError("no"))))).toBeInstanceOf(TypeError);
    // Something thrown that is not an Error at all.
    expect(await rejectionOf(metrics.timed("sweep", async () => Promise.reject(null)))).toBe(null);

    const operations = await points("messaging.client.operation.duration");
    const of = (operation: string) => withAttributes(operations, { "messaging.operation.name": operation }).map((p) => [p.attributes["error.type"], histogramOf(p).sum]);
    for (const operation of ["claim", "complete"]) {
      const timings = of(operation);
      expect(timings, operation).toHaveLength(1);
      const [errorType, seconds] = timings[0] as [string | undefined, number];
      expect(errorType, operation).toBe(operation === "claim" ? undefined : "40P01");
      // Thirty milliseconds as seconds: not a duration measured from the wrong end.
      expect(seconds, operation).toBeGreaterThanOrEqual(0.025);
      expect(seconds, operation).toBeLessThan(10);
    }
    expect(of("renew").map(([errorType]) => errorType)).toEqual(["TypeError"]);
    expect(of("sweep").map(([errorType]) => errorType)).toEqual(["error"]);
  });

  it("the held gauge: nothing before a source is set, then only what the source holds at each collection", async () => {
    const { metrics, points, prom } = setup();
    expect((await prom()).filter((s) => s.name === "picket_jobs_held")).toEqual([]);
    expect(await points("picket.jobs.held")).toEqual([]);

    let held: HeldCounts = { running: new Map([["a", 2]]), waiting: new Map([["b", 1]]) };
    metrics.observeHeld(() => held);
    const read = async () => ({
      prom: (await prom()).filter((s) => s.name === "picket_jobs_held").map((s) => [s.labels.messaging_destination_name, s.labels.picket_state, s.value]),
      otel: (await points("picket.jobs.held")).map((p) => [p.attributes["messaging.destination.name"], p.attributes["picket.state"], p.value]),
    });
    expect(await read()).toEqual({ prom: [["a", "running", 2], ["b", "waiting", 1]], otel: [["a", "running", 2], ["b", "waiting", 1]] });
    // b's job started and a's finished: b no longer waits. Prometheus loses the series that are
    // gone; OpenTelemetry's SDK would go on exporting their last value, so they read zero there.
    held = { running: new Map([["b", 1]]), waiting: new Map() };
    const now = await read();
    expect(now.prom).toEqual([["b", "running", 1]]);
    expect(now.otel).toEqual(expect.arrayContaining([["a", "running", 0], ["b", "waiting", 0], ["b", "running", 1]]));
    expect(now.otel).toHaveLength(3);
  });

  it("the depth gauge: one query for collectors that ask at once, a new one for the next, only its rows, nothing when the query fails", async () => {
    const { metrics, points, prom, reader } = setup();
    // No source yet (a worker before it has a pool): no depth, and no error.
    expect((await prom()).filter((s) => s.name === "picket_queue_depth")).toEqual([]);

    let asked = 0;
    let rows: QueueDepthRow[] = [{ type: "a", state: "ready", count: 3 }, { type: "b", state: "retrying", count: 1 }];
    let answer: () => Promise<QueueDepthRow[]> = async () => (await sleep(20), rows);
    metrics.observeDepth(() => (asked++, answer()));
    const depth = (samples: Awaited<ReturnType<typeof prom>>) =>
      samples.filter((s) => s.name === "picket_queue_depth").map((s) => [s.labels.messaging_destination_name, s.labels.picket_state, s.value]);

    // A scrape during an export: the two share one query.
    const [scraped, collected] = await Promise.all([prom(), reader.collect()]);
    expect(asked).toBe(1);
    expect(depth(scraped)).toEqual([["a", "ready", 3], ["b", "retrying", 1]]);
    expect(collected.errors).toEqual([]);
    // The next scrape asks again, and shows only what the table holds now.
    rows = [{ type: "a", state: "processing", count: 2 }];
    expect(depth(await prom())).toEqual([["a", "processing", 2]]);
    expect(asked).toBe(2);
    const otelDepth = async () => (await points("picket.queue.depth")).map((p) => [p.attributes["messaging.destination.name"], p.attributes["picket.state"], p.value]);
    // What drained reads zero in OpenTelemetry (whose SDK would otherwise repeat its last value).
    const drained = [["a", "ready", 0], ["b", "retrying", 0], ["a", "processing", 2]];
    expect(await otelDepth()).toEqual(expect.arrayContaining(drained));
    expect(await otelDepth()).toHaveLength(3);

    // The database does not answer: the collectors get no depth rather than an error, and no
    // zeros (the depth is unknown, not zero): OpenTelemetry's SDK repeats the last values it had.
    answer = () => Promise.reject(new Error("connection refused"));
    expect(depth(await prom())).toEqual([]);
    expect(await otelDepth()).toEqual(expect.arrayContaining(drained));
    // And once it answers again, so does the gauge.
    rows = [{ type: "a", state: "processing", count: 1 }];
    answer = async () => rows;
    expect(depth(await prom())).toEqual([["a", "processing", 1]]);
    expect(await otelDepth()).toEqual(expect.arrayContaining([["a", "processing", 1], ["a", "ready", 0]]));
  });
});
