// The one line the `picket` command prints for an error. picket's messages start with "picket: "
// already, and a message that wraps another's (a tasks module that threw one of picket's errors
// while loading) would say it twice: the prefix is written once, here.

const PREFIX = /^(?:picket:\s*)+/;

/** The message without any leading "picket: " (once or repeated). */
export const withoutPrefix = (message: string): string => message.replace(PREFIX, "");

/** "picket: <what went wrong>", whatever was thrown. */
export const cliErrorMessage = (error: unknown): string =>
  `picket: ${withoutPrefix(error instanceof Error ? error.message : String(error))}`;
