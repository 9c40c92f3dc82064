// The error a call ends with, for tests that check its whole message rather than a pattern.
import { expect } from "vitest";

/** The message of the error `fn` throws, checked to be a `type`; fails when it throws nothing. */
export const refusalOf = (fn: () => unknown, type: abstract new (...args: never[]) => Error): string => {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(type);
    return (error as Error).message;
  }
  throw new Error("expected a refusal");
};

/** The error `promise` rejects with; fails when it resolves. */
export const rejectionOf = async (promise: Promise<unknown>): Promise<Error> => {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error("expected a rejection");
};
