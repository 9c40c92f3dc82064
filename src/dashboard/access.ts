// Who may ask the dashboard what: the Host a request names (a web page using DNS rebinding names
// its own host, which is how it is told apart from the operator's browser), and the token that
// write actions, and reads when the dashboard asks, must carry.
import { timingSafeEqual } from "node:crypto";
import type { HttpServerRequest } from "effect/http";

/** The Host header's name or address, without the port, in lower case ("[::1]" keeps its brackets). */
export const hostName = (header: string | undefined): string | undefined => {
  if (header === undefined || header === "") return undefined;
  const host = header.trim().toLowerCase();
  return host.startsWith("[") ? host.slice(0, host.indexOf("]") + 1) : host.replace(/:\d*$/, "");
};

/** The names a dashboard listening on `host` answers to without being told more. */
export const loopbackHosts = (host: string): string[] => {
  const names = ["localhost", "127.0.0.1", "[::1]"];
  // An address it listens on, unless a wildcard: a request naming 0.0.0.0 has no business here.
  if (host !== "0.0.0.0" && host !== "::" && host !== "[::]") names.push(host.includes(":") && !host.startsWith("[") ? `[${host}]` : host);
  return names.map((name) => name.toLowerCase());
};

/** The host a request names: its Host header, or (a web Request passed to the mounted handler carries none) its URL's. */
export const requestHost = (request: HttpServerRequest.HttpServerRequest): string | undefined =>
  request.headers["host"] || (/^https?:\/\//.test(request.originalUrl) ? new URL(request.originalUrl).host : undefined);

const sameToken = (given: string, expected: string): boolean => {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
};

/** The token an `Authorization: Bearer <token>` header carries, if any. */
export const bearerToken = (request: HttpServerRequest.HttpServerRequest): string | undefined => /^Bearer (.+)$/.exec(request.headers["authorization"] ?? "")?.[1];

/**
 * Why a request that must carry `token` is refused, or undefined when it carries it. A missing
 * token and a wrong one are told apart: the first is a page that was never given it, the second a
 * typo or a token from another dashboard.
 */
export const tokenRefusal = (given: string | undefined, token: string, doing: string): string | undefined => {
  if (given === undefined || given === "") return `${doing} needs the dashboard's token, and none was sent: type it in the token field at the top of the page (or send Authorization: Bearer <token>)`;
  if (!sameToken(given, token)) return `the token sent is not this dashboard's token: check the token field at the top of the page (the dashboard's is the value of --token, or PICKET_DASHBOARD_TOKEN)`;
  return undefined;
};
