// Where an invocation's abort signal comes from: XState's actor arguments ({ input, signal }), or
// the derived path's (InvocationArgs in job-runner.ts), which make the signal only when it is read
// and also say whether the invocation was aborted without making it. What reads a job's signal
// (the outcome write's batcher and retry, the handler's context, the overrun check) takes either.

export interface SignalSource {
  readonly signal: AbortSignal;
  readonly aborted?: boolean;
}

/** Whether the invocation behind `source` was aborted, without making a signal nobody has read. */
export const isAborted = (source: SignalSource): boolean => source.aborted ?? source.signal.aborted;
