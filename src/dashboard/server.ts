// The dashboard's HTTP side, on Effect's HTTP router (as the health server): the page, a JSON
// snapshot, a server-sent-event stream of snapshots, a job's full row, the two machines' configs,
// and the admin actions, which are picket's fenced admin statements. Everything it shows comes
// from the database, so one dashboard sees every worker on every host.
//
// Served by `picket dashboard` (loopback by default), or mounted in a service behind its own
// auth through createDashboardHandler (a fetch-style handler). Write actions need the token the
// dashboard was given; without one they are refused.
import type { Server } from "node:http";
import * as Effect from "effect/Effect";
import * as Layer from "effect/Layer";
import * as Stream from "effect/Stream";
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http";
import {
  applyBulk,
  BULK_STATES,
  browseJobs,
  countBulk,
  cancelFlow,
  cancelJob,
  dashboardSnapshot,
  deleteFinishedJob,
  flowGraph,
  getJob,
  getWorker,
  InvalidConfigError,
  InvalidJobError,
  isJobId,
  jobsHeldBy,
  jobHistory,
  jobSteps,
  listFlows,
  pauseClaims,
  pauseSchedule,
  resumeClaims,
  resumeSchedule,
  retryDeadJob,
  runJobNow,
  triggerSchedule,
  type AdminAction,
  type AdminOptions,
  type AdminResult,
  type BrowseFilter,
  type BulkFilter,
  type BulkResult,
  type PauseResult,
  type PauseTarget,
  type ResumeResult,
  type Queryable,
  type StatementOptions,
} from "../db/index.ts";
import { checkOperatorName } from "../db/job-history.ts";
import {
  cancelWorkflow,
  getWorkflow,
  listWorkflows,
  sendToWorkflow,
  workflowCounts,
  workflowHistory,
  workflowJobs,
  workflowMachine,
  WorkflowFinishedError,
  WorkflowNotFoundError,
  type Workflow,
  type WorkflowStatus,
} from "../db/workflows.ts";
import { jobMachine, machineConfig, supervisorMachine } from "../machines/index.ts";
import { createLogger, type Logger } from "../runtime/logger.ts";
import { nodeListener, serveFetchHandler } from "../runtime/serve-fetch.ts";
import { bearerToken, hostName, loopbackHosts, requestHost, tokenRefusal } from "./access.ts";
import { bulkMessage, jobActionMessage, pauseMessage, resumeMessage, scheduleMessage, workflowCancelMessage, workflowSendMessage } from "./action-words.ts";
import { ASSETS, assetText } from "./assets.ts";
import { LiveFeed } from "./live-feed.ts";
import { DASHBOARD_PAGE } from "./page.ts";

export interface DashboardOptions {
  /** Where picket's tables are (a pool of the caller's, or of `picket dashboard`). */
  db: Queryable;
  /** Schema and statement bounds, as for any picket statement. */
  statements?: StatementOptions;
  /** Write actions (retry, cancel, run now, delete, pause) need `Authorization: Bearer <token>`; without a token they are refused. */
  token?: string;
  /**
   * Reads need the token too: every route but the page itself (which holds no data). The live
   * stream takes it as `?token=` (a browser's EventSource sends no headers).
   */
  tokenForReads?: boolean;
  /**
   * The Host header values (names or addresses, without the port) requests must carry; others get
   * 403. A page on another site that rebinds its DNS name to 127.0.0.1 reaches a loopback
   * dashboard with its own name as Host, so this is what keeps such a page from reading it.
   * serveDashboard always checks: localhost, the loopback addresses and the address it listens on,
   * plus these. createDashboardHandler checks only when given (the service's own routing decides).
   */
  allowedHosts?: readonly string[];
  /** How often the live stream sends a snapshot; default 1000 ms. */
  intervalMs?: number;
  /** Where each write action is logged (what, on what, by whom, with what outcome); default picket's logger. */
  logger?: Logger;
}

const json = (body: unknown, status = 200) => HttpServerResponse.jsonUnsafe(body, { status });

// A file the page loads. Revalidated on each load: the components change with picket's version.
const asset = (path: `/assets/${string}`) =>
  Effect.sync(() => HttpServerResponse.text(assetText(path), { contentType: ASSETS.get(path)!.contentType, headers: { "cache-control": "no-cache" } }));

