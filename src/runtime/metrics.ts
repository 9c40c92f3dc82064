// What a worker measures, recorded the two ways users collect metrics: through the OpenTelemetry
// API (the user's SDK collects them; without one the API's meter does nothing) and in a
// prom-client registry, served as Prometheus text at /metrics on the health server.
//
// Names and attributes follow OpenTelemetry's semantic conventions for messaging where one
// applies (a task is the destination, a claim a receive, a handler's run a process); the rest
// are picket's own. In Prometheus the names are the same with dots as underscores and the unit
// as a suffix, as OpenTelemetry's Prometheus exporter would write them:
//
// | OpenTelemetry | Prometheus | kind | attributes |
// | --- | --- | --- | --- |
// | messaging.client.consumed.messages | messaging_client_consumed_messages_total | counter | destination |
// | picket.job.outcomes | picket_job_outcomes_total | counter | destination, picket.outcome |
// | messaging.process.duration (s) | messaging_process_duration_seconds | histogram | destination, error.type |
// | picket.job.pickup_delay (s) | picket_job_pickup_delay_seconds | histogram | destination |
// | messaging.client.operation.duration (s) | messaging_client_operation_duration_seconds | histogram | messaging.operation.name, error.type |
// | picket.jobs.held | picket_jobs_held | gauge | destination, picket.state (running, waiting) |
// | picket.queue.depth | picket_queue_depth | gauge | destination, picket.state (ready, scheduled, retrying, waiting, processing) |
// | picket.flows | picket_flows | gauge | picket.state (running, completed, failed, cancelled) |
//
// Every metric also carries messaging.system = "picket".
import { metrics as otel, type Attributes, type MeterProvider, type ObservableResult, ValueType } from "@opentelemetry/api";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { JobHistogram, type HistogramChild } from "./job-histogram.ts";
import type { FlowCount, QueueDepthRow } from "../db/index.ts";
import type { JobOutcome } from "../machines/job-machine.ts";

export interface MetricsOptions {
  /** Where the OpenTelemetry instruments come from; default the global provider (your SDK's, once registered). */
  meterProvider?: MeterProvider;
  /**
   * A prom-client registry to add picket's metrics to (your service's own). Default: a registry of
   * picket's own, served at /metrics by the health server.
   */
  registry?: Registry;
}

/** What the worker holds right now, per task. */
export interface HeldCounts {
  running: ReadonlyMap<string, number>;
  waiting: ReadonlyMap<string, number>;
}

// Seconds: a no-op job takes microseconds, a statement a millisecond, a slow handler minutes.
const DURATION_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

const SYSTEM = "picket";

const FLOWS_HELP = "Flows in the table, by state: running, completed, failed, cancelled (finished ones until retention removes them)";

interface TaskInstruments {
  attributes: Attributes;
  consumed: { inc(value: number): void };
  pickup: HistogramChild;
  outcomes: Map<JobOutcome, CountedOutcome>;
  process: Map<string, { attributes: Attributes; prom: HistogramChild }>;
}

/**
 * A task's outcome as counted: jobs add to `pending`, and the counter takes the sum when it is
 * read (its collect), so a job costs an addition, not a prom-client label lookup.
 */
interface CountedOutcome {
  attributes: Attributes;
  prom: { inc(value: number): void };
  pending: number;
}

type Observation = [value: number, attributes: Attributes];

/**
 * A read a gauge's collectors share: those that ask at once (a scrape during an export) share one
 * query; one that asks while the database does not answer gets undefined rather than an error.
 * Without a source (no worker started yet) it reads nothing.
 */
class SharedRead<T extends unknown[]> {
  source: (() => Promise<T>) | undefined;
  private inFlight: Promise<T | undefined> | undefined;

  read(): Promise<T | undefined> {
    if (this.source === undefined) return Promise.resolve([] as unknown as T);
    this.inFlight ??= this.source()
      .catch(() => undefined)
      .finally(() => (this.inFlight = undefined));
    return this.inFlight;
  }
}

/**
 * The series an OpenTelemetry gauge has reported. The SDK goes on exporting a cumulative gauge's
 * last value for a series its callback no longer observes, so a task whose jobs all ran would
 * show its old depth for ever: a series that is gone is observed as zero instead (Prometheus's
 * gauges reset, and lose the series). Bounded by tasks × states.
 */
class GaugeSeries {
  private readonly seen = new Map<string, Attributes>();

  observe(result: ObservableResult, now: Observation[]): void {
    const current = new Set<string>();
    for (const [value, attributes] of now) {
      const key = JSON.stringify(attributes);
      current.add(key);
      this.seen.set(key, attributes);
      result.observe(value, attributes);
    }
    for (const [key, attributes] of this.seen) if (!current.has(key)) result.observe(0, attributes);
  }
}

