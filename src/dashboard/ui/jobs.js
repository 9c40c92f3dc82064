// Jobs: the lists of failing and dead ones, and a job's page (payload, result, steps, every attempt
// and operator action, its machine lit, the actions its status allows).
import { useEffect, useRef, useState } from "preact/hooks";
import { act } from "./api.js";
import { useFollowed } from "./follow.js";
import { html } from "./html.js";
import { FlowLink, JobLink, jobsChanged, openJob } from "./nav.js";
import { Statechart } from "./statechart.js";
import { useStore } from "./store.js";
import { ASK, JOB_ACTIONS } from "./words.js";

const OPERATOR_DID = { retry: "retried", cancel: "cancelled", run_now: "made due now" };

/** One entry of a job's history: an attempt that did not finish (numbered across operator retries, with the worker that held it) and its stack, or an operator's action with who asked. */
const HistoryEntry = ({ entry: e }) =>
  e.operator
    ? html`<div data-testid="history-operator">${OPERATOR_DID[e.operator] ?? e.operator} by ${e.by ?? "an operator"} <span class="muted">· ${e.at}</span></div>`
    : html`<div class="muted" data-testid="history-attempt">attempt ${e.attempt}${e.worker ? " on " + e.worker : ""} · ${e.at}</div><pre>${e.stack ?? e.message}</pre>`;

/**
 * What happened to the job, in order: enqueued, due, each attempt that did not finish (on which
 * worker, with its error), each operator action, the attempt running now (on which worker, since
 * when, its machine's state), and how it finished.
 */
const timelineOf = (job) => {
  const at = (time) => new Date(time).getTime();
  const events = [{ at: job.createdAt, what: "enqueued" }];
  if (at(job.runAt) > at(job.createdAt) + 1000 && !(job.errors ?? []).length) events.push({ at: job.runAt, what: "due" });
  for (const e of job.errors ?? []) {
    events.push(e.operator ? { at: e.at, what: (OPERATOR_DID[e.operator] ?? e.operator) + " by " + (e.by ?? "an operator") } : { at: e.at, what: "attempt " + e.attempt + " ended" + (e.worker ? " on " + e.worker : "") + ": " + e.message, bad: true });
  }
  if (job.status === "processing" && job.lockedAt) events.push({ at: job.lockedAt, what: "attempt " + ((job.priorAttempts ?? 0) + job.attempts) + " running on " + job.lockedBy + (job.machineState ? " (its machine: " + job.machineState + ")" : "") });
  if (job.finishedAt) events.push({ at: job.finishedAt, what: job.status });
  return events.sort((a, b) => at(a.at) - at(b.at));
};

const Timeline = ({ job }) => html`<ol class="timeline" data-testid="timeline">
  ${timelineOf(job).map((e) => html`<li class=${e.bad ? "bad" : ""}><span class="muted">${e.at}</span> ${e.what}</li>`)}
</ol>`;

/** A button for an action on one job: asked first, and the job's page read again after it. */
export const JobAction = ({ action, id, label }) => {
  const run = async () => {
    await act("api/jobs/" + encodeURIComponent(id) + "/" + action, ASK[action](id));
    jobsChanged.set((n) => n + 1);
  };
  return html`<button data-action=${action} data-id=${id} onClick=${run}>${label ?? action}</button>`;
};

/** Retrying jobs (each cancellable) or dead ones (each retryable), with every attempt's error. */
export const FailedTable = ({ rows, action }) =>
  rows.length === 0
    ? html`<p class="muted">none</p>`
    : html`<table>
        <thead><tr><th>job</th><th>task</th><th>attempts</th><th>error</th><th></th></tr></thead>
        <tbody>
          ${rows.map(
            (j) => html`<tr key=${j.id} data-testid=${action + "-row"} data-job-id=${j.id}>
              <td><${JobLink} id=${j.id} /></td><td>${j.type}</td><td>${j.attempts}/${j.maxAttempts}</td>
              <td><details><summary class="bad">${j.lastError}</summary>${(j.errors ?? []).slice().reverse().map((e) => html`<${HistoryEntry} entry=${e} />`)}</details></td>
              <td><${JobAction} action=${action} id=${j.id} /></td>
            </tr>`,
          )}
        </tbody>
      </table>`;