/** A statement's failure as the page shows it: what went wrong, in the database's words. */
const failure = (error: unknown) => json({ error: error instanceof Error ? error.message : String(error) }, 503);

/**
 * A statement run for a route: its result, or the response that says why it failed: 400 with
 * picket's words for a value it refuses (a filter, a name, who asked), 503 with the database's own.
 * (The error itself is kept: Effect.tryPromise without a catch wraps it in one that says only "An
 * error occurred in Effect.tryPromise", which is what the page showed.)
 */
const attempt = <A>(run: () => Promise<A>): Effect.Effect<A | HttpServerResponse.HttpServerResponse> =>
  Effect.tryPromise({ try: run, catch: (error) => error }).pipe(
    Effect.catch((error) =>
      Effect.succeed(error instanceof InvalidConfigError || error instanceof InvalidJobError ? json({ error: error.message }, 400) : failure(error)),
    ),
  );

/** A statement run for a read: `respond` with its result, or the response that says why it failed. */
const answered = <A extends object | number | null>(run: () => Promise<A>, respond: (result: A) => HttpServerResponse.HttpServerResponse) =>
  attempt(run).pipe(Effect.map((result) => (HttpServerResponse.isHttpServerResponse(result) ? result : respond(result as A))));

/** A job route's id that is no job id: the caller's mistake (400), not the database's (503). */
const badJobId = (id: string | undefined) => json({ error: `job id must be a positive integer (got ${JSON.stringify(id ?? "")})` }, 400);

/** A workflow route's id that is no id (400), as a flow's. */
const badWorkflowId = (id: string | undefined) => json({ error: `workflow id must be a positive integer (got ${JSON.stringify(id ?? "")})` }, 400);

/**
 * A workflow as its list shows it: enough to pick it out. Its context and output (a job's payload
 * and result, as it were) are on its page, as a job's are on the job's page.
 */
const listed = ({ context: _context, output: _output, tasks: _tasks, ...workflow }: Workflow) => workflow;

/** Most bytes of an event a send takes (its JSON text). */
const MAX_EVENT_BYTES = 1_000_000;

const BY_HEADER = "x-picket-by";

/**
 * Who an action names in the job's history and the log: "dashboard", or "dashboard: <name>" when
 * the page says who is at it (its "your name" field, sent URI-encoded in x-picket-by). The token is
 * shared, so the name is what the person typed, not a proof.
 */
const actorOf = (request: HttpServerRequest.HttpServerRequest): { by: string } | { error: string } => {
  const raw = request.headers[BY_HEADER];
  if (raw === undefined || raw === "") return { by: "dashboard" };
  try {
    const by = `dashboard: ${decodeURIComponent(raw)}`;
    checkOperatorName(by);
    return { by };
  } catch (error) {
    return { error: error instanceof Error && !(error instanceof URIError) ? error.message : `${BY_HEADER} must be a URI-encoded name (got ${JSON.stringify(raw.slice(0, 40))})` };
  }
};

/** A time in a query: ISO 8601 text, or undefined when absent or empty; anything else is the caller's mistake. */
const queryTime = (query: URLSearchParams, name: string): Date | undefined | string => {
  const text = query.get(name);
  if (text === null || text === "") return undefined;
  const time = new Date(text);
  return Number.isNaN(time.getTime()) ? `${name} must be a time like 2026-01-02T03:04:05Z (got ${JSON.stringify(text.slice(0, 40))})` : time;
};

/** The job browser's filter from a request's query (?state=dead&task=…); a string says what is wrong. */
const browseFilterOf = (request: HttpServerRequest.HttpServerRequest): BrowseFilter | string => {
  const query = new URL(request.url, "http://dashboard").searchParams;
  const filter: Record<string, unknown> = { state: query.get("state") ?? "ready" };
  for (const name of ["task", "queue", "worker", "key", "text", "order", "after"] as const) {
    const value = query.get(name);
    if (value !== null && value !== "") filter[name] = value;
  }
  const limit = query.get("limit");
  if (limit !== null && limit !== "") filter.limit = Number(limit);
  for (const name of ["from", "to"] as const) {
    const time = queryTime(query, name);
    if (typeof time === "string") return time;
    if (time !== undefined) filter[name] = time;
  }
  return filter as unknown as BrowseFilter;
};

