// What picket promises to users is what its entry points export, and docs/api.md is where that
// promise is written: each of package.json's entry points has a section there, and each section
// lists exactly the names (values and types) its entry exports. An export added behind the docs'
// back, or one removed while the docs still offer it, fails here. So does an internal (the claim,
// the fence, the statement runner) reaching the main entry again, and a README or example that
// imports a name the docs do not list.
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("..", import.meta.url));
const read = (file: string) => readFile(path.join(root, file), "utf8");

interface Names {
  values: string[];
  types: string[];
}

/** docs/api.md's sections: "## `picket/x`", then "- `value`: ..." and "- type `Type`: ..." lines. */
const documented = (markdown: string): Map<string, Names> => {
  const sections = new Map<string, Names>();
  let current: Names | undefined;
  for (const line of markdown.split("\n")) {
    const heading = /^## `([^`]+)`\s*$/.exec(line);
    if (heading) sections.set(heading[1]!, (current = { values: [], types: [] }));
    else if (line.startsWith("## ")) current = undefined;
    const item = /^- (type )?`(\w+)`:/.exec(line);
    if (item && current) (item[1] ? current.types : current.values).push(item[2]!);
  }
  return sections;
};

/** The type names an entry file exports: `export type { A }` and `type B` inside `export { ... }`. */
const exportedTypes = (source: string): string[] => {
  const types: string[] = [];
  for (const [, typeOnly, list] of source.matchAll(/^export (type )?\{([^}]*)\}/gm)) {
    for (const part of list!.split(",").map((s) => s.trim()).filter(Boolean)) {
      const name = /^(type )?(\w+)(?: as (\w+))?$/.exec(part);
      if (!name) throw new Error(`public-api.test: cannot read the export "${part}"; list exports as \`name\`, \`type Name\` or \`name as other\`.`);
      if (typeOnly || name[1]) types.push(name[3] ?? name[2]!);
    }
  }
  return types;
};

/** package.json's entry points: "picket/testing" → src/testing/index.ts (its types file, from dist/ back to src/). */
const entries = async (): Promise<Map<string, string>> => {
  const pkg = JSON.parse(await read("package.json")) as { name: string; exports: Record<string, { types: string }> };
  return new Map(
    Object.entries(pkg.exports).map(([subpath, target]) => [
      path.posix.join(pkg.name, subpath),
      target.types.replace(/^\.\/dist\//, "src/").replace(/\.d\.ts$/, ".ts"),
    ]),
  );
};

const sorted = (names: Iterable<string>) => [...names].sort();

describe("the public API is the one docs/api.md lists", async () => {
  const docs = documented(await read("docs/api.md"));
  const entryFiles = await entries();

  it("every entry point of package.json has a section in docs/api.md, and every section an entry point", () => {
    expect(sorted(docs.keys())).toEqual(sorted(entryFiles.keys()));
  });

  for (const [entry, file] of entryFiles) {
    describe(entry, () => {
      it("lists its exports by name: no `export *`, no declarations in the entry file", async () => {
        // A wildcard would export whatever its module adds, unseen by this test's reading of types.
        const source = await read(file);
        expect(source.match(/^export (\*|interface|enum|namespace|declare|type \w+\s*[=<]).*$/gm) ?? []).toEqual([]);
      });

      it("exports exactly the values docs/api.md lists", async () => {
        const module = (await import(path.join(root, file))) as Record<string, unknown>;
        const listed = docs.get(entry)?.values ?? [];
        expect(sorted(listed)).toEqual(sorted(new Set(listed))); // each listed once
        expect(sorted(listed)).toEqual(sorted(Object.keys(module)));
      });

      it("exports exactly the types docs/api.md lists", async () => {
        const listed = docs.get(entry)?.types ?? [];
        expect(sorted(listed)).toEqual(sorted(new Set(listed)));
        expect(sorted(listed)).toEqual(sorted(exportedTypes(await read(file))));
      });
    });
  }

  it("keeps picket's internals out of the main entry", async () => {
    const main = (await import(path.join(root, "src/index.ts"))) as Record<string, unknown>;
    // Each of these is safe only as the supervisor calls it (a claim without its lease renewals,
    // a write without its fence): a service calling one directly could break an invariant.
    const internals = [
      "claimJobs",
      "claimLimited",
      "claimTokenSql",
      "drawClaimSeed",
      "fence",
      "completeJobs",
      "failJobs",
      "deadLetterJobs",
      "renewLeases",
      "releaseJobs",
      "reportProgress",
      "recordStep",
      "sweepExpiredClaims",
      "giveBackUnreturnedClaims",
      "runStatement",
      "destroySocket",
      "isTransientDbError",
      "notifyChannel",
    ];
    expect(internals.filter((name) => name in main)).toEqual([]);
  });

  it('every name the README imports from picket\'s entry points is listed under that entry', async () => {
    const readme = await read("README.md");
    const missing: string[] = [];
    let imports = 0;
    for (const [, list, entry] of readme.matchAll(/^import \{([^}]*)\} from "(picket(?:\/[\w/-]+)?)";/gm)) {
      const names = docs.get(entry!);
      for (const part of list!.split(",").map((s) => s.trim()).filter(Boolean)) {
        imports++;
        const name = part.replace(/^type /, "");
        if (!names || ![...names.values, ...names.types].includes(name)) missing.push(`${name} from ${entry}`);
      }
    }
    expect(imports).toBeGreaterThan(10); // the README's snippets were read
    expect(missing).toEqual([]);
  });

  it("every name examples/ imports from the sources' entry points is listed under that entry (an app imports it from picket)", async () => {
    const sourceEntries = new Map([...entryFiles].map(([entry, file]) => [file, entry]));
    const files = (await readdir(path.join(root, "examples"), { recursive: true })).filter((f) => f.endsWith(".ts"));
    const missing: string[] = [];
    let imports = 0;
    for (const file of files) {
      const source = await read(path.join("examples", file));
      // Relative imports of the sources, and (examples/guide, as an installed service writes them) "picket".
      for (const [, list, from] of source.matchAll(/^import (?:type )?\{([^}]*)\} from "(\.[^"]+|picket(?:\/[\w/-]+)?)";/gm)) {
        const target = path.relative(root, path.resolve(root, "examples", path.dirname(file), from!));
        const entry = from!.startsWith("picket") ? from! : sourceEntries.get(target);
        if (entry === undefined) continue; // the example's own modules
        for (const part of list!.split(",").map((s) => s.trim()).filter(Boolean)) {
          imports++;
          const name = part.replace(/^type /, "");
          const names = docs.get(entry);
          if (!names || ![...names.values, ...names.types].includes(name)) missing.push(`${name} (examples/${file}) from ${entry}`);
        }
      }
    }
    expect(imports).toBeGreaterThan(20);
    expect(missing).toEqual([]);
  });
});
