// Which database errors a bookkeeping write retries (a wrong answer either gives up on a claim
// during a PostgreSQL restart or retries a bug for the whole lease), the error classes callers
// branch on, and the schema-name check that guards every statement's text.
import { describe, expect, it } from "vitest";
import {
  DatabaseUnreachableError,
  InvalidConfigError,
  InvalidJobError,
  MigrationChecksumError,
  PicketError,
  UnknownMigrationError,
} from "../src/index.ts";
import { isAuthFailure, isMissingDatabase, isTransientDbError } from "../src/db/errors.ts";
import { notifyChannel } from "../src/db/notify.ts";
import { checkSchemaName, perSchema } from "../src/db/schema-name.ts";

describe("database errors", () => {
  it.each([
    ["40001", "serialization failure"],
    ["40P01", "deadlock"],
    ["57P01", "admin shutdown, pg_terminate_backend"],
    ["57P02", "crash shutdown"],
    ["57P03", "cannot connect now (starting up)"],
    ["57014", "statement cancelled (statement_timeout, a cancel request)"],
    ["08000", "connection exception"],
    ["08003", "connection does not exist"],
    ["08006", "connection failure"],
    ["53300", "too many connections"],
    ["53200", "out of memory"],
    ["55P03", "lock not available (lock_timeout)"],
    ["58030", "I/O error"],
    ["25006", "read-only transaction (a replica, a failover)"],
    ["ECONNRESET", ""],
    ["ECONNREFUSED", ""],
    ["ECONNABORTED", ""],
    ["EPIPE", ""],
    ["ETIMEDOUT", ""],
    ["EHOSTUNREACH", ""],
    ["ENETUNREACH", ""],
    ["EAI_AGAIN", "DNS lookup failed for now"],
    ["ENOTFOUND", "host not found"],
  ])("retries code %s (%s)", (code) => expect(isTransientDbError(Object.assign(new Error("x"), { code }))).toBe(true));

  it.each(["23505", "42P01", "22P02", "P0001", "25P02", "3D000", "28P01", "", "X08", "ENOENT"])("does not retry code %j", (code) =>
    expect(isTransientDbError(Object.assign(new Error("x"), { code }))).toBe(false),
  );

  it("retries pg's connection-loss messages, whatever their case, and nothing else by message", () => {
    for (const message of [
      "Connection terminated unexpectedly",
      "connection ended",
      "Client has encountered a connection error and is not queryable",
      "CONNECTION TERMINATED",
      "timeout exceeded when trying to connect",
    ]) {
      expect(isTransientDbError(new Error(message))).toBe(true);
    }
    expect(isTransientDbError(new Error("relation does not exist"))).toBe(false);
    expect(isTransientDbError(undefined)).toBe(false);
    expect(isTransientDbError("ECONNRESET")).toBe(false);
    expect(isTransientDbError({})).toBe(false);
  });

  it("recognises a missing database and a failed login by their codes only", () => {
    expect(isMissingDatabase({ code: "3D000" })).toBe(true);
    expect(isMissingDatabase({ code: "3D001" })).toBe(false);
    expect(isMissingDatabase(null)).toBe(false);
    expect(isAuthFailure({ code: "28P01" })).toBe(true);
    expect(isAuthFailure({ code: "28000" })).toBe(true);
    expect(isAuthFailure({ code: "28001" })).toBe(false);
    expect(isAuthFailure(7)).toBe(false);
  });

  it("names every error class, each a PicketError", () => {
    const classes = [
      [PicketError, "PicketError"],
      [InvalidJobError, "InvalidJobError"],
      [InvalidConfigError, "InvalidConfigError"],
      [DatabaseUnreachableError, "DatabaseUnreachableError"],
      [MigrationChecksumError, "MigrationChecksumError"],
      [UnknownMigrationError, "UnknownMigrationError"],
    ] as const;
    for (const [Class, name] of classes) {
      const error = new Class("m");
      expect(error.name).toBe(name);
      expect(error).toBeInstanceOf(PicketError);
      expect(String(error)).toBe(`${name}: m`);
    }
  });
});

describe("schema names", () => {
  it("accepts lower-case identifiers up to 63 characters, starting with a letter or _", () => {
    for (const name of ["picket", "_p", "a1_b2", "a".repeat(63), "z"]) expect(checkSchemaName(name)).toBe(name);
  });

  it("refuses anything else, naming the value and the rule", () => {
    for (const name of ["", "1a", "Picket", "a-b", "a b", "a".repeat(64), 'x"; drop', "pick\u00e9t", " picket", "picket "]) {
      expect(() => checkSchemaName(name)).toThrow(
        new InvalidConfigError(
          `picket: schema name ${JSON.stringify(name)} is not allowed; use lower-case letters, digits and _ (starting with a letter or _), at most 63 characters, e.g. "picket".`,
        ),
      );
    }
    expect(() => checkSchemaName(42 as never)).toThrow(InvalidConfigError);
    // Not a string, though it reads as a valid name once a regex coerces it to "null".
    expect(() => checkSchemaName(null as never)).toThrow(InvalidConfigError);
  });

  it("builds a statement's text once per schema, and only for a valid name", () => {
    const built: string[] = [];
    const text = perSchema((schema) => {
      built.push(schema);
      return `SELECT 1 FROM ${schema}.jobs`;
    });
    expect(text("a")).toBe("SELECT 1 FROM a.jobs");
    expect(text("a")).toBe("SELECT 1 FROM a.jobs");
    expect(text("b")).toBe("SELECT 1 FROM b.jobs");
    expect(built).toEqual(["a", "b"]);
    expect(() => text("B")).toThrow(InvalidConfigError);
    expect(built).toEqual(["a", "b"]);
  });

  it("names one NOTIFY channel per schema", () => {
    expect(notifyChannel("picket")).toBe("picket:picket");
    expect(notifyChannel("other")).toBe("picket:other");
    expect(() => notifyChannel("Bad")).toThrow(InvalidConfigError);
  });
});