/** A bulk action's filter from a request's query (?state=dead&task=…&before=…); a string says what is wrong. */
const bulkFilterOf = (request: HttpServerRequest.HttpServerRequest): BulkFilter | string => {
  const query = new URL(request.url, "http://dashboard").searchParams;
  const filter: Record<string, unknown> = { state: query.get("state") ?? "" };
  for (const name of ["task", "queue"] as const) {
    const value = query.get(name);
    if (value !== null && value !== "") filter[name] = value;
  }
  const before = queryTime(query, "before");
  if (typeof before === "string") return before;
  if (before !== undefined) filter.before = before;
  return filter as unknown as BulkFilter;
};

const isBulkAction = (action: string | undefined): action is AdminAction => action !== undefined && Object.hasOwn(BULK_STATES, action);

/** The pause target a request's query names: ?queue=<name> or ?task=<name>. */
const pauseTargetOf = (request: HttpServerRequest.HttpServerRequest): PauseTarget | undefined => {
  const query = new URL(request.url, "http://dashboard").searchParams;
  const queue = query.get("queue");
  const task = query.get("task");
  if (queue !== null && task === null) return { queue };
  if (task !== null && queue === null) return { task };
  return undefined;
};

/** The dashboard's routes, as a Layer for HttpRouter.serve or HttpRouter.toWebHandler. */
export const dashboardRoutes = (options: DashboardOptions) => {
  const { db, token } = options;
  const allowed = options.allowedHosts === undefined ? undefined : new Set(options.allowedHosts.map((host) => hostName(host)));
  const statements = options.statements ?? {};
  const logger = options.logger ?? createLogger();

  /**
   * Every route's first check: the Host header (when the dashboard has a list), then, for reads
   * when they need it, the token. Refusals say what to change.
   */
  const guarded = <E, R>(route: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>, read: boolean) =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest;
      if (allowed !== undefined) {
        const header = requestHost(request);
        const host = hostName(header);
        if (host === undefined || !allowed.has(host)) {
          return json(
            { error: `this dashboard does not answer for the host ${JSON.stringify(header ?? "")}: open it as ${[...allowed].join(", ")}, or add the name you use (picket dashboard --allowed-host <name>, or allowedHosts)` },
            403,
          );
        }
      }
      if (read && options.tokenForReads === true) {
        if (token === undefined) return json({ error: "reads need the dashboard's token, and none was given: start it with --token (or PICKET_DASHBOARD_TOKEN)" }, 403);
        const given = bearerToken(request) ?? new URL(request.url, "http://dashboard").searchParams.get("token") ?? undefined;
        const refused = tokenRefusal(given, token, "reading this dashboard");
        if (refused !== undefined) return json({ error: refused }, 401);
      }
      return yield* route;
    });
  const intervalMs = options.intervalMs ?? 1_000;
  const snapshot = () => dashboardSnapshot(db, statements);

  // One snapshot per interval while any page is open, whatever their number; a failed one is sent
  // as an error event, and the stream goes on (the database may come back).
  const feed = new LiveFeed(
    () =>
      snapshot().then(
        (body) => `event: snapshot\ndata: ${JSON.stringify(body)}\n\n`,
        (error: unknown) => `event: failure\ndata: ${JSON.stringify({ error: error instanceof Error ? error.message : String(error) })}\n\n`,
      ),
    intervalMs,
  );

  /**
   * A write action: the token, then who is asking, then the write; its outcome is logged and
   * answered with words for the page (`message`) beside the outcome a script reads. An outcome
   * other than "applied" is a conflict (409): nothing was done.
   */
  const write = <A extends { outcome: string }>(what: string, run: (request: HttpServerRequest.HttpServerRequest, by: string) => Effect.Effect<HttpServerResponse.HttpServerResponse | { result: A; message: string; on: string }, never, HttpRouter.RouteContext>) =>
    guarded(
      Effect.gen(function* () {
        const request = yield* HttpServerRequest.HttpServerRequest;
        if (token === undefined) return json({ error: "write actions are off: start the dashboard with a token (picket dashboard --token, or PICKET_DASHBOARD_TOKEN)" }, 403);
        const refused = tokenRefusal(bearerToken(request), token, `this action (${what})`);
        if (refused !== undefined) return json({ error: refused }, 401);
        const actor = actorOf(request);
        if ("error" in actor) return json({ error: actor.error }, 400);
        const done = yield* run(request, actor.by);
        if (HttpServerResponse.isHttpServerResponse(done)) return done;
        logger.info({ action: what, on: done.on, by: actor.by, outcome: done.result.outcome }, "dashboard action");
        return json({ ...done.result, message: done.message }, done.result.outcome === "applied" ? 200 : 409);
      }),
      false,
    );

  const jobAction = (action: AdminAction, run: (db: Queryable, id: string, options: AdminOptions) => Promise<AdminResult>) =>
    write<AdminResult>(action, (_request, by) =>
      Effect.gen(function* () {
        const { id } = yield* HttpRouter.params;
        if (id === undefined || !isJobId(id)) return badJobId(id);
        return yield* attempt(async () => {
          const result = await run(db, id, { ...statements, by });
          return { result, message: jobActionMessage(action, id, result), on: `job ${id}` };
        });
      }),
    );

  const pauseAction = (action: "pause" | "resume") =>
    write<PauseResult | ResumeResult>(action, (request, by) => {
      const target = pauseTargetOf(request);
      if (target === undefined) return Effect.succeed(json({ error: `say what to ${action}: ?queue=<name> or ?task=<name>, one of them` }, 400));
      const on = "queue" in target ? `queue ${target.queue}` : `task ${target.task}`;
      const run = async () =>
        action === "pause"
          ? ((result) => ({ result, message: pauseMessage(target, result), on }))(await pauseClaims(db, target, { ...statements, by }))
          : ((result) => ({ result, message: resumeMessage(target, result), on }))(await resumeClaims(db, target, statements));
      // A name no job could have is the caller's mistake, said as enqueue says it.
      return attempt(run);
    });

  // A schedule's pause, resume or trigger, named by ?name=.
  const scheduleAction = (action: "pause" | "resume" | "trigger") =>
    write<{ outcome: string }>(`schedule ${action}`, (request, by) => {
      const name = new URL(request.url, "http://dashboard").searchParams.get("name");
      if (name === null || name === "") return Effect.succeed(json({ error: `say which schedule to ${action}: ?name=<schedule>` }, 400));
      const run = async () => {
        if (action === "trigger") {
          const id = await triggerSchedule(db, name, { ...statements, by });
          return { result: { outcome: id === null ? "not_found" : "applied", job: id }, message: scheduleMessage(action, name, id === null ? "not_found" : "applied", id), on: `schedule ${name}` };
        }
        const result = action === "pause" ? await pauseSchedule(db, name, { ...statements, by }) : await resumeSchedule(db, name, statements);
        return { result, message: scheduleMessage(action, name, result.outcome, null), on: `schedule ${name}` };
      };
      return attempt(run);
    });

  return Layer.mergeAll(
    HttpRouter.add("GET", "/", guarded(Effect.succeed(HttpServerResponse.html(DASHBOARD_PAGE)), false)),
    // Browsers ask for it: no icon, rather than a 404 in their console.
    HttpRouter.add("GET", "/favicon.ico", guarded(Effect.succeed(HttpServerResponse.empty({ status: 204 })), false)),
    ...[...ASSETS.keys()].map((path) => HttpRouter.add("GET", path, guarded(asset(path), false))),
    HttpRouter.add(
      "GET",
      "/api/history",
      guarded(
        Effect.gen(function* () {
          const range = new URL((yield* HttpServerRequest.HttpServerRequest).url, "http://dashboard").searchParams.get("range") ?? "hour";
          if (range !== "hour" && range !== "day") return json({ error: `range is "hour" or "day" (got ${JSON.stringify(range)})` }, 400);
          return yield* answered(() => jobHistory(db, range, statements), (history) => json(history));
        }),
        true,
      ),
    ),
    HttpRouter.add("GET", "/api/machines", guarded(Effect.succeed(json({ job: machineConfig(jobMachine), supervisor: machineConfig(supervisorMachine) })), true)),
    HttpRouter.add("GET", "/api/snapshot", guarded(answered(snapshot, (body) => json(body)), true)),
    HttpRouter.add(
      "GET",
      "/api/events",
      guarded(
        Effect.sync(() =>
          HttpServerResponse.stream(
            Stream.fromAsyncIterable({ [Symbol.asyncIterator]: () => feed.open() }, (error) => error),
            { contentType: "text/event-stream", headers: { "cache-control": "no-cache" } },
          ),
        ),
        true,
      ),
    ),
    HttpRouter.add(
      "GET",
      "/api/jobs",
      guarded(
        Effect.gen(function* () {
          const filter = browseFilterOf(yield* HttpServerRequest.HttpServerRequest);
          if (typeof filter === "string") return json({ error: filter }, 400);
          // A filter browseJobs refuses is the caller's mistake, in its words.
          return yield* answered(() => browseJobs(db, filter, statements), (page) => json(page));
        }),
        true,
      ),
    ),
    HttpRouter.add(
      "GET",
      "/api/workers/:id",
      guarded(Effect.gen(function* () {
        const { id } = yield* HttpRouter.params;
        // A worker's page: its heartbeat (the supervisor machine's state, the jobs it sampled with
        // their machines' states) and the jobs it holds, from the table (age, attempt, progress).
        const read = async () => {
          const worker = await getWorker(db, id ?? "", statements);
          if (worker === null) return null;
          return { worker, jobs: await jobsHeldBy(db, worker.id, statements) };
        };
        return yield* answered(read, (found) => (found === null ? json({ error: `no live worker ${JSON.stringify(id ?? "")}: it stopped, or has not beaten for an hour` }, 404) : json(found)));
      }), true),
    ),
    HttpRouter.add(
      "GET",
      "/api/jobs/:id",
      guarded(Effect.gen(function* () {
        const { id } = yield* HttpRouter.params;
        if (id === undefined || !isJobId(id)) return badJobId(id);
        // The job with its recorded steps: its history as a handler wrote it.
        const read = async () => {
          const job = await getJob(db, id, statements);
          if (job === null) return null;
          // A running job's machine state, as its worker's last heartbeat sampled it.
          const holder = job.status === "processing" && job.lockedBy !== null ? await getWorker(db, job.lockedBy, statements) : null;
          return { ...job, steps: await jobSteps(db, job.id, statements), machineState: holder?.jobs.find((held) => held.id === job.id)?.state ?? null };
        };
        return yield* answered(read, (job) => (job === null ? json({ error: `no job ${id}` }, 404) : json(job)));
      }), true),
    ),
    HttpRouter.add("POST", "/api/jobs/:id/retry", jobAction("retry", retryDeadJob)),
    HttpRouter.add("POST", "/api/jobs/:id/cancel", jobAction("cancel", cancelJob)),
    HttpRouter.add("POST", "/api/jobs/:id/run-now", jobAction("run-now", runJobNow)),
    HttpRouter.add("POST", "/api/jobs/:id/delete", jobAction("delete", deleteFinishedJob)),
    // A bulk action: first its count (what the operator is asked to confirm), then the action on at
    // most that many (?expected=<count>), in batches.
    HttpRouter.add(
      "GET",
      "/api/bulk/:action/count",
      guarded(
        Effect.gen(function* () {
          const { action } = yield* HttpRouter.params;
          if (!isBulkAction(action)) return json({ error: `a bulk action is one of ${Object.keys(BULK_STATES).join(", ")} (got ${JSON.stringify(action ?? "")})` }, 400);
          const filter = bulkFilterOf(yield* HttpServerRequest.HttpServerRequest);
          if (typeof filter === "string") return json({ error: filter }, 400);
          return yield* answered(() => countBulk(db, action, filter, statements), (count) => json({ count }));
        }),
        true,
      ),
    ),
    HttpRouter.add(
      "POST",
      "/api/bulk/:action",
      write<BulkResult & { outcome: string }>("bulk", (request, by) =>
        Effect.gen(function* () {
          const { action } = yield* HttpRouter.params;
          if (!isBulkAction(action)) return json({ error: `a bulk action is one of ${Object.keys(BULK_STATES).join(", ")} (got ${JSON.stringify(action ?? "")})` }, 400);
          const filter = bulkFilterOf(request);
          if (typeof filter === "string") return json({ error: filter }, 400);
          const expected = Number(new URL(request.url, "http://dashboard").searchParams.get("expected"));
          if (!Number.isInteger(expected) || expected < 1) return json({ error: "say how many jobs you confirmed: ?expected=<the count>, from GET api/bulk/<action>/count" }, 400);
          const on = `${expected} ${filter.state} jobs${filter.task ? ` of task ${filter.task}` : ""}${filter.queue ? ` in queue ${filter.queue}` : ""}${filter.before ? ` before ${filter.before.toISOString()}` : ""}`;
          return yield* attempt(async () => {
            const result = await applyBulk(db, action, filter, { ...statements, expected, by });
            return { result: { ...result, outcome: "applied" }, message: bulkMessage(action, result), on: `${action} ${on}` };
          });        }),
      ),
    ),
    // Flows: the newest (?status=, ?before=<id>), one with its jobs and edges, a cancel.
    HttpRouter.add(
      "GET",
      "/api/flows",
      guarded(
        Effect.gen(function* () {
          const query = new URL((yield* HttpServerRequest.HttpServerRequest).url, "http://dashboard").searchParams;
          const filter = { status: query.get("status") || undefined, before: query.get("before") || undefined, limit: 50 } as Parameters<typeof listFlows>[1];
          return yield* answered(() => listFlows(db, filter, statements), (flows) => json({ flows }));
        }),
        true,
      ),
    ),
    HttpRouter.add(
      "GET",
      "/api/flows/:id",
      guarded(Effect.gen(function* () {
        const { id } = yield* HttpRouter.params;
        if (id === undefined || !isJobId(id)) return json({ error: `flow id must be a positive integer (got ${JSON.stringify(id ?? "")})` }, 400);
        return yield* answered(() => flowGraph(db, id, statements), (graph) => (graph === null ? json({ error: `no flow ${id}` }, 404) : json(graph)));
      }), true),
    ),
    HttpRouter.add(
      "POST",
      "/api/flows/:id/cancel",
      write<{ outcome: string; cancelled: number }>("cancel flow", (_request, by) =>
        Effect.gen(function* () {
          const { id } = yield* HttpRouter.params;
          if (id === undefined || !isJobId(id)) return json({ error: `flow id must be a positive integer (got ${JSON.stringify(id ?? "")})` }, 400);
          return yield* attempt(async () => {
            const jobs = await cancelFlow(db, id, { ...statements, by });
            const result = { outcome: jobs.length > 0 ? "applied" : "nothing_live", cancelled: jobs.length };
            const message = jobs.length > 0 ? `flow ${id}: cancelled ${jobs.length} job${jobs.length === 1 ? "" : "s"} and what depended on them` : `flow ${id} has no live job to cancel`;
            return { result, message, on: `flow ${id}` };
          });
        }),
      ),
    ),
    // Workflows: the newest instances (?name=, ?status=, ?before=<id>) with the counts by workflow,
    // status and state; an instance with its machine, its events and the jobs it started; a cancel,
    // and an event sent.
    HttpRouter.add(
      "GET",
      "/api/workflows",
      guarded(
        Effect.gen(function* () {
          const query = new URL((yield* HttpServerRequest.HttpServerRequest).url, "http://dashboard").searchParams;
          const filter = {
            name: query.get("name") || undefined,
            status: (query.get("status") || undefined) as WorkflowStatus | undefined,
            before: query.get("before") || undefined,
            limit: 50,
          };
          const read = async () => {
            const [workflows, counts] = await Promise.all([listWorkflows(db, filter, statements), workflowCounts(db, statements)]);
            return { workflows: workflows.map(listed), counts };
          };
          return yield* answered(read, (body) => json(body));
        }),
        true,
      ),
    ),
    HttpRouter.add(
      "GET",
      "/api/workflows/:id",
      guarded(Effect.gen(function* () {
        const { id } = yield* HttpRouter.params;
        if (id === undefined || !isJobId(id)) return badWorkflowId(id);
        // The machine is the one its worker recorded for the instance's fingerprint: none before a
        // worker applied its start, or when no worker that ran it recorded it.
        const read = async () => {
          const workflow = await getWorkflow(db, id, statements);
          if (workflow === null) return null;
          const [machine, events, jobs] = await Promise.all([
            workflow.fingerprint === null ? null : workflowMachine(db, workflow.name, workflow.fingerprint, statements),
            workflowHistory(db, workflow.id, statements),
            workflowJobs(db, workflow.id, statements),
          ]);
          return { workflow, machine, ...events, jobs };
        };
        return yield* answered(read, (found) => (found === null ? json({ error: `no workflow ${id}` }, 404) : json(found)));
      }), true),
    ),
    HttpRouter.add(
      "POST",
      "/api/workflows/:id/cancel",
      write<{ outcome: string; status?: string; tasks: number }>("cancel workflow", (_request, by) =>
        Effect.gen(function* () {
          const { id } = yield* HttpRouter.params;
          if (id === undefined || !isJobId(id)) return badWorkflowId(id);
          return yield* attempt(async () => {
            const cancelled = await cancelWorkflow(db, id, { ...statements, by });
            if (cancelled.outcome === "not_found") return json({ error: `no workflow ${id}` }, 404);
            const result = { ...cancelled, outcome: cancelled.outcome === "cancelled" ? "applied" : cancelled.outcome };
            return { result, message: workflowCancelMessage(id, result), on: `workflow ${id}` };
          });
        }),
      ),
    ),
    HttpRouter.add(
      "POST",
      "/api/workflows/:id/send",
      write<{ outcome: string; status?: string; eventId?: string }>("send to workflow", (request, by) =>
        Effect.gen(function* () {
          const { id } = yield* HttpRouter.params;
          if (id === undefined || !isJobId(id)) return badWorkflowId(id);
          const text = yield* request.text.pipe(Effect.catch(() => Effect.succeed(undefined)));
          if (text !== undefined && Buffer.byteLength(text) > MAX_EVENT_BYTES) return json({ error: `an event is at most ${MAX_EVENT_BYTES} bytes of JSON` }, 413);
          let event: unknown;
          try {
            event = JSON.parse(text ?? "");
          } catch {
            return json({ error: `send the event as the request's body, JSON such as {"type":"APPROVE"} (got ${JSON.stringify((text ?? "").slice(0, 40))})` }, 400);
          }
          return yield* attempt(async () => {
            const type = typeof (event as { type?: unknown })?.type === "string" ? (event as { type: string }).type : "the event";
            try {
              const { eventId } = await sendToWorkflow(db, id, event as { type: string }, { ...statements, by });
              const result = { outcome: "applied", eventId };
              return { result, message: workflowSendMessage(id, type, result), on: `workflow ${id} (${type})` };
            } catch (error) {
              if (error instanceof WorkflowNotFoundError) return json({ error: `no workflow ${id}` }, 404);
              if (!(error instanceof WorkflowFinishedError)) throw error;
              const result = { outcome: "finished", status: error.status };
              return { result, message: workflowSendMessage(id, type, result), on: `workflow ${id} (${type})` };
            }
          });
        }),
      ),
    ),
    HttpRouter.add("POST", "/api/pause", pauseAction("pause")),
    HttpRouter.add("POST", "/api/schedules/pause", scheduleAction("pause")),
    HttpRouter.add("POST", "/api/schedules/resume", scheduleAction("resume")),
    HttpRouter.add("POST", "/api/schedules/trigger", scheduleAction("trigger")),
    HttpRouter.add("POST", "/api/resume", pauseAction("resume")),
  );
};

