// The write batcher on its own: writes made in one turn of the event loop go out together, at
// most maxBatch to a statement, and each caller gets its own result or the statement's error.
import { describe, expect, it } from "vitest";
import type { Claim, FencedResult } from "../src/db/index.ts";
import { createWriteBatcher } from "../src/runtime/write-batcher.ts";

const claim = (n: number): Claim => ({ id: String(n), token: `token-${n}` });
const applied = (id: string): FencedResult => ({ id, outcome: "applied", status: "completed"});

describe("the write batcher", () => {
  it("splits one turn's writes into statements of at most maxBatch, in order, each caller getting its own result", async () => {
    const statements: string[][] = [];
    const write = createWriteBatcher<Claim>(async (items) => {
      statements.push(items.map((item) => item.id));
      return items.map((item): FencedResult => (Number(item.id) % 2 === 0 ? applied(item.id) : { id: item.id, outcome: "fenced" }));
    }, 2);
    const results = await Promise.all([1, 2, 3, 4, 5].map((n) => write(claim(n))));
    expect(statements).toEqual([["1", "2"], ["3", "4"], ["5"]]);
    expect(results.map((r) => [r.id, r.outcome])).toEqual([["1", "fenced"], ["2", "applied"], ["3", "fenced"], ["4", "applied"], ["5", "fenced"]]);
  });

  it("fails every write of a statement that failed transiently (each caller retries its own), and only those", async () => {
    const write = createWriteBatcher<Claim>(async (items) => {
      if (items.some((item) => item.id === "1")) throw Object.assign(new Error("connection lost"), { code: "57P01" });
      return items.map((item) => applied(item.id));
    }, 2);
    const settled = await Promise.allSettled([1, 2, 3].map((n) => write(claim(n))));
    expect(settled.map((s) => s.status)).toEqual(["rejected", "rejected", "fulfilled"]);
  });

  it("writes each item of a batch that failed for another reason on its own, so only the item at fault fails", async () => {
    const statements: string[][] = [];
    const write = createWriteBatcher<Claim>(async (items) => {
      statements.push(items.map((item) => item.id));
      if (items.some((item) => item.id === "2")) throw Object.assign(new Error("invalid input syntax for type json"), { code: "22P02" });
      return items.map((item) => applied(item.id));
    });
    const settled = await Promise.allSettled([1, 2, 3].map((n) => write(claim(n))));
    expect(settled.map((s) => s.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((settled[1] as PromiseRejectedResult).reason).toMatchObject({ code: "22P02" });
    expect(statements).toEqual([["1", "2", "3"], ["1"], ["2"], ["3"]]);
  });

  it("never sends a write whose caller gave it up before the statement went out; the others of its turn are sent", async () => {
    const statements: string[][] = [];
    const write = createWriteBatcher<Claim>(async (items) => {
      statements.push(items.map((item) => item.id));
      return items.map((item) => applied(item.id));
    });
    const givenUp = new AbortController();
    const writes = [write(claim(1)), write(claim(2), givenUp), write(claim(3), new AbortController())];
    givenUp.abort(new Error("the drain's time ran out"));
    const settled = await Promise.allSettled(writes);
    expect(settled.map((s) => s.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((settled[1] as PromiseRejectedResult).reason).toEqual(new Error("the drain's time ran out"));
    expect(statements).toEqual([["1", "3"]]);
    // A turn whose every write was given up sends no statement at all.
    const alone = new AbortController();
    const last = write(claim(4), alone);
    alone.abort();
    await expect(last).rejects.toBeDefined();
    expect(statements).toEqual([["1", "3"]]);
  });

  it("reads a source's own aborted flag where it has one, and makes no signal for a write that is sent", async () => {
    const statements: string[][] = [];
    const write = createWriteBatcher<Claim>(async (items) => {
      statements.push(items.map((item) => item.id));
      return items.map((item) => applied(item.id));
    });
    // As the derived path gives an invocation: the signal is made only when read.
    const source = (aborted: boolean) => {
      const made = { signals: 0 };
      return { made, aborted, get signal() { made.signals++; return aborted ? AbortSignal.abort(new Error("left")) : new AbortController().signal; } };
    };
    const live = source(false);
    const left = source(true);
    const settled = await Promise.allSettled([write(claim(1), live), write(claim(2), left)]);
    expect(settled.map((s) => s.status)).toEqual(["fulfilled", "rejected"]);
    expect((settled[1] as PromiseRejectedResult).reason).toEqual(new Error("left"));
    expect(statements).toEqual([["1"]]);
    expect(live.made.signals).toBe(0);
  });

  it("with a gather window, sends the writes made within it of the first together, and later ones in a batch of their own", async () => {
    const statements: string[][] = [];
    const write = createWriteBatcher<Claim>(async (items) => {
      statements.push(items.map((item) => item.id));
      return items.map((item) => applied(item.id));
    }, 1_000, 40);
    const first = write(claim(1));
    // Turns of the event loop later, still within the window: the same statement.
    await new Promise((resolve) => setTimeout(resolve, 5));
    const second = write(claim(2));
    expect(statements).toEqual([]);
    await Promise.all([first, second]);
    expect(statements).toEqual([["1", "2"]]);
    await write(claim(3));
    expect(statements).toEqual([["1", "2"], ["3"]]);
  });
});
