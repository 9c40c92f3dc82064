// History kept by the database (/api/history): the last hour by minute or the last day by quarter
// hour, drawn with uPlot (served from the package as a global, assets/uplot.js), a colour per task.
import { useEffect, useRef, useState } from "preact/hooks";
import { getJson, token } from "./api.js";
import { html } from "./html.js";
import { useStore } from "./store.js";

const COLORS = ["#2f6fed", "#c2410c", "#15803d", "#7c3aed", "#b45309", "#0e7490", "#be185d", "#4d7c0f"];
const CHARTS = [
  ["completed", "jobs completed", (t) => t.completed],
  ["failed", "attempts failed", (t) => t.failed],
  ["pickup", "mean pickup delay (ms)", (t) => t.pickupMs],
  ["ready", "ready jobs (sampled)", (t) => t.ready],
];

export const History = () => {
  const [range, setRange] = useState("hour");
  const [answer, setAnswer] = useState(null);
  const [tick, setTick] = useState(0);
  const tokenValue = useStore(token);
  useEffect(() => {
    // Read again every 30 s while the page is seen: the rollup moves by the minute, with the
    // workers' heartbeats, so an action on a job changes nothing here to read at once.
    const timer = setInterval(() => document.visibilityState === "visible" && setTick((n) => n + 1), 30000);
    return () => clearInterval(timer);
  }, []);
  useEffect(() => {
    let current = true;
    getJson("api/history?range=" + range).then((a) => current && setAnswer(a));
    return () => void (current = false);
  }, [range, tick, tokenValue]);
  const box = useRef(null);
  const h = answer?.body;
  // The busiest tasks, each a colour of its own across the charts.
  const tasks = answer?.ok ? h.tasks.slice().sort((a, b) => sum(b.completed) - sum(a.completed)).slice(0, COLORS.length) : [];
  useEffect(() => {
    if (tasks.length === 0) return;
    const x = h.buckets.map((at) => new Date(at).getTime() / 1000);
    const width = Math.max(260, Math.min(560, Math.floor((box.current.clientWidth - 48) / 2)));
    const plots = CHARTS.map(([key, title, pick]) => {
      const opts = { title, width, height: 170, legend: { show: true }, scales: { x: { time: true } }, series: [{}, ...tasks.map((t, i) => ({ label: t.type, stroke: COLORS[i], width: 1.5, spanGaps: key === "ready" }))] };
      return new window.uPlot(opts, [x, ...tasks.map(pick)], box.current.querySelector('[data-chart="' + key + '"]'));
    });
    return () => plots.forEach((plot) => plot.destroy());
  }, [answer]);
  return html`
    <h2>History <span class="tabs" id="history-range">
      ${["hour", "day"].map((r) => html`<button type="button" key=${r} data-range=${r} aria-selected=${String(r === range)} onClick=${() => setRange(r)}>last ${r}</button>`)}
    </span></h2>
    <div id="history" class="charts" ref=${box}>
      ${answer === null
        ? null
        : !answer.ok
          ? html`<p class="bad">${h.error}</p>`
          : tasks.length === 0
            ? html`<p class="muted" data-testid="history-empty">nothing recorded in the last ${range}</p>`
            : CHARTS.map(([key]) => html`<div class="chart" key=${key} data-chart=${key}></div>`)}
    </div>
  `;
};

const sum = (values) => values.reduce((x, y) => x + y, 0);
