import { z } from 'zod';
import { exampleJobView, JobViewSchema } from './views.js';
import type { CommandContract, EventContract } from '../registry.js';
import {
  claimJob,
  createSprintRun,
  enqueueJob,
  finishJob,
  jobCommandContracts,
  jobEventContracts,
  jobQueryContracts,
  JobClaimRolledBack,
  JobIdSchema,
  JobLeaseExpired,
  JobPushReported,
  IdempotencyKeySchema,
  SprintRunPaused,
  sprintRunCommandContracts,
  sprintRunEventContracts,
  jobIdFor,
  jobExampleIds,
  jobOfferExamples,
  jobOfferMessageId,
  JobOfferSchema,
  productCommandContracts,
  productEventContracts,
  productExample,
  ProductRegistered,
  registerProduct,
  updateProduct,
  isTerminalJobStatus,
  jobInputBytes,
  jsonBytes,
  MAX_JOB_INPUT_BYTES,
  MAX_JOB_REQUEST_BYTES,
  MAX_SPRINT_TASK_PAYLOAD_BYTES,
  JobStatusSchema,
  jobEventTypes,
  TERMINAL_JOB_STATUSES,
  TerminalJobStatusSchema,
} from './index.js';
import { PullRequestChecksFailed, PullRequestMergeConflict, prSprintDrivingEventContracts } from '../prs/index.js';
import { deriveIdempotencyKey } from '../hashing.js';
import { isSubjectToken } from '../subjects.js';

const all: (CommandContract | EventContract)[] = [
  ...jobCommandContracts,
  ...sprintRunCommandContracts,
  ...jobQueryContracts,
  ...jobEventContracts,
  ...sprintRunEventContracts,
  ...prSprintDrivingEventContracts,
  ...productCommandContracts,
  ...productEventContracts,
] as unknown as (CommandContract | EventContract)[];

const schemaOf = (c: CommandContract | EventContract): z.ZodType => (c.kind === 'command' ? c.request : c.data);
const nameOf = (c: CommandContract | EventContract) => (c.kind === 'command' ? `${c.context}.${c.name}` : `${c.context}.${c.type}`);

function issuePaths(schema: z.ZodType, input: unknown): string[] {
  const parsed = schema.safeParse(input);
  if (parsed.success) return [];
  return parsed.error.issues.map((i) => i.path.join('.'));
}

