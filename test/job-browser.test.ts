// Browsing jobs by state (src/db/job-browser.ts): each state's rows, pages that neither repeat nor
// skip a row (ties in time, times a Date cannot hold), the filters, the scan's budget and the
// cursor it leaves, and what it refuses. Each test works in a schema of its own.
import { describe, expect, it } from "vitest";
import { browseJobs, claimJobs, InvalidJobError, SCAN_BUDGET, type BrowseFilter, type BrowseState } from "../src/db/index.ts";
import { schemasFor, useTestDatabase } from "./support/db.ts";
import { rejectionOf } from "./support/errors.ts";
import { want } from "./support/factory.ts";

const db = useTestDatabase();

const freshSchema = schemasFor(db, "browse");

/** Every page of a browse, followed to its end: the ids in order, and the pages' sizes. */
const allPages = async (schema: string, filter: BrowseFilter) => {
  const ids: string[] = [];
  const sizes: number[] = [];
  let after: string | undefined;
  for (let page = 0; page < 1_000; page++) {
    const result = await browseJobs(db.pool, { ...filter, ...(after ? { after } : {}) }, { schema });
    ids.push(...result.jobs.map((job) => job.id));
    sizes.push(result.jobs.length);
    if (result.next === null) return { ids, sizes };
    after = result.next;
  }
  throw new Error("more than 1,000 pages");
};

