// The worker's book of held claims, without a database or a machine: fake job handles whose state
// the test sets, and a clock it passes in. The supervisor's tests show the same rules against a
// real server; these pin each boundary (a lease deadline, a stall's margin, the claim's size) to
// the millisecond, which a test that waits on real timers cannot.
import { describe, expect, it } from "vitest";
import type { ClaimedJob, FencedResult } from "../src/db/index.ts";
import type { JobMachineEvent, JobOutcome } from "../src/machines/job-machine.ts";
import { HeldJobs, type HeldJob } from "../src/runtime/held-jobs.ts";
import type { JobHandle } from "../src/runtime/job-runtime.ts";
import { defineTask, type Task } from "../src/runtime/task.ts";
import { captureLogs } from "./support/worker.ts";

class FakeHandle implements JobHandle {
  state: string;
  status = "active" as const;
  readonly events: JobMachineEvent[] = [];
  constructor(slotFree: boolean) {
    this.state = slotFree ? "checkingPayload" : "waitingForSlot";
  }
  start(): void {}
  send(event: JobMachineEvent): void {
    this.events.push(event);
  }
}

let nextId = 0;
const job = (type: string, leaseMs = 1_000): ClaimedJob => ({
  id: String(++nextId),
  type,
  payload: {},
  attempts: 1,
  maxAttempts: 5,
  createdAt: new Date(0),
  claimToken: `token-${nextId}`,
  leaseMs,
  readyMs: 0,
});

