// A machine drawn from its config (/api/machines, or a workflow's recorded machine) with the
// current state(s) lit: leaves in columns by their distance from the initial state(s), an arrow for
// every transition between them. Nested states are drawn as their leaves (named by their path);
// entering a compound state enters its initial leaf, entering a parallel one every region's.
import { html } from "./html.js";

/** A delay in words: "200 ms", "1.5 s", "5 min", "24 h"; a named one ("jobTimeout") as named. */
export const delayWords = (delay) => {
  const ms = Number(delay);
  if (!/^\d+$/.test(String(delay))) return String(delay);
  const round = (n) => String(Math.round(n * 10) / 10);
  return ms < 1000 ? ms + " ms" : ms < 60_000 ? round(ms / 1000) + " s" : ms < 3_600_000 ? round(ms / 60_000) + " min" : round(ms / 3_600_000) + " h";
};

/** The event a transition's label names: "done", "error", "after 200 ms", or the event's own type. */
export const eventLabel = (type) =>
  type
    .replace(/^xstate\.done\.actor\..*$/, "done")
    .replace(/^xstate\.error\.actor\..*$/, "error")
    .replace(/^xstate\.done\.state\..*$/, "done")
    .replace(/^xstate\.after\.(\d+|[^.]+)\..*$/, (_, delay) => "after " + delayWords(delay));

/**
 * The leaves a state value names, as paths: "charging" → ["charging"]; { payment: "charging",
 * shipping: { packing: "picking" } } → ["payment.charging", "shipping.packing.picking"].
 */
export const activeLeaves = (value, prefix = "") => {
  if (value === null || value === undefined) return [];
  if (typeof value === "string") return [prefix + value];
  if (typeof value !== "object") return [];
  const entries = Object.entries(value);
  if (entries.length === 0) return prefix ? [prefix.slice(0, -1)] : [];
  return entries.flatMap(([key, child]) =>
    child !== null && typeof child === "object" && Object.keys(child).length === 0 ? [prefix + key] : activeLeaves(child, prefix + key + "."),
  );
};

/** Lays out `config`; `size` ({ W, H }) sets the boxes' size (the job's and supervisor's machines keep the default). */
export const layout = (config, size = {}) => {
  // Leaves by path ("running.polling").
  const leaves = [];
  const nodes = {};
  const walk = (node, path) => {
    nodes[path] = node;
    const children = Object.entries(node.states ?? {});
    if (path !== "" && children.length === 0) leaves.push(path);
    for (const [key, child] of children) walk(child, path ? path + "." + key : key);
  };
  walk(config, "");
  const isLeaf = new Set(leaves);
  // The leaves entering `path` enters: a compound state's initial leaf, every region's of a parallel one.
  const entered = (path) => {
    const node = nodes[path];
    if (node === undefined) return [];
    if (isLeaf.has(path)) return [path];
    const join = (key) => (path ? path + "." + key : key);
    if (node.type === "parallel") return Object.keys(node.states ?? {}).flatMap((key) => entered(join(key)));
    if (node.initial !== undefined) return entered(join(node.initial));
    return [];
  };
  // A target is relative to the state that defines the transition: a sibling by key, else by #id.
  const resolve = (from, target) => {
    if (target.startsWith("#")) return entered(target.slice(1).split(".").slice(1).join("."));
    const parent = from.split(".").slice(0, -1).join(".");
    return entered(parent ? parent + "." + target : target);
  };
  const edges = new Map();
  // Each arrow's state that defines it (a compound state's transition is an arrow from each of its leaves).
  const owners = {};
  const add = (leaf, path, ts, label) => {
    for (const t of ts ?? []) {
      for (const target of [].concat(t.target ?? [])) {
        for (const to of resolve(path, target)) {
          const key = leaf + "|" + to;
          owners[key] ??= path;
          const labels = edges.get(key) ?? [];
          if (!labels.includes(label)) labels.push(label);
          edges.set(key, labels);
        }
      }
    }
  };
  for (const [path, node] of Object.entries(nodes)) {
    for (const leaf of leaves.filter((l) => path === "" || l === path || l.startsWith(path + "."))) {
      for (const [event, ts] of Object.entries(node.on ?? {})) {
        // A compound or parallel state's own "done" is taken once its final leaves are reached: drawn from those only.
        if (event.startsWith("xstate.done.state.") && nodes[leaf].type !== "final") continue;
        add(leaf, path, ts, eventLabel(event));
      }
      add(leaf, path, node.always, "always");
      for (const [delay, ts] of Object.entries(node.after ?? {})) add(leaf, path, ts, "after " + delayWords(delay));
      for (const inv of node.invoke ?? []) {
        add(leaf, path, inv.onDone, "done");
        add(leaf, path, inv.onError, "error");
      }
    }
  }
  // Columns by distance from the initial leaves.
  const starts = entered("");
  const depth = Object.fromEntries(starts.map((leaf) => [leaf, 0]));
  const queue = [...starts];
  while (queue.length) {
    const from = queue.shift();
    for (const e of edges.keys()) {
      const [a, b] = e.split("|");
      if (a === from && depth[b] === undefined) {
        depth[b] = depth[a] + 1;
        queue.push(b);
      }
    }
  }
  const columns = [];
  for (const leaf of leaves) (columns[depth[leaf] ?? 0] ??= []).push(leaf);
  const W = size.W ?? 92, H = size.H ?? 20, GX = size.GX ?? 26, GY = 8, pos = {};
  columns.forEach((col, x) => col.forEach((leaf, y) => (pos[leaf] = { x: 4 + x * (W + GX), y: 4 + y * (H + GY) })));
  const width = 8 + columns.length * (W + GX) - GX;
  const height = 8 + Math.max(...columns.map((c) => c.length)) * (H + GY) - GY;
  const final = leaves.filter((leaf) => nodes[leaf].type === "final");
  return {
    leaves,
    edges: [...edges.keys()].map((e) => e.split("|")),
    labels: Object.fromEntries([...edges].map(([key, labels]) => [key, labels.join(", ")])),
    owners,
    final,
    pos,
    W,
    H,
    width,
    height,
  };
};

