// Dedupe keys under a race: the job holding a key can finish between picket's INSERT (which saw
// the key taken) and its lookup of the holder (which no longer finds it live). The interleaving is
// made real: a Queryable that runs picket's statements on the pool, and just before each lookup
// runs another connection's statements (finish the holder, and in the second test enqueue a new
// holder) — nothing is faked, every row is PostgreSQL's.
import pg from "pg";
import { describe, expect, it } from "vitest";
import { enqueueJob, enqueueJobs, PicketError, type Queryable } from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";

const db = useTestDatabase();

/** Runs hooks ahead of picket's INSERTs (after the first) and lookups of live key holders. */
const interleaved = (hooks: { beforeLookup?: () => Promise<unknown>; beforeReinsert?: () => Promise<unknown> }) => {
  let lookups = 0;
  let inserts = 0;
  const racing: Queryable = {
    query: async <R extends pg.QueryResultRow>(config: pg.QueryConfig) => {
      const text = config.text.trimStart();
      if (text.startsWith("SELECT")) {
        lookups++;
        await hooks.beforeLookup?.();
      } else if (text.startsWith("INSERT") && inserts++ > 0) {
        await hooks.beforeReinsert?.();
      }
      return db.pool.query<R>(config);
    },
  };
  return { db: racing, lookups: () => lookups, inserts: () => inserts };
};

const finishHolder = (key: string) => db.pool.query("UPDATE picket.jobs SET status = 'completed', finished_at = now() WHERE key = $1 AND status = 'pending'", [key]);

describe("dedupe keys under a race", () => {
  it("returns the live holder of a key after one lookup, with no second INSERT", async () => {
    const holder = await enqueueJob(db.pool, { type: "race", key: "k0" });
    const counting = interleaved({});
    const [same] = await enqueueJobs(counting.db, [{ type: "race", key: "k0" }]);
    expect(same!.id).toBe(holder.id);
    expect([counting.inserts(), counting.lookups()]).toEqual([1, 1]);
  });

  it("inserts again when the holder finished between the INSERT and the lookup, and returns the new job", async () => {
    const holder = await enqueueJob(db.pool, { type: "race", key: "k1" });
    const racing = interleaved({ beforeLookup: () => finishHolder("k1") });
    const [fresh, plain] = await enqueueJobs(racing.db, [{ type: "race", key: "k1", payload: { n: 2 } }, { type: "race" }]);
    expect([racing.inserts(), racing.lookups()]).toEqual([2, 1]);
    expect(fresh).toMatchObject({ key: "k1", status: "pending", payload: { n: 2 } });
    expect(fresh!.id).not.toBe(holder.id);
    expect(plain).toMatchObject({ key: null, status: "pending" });
    const { rows } = await db.pool.query("SELECT status FROM picket.jobs WHERE key = 'k1' ORDER BY id");
    expect(rows.map((r) => r.status)).toEqual(["completed", "pending"]);
  });

  it("gives up after three rounds when the key keeps changing hands, and says what to do", async () => {
    await enqueueJob(db.pool, { type: "race", key: "k2" });
    // Every lookup misses (the holder just finished) and every re-insert conflicts (a new holder
    // just took the key): the key changes hands faster than picket can read it.
    const churn = interleaved({ beforeLookup: () => finishHolder("k2"), beforeReinsert: () => enqueueJob(db.pool, { type: "race", key: "k2" }) });
    const attempt = enqueueJobs(churn.db, [{ type: "race", key: "k2" }]);
    await expect(attempt).rejects.toThrow(PicketError);
    await expect(attempt).rejects.toThrow(
      'picket: job "race" with key "k2" was not created because another job holds that key, and that job could not be read back. If you enqueue inside a REPEATABLE READ or SERIALIZABLE transaction, retry the transaction.',
    );
    expect(churn.lookups()).toBe(3);
    expect(churn.inserts()).toBe(4);
  });

  it("enqueues nothing, with no round trip, for an empty list", async () => {
    const counting = interleaved({});
    expect(await enqueueJobs(counting.db, [])).toEqual([]);
    expect(counting.inserts() + counting.lookups()).toBe(0);
  });
});
