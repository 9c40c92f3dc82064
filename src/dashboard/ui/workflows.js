// Workflows: the instances by workflow, status and state (a count each; one picks the list), the
// newest instances, and an instance's page: its statechart with its active state(s) lit, its
// context, its history (each event applied, with what came of it and the state after), its inbox
// (events waiting, timers with their due time), the task jobs it started (each opens the job's
// page), and the actions a live instance takes: an event sent, a cancel.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { act, getJson, tell } from "./api.js";
import { useFollowed } from "./follow.js";
import { html } from "./html.js";
import { JobLink, WorkflowLink, jobsChanged, openWorkflow } from "./nav.js";
import { activeLeaves, delayWords, layout, Statechart } from "./statechart.js";
import { useStore } from "./store.js";
import { ASK, localTime, waited } from "./words.js";

const LIVE = ["starting", "running"];

/** A state value as text: its active leaves' paths ("charging", "fulfilling.packing.picking, fulfilling.invoice.drafting"). */
export const stateText = (value) => {
  const leaves = activeLeaves(value);
  return leaves.length === 0 ? "—" : leaves.join(", ");
};

/** JSON on one line, cut to `max` characters. */
const brief = (value, max = 80) => {
  const text = JSON.stringify(value) ?? "undefined";
  return text.length > max ? text.slice(0, max - 1) + "…" : text;
};

/** How long until an ISO time: "in 59 min", or "due" once passed (waited() says how long ago one was). */
const dueIn = (at) => {
  const s = (new Date(at).getTime() - Date.now()) / 1000;
  return s <= 0 ? "due" : "in " + (s < 120 ? Math.round(s) + " s" : s < 7200 ? Math.round(s / 60) + " min" : Math.round(s / 3600) + " h");
};

/** The instances, read again every five seconds and after an action; a count picks the list's workflow and status. */
export const WorkflowsTable = () => {
  const reread = useStore(jobsChanged);
  const [filter, setFilter] = useState({ name: "", status: "" });
  const [answer, setAnswer] = useState(null);
  useEffect(() => {
    let current = true;
    const query = new URLSearchParams(Object.entries(filter).filter(([, v]) => v !== ""));
    const read = () => getJson("api/workflows" + (query.toString() ? "?" + query : "")).then((a) => current && setAnswer(a));
    read();
    const timer = setInterval(read, 5000);
    return () => ((current = false), clearInterval(timer));
  }, [reread, filter.name, filter.status]);
  if (answer === null) return null;
  if (!answer.ok) return html`<p class="bad">${answer.body.error}</p>`;
  const { workflows, counts } = answer.body;
  if (counts.length === 0) return html`<p class="muted">none yet: startWorkflow(db, workflow, input) starts one</p>`;
  const picked = (c) => c.name === filter.name && c.status === filter.status;
  return html`<div class="split">
    <table data-testid="workflow-counts">
      <thead><tr><th>workflow</th><th>status</th><th>state</th><th class="num">instances</th></tr></thead>
      <tbody>
        ${counts.map(
          (c) => html`<tr key=${c.name + c.status + JSON.stringify(c.state)} data-name=${c.name} data-status=${c.status} data-state=${c.state === null ? "" : stateText(c.state)}
              class=${picked(c) ? "picked" : ""}>
            <td><a class="job" href="#workflows" onClick=${(e) => (e.preventDefault(), setFilter(picked(c) ? { name: "", status: "" } : { name: c.name, status: c.status }))}>${c.name}</a></td>
            <td class=${c.status === "failed" ? "bad" : ""}>${c.status}</td><td>${c.state === null ? "" : stateText(c.state)}</td><td class="num">${c.count}</td>
          </tr>`,
        )}
      </tbody>
    </table>
    <div>
      <p class="muted" data-testid="workflow-filter">${filter.name ? "newest " + filter.status + " " + filter.name + " instances " : "newest instances "}
        ${filter.name && html`<button onClick=${() => setFilter({ name: "", status: "" })}>show all</button>`}</p>
      ${workflows.length === 0
        ? html`<p class="muted">none</p>`
        : html`<table data-testid="workflows">
            <thead><tr><th>workflow</th><th>name</th><th>key</th><th>status</th><th>state</th><th>updated</th><th>started</th></tr></thead>
            <tbody>
              ${workflows.map(
                (w) => html`<tr key=${w.id} data-workflow-id=${w.id}>
                  <td><${WorkflowLink} id=${w.id} /></td><td>${w.name}</td><td>${w.key ?? ""}</td><td class=${w.status === "failed" ? "bad" : ""}>${w.status}</td>
                  <td>${stateText(w.state)}</td><td>${waited(w.updatedAt)} ago</td><td>${waited(w.createdAt)} ago</td>
                </tr>`,
              )}
            </tbody>
          </table>`}
    </div>
  </div>`;
};

