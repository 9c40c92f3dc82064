// Flows: the newest ones (their status and their jobs' counts), and a flow's graph: its jobs in
// columns by depth (each one column right of its deepest dependency), each coloured by its status,
// an arrow for each dependency ("ignore" and "wait" edges say so). A job opens its page, with its
// statechart while it runs. A column of more than COLUMN_SHOWN jobs (a 10,000-way fan-out) shows
// its first ones and a box counting the rest by status.
import { useEffect, useRef, useState } from "preact/hooks";
import { act, getJson } from "./api.js";
import { useFollowed } from "./follow.js";
import { html } from "./html.js";
import { FlowLink, jobsChanged, openFlow, openJob } from "./nav.js";
import { useStore } from "./store.js";
import { ASK, waited } from "./words.js";

const COLUMN_SHOWN = 12;

/** The newest flows, read again every five seconds and after an action. */
export const FlowsTable = () => {
  const reread = useStore(jobsChanged);
  const [answer, setAnswer] = useState(null);
  useEffect(() => {
    let current = true;
    const read = () => getJson("api/flows").then((a) => current && setAnswer(a));
    read();
    const timer = setInterval(read, 5000);
    return () => ((current = false), clearInterval(timer));
  }, [reread]);
  if (answer === null) return null;
  if (!answer.ok) return html`<p class="bad">${answer.body.error}</p>`;
  const flows = answer.body.flows;
  if (flows.length === 0) return html`<p class="muted">none yet: enqueueFlow(db, { name, jobs }) starts one</p>`;
  return html`<table data-testid="flows">
    <thead><tr><th>flow</th><th>name</th><th>status</th><th class="num">jobs</th><th class="num">live</th><th class="num">dead</th><th class="num">cancelled</th><th>started</th></tr></thead>
    <tbody>
      ${flows.map(
        (f) => html`<tr key=${f.id} data-flow-id=${f.id}>
          <td><${FlowLink} id=${f.id} /></td><td>${f.name}</td><td class=${f.status === "failed" ? "bad" : ""}>${f.status}</td>
          <td class="num">${f.total}</td><td class="num">${f.live}</td><td class="num">${f.dead}</td><td class="num">${f.cancelled}</td><td>${waited(f.createdAt)} ago</td>
        </tr>`,
      )}
    </tbody>
  </table>`;
};

/** Columns by depth; a column's jobs in id order; each job's box and each drawn edge. */
export const flowLayout = ({ jobs, edges }) => {
  const dependsOn = new Map();
  for (const e of edges) dependsOn.set(e.dependent, [...(dependsOn.get(e.dependent) ?? []), e]);
  const depth = new Map();
  // Jobs come in id order, and a dependency is always enqueued before its dependent, except a
  // parent's children (added later, with greater ids): those are placed by a second pass.
  const depthOf = (id, seen = new Set()) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const d = Math.max(-1, ...(dependsOn.get(id) ?? []).map((e) => depthOf(e.dependency, seen))) + 1;
    depth.set(id, d);
    return d;
  };
  const columns = [];
  for (const job of jobs) (columns[depthOf(job.id)] ??= []).push(job);
  const W = 128, H = 34, GX = 40, GY = 8, pos = {};
  const boxes = [];
  columns.forEach((column, x) => {
    const shown = column.length > COLUMN_SHOWN ? column.slice(0, COLUMN_SHOWN - 1) : column;
    shown.forEach((job, y) => {
      pos[job.id] = { x: 4 + x * (W + GX), y: 4 + y * (H + GY) };
      boxes.push({ job, ...pos[job.id] });
    });
    if (shown.length < column.length) {
      const rest = column.slice(shown.length);
      const at = { x: 4 + x * (W + GX), y: 4 + shown.length * (H + GY) };
      const counts = {};
      for (const job of rest) counts[job.status] = (counts[job.status] ?? 0) + 1;
      boxes.push({ more: rest.length, counts, ...at });
      for (const job of rest) pos[job.id] = at;
    }
  });
  const seen = new Set();
  const lines = [];
  for (const e of edges) {
    const p = pos[e.dependency], q = pos[e.dependent];
    if (!p || !q) continue;
    const key = p.x + "," + p.y + ">" + q.x + "," + q.y;
    if (seen.has(key)) continue;
    seen.add(key);
    lines.push({ key, x1: p.x + W, y1: p.y + H / 2, x2: q.x, y2: q.y + H / 2, policy: e.onFailure });
  }
  const tallest = Math.max(...columns.map((c) => Math.min(c.length, COLUMN_SHOWN)));
  return { boxes, lines, W, H, width: 8 + columns.length * (W + GX) - GX, height: 8 + tallest * (H + GY) - GY };
};

