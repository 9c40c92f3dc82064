// What a newcomer tripped over (issue 16), each held by a test: a mistake is refused at once,
// with a message that says what to do, before anything is written or started.
import { existsSync } from "node:fs";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { picket } from "./support/cli.ts";
import { useTestDatabase } from "./support/db.ts";

const db = useTestDatabase();
const HELLO = fileURLToPath(new URL("./fixtures/hello-tasks.ts", import.meta.url));

// A project folder of its own per file: an embedded server started by mistake would leave
// .picket/ in it, which the tests look for.
let cwd = "";
beforeAll(async () => {
  cwd = await mkdtemp(path.join(tmpdir(), "picket-newcomer-"));
  await chmod(cwd, 0o755);
});
afterAll(async () => {
  await rm(cwd, { recursive: true, force: true });
});

describe("an empty database URL", () => {
  it("DATABASE_URL='' is refused, and no embedded server is started", async () => {
    const run = await picket(["stats"], { cwd, env: { DATABASE_URL: "" } });
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(
      "picket: DATABASE_URL is set but empty: set it to a PostgreSQL connection string, or unset it (`unset DATABASE_URL`) to use the embedded server.\n",
    );
    expect(existsSync(path.join(cwd, ".picket"))).toBe(false);
  }, 60_000);

  it("--database-url '' is refused too, by the demo before it says anything", async () => {
    const run = await picket(["demo", "--database-url", ""], { cwd, env: { DATABASE_URL: db.url } });
    expect(run.code).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain("picket: --database-url is empty: give a PostgreSQL connection string, or leave the option out.");
  }, 60_000);
});
