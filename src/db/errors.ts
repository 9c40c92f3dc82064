// Every error picket raises on purpose, and the one place that reads PostgreSQL error codes.

/** Base class: every message says what is wrong and what to do about it. */
export class PicketError extends Error {
  override readonly name: string = "PicketError";
}

/** A job, its payload or its options failed validation; nothing was written. */
export class InvalidJobError extends PicketError {
  override readonly name = "InvalidJobError";
}

/** A configuration value (schema name, lease, limit, ...) is not usable. */
export class InvalidConfigError extends PicketError {
  override readonly name = "InvalidConfigError";
}

/** The database could not be reached or refused the connection. */
export class DatabaseUnreachableError extends PicketError {
  override readonly name = "DatabaseUnreachableError";
}

/** An applied migration's file changed since it was applied. */
export class MigrationChecksumError extends PicketError {
  override readonly name = "MigrationChecksumError";
}

/** The database holds migrations this version of picket does not know (a newer picket ran). */
export class UnknownMigrationError extends PicketError {
  override readonly name = "UnknownMigrationError";
}

/**
 * A statement did not finish within its bound (picket's own timer, or the server's
 * statement_timeout / lock_timeout): a lock held by another session, a slow or paused server, a
 * black-holed connection. The statement was cancelled on the server where that was possible.
 */
export class StatementTimeoutError extends PicketError {
  override readonly name = "StatementTimeoutError";
}

/**
 * picket's tables are missing from the schema in use: nobody ran the migrations there (or the
 * schema name is wrong). Raised once at start, and by commands for 42P01 on picket's tables.
 */
/** The schema exists but lacks migrations this version of picket needs: a worker refuses to start on it. */
export class SchemaOutOfDateError extends PicketError {
  override readonly name = "SchemaOutOfDateError";
  readonly schema: string;
  readonly missing: string[];
  constructor(schema: string, missing: string[], options?: ErrorOptions) {
    super(
      `picket: the picket schema ${schema === "picket" ? "" : `"${schema}" `}lacks migrations this version needs (${missing.join(", ")}): ` +
        `run \`picket migrate${schema === "picket" ? "" : ` --schema ${schema}`}\` (or pass migrate: true); workers of older versions keep working on the migrated schema`,
      options,
    );
    this.schema = schema;
    this.missing = missing;
  }
}

export class SchemaNotSetUpError extends PicketError {
  override readonly name = "SchemaNotSetUpError";
  readonly schema: string;
  constructor(schema: string, options?: ErrorOptions) {
    super(
      schema === "picket"
        ? "picket: the picket schema is not set up in this database: run `picket migrate` (or pass migrate: true)"
        : `picket: the picket schema "${schema}" is not set up in this database: run \`picket migrate --schema ${schema}\` (or pass migrate: true)`,
      options,
    );
    this.schema = schema;
  }
}

interface PgLikeError {
  code?: string;
  message?: string;
}

const asPgError = (error: unknown): PgLikeError =>
  typeof error === "object" && error !== null ? (error as PgLikeError) : {};

// SQLSTATE classes of a server or a connection in trouble, not of the statement: connection
// exceptions (08), transaction rollbacks (40: serialization failures, deadlocks), insufficient
// resources (53: too many connections, out of memory or disk), objects in use or locks not
// available (55), operator intervention (57: shutdowns, cancels, terminated backends), system
// errors (58).
const TRANSIENT_CLASSES = new Set(["08", "40", "53", "55", "57", "58"]);

// Node's own errors for a peer that cannot be reached, or went away.
const NETWORK_ERRORS = new Set(["ECONNRESET", "ECONNREFUSED", "ECONNABORTED", "EPIPE", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN", "ENOTFOUND"]);

/**
 * Errors worth retrying: anything that says the server or the connection is in trouble rather
 * than that the statement is wrong, and statements that ran past their bound. A read-only server
 * (25006: a replica, or a primary during failover) counts: it will take the write once promoted.
 * pg's and pg-pool's own connection errors have no code; they are known by their words.
 */
export const isTransientDbError = (error: unknown): boolean => {
  if (error instanceof StatementTimeoutError) return true;
  const code = asPgError(error).code ?? "";
  return (
    TRANSIENT_CLASSES.has(code.slice(0, 2)) ||
    code === "25006" ||
    NETWORK_ERRORS.has(code) ||
    /Connection terminated|connection ended|Client has encountered a connection error|timeout exceeded when trying to connect/i.test(
      asPgError(error).message ?? "",
    )
  );
};

/**
 * Class 22 (data exception: a value out of range, text PostgreSQL refuses) and 54 (program limit
 * exceeded: a value too large): the statement's values are wrong, and will be on every retry.
 */
export const isDataException = (error: unknown): boolean => /^(22|54)/.test(asPgError(error).code ?? "");

/** 3D000: the database named in the connection string does not exist. */
export const isMissingDatabase = (error: unknown): boolean => asPgError(error).code === "3D000";

/** 28P01 / 28000: authentication failed. */
export const isAuthFailure = (error: unknown): boolean => {
  const code = asPgError(error).code;
  return code === "28P01" || code === "28000";
};

/** 57014 (query_canceled: statement_timeout, or a cancel request) / 55P03 (lock_not_available: lock_timeout). */
export const isTimeout = (error: unknown): boolean => {
  const code = asPgError(error).code;
  return code === "57014" || code === "55P03";
};

/**
 * 26000 (a prepared statement named by Bind does not exist) / 42P05 (Parse names one that already
 * exists): named statements that vanish or reappear between uses mean the connection is shared by
 * a pooler in transaction mode.
 */
export const isPreparedStatementMismatch = (error: unknown): boolean => {
  const code = asPgError(error).code;
  return code === "26000" || code === "42P05";
};

/** 23505: a unique index refused the row (for picket's tables: a live job holds the dedupe key). */
export const isUniqueViolation = (error: unknown): boolean => asPgError(error).code === "23505";

/** PostgreSQL chose this statement to break a deadlock: it was rolled back whole, and may be tried again. */
export const isDeadlock = (error: unknown): boolean => asPgError(error).code === "40P01";

/** 08P01 with PgBouncer's wording: the server refused a startup parameter picket sent. */
export const isUnsupportedStartupParameter = (error: unknown): boolean =>
  /unsupported startup parameter/i.test(asPgError(error).message ?? "");

/**
 * 42P01 (undefined_table) or 3F000 (invalid_schema_name) naming one of picket's relations in
 * `schema`: the statement met a database whose picket tables were never created.
 */
export const isMissingPicketSchema = (error: unknown, schema: string): boolean => {
  const { code, message = "" } = asPgError(error);
  if (code === "42P01") return message.includes(`"${schema}.`);
  if (code === "3F000") return message.includes(`"${schema}"`);
  return false;
};