describe("browsing jobs", () => {
  it("lists each state's jobs, and only them, in the state's own time order", async () => {
    const schema = await freshSchema();
    const insert = (sql: string) => db.pool.query(`INSERT INTO ${schema}.jobs (type, status, run_at, attempts, finished_at, last_error) ${sql}`);
    await insert(`VALUES ('t', 'pending', now() - interval '2 minutes', 0, NULL, NULL), ('t', 'pending', now() - interval '1 minute', 1, NULL, 'boom')`); // ready: 1, 2
    await insert(`VALUES ('t', 'pending', now() + interval '1 hour', 0, NULL, NULL)`); // scheduled: 3
    await insert(`VALUES ('t', 'pending', now() + interval '5 minutes', 2, NULL, 'boom')`); // retrying: 4
    await insert(`VALUES ('t', 'dead', now(), 3, now() - interval '1 minute', 'gave up'), ('t', 'dead', now(), 3, now(), 'gave up')`); // dead: 5, 6
    await insert(`VALUES ('t', 'completed', now(), 1, now(), NULL)`); // completed: 7
    await insert(`VALUES ('t', 'cancelled', now(), 0, now(), NULL)`); // cancelled: 8
    await insert(`VALUES ('t', 'pending', now() - interval '3 minutes', 0, NULL, NULL)`); // claimed below: 9
    const [running] = await claimJobs(db.pool, "w-browse", [want("t", { limit: 1 })], { schema });
    expect(running!.id).toBe("9");
    const listed = async (state: BrowseState, order?: "newest" | "oldest") =>
      (await browseJobs(db.pool, { state, ...(order ? { order } : {}) }, { schema })).jobs.map((job) => job.id);
    // Ready and the waiting ones: oldest first (the longest kept waiting, the soonest due).
    expect(await listed("ready")).toEqual(["1", "2"]);
    expect(await listed("ready", "newest")).toEqual(["2", "1"]);
    expect(await listed("scheduled")).toEqual(["3"]);
    expect(await listed("retrying")).toEqual(["4"]);
    expect(await listed("running")).toEqual(["9"]);
    // The ends: newest first.
    expect(await listed("dead")).toEqual(["6", "5"]);
    expect(await listed("dead", "oldest")).toEqual(["5", "6"]);
    expect(await listed("completed")).toEqual(["7"]);
    expect(await listed("cancelled")).toEqual(["8"]);
    const [dead] = (await browseJobs(db.pool, { state: "dead" }, { schema })).jobs;
    expect(dead).toEqual({
      id: "6", type: "t", status: "dead", queue: null, key: null, priority: 0, attempts: 3, maxAttempts: null, lockedBy: null,
      lastError: "gave up", progress: null, runAt: expect.any(Date), createdAt: expect.any(Date), finishedAt: expect.any(Date), at: dead!.finishedAt,
    });
    expect((await browseJobs(db.pool, { state: "running" }, { schema })).jobs[0]).toMatchObject({ lockedBy: "w-browse", at: expect.any(Date) });
  });

  it("pages through ties in time and times finer than a millisecond without repeating or skipping a job", async () => {
    const schema = await freshSchema();
    // 130 dead jobs: groups of ten finished at the same microsecond, the groups a microsecond apart.
    await db.pool.query(
      `INSERT INTO ${schema}.jobs (type, status, finished_at)
       SELECT 't', 'dead', timestamptz '2026-01-01 00:00:00.000100+00' + (i / 10) * interval '1 microsecond' FROM generate_series(0, 129) AS i`,
    );
    for (const order of ["newest", "oldest"] as const) {
      const { ids, sizes } = await allPages(schema, { state: "dead", order, limit: 50 });
      expect(sizes).toEqual([50, 50, 30]);
      expect(new Set(ids).size).toBe(130);
      // In time order, then by id.
      const expected = Array.from({ length: 130 }, (_, i) => String(i + 1));
      const byTime = (a: string, b: string) => Math.floor((Number(a) - 1) / 10) - Math.floor((Number(b) - 1) / 10) || Number(a) - Number(b);
      expect(ids).toEqual(order === "oldest" ? expected.sort(byTime) : expected.sort(byTime).reverse());
    }
  });

  it("filters by task, queue, worker, key, a payload or error substring (its % and _ taken as themselves), and a time range", async () => {
    const schema = await freshSchema();
    await db.pool.query(`
      INSERT INTO ${schema}.jobs (type, status, queue, key, payload, last_error, finished_at, locked_by) VALUES
        ('mail', 'dead', 'eu', 'k-1', '{"to": "ana@example.com"}', 'SMTP 550: 100% full', '2026-01-01T10:00:00Z', 'w-a'),
        ('mail', 'dead', 'us', 'k-2', '{"to": "bo@example.com"}', 'timeout', '2026-01-01T11:00:00Z', 'w-b'),
        ('bill', 'dead', 'eu', NULL, '{"amount": 100}', 'card_declined', '2026-01-01T12:00:00Z', 'w-a')`);
    const found = async (filter: Omit<BrowseFilter, "state">) => (await browseJobs(db.pool, { state: "dead", ...filter }, { schema })).jobs.map((job) => job.id);
    expect(await found({ task: "mail" })).toEqual(["2", "1"]);
    expect(await found({ queue: "eu" })).toEqual(["3", "1"]);
    expect(await found({ worker: "w-b" })).toEqual(["2"]);
    expect(await found({ key: "k-1" })).toEqual(["1"]);
    expect(await found({ text: "ANA@" })).toEqual(["1"]); // the payload, any case
    expect(await found({ text: "declined" })).toEqual(["3"]); // the error
    expect(await found({ text: "100%" })).toEqual(["1"]); // not the amount 100: % is a character here
    expect(await found({ text: "card_d" })).toEqual(["3"]);
    expect(await found({ text: "d_cl" })).toEqual([]); // _ is a character too
    expect(await found({ task: "mail", queue: "eu" })).toEqual(["1"]);
    expect(await found({ from: new Date("2026-01-01T11:00:00Z") })).toEqual(["3", "2"]);
    expect(await found({ to: new Date("2026-01-01T11:00:00Z") })).toEqual(["1"]);
    expect(await found({ from: new Date("2026-01-01T10:30:00Z"), to: new Date("2026-01-01T11:30:00Z") })).toEqual(["2"]);
    expect(await found({ task: "none" })).toEqual([]);
  });

  it("reads at most its budget of rows a page, and says how far it searched when a rare filter did not fill the page", async () => {
    const schema = await freshSchema();
    // Three old jobs of a rare task, then more of a common one than a page's budget.
    await db.pool.query(`INSERT INTO ${schema}.jobs (type, status, finished_at) SELECT 'rare', 'dead', timestamptz '2026-01-01' + i * interval '1 second' FROM generate_series(1, 3) AS i`);
    await db.pool.query(
      `INSERT INTO ${schema}.jobs (type, status, finished_at) SELECT 'common', 'dead', timestamptz '2026-01-02' + i * interval '1 second' FROM generate_series(1, $1::int) AS i`,
      [SCAN_BUDGET + 100],
    );
    const first = await browseJobs(db.pool, { state: "dead", task: "rare" }, { schema });
    expect(first.jobs).toEqual([]);
    // The scan stopped at its budget, among the common jobs, newest first: the 5,000th newest.
    expect(first.searchedTo).toEqual(new Date(Date.parse("2026-01-02T00:00:00Z") + 101_000));
    expect(first.next).toMatch(/^2026-01-02T00:01:41\.000000Z_\d+$/);
    const second = await browseJobs(db.pool, { state: "dead", task: "rare", after: first.next! }, { schema });
    expect(second.jobs.map((job) => job.type)).toEqual(["rare", "rare", "rare"]);
    expect(second).toMatchObject({ next: null, searchedTo: null });
    // Followed to the end, a rare filter finds every match once.
    expect((await allPages(schema, { state: "dead", task: "rare" })).ids).toEqual(second.jobs.map((job) => job.id));
  });

  it("refuses a state, order, page size, cursor or filter it cannot use, saying what it takes", async () => {
    const schema = await freshSchema();
    const refusal = async (filter: Partial<BrowseFilter>) => {
      const error = await rejectionOf(browseJobs(db.pool, { state: "dead", ...filter } as BrowseFilter, { schema }));
      expect(error).toBeInstanceOf(InvalidJobError);
      return (error as Error).message;
    };
    expect(await refusal({ state: "pending" as never })).toBe(
      'picket: browse state must be one of ready, scheduled, retrying, waiting, running, dead, completed, cancelled (got "pending").',
    );
    expect(await refusal({ order: "sideways" as never })).toBe('picket: browse order must be "newest" or "oldest" (got "sideways").');
    for (const limit of [0, 201, 1.5]) expect(await refusal({ limit })).toBe(`picket: browse limit must be an integer from 1 to 200 (got ${limit}).`);
    expect(await refusal({ after: "yesterday" })).toBe('picket: a browse cursor is the "next" of a page, like 2026-01-02T03:04:05.678901Z_42 (got "yesterday").');
    expect(await refusal({ after: "2026-13-45T00:00:00.000000Z_1" })).toMatch(/^picket: a browse cursor is the "next" of a page/);
    expect(await refusal({ text: "a\u0000b" })).toBe('picket: browse filter text must be text of at most 200 characters without NUL (got "a\\u0000b").');
    expect(await refusal({ task: "x".repeat(201) })).toMatch(/^picket: browse filter task must be text of at most 200 characters/);
    expect(await refusal({ from: new Date("nope") })).toBe("picket: browse filter from must be a valid Date (got Invalid Date).");
  });
});