/**
 * The machine `kind` ("job", "supervisor", "workflow") laid out by `layouts`, with `lit` lit (one
 * leaf's path, or a list of them: a parallel state's active leaves). `labels` writes each
 * transition's events beside its arrow, and a nested leaf's parent path above its name.
 */
export const Statechart = ({ layouts, kind, lit, title, labels = false }) => {
  const l = layouts?.[kind];
  if (!l) return null;
  const lits = [].concat(lit ?? []);
  const said = new Set();
  return html`<div class="chart" data-machine=${kind} data-lit=${lits.join(" ")}>
    <div class="title">${title}</div>
    <svg width=${l.width + (labels ? 70 : 0)} height=${l.height}>
      <defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#b8bfcc" /></marker></defs>
      ${l.edges.filter(([a, b]) => a !== b && l.pos[a] && l.pos[b]).map(([a, b]) => {
        const p = l.pos[a], q = l.pos[b];
        const y1 = p.y + l.H / 2, y2 = q.y + l.H / 2;
        const label = l.labels[a + "|" + b];
        // A compound state's transition is an arrow from each of its leaves, and one into a parallel
        // state an arrow to each region's: its words are written once.
        const once = [l.owners[a + "|" + b] + ">" + label + ">" + b, a + ">" + label];
        const written = labels && !once.some((k) => said.has(k)) && (once.forEach((k) => said.add(k)), true);
        const tip = html`<title>${a + " → " + b + ": " + label}</title>`;
        if (labels && q.x === p.x) {
          // Within a column: a bow out on its right, clear of the boxes between (and of its words).
          const x = p.x + l.W, bow = x + 18 + Math.min(20, Math.abs(y2 - y1) / 4);
          return html`<g key=${a + "|" + b}><path class="edge" d=${`M${x},${y1} C${bow},${y1} ${bow},${y2} ${x},${y2}`}>${tip}</path>
            ${written && html`<text class="edge-label" x=${bow - 4} y=${(y1 + y2) / 2 + 3}>${label}</text>`}</g>`;
        }
        const x1 = p.x + (q.x >= p.x ? l.W : 0), x2 = q.x + (q.x >= p.x ? 0 : l.W);
        return html`<g key=${a + "|" + b}><line class="edge" x1=${x1} y1=${y1} x2=${x2} y2=${y2}>${tip}</line>
          ${written && html`<text class="edge-label" x=${(x1 + x2) / 2} y=${(y1 + y2) / 2 - 3} text-anchor="middle">${label}</text>`}</g>`;
      })}
      ${l.leaves.map((leaf) => {
        const p = l.pos[leaf];
        const parts = leaf.split(".");
        const parent = parts.slice(0, -1).join(".");
        const classes = "state" + (lits.includes(leaf) ? " lit" : "") + (l.final.includes(leaf) ? " final" : "");
        return html`<g class=${classes} key=${leaf} data-state=${leaf}>
          <title>${leaf}</title>
          <rect x=${p.x} y=${p.y} width=${l.W} height=${l.H} rx="4" />
          ${labels && parent
            ? html`<text x=${p.x + 5} y=${p.y + 11} class="path">${parent}</text><text x=${p.x + 5} y=${p.y + l.H - 6}>${parts.at(-1)}</text>`
            : html`<text x=${p.x + 5} y=${p.y + Math.min(14, l.H - 6)}>${parts.at(-1)}</text>`}
        </g>`;
      })}
    </svg>
  </div>`;
};