const setup = (options: { concurrency?: number; prefetch?: number; tasks?: Task[]; reconfirm?: (jobs: readonly ClaimedJob[]) => Promise<readonly FencedResult[]> } = {}) => {
  const { lines, logger } = captureLogs();
  const tasks = options.tasks ?? [defineTask({ name: "a", handler: async () => undefined })];
  const finished: Array<{ id: string; outcome: JobOutcome; error: string | null }> = [];
  const turns: Array<{ finished: number; slotFreed: boolean }> = [];
  const watched: number[] = [];
  const held = new HeldJobs({
    ...(options.reconfirm ? { reconfirm: options.reconfirm, watch: (at: number) => watched.push(at) } : {}),
    concurrency: options.concurrency ?? 10,
    prefetch: options.prefetch ?? 0,
    tasks: new Map(tasks.map((task) => [task.name, task])),
    logger,
    create: (_job, slotFree) => new FakeHandle(slotFree),
    turnEnded: (finished, slotFreed) => turns.push({ finished, slotFreed }),
    finished: (entry, outcome, error) => finished.push({ id: entry.job.id, outcome, error }),
  });
  const handle = (entry: HeldJob) => entry.actor as FakeHandle;
  return { held, lines, finished, handle, turns, watched };
};

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe("the lease deadline on the worker's clock", () => {
  // A lease of 1,000 ms confirmed at 100 is provable until 900 (a fifth of it is the margin).
  it("interrupts a handler at its deadline to the millisecond, and says when to look next", () => {
    const { held, lines, handle } = setup();
    const [early, late] = held.claimed([job("a"), job("a")], 100);
    held.leaseConfirmed(late!.job, 200);
    expect(held.interruptExpired(899.9)).toBe(900);
    expect(handle(early!).events).toEqual([]);
    expect(held.interruptExpired(900)).toBe(1_000);
    expect(handle(early!).events).toEqual([{ type: "LEASE_EXPIRED", unconfirmedMs: 800 }]);
    expect(handle(late!).events).toEqual([]);
    expect(lines.find((l) => l.msg.startsWith("lease not confirmed"))).toMatchObject({
      level: 40,
      jobs: [early!.job.id],
      count: 1,
      last_renewal_error: null,
      rows_busy: 0,
      msg: "lease not confirmed in time for 1 job(s): interrupting their handlers before another worker may take the jobs",
    });
  });

  it("leaves a job alone once its handler has ended or its outcome is being written, and has nothing next", () => {
    const { held, handle } = setup();
    const [settled, writing, running] = held.claimed([job("a"), job("a"), job("a")], 0);
    held.handlerSettled(settled!.job, 50);
    handle(writing!).state = "completing";
    handle(running!).state = "running";
    expect(held.interruptExpired(10_000)).toBe(Infinity);
    expect(handle(settled!).events).toEqual([]);
    expect(handle(writing!).events).toEqual([]);
    expect(handle(running!).events).toEqual([{ type: "LEASE_EXPIRED", unconfirmedMs: 10_000 }]);
    expect(held.interruptExpired(10_000)).toBe(Infinity);
  });

  it("when the watch ran late (a blocked loop), renews first: a confirmed claim runs on with a new deadline, a taken one is lost, a row busy twice is interrupted", async () => {
    const asked: string[][] = [];
    const answers: Record<string, FencedResult["outcome"]> = {};
    const { held, handle, watched, lines } = setup({
      reconfirm: async (jobs) => {
        asked.push(jobs.map((j) => j.id));
        return jobs.map((j) => (answers[j.id] === "applied" ? { id: j.id, outcome: "applied", status: "processing" } : ({ id: j.id, outcome: answers[j.id] } as FencedResult)));
      },
    });
    // Confirmed long before this process's clock began: the renewal's answer, on the real clock, finds them past their deadline unless it confirmed them.
    const [kept, taken, busy] = held.claimed([job("a"), job("a"), job("a")], -1e7);
    Object.assign(answers, { [kept!.job.id]: "applied", [taken!.job.id]: "fenced", [busy!.job.id]: "busy" });
    for (const entry of [kept, taken, busy]) handle(entry!).state = "running";
    // 50 ms late and more: renewed first, nothing interrupted until the renewal answers.
    held.interruptExpired(2_000, 50);
    expect(asked).toEqual([[kept!.job.id, taken!.job.id, busy!.job.id]]);
    expect([kept, taken, busy].map((e) => handle(e!).events)).toEqual([[], [], []]);
    // Asked again meanwhile, it leaves them alone.
    held.interruptExpired(2_100, 500);
    expect(asked).toHaveLength(1);
    await turn();
    expect(handle(kept!).events).toEqual([]);
    expect(watched).toHaveLength(1);
    expect(watched[0]).toBeGreaterThan(performance.now());
    expect(handle(taken!).events).toEqual([{ type: "LEASE_LOST" }]);
    // The busy row is asked for once more (no round of this worker's was in flight), and interrupted only when busy again.
    expect(asked).toEqual([[kept!.job.id, taken!.job.id, busy!.job.id], [busy!.job.id]]);
    expect(handle(busy!).events).toEqual([expect.objectContaining({ type: "LEASE_EXPIRED" })]);
    expect(lines.filter((l) => l.msg.startsWith("the lease watch ran late"))).toMatchObject([{ count: 3, confirmed: 1 }, { count: 1, confirmed: 0 }]);
  });

  it("when the late renewal finds the row busy under this worker's own renewal round, asks again after that round, and the claim runs on", async () => {
    const asked: string[][] = [];
    let answer: FencedResult["outcome"] = "busy";
    const { held, handle, watched } = setup({
      reconfirm: async (jobs) => (asked.push(jobs.map((j) => j.id)), jobs.map((j) => (answer === "applied" ? { id: j.id, outcome: "applied", status: "processing" } : ({ id: j.id, outcome: answer } as FencedResult)))),
    });
    const [entry] = held.claimed([job("a")], -1e7);
    handle(entry!).state = "running";
    // The worker's own round went out first (its timer was as overdue), and holds the row's lock.
    let endRound!: () => void;
    const round = held.renewRound(
      (jobs) => new Promise((resolve) => (endRound = () => resolve(jobs.map((j) => ({ id: j.id, outcome: "applied", status: "processing" }))))),
    );
    held.interruptExpired(2_000, 1_500);
    await turn();
    await turn();
    // Busy: not interrupted, not asked again while the round is in flight, and the watch leaves it alone.
    expect(asked).toEqual([[entry!.job.id]]);
    held.interruptExpired(1e9, 0);
    expect(handle(entry!).events).toEqual([]);
    answer = "applied";
    endRound();
    await round;
    await turn();
    expect(asked).toEqual([[entry!.job.id], [entry!.job.id]]);
    expect(handle(entry!).events).toEqual([]);
    expect(watched.at(-1)).toBeGreaterThan(performance.now());
  });

  it("on time (up to 49 ms late), interrupts at once without a renewal", () => {
    const asked: string[][] = [];
    const { held, handle } = setup({ reconfirm: async (jobs) => (asked.push(jobs.map((j) => j.id)), []) });
    const [onTime] = held.claimed([job("a")], 100);
    handle(onTime!).state = "running";
    expect(held.interruptExpired(900, 49)).toBe(Infinity);
    expect(handle(onTime!).events).toEqual([{ type: "LEASE_EXPIRED", unconfirmedMs: 800 }]);
    expect(asked).toEqual([]);
  });

  it("when the late renewal fails, interrupts every claim it was for", async () => {
    const { held, handle } = setup({ reconfirm: async () => Promise.reject(new Error("connection refused")) });
    const entries = held.claimed([job("a"), job("a")], -1e7);
    for (const entry of entries) handle(entry).state = "running";
    held.interruptExpired(5_000, 4_000);
    expect(entries.map((e) => handle(e).events)).toEqual([[], []]);
    await turn();
    expect(entries.map((e) => handle(e).events)).toEqual([[expect.objectContaining({ type: "LEASE_EXPIRED" })], [expect.objectContaining({ type: "LEASE_EXPIRED" })]]);
  });

  it("names at most twenty jobs in its warning and counts them all", () => {
    const { held, lines } = setup({ concurrency: 30 });
    const entries = held.claimed(Array.from({ length: 25 }, () => job("a")), 0);
    held.interruptExpired(800);
    const warning = lines.find((l) => l.msg.startsWith("lease not confirmed"))!;
    expect(warning.jobs).toEqual(entries.slice(0, 20).map((e) => e.job.id));
    expect(warning.count).toBe(25);
  });

  it("lets user code start only while the lease is provable, and only on a claim it holds", () => {
    const { held } = setup();
    const [entry] = held.claimed([job("a")], 0);
    expect(held.leaseProvable(entry!.job, 799.9)).toBe(true);
    expect(held.leaseProvable(entry!.job, 800)).toBe(false);
    held.leaseConfirmed(entry!.job, 50);
    held.leaseConfirmed(entry!.job, 20); // an older confirmation arriving late moves nothing back
    expect(held.leaseProvable(entry!.job, 849.9)).toBe(true);
    expect(held.leaseProvable(job("a"), 0)).toBe(false);
    // A write under a claim that has since finished confirms nothing and ends nothing.
    expect(() => held.leaseConfirmed(job("a"), 900)).not.toThrow();
    expect(() => held.handlerSettled(job("a"), 900)).not.toThrow();
  });
});

