// The queue at a glance: each task's jobs by state with its rates, each named queue's depth, wait,
// head and pause; a task or a queue is paused and resumed here (the claim enforces it in SQL).
import { act } from "./api.js";
import { html } from "./html.js";
import { JobLink } from "./nav.js";
import { ASK, waited } from "./words.js";

// Pending jobs split three ways: only a growing "ready" means the workers are behind.
const LIVE_STATES = ["ready", "scheduled", "retrying", "processing"];
const LIVE_TITLES = {
  ready: "due now, waiting for a worker",
  scheduled: "waiting for the run time they were enqueued with",
  retrying: "an attempt failed; waiting out its backoff",
  processing: "held by a worker",
};

const PauseButton = ({ kind, name, paused }) => {
  const verb = paused ? "resume" : "pause";
  const data = { ["data-" + verb]: kind };
  return html`<button ...${data} data-name=${name} onClick=${() => act("api/" + verb + "?" + kind + "=" + encodeURIComponent(name), ASK[verb](kind, name))}>${verb}</button>`;
};

// A task's cluster-wide limits and their use: "2 of 5 running · 3 of 10 started in 1 s".
const limitText = (l) => {
  if (l === undefined) return "—";
  const parts = [];
  if (l.clusterConcurrency !== null) parts.push(l.running + " of " + l.clusterConcurrency + " running");
  if (l.rateLimit !== null) parts.push(l.startsInWindow + " of " + l.rateLimit.max + " started in " + seconds(l.rateLimit.windowMs));
  return parts.join(" · ");
};
const seconds = (ms) => (ms % 1000 === 0 ? ms / 1000 + " s" : ms + " ms");

export const TaskTable = ({ snapshot: s }) => {
  const pausedTasks = new Set((s.paused ?? []).filter((p) => p.kind === "task").map((p) => p.name));
  // Every task with live or recent jobs, every task a live worker runs (to pause one before its jobs come), every paused one.
  const tasks = [...new Set([...s.depth.map((d) => d.type), ...s.finished.map((f) => f.type), ...s.handlers.handled, ...pausedTasks])].sort();
  const live = (type, state) => s.depth.filter((r) => r.type === type && r.state === state).reduce((n, r) => n + r.count, 0);
  const rate = (type, status) => s.finished.filter((r) => r.type === type && r.status === status).reduce((n, r) => n + r.count, 0) / s.finishedWindowSeconds;
  const h = s.handlers;
  const limits = new Map((s.limits ?? []).map((l) => [l.type, l]));
  return html`
    ${h.unhandled.length > 0 &&
    html`<p class="bad" data-testid="unhandled">${(h.liveWorkers === 0 ? "no live worker: " : "no live worker has a handler for: ") + h.unhandled.map((u) => u.type + " (" + u.count + " pending)").join(", ")}</p>`}
    ${tasks.length === 0
      ? html`<p class="muted">no live jobs</p>`
      : html`<table>
          <thead><tr><th>task</th>${LIVE_STATES.map((c) => html`<th class="num" title=${LIVE_TITLES[c]}>${c}</th>`)}<th class="num">completed/s</th><th class="num">dead/s</th><th title="the cluster-wide limits the workers claim under, and what is in use of each">cluster limits</th><th></th></tr></thead>
          <tbody>
            ${tasks.map(
              (t) => html`<tr key=${t} data-task=${t}>
                <td>${t}</td>
                ${LIVE_STATES.map((c) => html`<td class="num" data-col=${c}>${live(t, c)}</td>`)}
                <td class="num">${rate(t, "completed").toFixed(1)}</td><td class="num">${rate(t, "dead").toFixed(1)}</td>
                <td data-col="limits">${limitText(limits.get(t))}</td>
                <td><${PauseButton} kind="task" name=${t} paused=${pausedTasks.has(t)} /></td>
              </tr>`,
            )}
          </tbody>
        </table>`}
  `;
};

export const QueuesTable = ({ snapshot: s }) => {
  const rows = s.queues ?? [];
  if (rows.length === 0) return html`<p class="muted">no queued jobs</p>`;
  return html`<table>
    <thead><tr><th>queue</th><th class="num">ready</th><th class="num">scheduled</th><th class="num">processing</th><th class="num">oldest ready</th><th class="num">completed/s</th><th class="num" title="attempts that failed (retried or dead)">failed/s</th><th>next</th><th>state</th><th></th></tr></thead>
    <tbody>
      ${rows.map(
        (q) => html`<tr key=${q.name} data-queue=${q.name}>
          <td>${q.name}</td><td class="num" data-col="ready">${q.ready}</td><td class="num" data-col="scheduled">${q.scheduled}</td><td class="num" data-col="processing">${q.processing}</td>
          <td class="num">${q.oldestReadyAt ? waited(q.oldestReadyAt) : "—"}</td>
          <td class="num" data-col="completed">${q.completedPerSecond.toFixed(1)}</td><td class=${q.failedPerSecond > 0 ? "num bad" : "num"} data-col="failed">${q.failedPerSecond.toFixed(1)}</td>
          <td data-col="head">${q.head ? html`<${JobLink} id=${q.head.id} /> ${q.head.type}` : "—"}</td>
          <td data-col="state">${q.paused ? html`<span class="paused">paused</span> <span class="muted">${q.paused.pausedBy ? "by " + q.paused.pausedBy : ""}</span>` : "running"}</td>
          <td><${PauseButton} kind="queue" name=${q.name} paused=${q.paused !== null} /></td>
        </tr>`,
      )}
    </tbody>
  </table>`;
};
