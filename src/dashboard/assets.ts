// The files the page loads, served by the dashboard itself: the page's components (./ui/) and the
// libraries they use, from the installed packages. No CDN: a dashboard on an operator's network
// may have no internet. Each file is read once, when first asked for.
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
/** A file beside a package's entry point (packages' exports do not all let their folders be named). */
const besideEntry = (entry: string, file: string): string => join(dirname(require.resolve(entry)), file);
const uiFolder = fileURLToPath(new URL("./ui/", import.meta.url));

const javascript = "text/javascript; charset=utf-8";

/** Each asset's URL path under the dashboard, its file, and its content type. */
export const ASSETS: ReadonlyMap<`/assets/${string}`, { file: string; contentType: string }> = new Map<`/assets/${string}`, { file: string; contentType: string }>([
  // Preact (the components) with its hooks, and htm (their templates, plain JavaScript: no build step).
  ["/assets/preact.js", { file: besideEntry("preact", "preact.mjs"), contentType: javascript }],
  ["/assets/preact-hooks.js", { file: besideEntry("preact/hooks", "hooks.mjs"), contentType: javascript }],
  ["/assets/htm.js", { file: besideEntry("htm", "htm.mjs"), contentType: javascript }],
  // uPlot (the history's charts).
  ["/assets/uplot.js", { file: besideEntry("uplot", "uPlot.iife.min.js"), contentType: javascript }],
  ["/assets/uplot.css", { file: besideEntry("uplot", "uPlot.min.css"), contentType: "text/css; charset=utf-8" }],
  ...readdirSync(uiFolder)
    .filter((name) => name.endsWith(".js"))
    .map((name) => [`/assets/ui/${name}` as const, { file: join(uiFolder, name), contentType: javascript }] as const),
]);

const read = new Map<string, string>();
/** An asset's text (read from disk the first time). */
export const assetText = (path: `/assets/${string}`): string => {
  const asset = ASSETS.get(path);
  if (asset === undefined) throw new Error(`picket: no dashboard asset ${path}`);
  let text = read.get(path);
  if (text === undefined) read.set(path, (text = readFileSync(asset.file, "utf8")));
  return text;
};