/** The events the active states (and the states holding them) take, for the send field's suggestions. */
const acceptedEvents = (config, leaves) => {
  const events = new Set();
  for (const leaf of leaves) {
    let node = config;
    for (const key of leaf.split(".")) {
      for (const type of Object.keys(node?.on ?? {})) if (!type.startsWith("xstate.")) events.add(type);
      node = node?.states?.[key];
    }
    for (const type of Object.keys(node?.on ?? {})) if (!type.startsWith("xstate.")) events.add(type);
  }
  // In name order: the recorded machine is jsonb, which keeps no key order of its own.
  return [...events].sort();
};

/** Boxes wide enough for the machine's longest name. */
const boxWidth = (config) => {
  let longest = 0;
  const walk = (node, path) => {
    for (const [key, child] of Object.entries(node.states ?? {})) {
      longest = Math.max(longest, key.length, path.length);
      walk(child, path ? path + "." + key : key);
    }
  };
  walk(config, "");
  return Math.min(200, Math.max(92, Math.ceil(12 + 6.2 * longest)));
};

/** What an event was, in words: a start's input, a sent event, a task's or a child workflow's end (linked), a timer. */
const EventCell = ({ e }) => {
  const event = e.event ?? {};
  if (e.kind === "start") return html`<span>start</span> <span class="muted">input ${brief(event.input ?? null)}</span>`;
  if (e.kind === "task") {
    return html`<span>task job <${JobLink} id=${e.jobId} /> ${event.status}</span>${event.error ? html` <span class="bad">${brief(event.error, 120)}</span>` : event.status === "completed" ? html` <span class="muted">${brief(event.result)}</span>` : null}`;
  }
  if (e.kind === "child") {
    return html`<span>child workflow <${WorkflowLink} id=${String(event.workflow)} /> ${event.status}</span>${event.error ? html` <span class="bad">${brief(event.error, 120)}</span>` : event.status === "done" ? html` <span class="muted">${brief(event.output)}</span>` : null}`;
  }
  if (e.kind === "timer") {
    const delay = /^xstate\.after\.(\d+|[^.]+)\./.exec(event.type ?? "");
    return html`<span title=${event.type}>${delay ? "after " + delayWords(delay[1]) : event.type}</span>`;
  }
  const { type, ...rest } = event;
  return html`<b>${type}</b>${Object.keys(rest).length > 0 ? html` <span class="muted">${brief(rest)}</span>` : null}`;
};

const History = ({ events, total }) => html`
  <h3>History <span class="muted">${total > events.length ? "(the newest " + events.length + " of " + total + ")" : ""}</span></h3>
  ${events.length === 0
    ? html`<p class="muted">nothing applied yet</p>`
    : html`<table data-testid="workflow-history">
        <thead><tr><th class="num">#</th><th>applied</th><th>kind</th><th>event</th><th>outcome</th><th>note</th><th>state after</th></tr></thead>
        <tbody>
          ${events.map(
            (e) => html`<tr key=${e.id} data-event-id=${e.id} data-kind=${e.kind} data-outcome=${e.outcome}>
              <td class="num">${e.seq ?? ""}</td><td title=${e.appliedAt}>${localTime(e.appliedAt)}</td><td data-col="kind">${e.kind}</td>
              <td data-col="event"><${EventCell} e=${e} /></td><td data-col="outcome" class=${e.outcome === "dropped" ? "muted" : ""}>${e.outcome}</td>
              <td data-col="note">${[e.note, e.by ? "by " + e.by : null].filter(Boolean).join("; ")}</td><td data-col="state">${e.state === null ? "" : stateText(e.state)}</td>
            </tr>`,
          )}
        </tbody>
      </table>`}`;

