// A machine drawn from its config (/api/machines) with the current state lit: leaves in columns
// by their distance from the initial state, an arrow for every transition between them.
import { html } from "./html.js";

export const layout = (config) => {
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
  const leafOf = (path) => {
    let p = path;
    while (nodes[p] && nodes[p].states && nodes[p].initial) p = p + "." + nodes[p].initial;
    return p;
  };
  const resolve = (from, target) => {
    if (target.startsWith("#")) return leafOf(target.slice(1).split(".").slice(1).join("."));
    const parent = from.split(".").slice(0, -1).join(".");
    return leafOf(parent ? parent + "." + target : target);
  };
  const edges = new Set();
  const add = (from, ts) => {
    for (const t of ts ?? []) for (const target of [].concat(t.target ?? [])) edges.add(from + "|" + resolve(from, target));
  };
  for (const [path, node] of Object.entries(nodes)) {
    for (const leaf of leaves.filter((l) => l === path || l.startsWith(path + "."))) {
      for (const ts of Object.values(node.on ?? {})) add(leaf, ts);
      add(leaf, node.always);
      for (const ts of Object.values(node.after ?? {})) add(leaf, ts);
      for (const inv of node.invoke ?? []) {
        add(leaf, inv.onDone);
        add(leaf, inv.onError);
      }
    }
  }
  // Columns by distance from the initial leaf.
  const start = leafOf(config.initial);
  const depth = { [start]: 0 };
  const queue = [start];
  while (queue.length) {
    const from = queue.shift();
    for (const e of edges) {
      const [a, b] = e.split("|");
      if (a === from && depth[b] === undefined) {
        depth[b] = depth[a] + 1;
        queue.push(b);
      }
    }
  }
  const columns = [];
  for (const leaf of leaves) (columns[depth[leaf] ?? 0] ??= []).push(leaf);
  const W = 92, H = 20, GX = 26, GY = 8, pos = {};
  columns.forEach((col, x) => col.forEach((leaf, y) => (pos[leaf] = { x: 4 + x * (W + GX), y: 4 + y * (H + GY) })));
  const width = 8 + columns.length * (W + GX) - GX;
  const height = 8 + Math.max(...columns.map((c) => c.length)) * (H + GY) - GY;
  return { leaves, edges: [...edges].map((e) => e.split("|")), pos, W, H, width, height };
};

/** The machine `kind` ("job", "supervisor") laid out by `layouts`, with `lit` lit. */
export const Statechart = ({ layouts, kind, lit, title }) => {
  const l = layouts?.[kind];
  if (!l) return null;
  return html`<div class="chart" data-machine=${kind} data-lit=${lit}>
    <div class="title">${title}</div>
    <svg width=${l.width} height=${l.height}>
      <defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#b8bfcc" /></marker></defs>
      ${l.edges.filter(([a, b]) => a !== b).map(([a, b]) => {
        const p = l.pos[a], q = l.pos[b];
        const x1 = p.x + (q.x >= p.x ? l.W : 0), x2 = q.x + (q.x >= p.x ? 0 : l.W);
        return html`<line class="edge" key=${a + "|" + b} x1=${x1} y1=${p.y + l.H / 2} x2=${x2} y2=${q.y + l.H / 2} />`;
      })}
      ${l.leaves.map((leaf) => {
        const p = l.pos[leaf];
        return html`<g class=${"state" + (leaf === lit ? " lit" : "")} key=${leaf} data-state=${leaf}>
          <rect x=${p.x} y=${p.y} width=${l.W} height=${l.H} rx="4" /><text x=${p.x + 5} y=${p.y + 14}>${leaf.split(".").pop()}</text>
        </g>`;
      })}
    </svg>
  </div>`;
};