/**
 * A fetch-style handler (Request in, Response out) a service mounts behind its own auth: in
 * Hono, Bun, Deno or any framework that speaks the Fetch API. `dispose` releases it.
 */
export const createDashboardHandler = (options: DashboardOptions) => {
  const { handler, dispose } = HttpRouter.toWebHandler(dashboardRoutes(options), { disableLogger: true });
  return { handler: (request: Request) => handler(request), dispose };
};

/**
 * The dashboard as a node:http request listener, for a service on Express, Fastify or node:http:
 * `app.use("/picket", listener)` in Express; in Fastify, a route for `/picket` and `/picket/*` that
 * calls `reply.hijack()` then `listener(request.raw, reply.raw)`, with `prefix: "/picket"`.
 * `dispose` releases it.
 */
export const createDashboardNodeHandler = (options: DashboardOptions & { prefix?: string }) => {
  const { handler, dispose } = createDashboardHandler(options);
  return { listener: nodeListener(handler, options.prefix === undefined ? {} : { prefix: options.prefix }), dispose };
};

/**
 * Serves the dashboard until interrupted (`picket dashboard`): the handler a service would mount,
 * on node:http. Interrupting it ends the live streams still open and closes the port.
 */
export const serveDashboard = (
  options: DashboardOptions & { port: number; host: string },
  created: (server: Server) => void = () => undefined,
  listening: (url: string) => void = () => undefined,
) => {
  const allowedHosts = [...loopbackHosts(options.host), ...(options.allowedHosts ?? [])];
  // picket dashboard says where it listens itself, once it does: no "Listening on" line here.
  return serveFetchHandler(() => createDashboardHandler({ ...options, allowedHosts }), { port: options.port, host: options.host, created, listening });
};