export const JobPanel = ({ layouts }) => {
  const id = useStore(openJob);
  const reread = useStore(jobsChanged);
  const panel = useRef(null);
  // A running job's page follows it every second (its machine, its progress); a finished one is read once.
  const [follow, setFollow] = useState(false);
  const answer = useFollowed(id, "api/jobs/" + encodeURIComponent(id ?? ""), { follow, reread });
  useEffect(() => setFollow(answer?.body?.status === "processing"), [answer]);
  // Opened: brought into view, and its heading takes the focus (a keyboard user lands on what opened).
  useEffect(() => {
    if (id === null || answer === null) return;
    panel.current?.scrollIntoView({ block: "nearest" });
    panel.current?.querySelector("h2")?.focus({ preventScroll: true });
  }, [id, answer === null]);
  if (id === null || answer === null) return null;
  const job = answer.body;
  return html`<section class="wide open" id="detail" ref=${panel}>
    <h2 tabindex="-1">Job <span id="detail-id">${id}</span> <button id="detail-close" onClick=${() => openJob.set(null)}>close</button></h2>
    <div id="detail-body">${job.error ? html`<p class="bad">${job.error}</p>` : html`<${JobBody} layouts=${layouts} id=${id} job=${job} />`}</div>
  </section>`;
};

const JobBody = ({ layouts, id, job }) => {
  const attempts = job.attempts + " of " + (job.maxAttempts ?? "the task's") + (job.priorAttempts > 0 ? " since the last retry, " + (job.priorAttempts + job.attempts) + " in all" : "");
  const fields = [
    ["status", job.status], ["task", job.type], ["attempts", attempts], ["queue", job.queue ?? "—"], ["key", job.key ?? "—"], ["priority", job.priority],
    ["run at", job.runAt], ["created", job.createdAt], ["finished", job.finishedAt ?? "—"], ["claimed by", job.lockedBy ?? "—"],
  ];
  const steps = job.steps ?? [];
  const history = job.errors ?? [];
  return html`
    ${job.machineState && html`<div data-testid="job-machine"><${Statechart} layouts=${layouts} kind="job" lit=${job.machineState} title=${"its machine · " + job.machineState} /></div>`}
    <table data-testid="detail">
      <tbody>
        ${fields.map(([k, v]) => html`<tr key=${k}><th>${k}</th><td>${String(v)}</td></tr>`)}
        ${job.flowId && html`<tr><th>flow</th><td data-testid="job-flow"><${FlowLink} id=${job.flowId} /> as ${job.flowNode}</td></tr>`}
        <tr><th>payload</th><td><pre data-testid="payload">${JSON.stringify(job.payload, null, 2)}</pre></td></tr>
        <tr><th>progress</th><td><pre>${JSON.stringify(job.progress)}</pre></td></tr>
        <tr><th>result</th><td><pre>${JSON.stringify(job.result)}</pre></td></tr>
        <tr><th>steps</th><td>${steps.length === 0 ? "none" : steps.map((st) => html`<div data-testid="step"><b>${st.name}</b> <span class="muted">attempt ${st.attempt} · ${st.createdAt}</span><pre>${JSON.stringify(st.result)}</pre></div>`)}</td></tr>
        <tr><th>timeline</th><td><${Timeline} job=${job} /></td></tr>
        <tr><th>history</th><td>${history.length === 0 ? "none" : history.map((e) => html`<${HistoryEntry} entry=${e} />`)}</td></tr>
      </tbody>
    </table>
    <div class="buttons" data-testid="detail-actions">${JOB_ACTIONS.filter((a) => a.when.includes(job.status)).map((a) => html`<${JobAction} key=${a.action} action=${a.action} id=${id} label=${a.label} />${" "}`)}</div>
  `;
};
