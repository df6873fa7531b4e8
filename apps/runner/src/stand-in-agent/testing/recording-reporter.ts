import type { JobReporter } from '../../infrastructure/mcp/job-reporter.js';

/** Records what the tool server forwards; in production the reporter speaks NATS to the job service. */
export class RecordingReporter implements JobReporter {
  readonly calls: Array<{ method: keyof JobReporter; input: unknown }> = [];
  /** When set, every call is refused with it, as the job service would refuse (e.g. STALE_FENCE). */
  refuseWith: Error | null = null;

  private record<T>(method: keyof JobReporter, input: unknown, result: T): Promise<T> {
    if (this.refuseWith) return Promise.reject(this.refuseWith);
    this.calls.push({ method, input });
    return Promise.resolve(result);
  }
  logImplementation(entry: unknown) {
    return this.record('logImplementation', entry, { entryId: `log-${this.calls.length + 1}` });
  }
  logCommit(entry: unknown) {
    return this.record('logCommit', entry, { entryId: `log-${this.calls.length + 1}` });
  }
  logTestResult(entry: unknown) {
    return this.record('logTestResult', entry, { entryId: `log-${this.calls.length + 1}` });
  }
  updateJobStatus(update: unknown) {
    return this.record('updateJobStatus', update, undefined);
  }
  askQuestion(question: unknown) {
    return this.record('askQuestion', question, { questionId: 'q-1', answer: null });
  }

  methods(): string[] {
    return this.calls.map((c) => c.method);
  }
}
