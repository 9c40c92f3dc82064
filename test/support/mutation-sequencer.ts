// The order of test files in a mutation run. A mutant run stops at its first failing test, so a
// killed mutant costs the files that ran before the one that killed it: run first the files that
// failed last time (a neighbouring mutant was killed there), then the quickest ones. vitest's own
// order puts the slowest files first, which suits parallel runs, not a bail-out.
import { BaseSequencer, type TestSpecification } from "vitest/node";

export default class FailedThenQuickestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const last = new Map(files.map((file) => [file, this.ctx.cache.getTestSpecificationResult(file)]));
    const rank = (file: TestSpecification): [number, number] => {
      const result = last.get(file);
      // Never run yet: first, as its duration is unknown and it may well be quick.
      if (!result) return [0, 0];
      return [result.failed ? 0 : 1, result.duration ?? 0];
    };
    return [...files].sort((a, b) => {
      const [failedA, durationA] = rank(a);
      const [failedB, durationB] = rank(b);
      return failedA - failedB || durationA - durationB;
    });
  }
}
