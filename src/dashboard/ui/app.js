// The dashboard's page: the header (live status, who is asking, the token), the panels, the
// answer of the last action and the dialog that confirms each one. A snapshot arrives every
// interval on /api/events; the job browser, a job's page, a worker's page, the flows, the workflows
// and the history read their own routes.
import { render } from "preact";
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import { askedBy, getJson, question, toast, token } from "./api.js";
import { JobBrowser } from "./browse.js";
import { History } from "./history.js";
import { html } from "./html.js";
import { FlowPanel, FlowsTable } from "./flows.js";
import { FailedTable, JobPanel } from "./jobs.js";
import { followAddress, openFlow, openJob, openWorkflow } from "./nav.js";
import { QueuesTable, TaskTable } from "./queues.js";
import { SchedulesTable } from "./schedules.js";
import { layout } from "./statechart.js";
import { useStore } from "./store.js";
import { WorkerPanel, WorkersTable } from "./workers.js";
import { WorkflowPanel, WorkflowsTable } from "./workflows.js";

// EventSource sends no headers: the token, when there is one, goes in the query.
const openStream = (tokenValue) => new EventSource("api/events" + (tokenValue ? "?token=" + encodeURIComponent(tokenValue) : ""));

/** The stream the page's inline script opened before the modules loaded, once, if it was opened with this token; its last snapshot is handed on. */
const takeEarlyStream = (tokenValue, snapshot) => {
  const early = window.picketEarlyStream;
  delete window.picketEarlyStream;
  if (early === undefined) return null;
  early.events.removeEventListener("snapshot", early.keep);
  if (early.token !== tokenValue) return early.events.close(), null;
  // One that came after the first render (which drew any before it) is handed on.
  if (early.last !== null && early.last !== early.drawn) snapshot(early.last);
  return early.events;
};

/** The live snapshot and the machines' layouts, for the token given; the status line says how it goes. */
const useLive = () => {
  const tokenValue = useStore(token);
  // A snapshot the early stream already has is drawn in the very first render.
  const [live, setLive] = useState(() => {
    const early = window.picketEarlyStream;
    const last = early?.token === tokenValue ? early.last : null;
    if (early !== undefined) early.drawn = last;
    return { status: last ? "live · " + new Date().toLocaleTimeString() : "connecting…", down: false, snapshot: last ? JSON.parse(last.data) : null, layouts: null };
  });
  useEffect(() => {
    let current = true;
    // Both at once: the stream's first snapshot does not wait for the machines (only the statecharts need them).
    getJson("api/machines").then(({ ok, body }) => {
      if (!current) return;
      if (!ok) return setLive((l) => ({ ...l, status: body.error, down: true }));
      setLive((l) => ({ ...l, layouts: { job: layout(body.job), supervisor: layout(body.supervisor) } }));
    });
    const snapshot = (e) => setLive((l) => ({ ...l, status: "live · " + new Date().toLocaleTimeString(), down: false, snapshot: JSON.parse(e.data) }));
    const events = takeEarlyStream(tokenValue, snapshot) ?? openStream(tokenValue);
    events.addEventListener("snapshot", snapshot);
    events.addEventListener("failure", (e) => setLive((l) => ({ ...l, status: "database: " + JSON.parse(e.data).error, down: true })));
    events.onerror = () => setLive((l) => ({ ...l, status: "dashboard unreachable, retrying…", down: true }));
    return () => ((current = false), events.close());
  }, [tokenValue]);
  return live;
};

// The two fields keep what is typed (not re-rendered from the stores: a snapshot arriving while one
// is typed in would put the old value back); a change is kept for the session.
const Field = ({ store, ...props }) => {
  const input = useRef(null);
  useEffect(() => void (input.current.value = store.get()), []);
  return html`<input ...${props} ref=${input} autocomplete="off" onChange=${(e) => store.set(e.target.value)} />`;
};

