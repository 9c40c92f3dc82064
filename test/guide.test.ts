// docs/guide.md cannot drift from the files CI runs: each file it shows is an exact copy of one
// under examples/guide/, every such file is shown, and every command test/git-install.test.ts
// runs for the guide is one the guide gives. (The running itself is in git-install.test.ts, which
// shares its install from git.)
import { readFile } from "node:fs/promises";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { GUIDE_COMMANDS, GUIDE_FILES_DIR, guideBlocks, guideFiles, readGuide, repositoryRoot } from "./support/guide.ts";

describe("docs/guide.md", () => {
  it("shows every file of examples/guide/ once, each block an exact copy of its file", async () => {
    const blocks = guideBlocks(await readGuide()).filter((block) => block.file !== undefined);
    const files = await guideFiles();
    expect(blocks.map((block) => block.file).sort()).toEqual(files);
    for (const block of blocks) {
      const file = await readFile(path.join(GUIDE_FILES_DIR, block.file!), "utf8");
      expect({ file: block.file, text: block.text }).toEqual({ file: block.file, text: file });
    }
    // The guide is the newcomer's path: a service, its task, a test under each runner.
    expect(files).toEqual(expect.arrayContaining(["shop.ts", "service.ts", "vitest.config.ts", "test/receipt.test.ts", "test/receipt.node-test.ts"]));
  });

  it("gives every command the install test runs for it, each on a line of its own in a shell block", async () => {
    const lines = new Set(
      guideBlocks(await readGuide())
        .filter((block) => block.lang === "sh")
        .flatMap((block) => block.text.split("\n").map((line) => line.replace(/\s+#.*$/, "").trim())),
    );
    const missing = Object.entries(GUIDE_COMMANDS).filter(([, command]) => !lines.has(command));
    expect(missing).toEqual([]);
  });

  it("links only to README sections that exist", async () => {
    const readme = await readFile(path.join(repositoryRoot, "README.md"), "utf8");
    // GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
    const anchors = new Set([...readme.matchAll(/^#{2,4} (.+)$/gm)].map(([, title]) => title!.toLowerCase().replace(/[^\w\s-]/g, "").replace(/\s/g, "-")));
    const linked = [...(await readGuide()).matchAll(/\(\.\.\/README\.md#([\w-]+)\)/g)].map(([, anchor]) => anchor!);
    expect(linked.length).toBeGreaterThan(5);
    expect(linked.filter((anchor) => !anchors.has(anchor))).toEqual([]);
  });

  it("is the README's first link, before its two commands", async () => {
    const readme = await readFile(path.join(repositoryRoot, "README.md"), "utf8");
    const firstLink = readme.match(/\]\(([^)]+)\)/)?.[1];
    expect(firstLink).toBe("docs/guide.md");
    expect(readme.indexOf("docs/guide.md")).toBeLessThan(readme.indexOf("## Two commands"));
  });
});
