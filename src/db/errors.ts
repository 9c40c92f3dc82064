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

interface PgLikeError {
  code?: string;
  message?: string;
}

const asPgError = (error: unknown): PgLikeError =>
  typeof error === "object" && error !== null ? (error as PgLikeError) : {};

/**
 * Errors worth retrying: serialization failures, deadlocks, admin shutdowns, connection loss.
 * Node socket errors (ECONNRESET, ...) count as connection loss.
 */
export const isTransientDbError = (error: unknown): boolean => {
  const code = asPgError(error).code ?? "";
  return (
    code === "40001" ||
    code === "40P01" ||
    code === "57P01" ||
    code === "57P02" ||
    code === "57P03" ||
    code.startsWith("08") ||
    code === "ECONNRESET" ||
    code === "ECONNREFUSED" ||
    code === "EPIPE" ||
    code === "ETIMEDOUT" ||
    /Connection terminated|connection ended|Client has encountered a connection error/i.test(
      asPgError(error).message ?? "",
    )
  );
};

/** 3D000: the database named in the connection string does not exist. */
export const isMissingDatabase = (error: unknown): boolean => asPgError(error).code === "3D000";

/** 28P01 / 28000: authentication failed. */
export const isAuthFailure = (error: unknown): boolean => {
  const code = asPgError(error).code;
  return code === "28P01" || code === "28000";
};
