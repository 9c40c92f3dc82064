import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger, jobLogger } from "../src/runtime/logger.ts";

const capture = () => {
  const lines: Record<string, unknown>[] = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      for (const line of chunk.toString().split("\n").filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  return { lines, logger: createLogger({ destination }) };
};

const job = { id: "7", type: "mail.send", attempts: 2, claimToken: "3f0c2b52-8a8e-4f0e-9a77-0d1f1c2b3a4d", payload: { password: "hunter2" } };

describe("logging", () => {
  it("writes JSON with stable job fields and no payload by default", () => {
    const { lines, logger } = capture();
    jobLogger(logger, job).info("started");
    expect(lines).toEqual([
      expect.objectContaining({ msg: "started", job_id: "7", task: "mail.send", attempt: 2, claim_token: job.claimToken }),
    ]);
    expect(JSON.stringify(lines)).not.toContain("hunter2");
  });

  it("includes the payload only when asked", () => {
    const { lines, logger } = capture();
    jobLogger(logger, job, { logPayload: true }).info("started");
    expect(lines[0]).toMatchObject({ payload: { password: "hunter2" } });
  });
});