const Header = ({ status, down }) => html`<header>
  <h1>picket</h1>
  <span id="status" class=${down ? "down" : ""}>${status}</span>
  <span style="flex:1"></span>
  <label class="muted">your name <${Field} store=${askedBy} id="by" size="10" placeholder="(optional)" /></label>
  <label class="muted">token (actions; reads when the dashboard asks) <${Field} store=${token} id="token" type="password" size="16" /></label>
</header>`;

/** What the last action did: fixed at the bottom, where it is seen wherever the button was. */
const Toast = () => {
  const { text, bad } = useStore(toast);
  return html`<div id="action" role="status" aria-live="polite" class=${bad ? "bad" : ""}>${text || null}</div>`;
};

/** Every action asks first: Escape or "keep as is" keeps, Enter or the named button goes. */
const ConfirmDialog = () => {
  const asked = useStore(question);
  const dialog = useRef(null);
  // Opened in the same task that writes the question in: a question shown is a dialog open (an Escape
  // pressed as soon as the words appear closes it).
  useLayoutEffect(() => {
    if (asked === null) return;
    const d = dialog.current;
    d.returnValue = "";
    const closed = () => {
      question.set(null);
      asked.answer(d.returnValue === "go");
    };
    d.addEventListener("close", closed, { once: true });
    d.showModal();
    return () => d.removeEventListener("close", closed);
  }, [asked]);
  return html`<dialog id="confirm" aria-labelledby="confirm-text" ref=${dialog}>
    <form method="dialog">
      <p id="confirm-text">${asked?.text ?? ""}</p>
      <div class="buttons"><button value="keep" id="confirm-keep">keep as is</button><button value="go" id="confirm-go" class="danger" autofocus>${asked?.go ?? ""}</button></div>
    </form>
  </dialog>`;
};

const App = () => {
  const { status, down, snapshot: s, layouts } = useLive();
  const rendered = useRef(false);
  // Marked once the first snapshot's tables are in the DOM (a layout effect: before the paint, as
  // the page's earlier innerHTML version marked it), for the browser test's measure.
  useLayoutEffect(() => {
    if (s !== null && !rendered.current) {
      rendered.current = true;
      performance.mark("picket-first-render");
    }
  }, [s]);
  return html`
    <${Header} status=${status} down=${down} />
    <main>
      <section><h2>Queue by task</h2>${s && html`<${TaskTable} snapshot=${s} />`}</section>
      <section><h2>Queues</h2>${s && html`<${QueuesTable} snapshot=${s} />`}</section>
      <section class="wide" id="browser"><h2>Jobs</h2><${JobBrowser} /></section>
      <section class="wide"><${History} /></section>
      <section class="wide"><h2>Workers</h2>${s && html`<${WorkersTable} workers=${s.workers} />`}</section>
      <${WorkerPanel} layouts=${layouts} />
      <section class="wide" id="flows"><h2>Flows</h2><${FlowsTable} /></section>
      <${FlowPanel} />
      <section class="wide" id="workflows"><h2>Workflows</h2><${WorkflowsTable} /></section>
      <${WorkflowPanel} />
      <section class="wide"><h2>Schedules</h2>${s && html`<${SchedulesTable} schedules=${s.schedules ?? []} lastJobs=${s.scheduleJobs ?? []} />`}</section>
      <section><h2>Recent failures (retrying)</h2>${s && html`<${FailedTable} rows=${s.retrying} action="cancel" />`}</section>
      <section><h2>Dead jobs</h2>${s && html`<${FailedTable} rows=${s.dead} action="retry" />`}</section>
      <${JobPanel} layouts=${layouts} />
    </main>
    <${Toast} />
    <${ConfirmDialog} />
  `;
};

// For a test or a console: open a job's page by id.
window.openJob = (id) => openJob.set(String(id));
window.openFlow = (id) => openFlow.set(String(id));
window.openWorkflow = (id) => openWorkflow.set(String(id));
followAddress();
render(html`<${App} />`, document.getElementById("app"));