describe('job-service contracts', () => {
  it('declares every command, query and event the job service answers or emits', () => {
    expect(jobCommandContracts.map((c) => c.name)).toEqual([
      'enqueue_job', 'claim_job', 'renew_job_lease', 'start_job', 'log_implementation', 'log_commit',
      'log_test_result', 'report_push', 'finish_job', 'rollback_claim', 'cancel_job',
    ]);
    expect(sprintRunCommandContracts.map((c) => c.name)).toEqual(['create_sprint_run', 'resume_sprint_run', 'cancel_sprint_run']);
    expect(jobQueryContracts.map((c) => c.name)).toEqual(['get_job', 'list_jobs', 'get_sprint_run', 'get_job_story']);
    expect(jobEventContracts.map((c) => c.type)).toContain('JobLeaseExpired');
    expect(prSprintDrivingEventContracts.every((c) => c.context === 'prs')).toBe(true);
  });

  describe.each(all.map((c) => [nameOf(c), c] as const))('%s', (_name, contract) => {
    it('accepts each of its valid examples, also after a trip through JSON', () => {
      expect(contract.examples.valid.length).toBeGreaterThan(0);
      for (const example of contract.examples.valid) {
        const parsed = schemaOf(contract).safeParse(JSON.parse(JSON.stringify(example)));
        expect(parsed.error?.issues ?? []).toEqual([]);
      }
    });
    it('refuses each of its invalid examples', () => {
      expect(contract.examples.invalid.length).toBeGreaterThan(0);
      for (const example of contract.examples.invalid) {
        expect(schemaOf(contract).safeParse(example).success).toBe(false);
      }
    });
  });

  it('refuses a REVIEW enqueue without an agent profile, naming the field', () => {
    expect(issuePaths(enqueueJob.request, enqueueJob.examples.invalid[0])).toEqual(['agentProfile']);
  });

  describe('how large a job may be (docs/jobs.md, "How large a job may be")', () => {
    const enqueue = (over: Record<string, unknown>) => ({ kind: 'PLAN_CHAT', productId: 'product-42', idempotencyKey: 'p/enqueue:1', ...over });
    /** A payload of exactly `bytes` bytes as JSON. */
    const payloadOf = (bytes: number) => ({ blob: 'b'.repeat(bytes - jsonBytes({ blob: '' })) });
    const messagesOf = (schema: z.ZodType, input: unknown) => schema.safeParse(input).error?.issues.map((i) => i.message) ?? [];

    it('weighs a prompt as JSON writes it: a control character is six bytes, a quote two', () => {
      expect(jobInputBytes(['\u0001"é'], [{ a: 1 }])).toBe('"\\u0001\\"é"'.length + 1 + '{"a":1}'.length);
    });

    it('accepts an enqueue whose prompt and payload are MAX_JOB_INPUT_BYTES as JSON, and refuses one byte more, naming the limit and the field', () => {
      const prompt = '\u0001'.repeat(20_000);
      const payload = payloadOf(MAX_JOB_INPUT_BYTES - jsonBytes(prompt));
      expect(enqueueJob.request.safeParse(enqueue({ prompt, payload })).error?.issues ?? []).toEqual([]);
      const over = enqueue({ prompt, payload: payloadOf(MAX_JOB_INPUT_BYTES - jsonBytes(prompt) + 1) });
      expect(issuePaths(enqueueJob.request, over)).toEqual(['payload']);
      expect(messagesOf(enqueueJob.request, over)).toEqual([
        `the job's prompt and payload: ${MAX_JOB_INPUT_BYTES + 1} bytes as JSON; at most ${MAX_JOB_INPUT_BYTES} bytes are accepted (MAX_JOB_INPUT_BYTES), so that the job fits one message`,
      ]);
      expect(issuePaths(enqueueJob.request, enqueueJob.examples.invalid[4])).toEqual(['prompt']);
      // 100 000 plain characters could be 600 002 bytes as JSON, and are 100 002
      expect(enqueueJob.request.safeParse(enqueue({ prompt: 'p'.repeat(100_000), payload: payloadOf(MAX_JOB_INPUT_BYTES - 100_002) })).success).toBe(true);
    });

    it('refuses a payload nested too deeply for JSON.stringify as too large, rather than throwing', () => {
      const deep = JSON.parse(`${'['.repeat(100_000)}${']'.repeat(100_000)}`) as unknown;
      expect(jsonBytes(deep)).toBe(Number.POSITIVE_INFINITY);
      const request = enqueue({ payload: { deep } });
      expect(issuePaths(enqueueJob.request, request)).toEqual(['payload']);
      expect(messagesOf(enqueueJob.request, request)[0]).toContain('nested too deeply to be written out as JSON');
    });

    it('refuses an enqueue over MAX_JOB_REQUEST_BYTES as a whole, its input within its own bound', () => {
      expect(issuePaths(enqueueJob.request, enqueueJob.examples.invalid[5])).toEqual(['']);
      expect(messagesOf(enqueueJob.request, enqueueJob.examples.invalid[5])[0]).toContain(`at most ${MAX_JOB_REQUEST_BYTES} bytes are accepted (MAX_JOB_REQUEST_BYTES)`);
      expect(issuePaths(enqueueJob.request, enqueueJob.examples.invalid[6])).toEqual(['configOverrides.job.allowedTools']);
      expect(issuePaths(enqueueJob.request, enqueueJob.examples.invalid[7])).toEqual(['agentProfile.model']);
    });

    it('refuses a sprint run whose task payload its job could not carry, or whose request is over MAX_JOB_REQUEST_BYTES', () => {
      const run = (taskPayloads: Record<string, unknown>) => ({ sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1', 'T-2'], branch: 'sprint/SP-7', taskPayloads, idempotencyKey: 'p/sprint-run:1' });
      expect(createSprintRun.request.safeParse(run({ 'T-1': payloadOf(MAX_SPRINT_TASK_PAYLOAD_BYTES) })).success).toBe(true);
      expect(issuePaths(createSprintRun.request, run({ 'T-1': payloadOf(MAX_SPRINT_TASK_PAYLOAD_BYTES + 1) }))).toEqual(['taskPayloads.T-1']);
      const half = payloadOf(MAX_JOB_REQUEST_BYTES / 2);
      expect(messagesOf(createSprintRun.request, run({ 'T-1': half, 'T-2': half }))[0]).toContain(`at most ${MAX_JOB_REQUEST_BYTES} bytes are accepted (MAX_JOB_REQUEST_BYTES)`);
    });
  });

  it('refuses an idempotency key that holds an e-mail address or has no scope', () => {
    expect(IdempotencyKeySchema.safeParse('alice@example.com:chat').success).toBe(false);
    expect(IdempotencyKeySchema.safeParse('just-a-key').success).toBe(false);
    expect(IdempotencyKeySchema.safeParse('my key:x').success).toBe(false);
    expect(IdempotencyKeySchema.safeParse(deriveIdempotencyKey('product-42/queue_run', { entry: 3, step: 'review' })).success).toBe(true);
  });

  it('defaults excludeFromCoalescing to false: only a request that says so is excluded', () => {
    const parsed = enqueueJob.request.parse(enqueueJob.examples.valid[0]);
    expect(parsed.excludeFromCoalescing).toBe(false);
    expect(enqueueJob.request.parse(enqueueJob.examples.valid[1]).excludeFromCoalescing).toBe(true);
  });

  it('makes job ids single subject tokens of the form job-<uuid>', () => {
    const id = jobIdFor('0d9f1c2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f');
    expect(id).toBe('job-0d9f1c2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f');
    expect(isSubjectToken(id)).toBe(true);
    expect(() => jobIdFor('not-a-uuid')).toThrow();
    expect(JobIdSchema.safeParse('job-1.2').success).toBe(false);
  });

  it('refuses a claim by a runner that can run no kind, and a lease too short to renew', () => {
    expect(issuePaths(claimJob.request, claimJob.examples.invalid[0])).toEqual(['kinds']);
    expect(issuePaths(claimJob.request, claimJob.examples.invalid[1])).toEqual(['runnerId']);
    expect(issuePaths(claimJob.request, claimJob.examples.invalid[2])).toEqual(['leaseDurationMs']);
  });

  it('refuses a finish that reports a status instead of facts', () => {
    expect(issuePaths(finishJob.request, finishJob.examples.invalid[0])).toEqual(['facts']);
    expect(issuePaths(finishJob.request, finishJob.examples.invalid[1])).toEqual(['facts.failure.message']);
  });

  it('keeps a push report honest: pushedAt is null or a time, never left out', () => {
    expect(issuePaths(JobPushReported.data, JobPushReported.examples.invalid[0])).toEqual(['pushedAt']);
  });

  it('ties a requeue to attempt + 1 (or the same attempt, when none was spent) and a failure to an error sentence', () => {
    expect(JobClaimRolledBack.data.safeParse(JobClaimRolledBack.examples.invalid[0]).success).toBe(false);
    expect(JobClaimRolledBack.data.safeParse(JobClaimRolledBack.examples.valid[1]).success).toBe(true);
    expect(JobLeaseExpired.data.safeParse(JobLeaseExpired.examples.invalid[0]).success).toBe(false);
    const requeued = JobLeaseExpired.examples.valid[0]!;
    expect(JobLeaseExpired.data.safeParse({ ...requeued, error: 'x' }).success).toBe(false);
  });

  it('pauses a sprint run only for a merge conflict, and always with its files', () => {
    expect(issuePaths(SprintRunPaused.data, SprintRunPaused.examples.invalid[0])).toEqual(['conflictingFiles']);
    expect(issuePaths(SprintRunPaused.data, SprintRunPaused.examples.invalid[1])).toEqual(['reason']);
  });

  it('carries the PR url and conflicting files on a merge conflict, and the failed checks on red CI', () => {
    const conflict = PullRequestMergeConflict.data.parse(PullRequestMergeConflict.examples.valid[0]);
    expect(conflict.prUrl).toBe('https://github.com/acme/shop/pull/102');
    expect(conflict.conflictingFiles).toEqual(['src/app.ts', 'package.json']);
    expect(issuePaths(PullRequestMergeConflict.data, PullRequestMergeConflict.examples.invalid[0])).toEqual(['conflictingFiles']);
    expect(issuePaths(PullRequestChecksFailed.data, PullRequestChecksFailed.examples.invalid[0])).toEqual(['failedChecks']);
    expect(issuePaths(PullRequestChecksFailed.data, PullRequestChecksFailed.examples.invalid[1])).toEqual(['headSha']);
  });

  it('registers and updates a product only with a clone URL the worktree service and runners accept (docs/products.md)', () => {
    const register = { ...productExample, idempotencyKey: 'product-42/register:1' };
    for (const cloneUrl of ['git@github.com:-oProxyCommand=touch', 'ext::sh', 'fd::17', '/srv/../etc/shop.git', 'http://github.com/acme/shop.git', 'ssh://-oProxyCommand=x/y']) {
      expect({ cloneUrl, register: registerProduct.request.safeParse({ ...register, cloneUrl }).success }).toEqual({ cloneUrl, register: false });
      const update = updateProduct.request.safeParse({ productId: 'product-42', changes: { cloneUrl }, idempotencyKey: 'product-42/update:1' });
      expect({ cloneUrl, update: update.success }).toEqual({ cloneUrl, update: false });
    }
    for (const cloneUrl of ['https://github.com/acme/shop', 'git@github.com:acme/shop.git', 'ssh://git@github.com/acme/shop.git', 'file:///srv/git/shop.git']) {
      expect({ cloneUrl, register: registerProduct.request.safeParse({ ...register, cloneUrl }).success }).toEqual({ cloneUrl, register: true });
    }
    // What was registered before still reads back from the log.
    const registered = { ...ProductRegistered.examples.valid[0]!, cloneUrl: 'http://github.com/acme/shop.git' };
    expect(ProductRegistered.data.safeParse(registered).success).toBe(true);
  });

  it('reads a job view of a job service that does not say when a hand-back pause ends as one without a pause', () => {
    const { offerNotBefore: _left, ...earlier } = exampleJobView;
    expect(JobViewSchema.parse(earlier).offerNotBefore).toBeNull();
    expect(JobViewSchema.parse({ ...exampleJobView, status: 'QUEUED', lease: null, offerNotBefore: '2026-11-30T06:05:02.000Z' }).offerNotBefore).toBe('2026-11-30T06:05:02.000Z');
  });

  it('uses the example ids consistently as subject tokens', () => {
    for (const id of [jobExampleIds.jobId, jobExampleIds.sprintRunId, jobExampleIds.runnerId]) expect(isSubjectToken(id)).toBe(true);
  });
});

describe('the job offer on the dispatch subject', () => {
  it('accepts its valid example and refuses each invalid one', () => {
    for (const example of jobOfferExamples.valid) expect(JobOfferSchema.safeParse(JSON.parse(JSON.stringify(example))).success).toBe(true);
    expect(issuePaths(JobOfferSchema, jobOfferExamples.invalid[0])).toEqual(['attempt']);
    expect(issuePaths(JobOfferSchema, jobOfferExamples.invalid[1])).toEqual(['kind']);
  });

  it('names one offer per stay in the queue, as a single subject token usable as Nats-Msg-Id', () => {
    const first = jobOfferMessageId({ jobId: jobExampleIds.jobId, attempt: 1, afterLeaseToken: 0 });
    expect(first).not.toBe(jobOfferMessageId({ jobId: jobExampleIds.jobId, attempt: 2, afterLeaseToken: 1 }));
    // a requeue that spent no attempt is offered afresh, not dropped as a duplicate of the first offer
    expect(first).not.toBe(jobOfferMessageId({ jobId: jobExampleIds.jobId, attempt: 1, afterLeaseToken: 1 }));
    expect(isSubjectToken(first)).toBe(true);
  });

  it('reads an offer published before offers named their requeue as the offer after the enqueue', () => {
    const { afterLeaseToken: _dropped, ...older } = jobOfferExamples.valid[0]!;
    expect(JobOfferSchema.parse(older).afterLeaseToken).toBe(0);
  });
});

describe('terminal job statuses and job event types, in one place', () => {
  it('a job ends DONE, FAILED, SKIPPED or CANCELLED: the finish reply’s statuses, all of them job statuses', () => {
    expect([...TERMINAL_JOB_STATUSES]).toEqual(['DONE', 'FAILED', 'SKIPPED', 'CANCELLED']);
    expect(TERMINAL_JOB_STATUSES).toBe(TerminalJobStatusSchema.options);
    for (const status of TERMINAL_JOB_STATUSES) expect(JobStatusSchema.options).toContain(status);
  });

  it('tells a terminal status from a live one, and from what is not a status at all', () => {
    expect(JobStatusSchema.options.filter(isTerminalJobStatus)).toEqual(['DONE', 'FAILED', 'SKIPPED', 'CANCELLED']);
    expect(isTerminalJobStatus('QUEUED')).toBe(false);
    expect(isTerminalJobStatus('done')).toBe(false);
  });

  it('lists the job event types of the job event contracts, in the order of the lifecycle', () => {
    expect(jobEventTypes).toEqual(jobEventContracts.map((c) => c.type));
    expect(jobEventTypes[0]).toBe('JobEnqueued');
    expect(new Set(jobEventTypes).size).toBe(jobEventTypes.length);
  });
});