const Inbox = ({ events, total }) => html`
  <h3>Inbox <span class="muted">${total > events.length ? "(the soonest " + events.length + " of " + total + ")" : ""}</span></h3>
  ${events.length === 0
    ? html`<p class="muted" data-testid="workflow-inbox-empty">empty</p>`
    : html`<table data-testid="workflow-inbox">
        <thead><tr><th>kind</th><th>event</th><th>due</th><th>since</th></tr></thead>
        <tbody>
          ${events.map(
            (e) => html`<tr key=${e.id} data-event-id=${e.id} data-kind=${e.kind}>
              <td data-col="kind">${e.kind}</td><td data-col="event"><${EventCell} e=${e} /></td>
              <td data-col="due" title=${e.dueAt}>${localTime(e.dueAt)} <span class="muted">(${dueIn(e.dueAt)})</span></td><td>${localTime(e.createdAt)}</td>
            </tr>`,
          )}
        </tbody>
      </table>`}`;

const Jobs = ({ jobs }) => html`
  <h3>Task jobs</h3>
  ${jobs.length === 0
    ? html`<p class="muted">none</p>`
    : html`<table data-testid="workflow-jobs">
        <thead><tr><th>job</th><th>task</th><th>status</th><th class="num">attempts</th><th>created</th><th>finished</th></tr></thead>
        <tbody>
          ${jobs.map(
            (j) => html`<tr key=${j.id} data-job-id=${j.id}>
              <td><${JobLink} id=${j.id} /></td><td>${j.type}</td><td class=${j.status === "dead" ? "bad" : ""}>${j.status}</td><td class="num">${j.attempts}</td>
              <td>${localTime(j.createdAt)}</td><td>${j.finishedAt ? localTime(j.finishedAt) : "—"}</td>
            </tr>`,
          )}
        </tbody>
      </table>`}`;

/** The event typed: a type ("APPROVE") or an event's JSON ({"type":"APPROVE","by":"ana"}); a string says what is wrong. */
const eventOf = (text) => {
  const typed = text.trim();
  if (typed === "") return "type an event: its type (APPROVE), or its JSON ({\"type\":\"APPROVE\"})";
  if (!typed.startsWith("{")) return { type: typed };
  try {
    return JSON.parse(typed);
  } catch (error) {
    return "the event is not JSON: " + error.message;
  }
};

const SendEvent = ({ id, accepted }) => {
  const input = useRef(null);
  const send = async (e) => {
    e.preventDefault();
    const event = eventOf(input.current.value);
    if (typeof event === "string") return tell(event, true);
    const body = JSON.stringify(event);
    if (await act("api/workflows/" + encodeURIComponent(id) + "/send", ASK["workflow-send"](id, body), body)) input.current.value = "";
    jobsChanged.set((n) => n + 1);
  };
  return html`<form class="send" data-testid="workflow-send" onSubmit=${send}>
    <label>event <input id="workflow-event" ref=${input} list="workflow-events" autocomplete="off" size="28" placeholder='APPROVE, or {"type":"APPROVE", …}' /></label>
    <datalist id="workflow-events">${accepted.map((type) => html`<option value=${type} />`)}</datalist>
    <button data-action="send-event">send event</button>
    ${accepted.length > 0 &&
    html`<span class="muted">its state takes: ${accepted.map(
      (type) => html` <button type="button" class="chip" data-event=${type} onClick=${() => ((input.current.value = type), input.current.focus())}>${type}</button>`,
    )}</span>`}
  </form>`;
};