export class WorkerMetrics {
  /** The registry /metrics serves. */
  readonly registry: Registry;
  private readonly otel;
  private readonly prom;
  private heldSource: () => HeldCounts = () => ({ running: new Map(), waiting: new Map() });
  private readonly depthRead = new SharedRead<QueueDepthRow[]>();
  private readonly flowsRead = new SharedRead<FlowCount[]>();
  private readonly tasks = new Map<string, TaskInstruments>();

  constructor(options: MetricsOptions = {}) {
    this.registry = options.registry ?? new Registry();
    const registers = [this.registry];
    const meter = (options.meterProvider ?? otel.getMeterProvider()).getMeter("picket");
    const seconds = { unit: "s", advice: { explicitBucketBoundaries: DURATION_BUCKETS } };
    this.otel = {
      consumed: meter.createCounter("messaging.client.consumed.messages", { description: "Jobs claimed", unit: "{message}", valueType: ValueType.INT }),
      outcomes: meter.createCounter("picket.job.outcomes", { description: "Jobs whose attempt ended, by outcome", unit: "{job}", valueType: ValueType.INT }),
      process: meter.createHistogram("messaging.process.duration", { description: "How long a job's handler ran", ...seconds }),
      pickup: meter.createHistogram("picket.job.pickup_delay", { description: "From a job's run_at to its start in a worker", ...seconds }),
      operation: meter.createHistogram("messaging.client.operation.duration", { description: "How long picket's claim and outcome statements took", ...seconds }),
    };
    const heldSeries = new GaugeSeries();
    meter.createObservableGauge("picket.jobs.held", { description: "Jobs this worker holds: running, or waiting in its buffer for a slot", unit: "{job}", valueType: ValueType.INT }).addCallback((result) => {
      const now = Object.entries(this.heldSource()).flatMap(([state, counts]) => [...counts].map(([type, n]): Observation => [n, this.attributes(type, { "picket.state": state })]));
      heldSeries.observe(result, now);
    });
    const depthSeries = new GaugeSeries();
    meter.createObservableGauge("picket.queue.depth", { description: "Live jobs in the table, by task and state: ready, scheduled, retrying, waiting, processing", unit: "{job}", valueType: ValueType.INT }).addCallback(async (result) => {
      // Unknown while the database does not answer: no observation, not zeros.
      const rows = await this.depthRead.read();
      if (rows !== undefined) depthSeries.observe(result, rows.map((row): Observation => [row.count, this.attributes(row.type, { "picket.state": row.state })]));
    });
    const flowSeries = new GaugeSeries();
    meter.createObservableGauge("picket.flows", { description: FLOWS_HELP, unit: "{flow}", valueType: ValueType.INT }).addCallback(async (result) => {
      const rows = await this.flowsRead.read();
      if (rows !== undefined) flowSeries.observe(result, rows.map((row): Observation => [row.count, { "messaging.system": SYSTEM, "picket.state": row.status }]));
    });

    const heldSource = () => this.heldSource();
    const depth = () => this.depthRead.read();
    const flows = () => this.flowsRead.read();
    this.prom = {
      consumed: new Counter({ name: "messaging_client_consumed_messages_total", help: "Jobs claimed", labelNames: ["messaging_system", "messaging_destination_name"], registers }),
      outcomes: new Counter({
        name: "picket_job_outcomes_total",
        help: "Jobs whose attempt ended, by outcome",
        labelNames: ["messaging_system", "messaging_destination_name", "picket_outcome"],
        registers,
        collect: () => this.countOutcomes(),
      }),
      // Observed once per job: JobHistogram, whose observation costs no label lookup.
      process: new JobHistogram<"messaging_system" | "messaging_destination_name" | "error_type">({ name: "messaging_process_duration_seconds", help: "How long a job's handler ran", buckets: DURATION_BUCKETS, registers }),
      pickup: new JobHistogram<"messaging_system" | "messaging_destination_name">({ name: "picket_job_pickup_delay_seconds", help: "From a job's run_at to its start in a worker", buckets: DURATION_BUCKETS, registers }),
      operation: new Histogram({ name: "messaging_client_operation_duration_seconds", help: "How long picket's claim and outcome statements took", labelNames: ["messaging_system", "messaging_operation_name", "error_type"], buckets: DURATION_BUCKETS, registers }),
    };
    new Gauge({
      name: "picket_jobs_held",
      help: "Jobs this worker holds: running, or waiting in its buffer for a slot",
      labelNames: ["messaging_system", "messaging_destination_name", "picket_state"],
      registers,
      collect() {
        this.reset();
        for (const [state, counts] of Object.entries(heldSource())) for (const [type, n] of counts) this.set({ messaging_system: SYSTEM, messaging_destination_name: type, picket_state: state }, n);
      },
    });
    new Gauge({
      name: "picket_queue_depth",
      help: "Live jobs in the table, by task and state: ready, scheduled, retrying, waiting, processing",
      labelNames: ["messaging_system", "messaging_destination_name", "picket_state"],
      registers,
      async collect() {
        const rows = await depth();
        this.reset();
        for (const row of rows ?? []) this.set({ messaging_system: SYSTEM, messaging_destination_name: row.type, picket_state: row.state }, row.count);
      },
    });
    new Gauge({
      name: "picket_flows",
      help: FLOWS_HELP,
      labelNames: ["messaging_system", "picket_state"],
      registers,
      async collect() {
        const rows = await flows();
        this.reset();
        for (const row of rows ?? []) this.set({ messaging_system: SYSTEM, picket_state: row.status }, row.count);
      },
    });
  }

