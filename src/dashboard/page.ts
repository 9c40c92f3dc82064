// The dashboard's one page: its style and the shell its components (./ui/, Preact with htm) render
// into. No build step and nothing fetched from elsewhere (a dashboard on an operator's network may
// have no internet): Preact, htm and uPlot are served from the installed packages (./assets.ts).
import { ASSETS } from "./assets.ts";

// Every module the page runs, asked for at once (modulepreload) rather than one import level at a
// time as the browser would find them: the first render waits for the slowest, not for the chain.
const MODULES = [...ASSETS.keys()].filter((path) => path.endsWith(".js") && path !== "/assets/uplot.js");

export const DASHBOARD_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>picket</title>
<link rel="stylesheet" href="assets/uplot.css">
<script src="assets/uplot.js"></script>
<script>
// The live stream is opened here, before the page's modules load, so the first snapshot is read
// while they do (that halved the first render); app.js takes the stream over, with what came.
(() => {
  const token = sessionStorage.getItem("picket-token") ?? "";
  const events = new EventSource("api/events" + (token ? "?token=" + encodeURIComponent(token) : ""));
  const early = { events, token, last: null, keep: (e) => (early.last = e) };
  events.addEventListener("snapshot", early.keep);
  window.picketEarlyStream = early;
})();
</script>
<script type="importmap">{ "imports": { "preact": "./assets/preact.js", "preact/hooks": "./assets/preact-hooks.js", "htm": "./assets/htm.js" } }</script>
${MODULES.map((path) => `<link rel="modulepreload" href="${path.slice(1)}">`).join("\n")}
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
  svg .node rect { fill: #fff; stroke: #9aa3b5; }
  svg .node { cursor: pointer; }
  svg .node .status { fill: var(--muted); }
  svg .node.st-completed rect { fill: #e7f5ec; stroke: var(--ok); }
  svg .node.st-processing rect { fill: var(--lit); stroke: var(--lit); }
  svg .node.st-processing text { fill: #fff; }
  svg .node.st-dead rect { fill: #fdece4; stroke: var(--bad); }
  svg .node.st-cancelled rect { fill: var(--bg); stroke: var(--muted); stroke-dasharray: 3 2; }
  svg .node.st-waiting rect { stroke-dasharray: 5 3; }
  svg .node.more rect { fill: var(--bg); }
  svg .flow-edge.ignore, svg .flow-edge.wait { stroke-dasharray: 4 3; }
  svg .state.final rect { stroke-width: 2.5; }
  svg .state text.path { fill: var(--muted); font-size: 9px; }
  svg .state.lit text.path { fill: #dbe6ff; }
  svg .edge-label { fill: var(--muted); font-size: 9px; }
  .split { display: grid; gap: 16px; grid-template-columns: minmax(0, 2fr) minmax(0, 3fr); align-items: start; }
  tr.picked td { background: var(--bg); font-weight: 600; }
  #workflow-panel h3 { font-size: 14px; margin: 14px 0 6px; }
  #workflow-panel .context { min-width: 220px; max-width: 420px; }
  #workflow-panel .context pre { max-height: 220px; overflow: auto; }
  form.send { display: flex; flex-wrap: wrap; gap: 6px 10px; align-items: center; margin: 6px 0 10px; }
  button.chip { font-size: 12px; padding: 0 8px; }
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
  ol.timeline { margin: 0; padding-left: 1.4em; }
  ol.timeline li { margin: 2px 0; }
  .tabs { display: flex; flex-wrap: wrap; gap: 4px; margin-bottom: 8px; }
  .tabs button[aria-selected="true"] { background: var(--lit); border-color: var(--lit); color: #fff; }
  #browse-form { display: flex; flex-wrap: wrap; gap: 6px 10px; align-items: center; margin-bottom: 8px; }
  #browse-form input { width: 9em; }
  :focus-visible { outline: 2px solid var(--lit); outline-offset: 1px; }
  @media (max-width: 800px) {
    main { grid-template-columns: 1fr; padding: 10px; }
    header { flex-wrap: wrap; padding: 10px; }
    .split { grid-template-columns: 1fr; }
  }
</style>
</head>
<body>
<div id="app"></div>
<script type="module" src="assets/ui/app.js"></script>
</body>
</html>
`;
