// Serves a Fetch-style handler (Request in, Response out; Effect's `HttpRouter.toWebHandler` makes
// one from routes) on node:http: the health server and `picket dashboard` both run on it.
//
// Not @effect/platform-node's NodeHttpServer: that package requires `redis` as a peer (npm
// installs required peers) and brings undici and ws, 25 MB of a 110 MB install, and the server
// loaded with it held 11 MB more heap (docs/benchmarks.md, issue 28). What the two servers used
// of it is this file.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import * as Effect from "effect/Effect";

export interface FetchHandler {
  handler: (request: Request) => Promise<Response>;
  /** Releases what the handler holds (its routes' Layer); called once the server has closed. */
  dispose: () => Promise<void>;
}

export interface ServeOptions {
  port: number;
  host: string;
  /** Handed the server before it listens: its `error` and `listening` events, closeAllConnections(). */
  created?: (server: Server) => void;
  /** Once it listens: its URL, e.g. `http://127.0.0.1:7070` (the port chosen, for port 0). */
  listening?: (url: string) => void;
}

/**
 * Serves until interrupted. It fails when the server cannot listen (the error is Node's, with its
 * `code`, e.g. EADDRINUSE). Interrupting it stops listening, interrupts every request still being
 * answered (a live stream never ends by itself) and closes their connections, then disposes of
 * the handler.
 */
export const serveFetchHandler = (make: () => FetchHandler, options: ServeOptions): Effect.Effect<never, unknown> =>
  Effect.scoped(
    Effect.gen(function* () {
      const { handler } = yield* Effect.acquireRelease(Effect.sync(make), ({ dispose }) => Effect.promise(dispose));
      const server = createServer();
      options.created?.(server);
      // Where requests arrive, for a Request's URL (a Host header, when sent, names the host too):
      // known once it listens, before any request comes.
      let origin = "";
      server.on("request", (req: IncomingMessage, res: ServerResponse) => void answer(handler, req, res, origin));
      yield* Effect.acquireRelease(listen(server, options), () => close(server));
      origin = `http://${urlHost((server.address() as AddressInfo).address)}:${(server.address() as AddressInfo).port}`;
      options.listening?.(origin);
      return yield* Effect.never;
    }),
  );

const urlHost = (host: string): string => (host.includes(":") && !host.startsWith("[") ? `[${host}]` : host);

const listen = (server: Server, options: ServeOptions) =>
  Effect.callback<void, Error>((resume) => {
    const failed = (error: Error) => resume(Effect.fail(error));
    server.once("error", failed);
    server.listen(options.port, options.host, () => {
      server.off("error", failed);
      resume(Effect.void);
    });
  });

/** Every connection is closed too (each request's handler is interrupted as its client leaves). */
const close = (server: Server) =>
  Effect.callback<void>((resume) => {
    server.close(() => resume(Effect.void));
    server.closeAllConnections();
  });

/** One request: to a web Request, through the handler, its Response back onto Node's response. */
const answer = async (handler: FetchHandler["handler"], req: IncomingMessage, res: ServerResponse, origin: string): Promise<void> => {
  const controller = new AbortController();
  // The client left (or the server closed its connection) before the whole response was sent:
  // the handler's fiber is interrupted, a stream's producer with it.
  res.once("close", () => {
    if (!res.writableEnded) controller.abort();
  });
  let request: Request;
  try {
    request = toRequest(req, origin, controller.signal);
  } catch (error) {
    // A request line the Fetch API refuses (a TRACE, an asterisk target): the client's mistake.
    res.writeHead(400, { "content-type": "text/plain" }).end(`bad request: ${error instanceof Error ? error.message : String(error)}\n`);
    return;
  }
  try {
    const response = await handler(request);
    const headers: Record<string, string | string[]> = Object.fromEntries(response.headers);
    const cookies = response.headers.getSetCookie();
    if (cookies.length > 0) headers["set-cookie"] = cookies;
    if (response.statusText === "") res.writeHead(response.status, headers);
    else res.writeHead(response.status, response.statusText, headers);
    if (response.body === null) res.end();
    else await pipeline(Readable.fromWeb(response.body as NodeReadableStream), res);
  } catch {
    // The client left mid-stream, or the server is closing: nothing more can be sent.
    if (!res.headersSent) res.writeHead(500).end();
    else res.destroy();
  }
};

/**
 * A Fetch-style handler as a node:http request listener, for a service that hands over Node's own
 * request and response: Express (`app.use("/picket", listener)`, which takes its mount path off
 * `req.url`), Fastify (`reply.hijack()` and the raw request, whose URL keeps the prefix: give it as
 * `prefix`), or `http.createServer`. A page at the prefix without its trailing slash is
 * redirected to it, so that the page's relative URLs resolve under the prefix.
 */
export const nodeListener =
  (handler: FetchHandler["handler"], options: { prefix?: string } = {}) =>
  (req: IncomingMessage & { originalUrl?: string }, res: ServerResponse): void => {
    const full = req.originalUrl ?? req.url ?? "/";
    const [fullPath = "/", query] = full.split(/\?(.*)/s, 2);
    const prefix = options.prefix?.replace(/\/+$/, "");
    const inner = prefix !== undefined && prefix !== "" && (fullPath === prefix || fullPath.startsWith(`${prefix}/`)) ? full.slice(prefix.length) : (req.url ?? "/");
    const innerPath = inner.split("?")[0]!;
    if (innerPath === "" || (innerPath === "/" && !fullPath.endsWith("/"))) {
      res.writeHead(308, { location: `${fullPath}/${query === undefined ? "" : `?${query}`}` }).end();
      return;
    }
    req.url = inner;
    void answer(handler, req, res, `http://${req.headers.host ?? "localhost"}`);
  };

const toRequest = (req: IncomingMessage, origin: string, signal: AbortSignal): Request => {
  const headers = new Headers();
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i]!, req.rawHeaders[i + 1]!);
  // The path is appended, not resolved: `//x` is a path here, not another host.
  const url = req.url?.startsWith("/") ? origin + req.url : (req.url ?? "/");
  const hasBody = (req.headers["content-length"] !== undefined && req.headers["content-length"] !== "0") || req.headers["transfer-encoding"] !== undefined;
  return new Request(url, {
    method: req.method ?? "GET",
    headers,
    signal,
    ...(hasBody ? { body: Readable.toWeb(req) as ReadableStream<Uint8Array>, duplex: "half" } : {}),
  });
};