describe("renewal rounds", () => {
  it("confirms written leases from when the round was sent, counts busy rows, and interrupts a job whose claim was taken", () => {
    const { held, lines, handle } = setup();
    const [applied, busy, stolen, finishing] = held.claimed([job("a"), job("a"), job("a"), job("a")], 0);
    handle(finishing!).state = "completing";
    const results: FencedResult[] = [
      { id: applied!.job.id, outcome: "applied", status: "processing"},
      { id: busy!.job.id, outcome: "busy" },
      { id: stolen!.job.id, outcome: "fenced" },
      { id: finishing!.job.id, outcome: "fenced" },
    ];
    held.renewed([applied!, busy!, stolen!, finishing!], results, 300);
    expect(applied!.confirmedAt).toBe(300);
    expect(busy!.confirmedAt).toBe(0);
    expect(handle(stolen!).events).toEqual([{ type: "LEASE_LOST" }]);
    // Its renewal found its own outcome written, not a theft.
    expect(handle(finishing!).events).toEqual([]);
    const warnings = lines.filter((l) => l.msg.startsWith("lease renewal fenced"));
    expect(warnings).toEqual([
      expect.objectContaining({
        level: 40,
        job_id: stolen!.job.id,
        task: "a",
        claim_token: stolen!.job.claimToken,
        msg: `lease renewal fenced: job ${stolen!.job.id} (claim ${stolen!.job.claimToken}) was reclaimed; interrupting its handler`,
      }),
    ]);
    held.interruptExpired(800);
    expect(lines.find((l) => l.msg.startsWith("lease not confirmed"))).toMatchObject({ rows_busy: 1, last_renewal_error: null });
  });

  it("never moves a confirmation back", () => {
    const { held } = setup();
    const [entry] = held.claimed([job("a")], 500);
    held.renewed([entry!], [{ id: entry!.job.id, outcome: "applied", status: "processing"}], 400);
    expect(entry!.confirmedAt).toBe(500);
  });
});