  /** Where the held-jobs gauge reads from. */
  observeHeld(source: () => HeldCounts): void {
    this.heldSource = source;
  }

  /** Where the depth gauge reads from: one query, run when a collector asks (a scrape, an export). */
  observeDepth(source: () => Promise<QueueDepthRow[]>): void {
    this.depthRead.source = source;
  }

  /** Where the flows gauge reads from, as the depth gauge does. */
  observeFlows(source: () => Promise<FlowCount[]>): void {
    this.flowsRead.source = source;
  }

  claimed(type: string, count: number): void {
    const task = this.task(type);
    this.otel.consumed.add(count, task.attributes);
    task.consumed.inc(count);
  }

  /** A job got its slot: `pickupMs` since it became ready (its run_at). */
  started(type: string, pickupMs: number): void {
    const task = this.task(type);
    const s = Math.max(0, pickupMs) / 1000;
    this.otel.pickup.record(s, task.attributes);
    task.pickup.observe(s);
  }

  /** A job's machine ended; `handlerMs` when its handler ran, `errorKind` when the attempt failed. */
  finished(type: string, outcome: JobOutcome, handlerMs: number | undefined, errorKind: string | undefined): void {
    const task = this.task(type);
    const counted = task.outcomes.get(outcome) ?? this.outcomeOf(task, type, outcome);
    this.otel.outcomes.add(1, counted.attributes);
    counted.pending++;
    if (handlerMs === undefined) return;
    const s = handlerMs / 1000;
    const kind = errorKind ?? "";
    const timed = task.process.get(kind) ?? this.processOf(task, type, kind);
    this.otel.process.record(s, timed.attributes);
    timed.prom.observe(s);
  }

  /** One of picket's statements ended (claim, complete, fail, renew, sweep): `errorType` when it failed. */
  statement(operation: string, ms: number, errorType: string | undefined): void {
    const s = ms / 1000;
    this.otel.operation.record(s, { "messaging.system": SYSTEM, "messaging.operation.name": operation, ...(errorType === undefined ? {} : { "error.type": errorType }) });
    this.prom.operation.observe({ messaging_system: SYSTEM, messaging_operation_name: operation, error_type: errorType ?? "" }, s);
  }

  /** Times `run` as the statement `operation`. */
  async timed<A>(operation: string, run: () => Promise<A>): Promise<A> {
    const start = performance.now();
    try {
      const result = await run();
      this.statement(operation, performance.now() - start, undefined);
      return result;
    } catch (error) {
      this.statement(operation, performance.now() - start, (error as { code?: string })?.code ?? (error as Error)?.name ?? "error");
      throw error;
    }
  }

  // Per task (and outcome, and error kind): the attribute objects and prom-client children made
  // once, so a job's records cost no label hashing and no allocation.
  private task(type: string): TaskInstruments {
    let task = this.tasks.get(type);
    if (task === undefined) {
      const labels = { messaging_system: SYSTEM, messaging_destination_name: type };
      task = {
        attributes: this.attributes(type),
        consumed: this.prom.consumed.labels(labels),
        pickup: this.prom.pickup.child(labels),
        outcomes: new Map(),
        process: new Map(),
      };
      this.tasks.set(type, task);
    }
    return task;
  }

  private outcomeOf(task: TaskInstruments, type: string, outcome: JobOutcome): CountedOutcome {
    const made = {
      attributes: this.attributes(type, { "picket.outcome": outcome }),
      prom: this.prom.outcomes.labels({ messaging_system: SYSTEM, messaging_destination_name: type, picket_outcome: outcome }),
      pending: 0,
    };
    task.outcomes.set(outcome, made);
    return made;
  }

  private processOf(task: TaskInstruments, type: string, kind: string) {
    const made = {
      attributes: this.attributes(type, kind === "" ? {} : { "error.type": kind }),
      prom: this.prom.process.child({ messaging_system: SYSTEM, messaging_destination_name: type, error_type: kind }),
    };
    task.process.set(kind, made);
    return made;
  }

  /** The outcomes counted since the counter was last read, added to it. */
  private countOutcomes(): void {
    for (const task of this.tasks.values()) {
      for (const counted of task.outcomes.values()) {
        if (counted.pending > 0) counted.prom.inc(counted.pending);
        counted.pending = 0;
      }
    }
  }

  private attributes(type: string, more: Attributes = {}): Attributes {
    return { "messaging.system": SYSTEM, "messaging.destination.name": type, ...more };
  }
}
