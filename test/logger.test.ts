import { spawn } from "node:child_process";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
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

  it("names picket, leaves out pid and hostname, and logs at info unless told otherwise", () => {
    const { lines, logger } = capture();
    logger.debug("hidden");
    logger.info("shown");
    expect(lines).toEqual([{ level: 30, time: expect.any(Number), name: "picket", msg: "shown" }]);
  });

  it("takes the level from the option, else from PICKET_LOG_LEVEL", () => {
    const previous = process.env.PICKET_LOG_LEVEL;
    try {
      process.env.PICKET_LOG_LEVEL = "warn";
      const destination = new Writable({ write: (_chunk, _encoding, done) => done() });
      expect(createLogger({ destination }).level).toBe("warn");
      expect(createLogger({ level: "debug", destination }).level).toBe("debug");
      delete process.env.PICKET_LOG_LEVEL;
      expect(createLogger({ destination }).level).toBe("info");
    } finally {
      if (previous === undefined) delete process.env.PICKET_LOG_LEVEL;
      else process.env.PICKET_LOG_LEVEL = previous;
    }
  });

  it("logs an error by its type, message, code and stack only: never the pg client it carries", () => {
    const { lines, logger } = capture();
    const error = Object.assign(new TypeError("boom"), { code: "08006", client: { password: "secret" } });
    logger.error({ err: error }, "failed");
    logger.error({ err: "a plain string" }, "odd");
    expect(lines[0]!.err).toEqual({ type: "TypeError", message: "boom", code: "08006", stack: error.stack });
    expect(JSON.stringify(lines[0])).not.toContain("secret");
    expect(lines[1]!.err).toBe("a plain string");
  });

  it("writes to stdout in order with the process's other output, though the reader is slow: a line logged before a console.log is printed before it", { tags: ["spawns"], timeout: 60_000 }, async () => {
    const logger = fileURLToPath(new URL("../src/runtime/logger.ts", import.meta.url));
    // Far more than a pipe holds (64 KiB at most), and a reader that waits before it reads: the
    // pipe fills, and console.log's lines wait in process.stdout. Logged to fd 1 directly, picket's
    // lines overtook them (seen on a loaded machine, where the test runner read late).
    const script = `import { createLogger } from ${JSON.stringify(logger)};
      const logger = createLogger();
      for (let i = 0; i < 2000; i++) { logger.info({ i, pad: "x".repeat(100) }, "logged"); console.log("printed " + i); }`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], { env: { ...process.env, PICKET_LOG_LEVEL: "info" }, stdio: ["ignore", "pipe", "inherit"] });
    await new Promise((resolve) => setTimeout(resolve, 500));
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    await new Promise((resolve) => child.on("close", resolve));
    const order = output
      .trim()
      .split("\n")
      .map((line) => (line.startsWith("{") ? `logged ${JSON.parse(line).i}` : line));
    expect(order).toEqual(Array.from({ length: 2000 }, (_, i) => [`logged ${i}`, `printed ${i}`]).flat());
  });
});