const FlowGraph = ({ graph }) => {
  const l = flowLayout(graph);
  return html`<div class="chart" data-testid="flow-graph">
    <svg width=${l.width} height=${l.height} role="img" aria-label=${"the flow's " + graph.jobs.length + " jobs and their dependencies"}>
      <defs><marker id="flow-arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#b8bfcc" /></marker></defs>
      ${l.lines.map((e) => html`<line class=${"edge flow-edge " + e.policy} key=${e.key} x1=${e.x1} y1=${e.y1} x2=${e.x2} y2=${e.y2} marker-end="url(#flow-arrow)" />`)}
      ${l.boxes.map((b) =>
        b.job
          ? html`<g class=${"node st-" + b.job.status} key=${b.job.id} data-job=${b.job.id} data-status=${b.job.status} tabindex="0" role="link"
                onClick=${() => openJob.set(b.job.id)} onKeyDown=${(e) => e.key === "Enter" && openJob.set(b.job.id)}>
              <title>${"job " + b.job.id + " · " + b.job.type + " · " + b.job.status + (b.job.lastError ? " · " + b.job.lastError : "")}</title>
              <rect x=${b.x} y=${b.y} width=${l.W} height=${l.H} rx="4" />
              <text x=${b.x + 5} y=${b.y + 13}>${(b.job.flowNode ?? b.job.id).slice(0, 22)}</text>
              <text x=${b.x + 5} y=${b.y + 27} class="status">${b.job.status}</text>
            </g>`
          : html`<g class="node more" key=${"more" + b.x}><rect x=${b.x} y=${b.y} width=${l.W} height=${l.H} rx="4" />
              <text x=${b.x + 5} y=${b.y + 13}>+${b.more} more</text>
              <text x=${b.x + 5} y=${b.y + 27} class="status">${Object.entries(b.counts).map(([s, n]) => n + " " + s).join(", ")}</text></g>`,
      )}
    </svg>
  </div>`;
};

export const FlowPanel = () => {
  const id = useStore(openFlow);
  const reread = useStore(jobsChanged);
  const panel = useRef(null);
  // A running flow's graph follows it every second; a finished one is read once.
  const [follow, setFollow] = useState(false);
  const answer = useFollowed(id, "api/flows/" + encodeURIComponent(id ?? ""), { follow, reread });
  useEffect(() => setFollow(answer?.body?.flow?.status === "running"), [answer]);
  useEffect(() => {
    if (id === null || answer === null) return;
    panel.current?.scrollIntoView({ block: "nearest" });
    panel.current?.querySelector("h2")?.focus({ preventScroll: true });
  }, [id, answer === null]);
  if (id === null || answer === null) return null;
  const { flow, error } = answer.body;
  const cancel = async () => {
    await act("api/flows/" + encodeURIComponent(id) + "/cancel", ASK["flow-cancel"](id));
    jobsChanged.set((n) => n + 1);
  };
  return html`<section class="wide open" id="flow-panel" ref=${panel}>
    <h2 tabindex="-1">Flow <span id="flow-id">${id}</span> <button id="flow-close" onClick=${() => openFlow.set(null)}>close</button></h2>
    ${error
      ? html`<p class="bad">${error}</p>`
      : html`<p data-testid="flow-summary">${flow.name}${flow.key ? " (key " + flow.key + ")" : ""}: <b>${flow.status}</b>, ${flow.total} jobs — ${flow.live} live, ${flow.dead} dead, ${flow.cancelled} cancelled; started ${waited(flow.createdAt)} ago
          ${flow.status === "running" && html` <button data-action="cancel-flow" class="danger" onClick=${cancel}>cancel the flow</button>`}</p>
        <${FlowGraph} graph=${answer.body} />`}
  </section>`;
};