describe("the lease health check", () => {
  it("fails once a lease went unconfirmed for longer than a lease, naming the oldest claim and why", () => {
    const { held } = setup();
    const [older, newer] = held.claimed([job("a", 1_000), job("a", 2_000)], 0);
    held.leaseConfirmed(newer!.job, 10);
    expect(held.leaseHealth(1_000)).toEqual({ ok: true });
    expect(held.leaseHealth(3_000)).toEqual({
      ok: false,
      reason:
        `the leases of 2 claim(s) have not been renewed for longer than a lease (job ${older!.job.id}: 3000 ms, lease 1000 ms): ` +
        "renewals are not getting through",
    });
    held.leaseConfirmed(older!.job, 20);
    expect(held.leaseHealth(2_009.6)).toMatchObject({ reason: expect.stringContaining(`(job ${older!.job.id}: 1990 ms, lease 1000 ms)`) });
    expect(held.leaseHealth(2_009.6)).toMatchObject({ reason: expect.stringMatching(/^the leases of 1 claim/) });
  });

  it("says the rows are locked when the last round found them busy, and gives a failed round's error", () => {
    const { held } = setup();
    const [entry] = held.claimed([job("a")], 0);
    held.renewed([entry!], [{ id: entry!.job.id, outcome: "busy" }], 0);
    expect(held.leaseHealth(2_000)).toMatchObject({ reason: expect.stringMatching(/: their rows are locked by another session$/) });
    held.renewalFailed(new Error("connection terminated"));
    expect(held.leaseHealth(2_000)).toMatchObject({ reason: expect.stringMatching(/: connection terminated$/) });
    held.renewalFailed("a thrown string");
    expect(held.leaseHealth(2_000)).toMatchObject({ reason: expect.stringMatching(/: a thrown string$/) });
    held.renewed([entry!], [{ id: entry!.job.id, outcome: "fenced" }], 0);
    expect(held.leaseHealth(2_000)).toMatchObject({ reason: expect.stringMatching(/: renewals are not getting through$/) });
  });
});