export const WorkflowPanel = () => {
  const id = useStore(openWorkflow);
  const reread = useStore(jobsChanged);
  const panel = useRef(null);
  // A live instance's page follows it every second; a finished one is read once.
  const [follow, setFollow] = useState(false);
  const answer = useFollowed(id, "api/workflows/" + encodeURIComponent(id ?? ""), { follow, reread });
  useEffect(() => setFollow(LIVE.includes(answer?.body?.workflow?.status)), [answer]);
  useEffect(() => {
    if (id === null || answer === null) return;
    panel.current?.scrollIntoView({ block: "nearest" });
    panel.current?.querySelector("h2")?.focus({ preventScroll: true });
  }, [id, answer === null]);
  const machine = answer?.body?.machine ?? null;
  const machineKey = machine === null ? null : answer.body.workflow.name + "@" + answer.body.workflow.fingerprint;
  const layouts = useMemo(() => (machine === null ? null : { workflow: layout(machine, { W: boxWidth(machine), H: 30, GX: 70 }) }), [machineKey]);
  if (id === null || answer === null) return null;
  const { workflow: w, error } = answer.body;
  const cancel = async () => {
    await act("api/workflows/" + encodeURIComponent(id) + "/cancel", ASK["workflow-cancel"](id));
    jobsChanged.set((n) => n + 1);
  };
  const leaves = w ? activeLeaves(w.state) : [];
  const live = w && LIVE.includes(w.status);
  return html`<section class="wide open" id="workflow-panel" ref=${panel}>
    <h2 tabindex="-1">Workflow <span id="workflow-id">${id}</span> <button id="workflow-close" onClick=${() => openWorkflow.set(null)}>close</button></h2>
    ${error
      ? html`<p class="bad">${error}</p>`
      : html`<p data-testid="workflow-summary">${w.name}${w.key ? " (key " + w.key + ")" : ""}${w.version ? " v" + w.version : ""}: <b data-testid="workflow-status">${w.status}</b>${leaves.length > 0 ? html` in <b data-testid="workflow-state">${leaves.join(", ")}</b>` : null};
          started ${waited(w.createdAt)} ago, updated ${waited(w.updatedAt)} ago${w.finishedAt ? ", finished " + localTime(w.finishedAt) : ""}
          ${live && html` <button data-action="cancel-workflow" class="danger" onClick=${cancel}>cancel the workflow</button>`}</p>
        ${w.error && html`<p class="bad" data-testid="workflow-error">${w.error}</p>`}
        ${(w.parentId !== null || Object.keys(w.children).length > 0) &&
        html`<p data-testid="workflow-family">${w.parentId !== null ? html`a child of workflow <${WorkflowLink} id=${w.parentId} />` : null}${w.parentId !== null && Object.keys(w.children).length > 0 ? "; " : ""}${Object.keys(w.children).length > 0
          ? html`children in flight: ${Object.entries(w.children).map(([invoke, child], i) => html`${i > 0 ? ", " : ""}${invoke} → <${WorkflowLink} id=${child} />`)}`
          : null}</p>`}
        ${live && html`<${SendEvent} id=${id} accepted=${machine === null ? [] : acceptedEvents(machine, leaves)} />`}
        <div class="charts" data-testid="workflow-machine">
          ${layouts
            ? html`<${Statechart} layouts=${layouts} kind="workflow" lit=${leaves} labels=${true} title=${"its machine" + (w.version ? " · version " + w.version : "") + " · " + stateText(w.state)} />`
            : html`<p class="muted">${w.fingerprint === null
                ? "no worker has applied its start yet: its machine is drawn once one has"
                : "no worker recorded its machine (" + w.name + ", fingerprint " + w.fingerprint + "): it is drawn once a worker that runs it starts"}</p>`}
          <div class="context"><div class="title muted">context</div><pre data-testid="workflow-context">${JSON.stringify(w.context, null, 2)}</pre>
            ${w.output !== null && html`<div class="title muted">output</div><pre data-testid="workflow-output">${JSON.stringify(w.output, null, 2)}</pre>`}</div>
        </div>
        <${History} events=${answer.body.history} total=${answer.body.historyTotal} />
        <${Inbox} events=${answer.body.inbox} total=${answer.body.inboxTotal} />
        <${Jobs} jobs=${answer.body.jobs} />`}
  </section>`;
};
