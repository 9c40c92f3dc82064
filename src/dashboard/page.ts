// The dashboard's one page: plain HTML, CSS and a script, no build step and nothing fetched from
// elsewhere (a dashboard on an operator's network may have no internet). It listens to
// /api/events (a snapshot a second), draws the history the database keeps (/api/history) with
// uPlot (served from the package, assets/uplot.*), and draws
// each machine from its config (/api/machines) with the current state lit.
export const DASHBOARD_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>picket</title>
<link rel="stylesheet" href="assets/uplot.css">
<script src="assets/uplot.js"></script>
<style>
  :root { --fg: #1d2433; --muted: #6b7385; --line: #d8dce5; --bg: #f6f7fa; --lit: #2f6fed; --bad: #c2410c; --ok: #15803d; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
  header { display: flex; gap: 16px; align-items: center; padding: 12px 20px; background: #fff; border-bottom: 1px solid var(--line); }
  header h1 { font-size: 18px; margin: 0; }
  #status { color: var(--muted); }
  #status.down { color: var(--bad); }
  main { padding: 16px 20px; display: grid; gap: 16px; grid-template-columns: 1fr 1fr; }
  section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; min-width: 0; }
  section.wide { grid-column: 1 / -1; }
  h2 { font-size: 15px; margin: 0 0 8px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
  th { color: var(--muted); font-weight: 600; }
  td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
  .muted { color: var(--muted); }
  .bad { color: var(--bad); }
  button { font: inherit; padding: 2px 10px; border: 1px solid var(--line); border-radius: 4px; background: #fff; cursor: pointer; }
  button:hover { border-color: var(--lit); }
  a.job { color: var(--lit); cursor: pointer; text-decoration: underline; }
  pre { white-space: pre-wrap; word-break: break-word; background: var(--bg); padding: 6px 8px; border-radius: 4px; margin: 4px 0; font-size: 12px; }
  .worker { border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; margin-bottom: 10px; }
  .worker h3 { margin: 0 0 4px; font-size: 14px; }
  .charts { display: flex; flex-wrap: wrap; gap: 8px; align-items: flex-start; }
  .chart { border: 1px solid var(--line); border-radius: 4px; padding: 4px; }
  .chart .title { font-size: 12px; color: var(--muted); }
  svg text { font: 10px system-ui, sans-serif; }
  svg .state rect { fill: #fff; stroke: #9aa3b5; }
  svg .state.lit rect { fill: var(--lit); stroke: var(--lit); }
  svg .state.lit text { fill: #fff; font-weight: 600; }
  svg .edge { stroke: #b8bfcc; fill: none; marker-end: url(#arrow); }
  #detail, #worker-panel { display: none; }
  #detail.open, #worker-panel.open { display: block; }
  input { font: inherit; padding: 2px 6px; }
  section { overflow-x: auto; }
  /* What an action did: fixed at the bottom, where it is seen wherever the button was. */
  #action { position: fixed; left: 50%; bottom: 16px; transform: translateX(-50%); max-width: min(640px, calc(100vw - 24px)); background: var(--fg); color: #fff; padding: 8px 14px; border-radius: 6px; box-shadow: 0 4px 16px rgba(0,0,0,.2); }
  #action:empty { display: none; }
  #action.bad { background: var(--bad); }
  dialog { border: 1px solid var(--line); border-radius: 8px; max-width: min(520px, calc(100vw - 24px)); }
  dialog .buttons { display: flex; gap: 8px; justify-content: flex-end; margin-top: 12px; }
  button.danger { border-color: var(--bad); color: var(--bad); }
  .paused { color: var(--bad); font-weight: 600; }
  .tabs { display: flex; flex-wrap: wrap; gap: 4px; margin-bottom: 8px; }
  .tabs button[aria-selected="true"] { background: var(--lit); border-color: var(--lit); color: #fff; }
  #browse-form { display: flex; flex-wrap: wrap; gap: 6px 10px; align-items: center; margin-bottom: 8px; }
  #browse-form input { width: 9em; }
  :focus-visible { outline: 2px solid var(--lit); outline-offset: 1px; }
  @media (max-width: 800px) {
    main { grid-template-columns: 1fr; padding: 10px; }
    header { flex-wrap: wrap; padding: 10px; }
  }
</style>
</head>
<body>
<header>
  <h1>picket</h1>
  <span id="status">connecting…</span>
  <span style="flex:1"></span>
  <label class="muted">your name <input id="by" size="10" autocomplete="off" placeholder="(optional)"></label>
  <label class="muted">token (actions; reads when the dashboard asks) <input id="token" type="password" size="16" autocomplete="off"></label>
</header>
<main>
  <section><h2>Queue by task</h2><div id="unhandled"></div><div id="queue"></div></section>
  <section><h2>Queues</h2><div id="queues"></div></section>
  <section class="wide" id="browser"><h2>Jobs</h2>
    <div class="tabs" role="tablist" id="browse-tabs"></div>
    <form id="browse-form">
      <label>task <input name="task" autocomplete="off"></label>
      <label>queue <input name="queue" autocomplete="off"></label>
      <label>worker <input name="worker" autocomplete="off"></label>
      <label>key <input name="key" autocomplete="off"></label>
      <label>search <input name="text" autocomplete="off" placeholder="a job id, or text in payload or error"></label>
      <label>before <input name="before" type="datetime-local" step="1"></label>
      <select name="order" aria-label="order"><option value="">usual order</option><option value="newest">newest first</option><option value="oldest">oldest first</option></select>
      <button type="submit">find</button>
    </form>
    <div id="bulk" class="buttons"></div>
    <div id="browse-results"></div>
  </section>
  <section class="wide"><h2>History <span class="tabs" id="history-range"><button type="button" data-range="hour" aria-selected="true">last hour</button><button type="button" data-range="day" aria-selected="false">last day</button></span></h2><div id="history" class="charts"></div></section>
  <section class="wide"><h2>Workers</h2><div id="workers"></div></section>
  <section class="wide" id="worker-panel"><h2>Worker <span id="worker-id"></span> <button id="worker-close">close</button></h2><div id="worker-body"></div></section>
  <section class="wide"><h2>Schedules</h2><div id="schedules"></div></section>
  <section><h2>Recent failures (retrying)</h2><div id="retrying"></div></section>
  <section><h2>Dead jobs</h2><div id="dead"></div></section>
  <section class="wide" id="detail"><h2>Job <span id="detail-id"></span> <button id="detail-close">close</button></h2><div id="detail-body"></div></section>
</main>
<div id="action" role="status" aria-live="polite"></div>
<dialog id="confirm" aria-labelledby="confirm-text"><form method="dialog"><p id="confirm-text"></p><div class="buttons"><button value="keep" id="confirm-keep">keep as is</button><button value="go" id="confirm-go" class="danger" autofocus></button></div></form></dialog>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const tokenInput = $("token");
tokenInput.value = sessionStorage.getItem("picket-token") ?? "";
// Sent with every request: write actions need it, and reads too when the dashboard was started so.
const withToken = () => (tokenInput.value ? { headers: { authorization: "Bearer " + tokenInput.value } } : {});
tokenInput.addEventListener("change", () => { sessionStorage.setItem("picket-token", tokenInput.value); start(); });
const byInput = $("by");
byInput.value = localStorage.getItem("picket-by") ?? "";
byInput.addEventListener("change", () => localStorage.setItem("picket-by", byInput.value));

// --- Statecharts, laid out from the machine's config ------------------------------------------
let machines = null;
const charts = {};
function layout(config) {
  // Leaves by path ("running.polling"); a target naming a compound state enters its initial leaf.
  const leaves = [];
  const nodes = {};
  const walk = (node, path) => {
    nodes[path] = node;
    const children = Object.entries(node.states ?? {});
    if (path !== "" && children.length === 0) leaves.push(path);
    for (const [key, child] of children) walk(child, path ? path + "." + key : key);
  };
  walk(config, "");
  const leafOf = (path) => { let p = path; while (nodes[p] && nodes[p].states && nodes[p].initial) p = p + "." + nodes[p].initial; return p; };
  const resolve = (from, target) => {
    if (target.startsWith("#")) return leafOf(target.slice(1).split(".").slice(1).join("."));
    const parent = from.split(".").slice(0, -1).join(".");
    return leafOf(parent ? parent + "." + target : target);
  };
  const edges = new Set();
  const add = (from, ts) => { for (const t of ts ?? []) for (const target of [].concat(t.target ?? [])) edges.add(from + "|" + resolve(from, target)); };
  for (const [path, node] of Object.entries(nodes)) {
    const from = leaves.filter((l) => l === path || l.startsWith(path + "."));
    for (const leaf of from) {
      for (const ts of Object.values(node.on ?? {})) add(leaf, ts);
      add(leaf, node.always);
      for (const ts of Object.values(node.after ?? {})) add(leaf, ts);
      for (const inv of node.invoke ?? []) { add(leaf, inv.onDone); add(leaf, inv.onError); }
    }
  }
  // Columns by distance from the initial leaf.
  const start = leafOf(config.initial);
  const depth = { [start]: 0 };
  const queue = [start];
  while (queue.length) {
    const from = queue.shift();
    for (const e of edges) { const [a, b] = e.split("|"); if (a === from && depth[b] === undefined) { depth[b] = depth[a] + 1; queue.push(b); } }
  }
  const columns = [];
  for (const leaf of leaves) (columns[depth[leaf] ?? 0] ??= []).push(leaf);
  const W = 92, H = 20, GX = 26, GY = 8, pos = {};
  columns.forEach((col, x) => col.forEach((leaf, y) => (pos[leaf] = { x: 4 + x * (W + GX), y: 4 + y * (H + GY) })));
  const width = 8 + columns.length * (W + GX) - GX;
  const height = 8 + Math.max(...columns.map((c) => c.length)) * (H + GY) - GY;
  return { leaves, edges: [...edges].map((e) => e.split("|")), pos, W, H, width, height };
}
function chart(kind, lit, title) {
  const l = charts[kind];
  if (!l) return "";
  const lines = l.edges.filter(([a, b]) => a !== b).map(([a, b]) => {
    const p = l.pos[a], q = l.pos[b];
    const x1 = p.x + (q.x >= p.x ? l.W : 0), x2 = q.x + (q.x >= p.x ? 0 : l.W);
    return '<line class="edge" x1="' + x1 + '" y1="' + (p.y + l.H / 2) + '" x2="' + x2 + '" y2="' + (q.y + l.H / 2) + '"/>';
  }).join("");
  const boxes = l.leaves.map((leaf) => {
    const p = l.pos[leaf];
    const on = leaf === lit;
    return '<g class="state' + (on ? " lit" : "") + '" data-state="' + esc(leaf) + '"><rect x="' + p.x + '" y="' + p.y + '" width="' + l.W + '" height="' + l.H + '" rx="4"/><text x="' + (p.x + 5) + '" y="' + (p.y + 14) + '">' + esc(leaf.split(".").pop()) + "</text></g>";
  }).join("");
  return '<div class="chart" data-machine="' + kind + '" data-lit="' + esc(lit) + '"><div class="title">' + title + '</div><svg width="' + l.width + '" height="' + l.height + '"><defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#b8bfcc"/></marker></defs>' + lines + boxes + "</svg></div>";
}

// --- History: charts of what the database kept (an hour by minute, a day by quarter hour) --------
const CHART_COLORS = ["#2f6fed", "#c2410c", "#15803d", "#7c3aed", "#b45309", "#0e7490", "#be185d", "#4d7c0f"];
const CHARTS = [
  ["completed", "jobs completed", (t) => t.completed],
  ["failed", "attempts failed", (t) => t.failed],
  ["pickup", "mean pickup delay (ms)", (t) => t.pickupMs],
  ["ready", "ready jobs (sampled)", (t) => t.ready],
];
let historyRange = "hour";
const plots = [];
async function drawHistory() {
  const response = await fetch("api/history?range=" + historyRange, withToken());
  const h = await response.json();
  if (!response.ok) { $("history").innerHTML = '<p class="bad">' + esc(h.error) + "</p>"; return; }
  for (const plot of plots.splice(0)) plot.destroy();
  // The busiest tasks, each a colour of its own across the charts.
  const tasks = h.tasks.slice().sort((a, b) => b.completed.reduce((x, y) => x + y, 0) - a.completed.reduce((x, y) => x + y, 0)).slice(0, CHART_COLORS.length);
  if (tasks.length === 0) { $("history").innerHTML = '<p class="muted" data-testid="history-empty">nothing recorded in the last ' + historyRange + "</p>"; return; }
  $("history").innerHTML = CHARTS.map(([key]) => '<div class="chart" data-chart="' + key + '"></div>').join("");
  const x = h.buckets.map((at) => new Date(at).getTime() / 1000);
  const width = Math.max(260, Math.min(560, Math.floor(($("history").clientWidth - 24) / 2)));
  for (const [key, title, pick] of CHARTS) {
    const el = document.querySelector('[data-chart="' + key + '"]');
    const opts = { title, width, height: 170, legend: { show: true }, scales: { x: { time: true } },
      series: [{}, ...tasks.map((t, i) => ({ label: t.type, stroke: CHART_COLORS[i], width: 1.5, spanGaps: key === "ready" }))] };
    plots.push(new uPlot(opts, [x, ...tasks.map(pick)], el));
  }
}
setInterval(() => { if (document.visibilityState === "visible") drawHistory(); }, 30000);

// --- Rendering a snapshot --------------------------------------------------------------------
// Pending jobs split three ways: only a growing "ready" means the workers are behind.
const LIVE_STATES = ["ready", "scheduled", "retrying", "processing"];
const LIVE_TITLES = { ready: "due now, waiting for a worker", scheduled: "waiting for the run time they were enqueued with", retrying: "an attempt failed; waiting out its backoff", processing: "held by a worker" };
// One entry of a job's history: an attempt that did not finish (numbered across operator
// retries) with its stack, or an operator's action with who asked.
const OPERATOR_DID = { retry: "retried", cancel: "cancelled", run_now: "made due now" };
function historyEntry(e) {
  if (e.operator) return '<div data-testid="history-operator">' + esc(OPERATOR_DID[e.operator] ?? e.operator) + " by " + esc(e.by ?? "an operator") + ' <span class="muted">· ' + esc(e.at) + "</span></div>";
  return '<div class="muted" data-testid="history-attempt">attempt ' + e.attempt + " · " + esc(e.at) + "</div><pre>" + esc(e.stack ?? e.message) + "</pre>";
}
// How long ago an ISO time was, for a person: "42 s", "3 min", "2 h".
const waited = (at) => { const s = Math.max(0, (Date.now() - new Date(at).getTime()) / 1000); return s < 120 ? Math.round(s) + " s" : s < 7200 ? Math.round(s / 60) + " min" : Math.round(s / 3600) + " h"; };
const pauseButton = (kind, name, paused) => '<button data-' + (paused ? "resume" : "pause") + '="' + kind + '" data-name="' + esc(name) + '">' + (paused ? "resume" : "pause") + "</button>";
let firstRendered = false;
function render(s) {
  const pausedTasks = new Set((s.paused ?? []).filter((p) => p.kind === "task").map((p) => p.name));
  // Every task with live or recent jobs, every task a live worker runs (to pause one before its jobs come), every paused one.
  const tasks = [...new Set([...s.depth.map((d) => d.type), ...s.finished.map((f) => f.type), ...s.handlers.handled, ...pausedTasks])].sort();
  const live = (type, state) => s.depth.filter((r) => r.type === type && r.state === state).reduce((n, r) => n + r.count, 0);
  const rate = (type, status) => s.finished.filter((r) => r.type === type && r.status === status).reduce((n, r) => n + r.count, 0) / s.finishedWindowSeconds;
  const h = s.handlers;
  $("unhandled").innerHTML = h.unhandled.length === 0 ? "" : '<p class="bad" data-testid="unhandled">' + (h.liveWorkers === 0 ? "no live worker: " : "no live worker has a handler for: ") +
    h.unhandled.map((u) => esc(u.type) + " (" + u.count + " pending)").join(", ") + "</p>";
  $("queue").innerHTML = tasks.length === 0 ? '<p class="muted">no live jobs</p>' :
    '<table><tr><th>task</th>' + LIVE_STATES.map((c) => '<th class="num" title="' + LIVE_TITLES[c] + '">' + c + "</th>").join("") + '<th class="num">completed/s</th><th class="num">dead/s</th><th></th></tr>' +
    tasks.map((t) => '<tr data-task="' + esc(t) + '"><td>' + esc(t) + "</td>" + LIVE_STATES.map((c) => '<td class="num" data-col="' + c + '">' + live(t, c) + "</td>").join("") + '<td class="num">' + rate(t, "completed").toFixed(1) + '</td><td class="num">' + rate(t, "dead").toFixed(1) + "</td><td>" + pauseButton("task", t, pausedTasks.has(t)) + "</td></tr>").join("") + "</table>";
  const queueRows = s.queues ?? [];
  $("queues").innerHTML = queueRows.length === 0 ? '<p class="muted">no queued jobs</p>' :
    '<table><tr><th>queue</th><th class="num">ready</th><th class="num">scheduled</th><th class="num">processing</th><th class="num">oldest ready</th><th>next</th><th>state</th><th></th></tr>' +
    queueRows.map((q) => '<tr data-queue="' + esc(q.name) + '"><td>' + esc(q.name) + '</td><td class="num" data-col="ready">' + q.ready + '</td><td class="num" data-col="scheduled">' + q.scheduled + '</td><td class="num" data-col="processing">' + q.processing +
      '</td><td class="num">' + (q.oldestReadyAt ? waited(q.oldestReadyAt) : "—") + '</td><td data-col="head">' + (q.head ? '<a class="job" href="#job-' + esc(q.head.id) + '" data-open="' + esc(q.head.id) + '">' + esc(q.head.id) + "</a> " + esc(q.head.type) : "—") + '</td><td data-col="state">' + (q.paused ? '<span class="paused">paused</span> <span class="muted">' + (q.paused.pausedBy ? "by " + esc(q.paused.pausedBy) : "") + "</span>" : "running") +
      "</td><td>" + pauseButton("queue", q.name, q.paused !== null) + "</td></tr>").join("") + "</table>";
  // One row a worker, a hundred of them at a glance; a worker's page (openWorker) has its machine and jobs.
  $("workers").innerHTML = s.workers.length === 0 ? '<p class="muted">no worker has written a heartbeat</p>' :
    '<table data-testid="workers"><thead><tr><th>worker</th><th>host</th><th class="num">pid</th><th>version</th><th>state</th><th class="num">concurrency</th><th class="num">running</th><th class="num">waiting</th><th>last beat</th><th>started</th></tr></thead><tbody>' +
    s.workers.map((w) => '<tr data-testid="worker" data-worker-id="' + esc(w.id) + '"><td><a class="job" href="#worker-' + esc(w.id) + '" data-worker="' + esc(w.id) + '">' + esc(w.id) + "</a></td><td>" + esc(w.host) + '</td><td class="num">' + w.pid + "</td><td>" + esc(w.version) +
      '</td><td data-col="state">' + esc(w.state) + '</td><td class="num">' + w.concurrency + '</td><td class="num" data-col="running">' + w.running + '</td><td class="num">' + w.waiting + '</td><td class="' + (w.silentMs > 10000 ? "bad" : "") + '">' + (w.silentMs / 1000).toFixed(1) + " s ago</td><td>" +
      new Date(w.startedAt).toLocaleString() + "</td></tr>").join("") + "</tbody></table>";
  if (!firstRendered) { firstRendered = true; performance.mark("picket-first-render"); }
  const failedRows = (rows, action) => rows.length === 0 ? '<p class="muted">none</p>' :
    "<table><tr><th>job</th><th>task</th><th>attempts</th><th>error</th><th></th></tr>" + rows.map((j) =>
      '<tr data-testid="' + action + '-row" data-job-id="' + esc(j.id) + '"><td><a class="job" href="#job-' + esc(j.id) + '" data-open="' + esc(j.id) + '">' + esc(j.id) + "</a></td><td>" + esc(j.type) + "</td><td>" + j.attempts + "/" + j.maxAttempts + '</td><td><details><summary class="bad">' + esc(j.lastError) + "</summary>" +
      (j.errors ?? []).slice().reverse().map(historyEntry).join("") +
      '</details></td><td><button data-action="' + action + '" data-id="' + esc(j.id) + '">' + action + "</button></td></tr>").join("") + "</table>";
  const missed = (m) => typeof m === "string" ? m : "catch up " + m.catchUp;
  // Each schedule: its pattern, its last tick's job and that job's status, its next ticks; pause, resume, trigger now.
  const lastJobs = new Map((s.scheduleJobs ?? []).map((j) => [j.schedule, j]));
  $("schedules").innerHTML = (s.schedules ?? []).length === 0 ? '<p class="muted">no schedules</p>' :
    "<table><tr><th>schedule</th><th>task</th><th>cron</th><th>missed</th><th>last fired</th><th>its job</th><th>next run</th><th>state</th><th></th></tr>" + s.schedules.map((c) => {
      const last = lastJobs.get(c.name);
      const job = !last ? "—" : last.id ? '<a class="job" href="#job-' + esc(last.id) + '" data-open="' + esc(last.id) + '">' + esc(last.id) + "</a> " + esc(last.status) : '<span class="muted">none kept</span>';
      return '<tr data-testid="schedule-row" data-schedule="' + esc(c.name) + '"><td>' + esc(c.name) + "</td><td>" + esc(c.task) + "</td><td><code>" + esc(c.cron) + "</code>" + (c.timezone ? " " + esc(c.timezone) : "") +
        "</td><td>" + esc(missed(c.missed)) + "</td><td>" + (c.lastFired ? new Date(c.lastFired).toLocaleString() : "never") + '</td><td data-col="job">' + job + '</td><td data-col="next">' + (c.pausedAt ? "—" : c.nextRun ? new Date(c.nextRun).toLocaleString() : "never") +
        '</td><td data-col="state">' + (c.pausedAt ? '<span class="paused">paused</span>' + (c.pausedBy ? ' <span class="muted">by ' + esc(c.pausedBy) + "</span>" : "") : "running") +
        '</td><td><button data-schedule-action="' + (c.pausedAt ? "resume" : "pause") + '" data-name="' + esc(c.name) + '">' + (c.pausedAt ? "resume" : "pause") + '</button> <button data-schedule-action="trigger" data-name="' + esc(c.name) + '">trigger now</button></td></tr>';
    }).join("") + "</table>";
  $("retrying").innerHTML = failedRows(s.retrying, "cancel");
  $("dead").innerHTML = failedRows(s.dead, "retry");
}

// Which actions a job's page offers, by its status: what the server would refuse is not shown.
const JOB_ACTIONS = [
  { action: "retry", label: "retry", when: ["dead"] },
  { action: "run-now", label: "run now", when: ["pending"] },
  { action: "cancel", label: "cancel", when: ["pending", "processing"] },
  { action: "delete", label: "delete", when: ["completed", "dead", "cancelled"] },
];
// What each action asks before it is done, and the confirming button's words.
const ASK = {
  retry: (id) => ["Retry job " + id + "? It runs again with a fresh set of attempts; its history is kept.", "retry"],
  cancel: (id) => ["Cancel job " + id + "? A pending job never runs; a running one's handler is told to stop.", "cancel the job"],
  "run-now": (id) => ["Run job " + id + " now? It becomes due at once, ahead of its run time.", "run now"],
  delete: (id) => ["Delete job " + id + " and its recorded steps? This cannot be undone.", "delete"],
  pause: (kind, name) => ["Pause " + kind + " " + name + "? No worker claims its jobs until it is resumed; running jobs finish.", "pause"],
  resume: (kind, name) => ["Resume " + kind + " " + name + "? Workers claim its jobs again at once.", "resume"],
  "schedule-pause": (name) => ["Pause schedule " + name + "? It fires no tick until resumed; the ticks meanwhile are skipped.", "pause"],
  "schedule-resume": (name) => ["Resume schedule " + name + "? It fires from its next tick.", "resume"],
  "schedule-trigger": (name) => ["Trigger schedule " + name + " now? One job is made at once, as a tick would make it.", "trigger now"],
};
function confirmed(text, go) {
  return new Promise((resolve) => {
    const dialog = $("confirm");
    $("confirm-text").textContent = text;
    $("confirm-go").textContent = go;
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "go"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}
let toastTimer = null;
function tell(text, bad) {
  $("action").textContent = text;
  $("action").className = bad ? "bad" : "";
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { $("action").textContent = ""; }, 15000);
}
async function act(path, question) {
  if (!(await confirmed(...question))) return;
  const headers = { ...(withToken().headers ?? {}) };
  if (byInput.value.trim()) headers["x-picket-by"] = encodeURIComponent(byInput.value.trim());
  try {
    const response = await fetch(path, { method: "POST", headers });
    const body = await response.json();
    tell(body.message ?? body.error, !response.ok);
  } catch (error) {
    tell("the dashboard did not answer: " + error.message + " (nothing is known to have changed; look again before retrying)", true);
  }
}
// --- The job browser: a state's jobs, filtered, a page at a time (GET api/jobs) --------------------
const BROWSE = [
  ["ready", "due since"], ["scheduled", "due at"], ["retrying", "retry at"], ["running", "claimed at"],
  ["dead", "died at"], ["completed", "completed at"], ["cancelled", "cancelled at"],
];
let browseState = "ready";
let browseCursor = null;
// The bulk actions each state offers (what the server would refuse is not shown).
const BULK = {
  ready: [["cancel", "cancel all"]], scheduled: [["run-now", "run all now"], ["cancel", "cancel all"]], retrying: [["run-now", "run all now"], ["cancel", "cancel all"]],
  running: [["cancel", "cancel all"]], dead: [["retry", "retry all"], ["delete", "delete all"]], completed: [["delete", "delete all"]], cancelled: [["delete", "delete all"]],
};
const BULK_VERB = { retry: "Retry", cancel: "Cancel", "run-now": "Run now", delete: "Delete" };
const BULK_AFTER = { retry: "They run again with fresh attempts.", cancel: "Pending ones never run; running ones are told to stop.", "run-now": "They become due at once.", delete: "This cannot be undone." };
function filterParams() {
  const params = new URLSearchParams({ state: browseState });
  for (const [name, value] of new FormData($("browse-form"))) {
    if (!value) continue;
    if (name === "before") params.set("before", new Date(value).toISOString());
    else params.set(name, value);
  }
  return params;
}
function renderBulk() {
  $("bulk").innerHTML = BULK[browseState].map(([action, label]) => '<button type="button" data-bulk="' + action + '">' + label + "</button>").join(" ");
}
async function bulk(action) {
  const all = filterParams();
  const params = new URLSearchParams({ state: browseState });
  for (const name of ["task", "queue", "before"]) if (all.get(name)) params.set(name, all.get(name));
  const counted = await fetch("api/bulk/" + action + "/count?" + params, withToken());
  const body = await counted.json();
  if (!counted.ok) return tell(body.error, true);
  if (body.count === 0) return tell("no " + browseState + " jobs match: nothing to do", false);
  const what = body.count.toLocaleString("en-US") + " " + browseState + " job" + (body.count === 1 ? "" : "s") + (params.get("task") ? " of task " + params.get("task") : "") + (params.get("queue") ? " in queue " + params.get("queue") : "") + (params.get("before") ? " before " + new Date(params.get("before")).toLocaleString() : "");
  params.set("expected", String(body.count));
  await act("api/bulk/" + action + "?" + params, [BULK_VERB[action] + " " + what + "? " + BULK_AFTER[action] + " At most that many are changed, in batches.", BULK_VERB[action].toLowerCase() + " " + body.count.toLocaleString("en-US")]);
  browse(false);
  drawHistory();
}
$("browse-tabs").innerHTML = BROWSE.map(([state]) => '<button type="button" role="tab" data-browse="' + state + '" aria-selected="' + (state === browseState) + '">' + state + "</button>").join("");
let browseSeq = 0;
async function browse(more) {
  // Only the latest request's answer is shown: an earlier one (another tab, the page's first) answered late is dropped.
  const seq = ++browseSeq;
  renderBulk();
  const params = filterParams();
  if (params.get("before")) { params.set("to", params.get("before")); params.delete("before"); }
  // A job id typed in the search box opens that job.
  const text = params.get("text");
  if (text && /^[1-9][0-9]{0,18}$/.test(text.trim())) return openJob(text.trim());
  if (more && browseCursor) params.set("after", browseCursor);
  const response = await fetch("api/jobs?" + params, withToken());
  const body = await response.json();
  if (seq !== browseSeq) return;
  if (!response.ok) { $("browse-results").innerHTML = '<p class="bad" data-testid="browse-error">' + esc(body.error) + "</p>"; return; }
  browseCursor = body.next;
  const label = BROWSE.find(([state]) => state === browseState)[1];
  const rows = body.jobs.map((j) => '<tr data-testid="browse-row" data-job-id="' + esc(j.id) + '"><td><a class="job" href="#job-' + esc(j.id) + '" data-open="' + esc(j.id) + '">' + esc(j.id) + "</a></td><td>" + esc(j.type) + "</td><td>" + esc(j.queue ?? "") + "</td><td>" + esc(j.key ?? "") +
    '</td><td class="num">' + j.attempts + (j.maxAttempts ? "/" + j.maxAttempts : "") + "</td><td>" + new Date(j.at).toLocaleString() + "</td><td>" + esc(j.lockedBy ?? "") + '</td><td class="bad">' + esc(j.lastError ?? "") + "</td></tr>").join("");
  const table = $("browse-table");
  if (more && table) table.insertAdjacentHTML("beforeend", rows);
  else $("browse-results").innerHTML = (body.jobs.length === 0 && !body.next ? '<p class="muted" data-testid="browse-empty">no ' + esc(browseState) + " jobs match</p>" :
    '<table><thead><tr><th>job</th><th>task</th><th>queue</th><th>key</th><th class="num">attempts</th><th>' + label + '</th><th>worker</th><th>last error</th></tr></thead><tbody id="browse-table">' + rows + "</tbody></table>") + '<p id="browse-more-line"></p>';
  $("browse-more-line").innerHTML = body.next === null ? '<span class="muted" data-testid="browse-end">end of the list</span>' :
    (body.searchedTo ? '<span class="muted" data-testid="browse-searched">searched back to ' + new Date(body.searchedTo).toLocaleString() + " without filling the page · </span>" : "") + '<button type="button" id="browse-more">more</button>';
}
$("browse-form").addEventListener("submit", (event) => { event.preventDefault(); browse(false); });

// --- A worker's page: its supervisor machine and the jobs it holds, refreshed while open -----------
let openWorkerId = null;
async function openWorker(id, quiet) {
  openWorkerId = id;
  const response = await fetch("api/workers/" + encodeURIComponent(id), withToken());
  const body = await response.json();
  if (openWorkerId !== id) return;
  $("worker-panel").classList.add("open");
  $("worker-id").textContent = id;
  if (!quiet) $("worker-panel").scrollIntoView({ block: "nearest" });
  if (!response.ok) { $("worker-body").innerHTML = '<p class="bad">' + esc(body.error) + "</p>"; return; }
  const w = body.worker;
  const states = new Map(w.jobs.map((j) => [j.id, j.state]));
  $("worker-body").innerHTML = '<div class="muted">' + esc(w.host) + " · pid " + w.pid + " · picket " + esc(w.version) + " · since " + new Date(w.startedAt).toLocaleString() + " · concurrency " + w.concurrency + " · running " + w.running + " · waiting " + w.waiting + "</div>" +
    '<div class="charts">' + chart("supervisor", w.state, "supervisor · " + esc(w.state)) + "</div>" +
    (body.jobs.length === 0 ? '<p class="muted">holds no job</p>' :
      '<table data-testid="worker-jobs"><thead><tr><th>job</th><th>task</th><th>machine</th><th class="num">attempt</th><th>held for</th><th>progress</th><th></th></tr></thead><tbody>' +
      body.jobs.map((j) => '<tr data-testid="worker-job" data-job-id="' + esc(j.id) + '"><td><a class="job" href="#job-' + esc(j.id) + '" data-open="' + esc(j.id) + '">' + esc(j.id) + "</a></td><td>" + esc(j.type) + '</td><td data-col="state">' + esc(states.get(j.id) ?? "—") +
        '</td><td class="num">' + j.attempts + "</td><td>" + waited(j.at) + "</td><td><code>" + esc(j.progress ?? "") + '</code></td><td><button data-action="cancel" data-id="' + esc(j.id) + '">cancel</button></td></tr>').join("") + "</tbody></table>");
}
// While a worker's page or a running job's page is open, it follows the worker's heartbeats.
let openJobRunning = null;
setInterval(() => {
  if (openWorkerId !== null && $("worker-panel").classList.contains("open")) openWorker(openWorkerId, true);
  if (openJobRunning !== null && $("detail").classList.contains("open")) openJob(openJobRunning, true);
}, 1000);

let shownJob = null;
async function openJob(id, quiet) {
  // The last job asked for is the one shown: a refresh of the one before, answered late, is dropped.
  shownJob = id;
  if (openJobRunning !== id) openJobRunning = null;
  const response = await fetch("api/jobs/" + encodeURIComponent(id), withToken());
  const job = await response.json();
  if (shownJob !== id) return;
  $("detail").classList.add("open");
  if (!quiet) $("detail").scrollIntoView({ block: "nearest" });
  openJobRunning = job.status === "processing" ? id : null;
  $("detail-id").textContent = id;
  $("detail-body").innerHTML = job.error ? '<p class="bad">' + esc(job.error) + "</p>" :
    (job.machineState ? '<div data-testid="job-machine">' + chart("job", job.machineState, "its machine · " + esc(job.machineState)) + "</div>" : "") +
    '<table data-testid="detail">' + [["status", job.status], ["task", job.type], ["attempts", job.attempts + " of " + (job.maxAttempts ?? "the task's") + (job.priorAttempts > 0 ? " since the last retry, " + (job.priorAttempts + job.attempts) + " in all" : "")], ["queue", job.queue ?? "—"], ["key", job.key ?? "—"], ["priority", job.priority], ["run at", job.runAt], ["created", job.createdAt], ["finished", job.finishedAt ?? "—"], ["claimed by", job.lockedBy ?? "—"]]
      .map(([k, v]) => "<tr><th>" + k + "</th><td>" + esc(v) + "</td></tr>").join("") +
    '<tr><th>payload</th><td><pre data-testid="payload">' + esc(JSON.stringify(job.payload, null, 2)) + "</pre></td></tr>" +
    "<tr><th>progress</th><td><pre>" + esc(JSON.stringify(job.progress)) + "</pre></td></tr><tr><th>result</th><td><pre>" + esc(JSON.stringify(job.result)) + "</pre></td></tr>" +
    "<tr><th>steps</th><td>" + ((job.steps ?? []).map((st) => '<div data-testid="step"><b>' + esc(st.name) + '</b> <span class="muted">attempt ' + st.attempt + " · " + esc(st.createdAt) + "</span><pre>" + esc(JSON.stringify(st.result)) + "</pre></div>").join("") || "none") + "</td></tr>" +
    "<tr><th>history</th><td>" + ((job.errors ?? []).map(historyEntry).join("") || "none") + "</td></tr></table>" +
    '<div class="buttons" data-testid="detail-actions">' + JOB_ACTIONS.filter((a) => a.when.includes(job.status)).map((a) => '<button data-action="' + a.action + '" data-id="' + esc(id) + '">' + a.label + "</button>").join(" ") + "</div>";
}

document.addEventListener("click", async (event) => {
  const target = event.target;
  if (target.dataset.open) { event.preventDefault(); return openJob(target.dataset.open); }
  if (target.dataset.browse) {
    browseState = target.dataset.browse;
    for (const tab of document.querySelectorAll("[data-browse]")) tab.setAttribute("aria-selected", String(tab === target));
    return browse(false);
  }
  if (target.id === "browse-more") return browse(true);
  if (target.dataset.range) {
    historyRange = target.dataset.range;
    for (const tab of document.querySelectorAll("[data-range]")) tab.setAttribute("aria-selected", String(tab === target));
    return drawHistory();
  }
  if (target.dataset.bulk) return bulk(target.dataset.bulk);
  if (target.dataset.scheduleAction) {
    const action = target.dataset.scheduleAction, name = target.dataset.name;
    return act("api/schedules/" + action + "?name=" + encodeURIComponent(name), ASK["schedule-" + action](name));
  }
  if (target.id === "detail-close") return $("detail").classList.remove("open");
  if (target.id === "worker-close") { openWorkerId = null; return $("worker-panel").classList.remove("open"); }
  if (target.dataset.worker) { event.preventDefault(); return openWorker(target.dataset.worker); }
  if (target.dataset.action) {
    const { action, id } = target.dataset;
    await act("api/jobs/" + encodeURIComponent(id) + "/" + action, ASK[action](id));
    if ($("detail").classList.contains("open") && $("detail-id").textContent === id) openJob(id);
  }
  for (const verb of ["pause", "resume"]) {
    if (target.dataset[verb]) {
      const kind = target.dataset[verb], name = target.dataset.name;
      await act("api/" + verb + "?" + kind + "=" + encodeURIComponent(name), ASK[verb](kind, name));
    }
  }
});

let events = null;
async function start() {
  events?.close();
  const response = await fetch("api/machines", withToken());
  if (!response.ok) { $("status").textContent = (await response.json()).error; $("status").className = "down"; return; }
  machines = await response.json();
  charts.job = layout(machines.job);
  charts.supervisor = layout(machines.supervisor);
  // EventSource sends no headers: the token, when there is one, goes in the query.
  events = new EventSource("api/events" + (tokenInput.value ? "?token=" + encodeURIComponent(tokenInput.value) : ""));
  events.addEventListener("snapshot", (e) => { $("status").textContent = "live · " + new Date().toLocaleTimeString(); $("status").className = ""; render(JSON.parse(e.data)); });
  events.addEventListener("failure", (e) => { $("status").textContent = "database: " + JSON.parse(e.data).error; $("status").className = "down"; });
  events.onerror = () => { $("status").textContent = "dashboard unreachable, retrying…"; $("status").className = "down"; };
  browse(false);
  drawHistory();
}
start();
</script>
</body>
</html>
`;