describe("the event-loop stall report", () => {
  const quick = defineTask({ name: "quick", leaseMs: 1_000, handler: async () => undefined });
  const slow = defineTask({ name: "slow", leaseMs: 5_000, handler: async () => undefined });
  const threaded = defineTask({ name: "threaded", leaseMs: 1_000, isolate: { module: new URL("./nowhere.ts", import.meta.url) } });
  const stalls = (lines: Array<{ msg: string }>) => lines.filter((l) => l.msg.startsWith("the event loop was blocked"));

  it("names the in-thread tasks whose handlers ran, once the stall reaches the shortest lease's margin", () => {
    const { held, lines, handle } = setup({ tasks: [quick, slow, threaded] });
    const entries = held.claimed([job("quick"), job("slow"), job("threaded")], 0);
    for (const entry of entries) handle(entry).state = "running";
    held.reportStall(199.9, 1_000);
    expect(stalls(lines)).toEqual([]);
    held.reportStall(200.4, 1_000);
    expect(stalls(lines)).toEqual([
      expect.objectContaining({
        level: 40,
        stalled_ms: 200,
        tasks: ["quick", "slow"],
        lease_ms: 1_000,
        msg:
          'the event loop was blocked for 200 ms while handlers of "quick", "slow" ran (lease 1000 ms): nothing else ran meanwhile, ' +
          "not lease renewal, not timeouts. Run CPU-bound handlers with isolate (a worker thread), or yield (await) between chunks of work.",
      }),
    ]);
  });

  it("counts a handler that ended when the loop ran again, not one that ended before the stall or has not started", () => {
    const { held, lines, handle } = setup({ tasks: [quick, slow] });
    const [endedAtStall, endedBefore, notStarted] = held.claimed([job("slow"), job("quick"), job("quick")], 0);
    held.handlerSettled(endedAtStall!.job, 4_000);
    held.handlerSettled(endedBefore!.job, 2_999);
    handle(notStarted!).state = "checkingPayload";
    held.reportStall(1_000, 4_000);
    expect(stalls(lines)).toEqual([expect.objectContaining({ tasks: ["slow"], lease_ms: 5_000 })]);
    held.reportStall(999, 4_000);
    expect(stalls(lines)).toHaveLength(1);
    held.handlerSettled(endedBefore!.job, 3_000);
    held.reportStall(200, 3_200);
    expect(stalls(lines)).toHaveLength(2);
  });

  it("says nothing when only threaded or unknown tasks ran", () => {
    const { held, lines, handle } = setup({ tasks: [threaded] });
    const entries = held.claimed([job("threaded"), job("gone")], 0);
    for (const entry of entries) handle(entry).state = "running";
    held.reportStall(10_000, 20_000);
    expect(stalls(lines)).toEqual([]);
  });
});

