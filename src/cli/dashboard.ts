import type { Command } from "commander";
import * as Effect from "effect/Effect";
import * as Fiber from "effect/Fiber";
import { InvalidConfigError } from "../db/errors.ts";
import { integerOption, statementOptions, withDatabaseOptions, withPool, type DatabaseOptions } from "./shared.ts";

interface DashboardCliOptions extends DatabaseOptions {
  port: number;
  host: string;
  token?: string;
  allowedHost: string[];
  tokenForReads?: boolean;
}

export const dashboardCommand = (program: Command): void => {
  withDatabaseOptions(
    program
      .command("dashboard")
      .description("a live web dashboard of the queue, the workers and their job machines (until SIGTERM/SIGINT)")
      .option("--port <port>", "port to listen on", integerOption("--port"), 7070)
      .option("--host <host>", "address to listen on (loopback by default: put your own auth in front before exposing it)", "127.0.0.1")
      .option("--token <token>", "allow retry and cancel to requests bearing this token (default: PICKET_DASHBOARD_TOKEN; without one they are refused)")
      .option("--token-for-reads", "require the token for reads too (every route but the page itself)")
      .option(
        "--allowed-host <name>",
        "a Host name requests may use besides localhost, 127.0.0.1, [::1] and the --host address (repeatable); others are refused, so a web page cannot reach a loopback dashboard by DNS rebinding",
        (name: string, names: string[]) => [...names, name],
        [] as string[],
      ),
  ).action(async (options: DashboardCliOptions) => {
    const token = options.token ?? process.env.PICKET_DASHBOARD_TOKEN;
    // Loaded here, not with the CLI: a worker process has no use for the HTTP server's modules.
    const { serveDashboard } = await import("../dashboard/server.ts");
    await withPool(options, async (pool) => {
      const stopped = new Promise<void>((resolve) => {
        process.once("SIGINT", resolve);
        process.once("SIGTERM", resolve);
      });
      // The URL is printed once the port listens, not before: a port already in use (or an
      // address this host does not have) ends the command with the reason, instead of a URL that
      // nothing serves.
      const fiber = Effect.runFork(
        serveDashboard(
          {
            db: pool,
            statements: statementOptions(options),
            port: options.port,
            host: options.host,
            allowedHosts: options.allowedHost,
            ...(options.tokenForReads ? { tokenForReads: true } : {}),
            ...(token ? { token } : {}),
          },
          undefined,
          () =>
            process.stderr.write(`picket dashboard: http://${options.host}:${options.port}/ (write actions ${token ? "need the token" : "off: no --token"}${options.tokenForReads ? "; reads need it too" : ""})\n`),
        ),
      );
      const failed = Effect.runPromise(Fiber.join(fiber)).then(
        () => undefined,
        (error: unknown) => error,
      );
      const error = await Promise.race([stopped.then(() => undefined), failed]);
      if (error !== undefined) {
        const reason = (error as { code?: string }).code ?? (error instanceof Error ? error.message : String(error));
        throw new InvalidConfigError(
          `the dashboard cannot listen on ${options.host}:${options.port} (${reason}): ` +
            (reason === "EADDRINUSE" ? "another process holds that port: choose another with --port, or stop that process" : "choose another --host or --port"),
          { cause: error },
        );
      }
      await Effect.runPromise(Fiber.interrupt(fiber));
    });
  });
};
