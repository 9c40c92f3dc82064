// The workers: one row each (a hundred at a glance), and a worker's page with its supervisor
// machine and the jobs it holds, refreshed from its heartbeats while open.
import { useEffect, useRef } from "preact/hooks";
import { useFollowed } from "./follow.js";
import { html } from "./html.js";
import { JobAction } from "./jobs.js";
import { JobLink, openWorker, WorkerLink } from "./nav.js";
import { Statechart } from "./statechart.js";
import { useStore } from "./store.js";
import { localTime, waited } from "./words.js";

export const WorkersTable = ({ workers }) => {
  if (workers.length === 0) return html`<p class="muted">no worker has written a heartbeat</p>`;
  return html`<table data-testid="workers">
    <thead><tr><th>worker</th><th>host</th><th class="num">pid</th><th>version</th><th>state</th><th class="num">concurrency</th><th class="num">running</th><th class="num">waiting</th><th>last beat</th><th>started</th></tr></thead>
    <tbody>
      ${workers.map(
        (w) => html`<tr key=${w.id} data-testid="worker" data-worker-id=${w.id}>
          <td><${WorkerLink} id=${w.id} /></td><td>${w.host}</td><td class="num">${w.pid}</td><td>${w.version}</td><td data-col="state">${w.state}</td>
          <td class="num">${w.concurrency}</td><td class="num" data-col="running">${w.running}</td><td class="num">${w.waiting}</td>
          <td class=${w.silentMs > 10000 ? "bad" : ""}>${(w.silentMs / 1000).toFixed(1)} s ago</td><td>${localTime(w.startedAt)}</td>
        </tr>`,
      )}
    </tbody>
  </table>`;
};

export const WorkerPanel = ({ layouts }) => {
  const id = useStore(openWorker);
  const answer = useFollowed(id, "api/workers/" + encodeURIComponent(id ?? ""));
  const panel = useRef(null);
  // Opened: brought into view, and its heading takes the focus (a keyboard user lands on what opened).
  useEffect(() => {
    if (id === null || answer === null) return;
    panel.current?.scrollIntoView({ block: "nearest" });
    panel.current?.querySelector("h2")?.focus({ preventScroll: true });
  }, [id, answer === null]);
  if (id === null || answer === null) return null;
  const body = answer.body;
  return html`<section class="wide open" id="worker-panel" ref=${panel}>
    <h2 tabindex="-1">Worker <span id="worker-id">${id}</span> <button id="worker-close" onClick=${() => openWorker.set(null)}>close</button></h2>
    <div id="worker-body">${answer.ok ? html`<${WorkerBody} layouts=${layouts} worker=${body.worker} jobs=${body.jobs} />` : html`<p class="bad">${body.error}</p>`}</div>
  </section>`;
};

const WorkerBody = ({ layouts, worker: w, jobs }) => {
  const states = new Map(w.jobs.map((j) => [j.id, j.state]));
  return html`
    <div class="muted">${w.host} · pid ${w.pid} · picket ${w.version} · since ${localTime(w.startedAt)} · concurrency ${w.concurrency} · running ${w.running} · waiting ${w.waiting}</div>
    <div class="charts"><${Statechart} layouts=${layouts} kind="supervisor" lit=${w.state} title=${"supervisor · " + w.state} /></div>
    ${jobs.length === 0
      ? html`<p class="muted">holds no job</p>`
      : html`<table data-testid="worker-jobs">
          <thead><tr><th>job</th><th>task</th><th>machine</th><th class="num">attempt</th><th>held for</th><th>progress</th><th></th></tr></thead>
          <tbody>
            ${jobs.map(
              (j) => html`<tr key=${j.id} data-testid="worker-job" data-job-id=${j.id}>
                <td><${JobLink} id=${j.id} /></td><td>${j.type}</td><td data-col="state">${states.get(j.id) ?? "—"}</td><td class="num">${j.attempts}</td><td>${waited(j.at)}</td>
                <td><code>${j.progress ?? ""}</code></td>
                <td><${JobAction} action="cancel" id=${j.id} /></td>
              </tr>`,
            )}
          </tbody>
        </table>`}
  `;
};