describe("slots, the local buffer and the claim's size", () => {
  it("asks for the free slots with no buffer before any claim has been timed", () => {
    const { held } = setup({ concurrency: 3, prefetch: 100 });
    const plan = held.planClaim();
    expect(plan.asked).toBe(3);
    expect(plan.wants).toEqual([{ type: "a", limit: 3, leaseMs: 20_000, backoffBaseMs: 1_000, backoffMaxMs: 3_600_000, maxAttempts: 5 }]);
  });

  it("gives claimed jobs the free slots, keeps the rest waiting, and starts them oldest first as slots free", async () => {
    const { held, handle, turns } = setup({ concurrency: 2 });
    const entries = held.claimed([job("a"), job("a"), job("a"), job("a")], 0);
    expect(entries.map((e) => e.holdsSlot)).toEqual([true, true, false, false]);
    expect(held.waiting).toBe(2);
    entries[0]!.changed("completing");
    entries[1]!.changed("completing");
    expect(turns).toEqual([]);
    await turn();
    expect(turns).toEqual([{ finished: 0, slotFreed: true }]);
    expect(handle(entries[2]!).events).toEqual([{ type: "START" }]);
    expect(handle(entries[3]!).events).toEqual([{ type: "START" }]);
    expect(held.waiting).toBe(0);
  });

  it("holds the claim back while outcomes being written reach four times the concurrency plus the buffer", () => {
    const { held } = setup({ concurrency: 1, prefetch: 3 });
    // A claim timed at 1 s and slot holds of microseconds: the task's turnover makes the whole
    // buffer worth claiming ahead.
    held.claimTook(1_000);
    // Six jobs whose handlers ended: their outcomes are being written.
    for (let n = 0; n < 6; n++) held.claimed([job("a")], 0)[0]!.changed("completing");
    // One job running, one waiting: room for two more in the buffer, but the bound is 4 + 3 - 6.
    held.claimed([job("a"), job("a")], 0);
    expect(held.waiting).toBe(1);
    expect(held.planClaim().asked).toBe(1);
    expect(held.planClaim().wants).toEqual([expect.objectContaining({ type: "a", limit: 1 })]);
  });

  it("claims nothing ahead for a task limited across the cluster: a buffered job would hold a share an idle worker could run", () => {
    const plain = defineTask({ name: "a", handler: async () => undefined });
    const capped = defineTask({ name: "capped", clusterConcurrency: 5, handler: async () => undefined });
    const rated = defineTask({ name: "rated", rateLimit: { max: 5, windowMs: 1_000 }, handler: async () => undefined });
    const { held } = setup({ concurrency: 1, prefetch: 10, tasks: [plain, capped, rated] });
    held.claimTook(1_000);
    // Each task ran a job quickly: all three turn over fast enough to be worth claiming ahead.
    for (const type of ["a", "capped", "rated"]) held.claimed([job(type)], 0)[0]!.changed("completing");
    held.claimed([job("a")], 0);
    const limits = Object.fromEntries(held.planClaim().wants.map((w) => [w.type, w.limit]));
    expect(limits).toEqual({ a: 10, capped: 0, rated: 0 });
  });

  it("claims nothing while slots and buffer are full, and never asks for a negative count", () => {
    const { held } = setup({ concurrency: 1 });
    held.claimed([job("a"), job("a"), job("a"), job("a"), job("a"), job("a")], 0);
    const plan = held.planClaim();
    expect(plan.asked).toBe(0);
    expect(plan.wants).toEqual([]);
  });

  it("starts no waiting job once the drain was asked for, and releases them all when it begins", async () => {
    const { held, handle } = setup({ concurrency: 1 });
    const [running, waiting] = held.claimed([job("a"), job("a")], 0);
    held.stopStarting();
    running!.changed("completing");
    await turn();
    expect(handle(waiting!).events).toEqual([]);
    held.releaseWaiting();
    expect(handle(waiting!).events).toEqual([{ type: "RELEASE" }]);
    expect(handle(running!).events).toEqual([]);
  });

  it("tells the supervisor once per turn how many jobs finished and whether a slot was freed", async () => {
    const { held, turns, handle } = setup({ concurrency: 3 });
    const entries = held.claimed([job("a"), job("a"), job("a"), job("a")], 0);
    for (const entry of entries.slice(0, 3)) held.finish(entry, "completed", null);
    expect(turns).toEqual([]);
    await turn();
    expect(turns).toEqual([{ finished: 3, slotFreed: true }]);
    // The waiting job took a freed slot at the end of that turn, before the supervisor heard.
    expect(handle(entries[3]!).events).toEqual([{ type: "START" }]);
    await turn();
    expect(turns).toHaveLength(1);
    const [waiting] = held.claimed([job("a"), job("a"), job("a")], 0).slice(2);
    held.finish(waiting!, "released", null); // it never held a slot
    await turn();
    expect(turns.at(-1)).toEqual({ finished: 1, slotFreed: false });
  });

  it("counts each outcome once, and tells the supervisor once per job", () => {
    const { held, finished } = setup();
    const [entry] = held.claimed([job("a")], 0);
    held.finish(entry!, "retried", "error: boom");
    held.finish(entry!, "retried", "error: boom");
    expect(held.outcomes.retried).toBe(1);
    expect(finished).toEqual([{ id: entry!.job.id, outcome: "retried", error: "error: boom" }]);
    expect(held.size).toBe(0);
  });

  it("logs a job machine that failed and gives its job up as abandoned", () => {
    const { held, lines, finished } = setup();
    const [entry] = held.claimed([job("a")], 0);
    entry!.failed(new Error("machine broke"));
    expect(lines.find((l) => l.msg.startsWith("job machine failed"))).toMatchObject({ level: 50, job_id: entry!.job.id });
    expect(finished).toEqual([{ id: entry!.job.id, outcome: "abandoned", error: "Error: machine broke" }]);
  });
});
