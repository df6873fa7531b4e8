import { ErrorCode, GantryError, jobInputBytes, MAX_JOB_INPUT_BYTES } from '@gantry/contracts';
import { COALESCING_WINDOW_MS, IDEMPOTENCY_WINDOW_MS, routeEnqueue, runSettingsOf, type RunQueueEntry, type RunQueueRequest, type RunSettings } from './run-queue.js';

const T0 = Date.parse('2026-11-30T06:00:00.000Z');
const at = (ms: number) => new Date(T0 + ms).toISOString();
const HASH_A = 'a'.repeat(64);
const HASH_B = 'b'.repeat(64);
const asked = (over: Partial<RunSettings> = {}): RunSettings => ({
  kind: 'REVIEW',
  configOverrides: { product: { model: 'claude-sonnet-4-6' } },
  agentProfile: { id: 'profile-reviewer', model: 'claude-opus-4-7', thinkingBudget: 12000 },
  repository: 'acme/shop',
  repositoryUrl: 'https://github.com/acme/shop.git',
  targetBranch: 'main',
  maxAttempts: 3,
  ...over,
});
const SETTINGS = runSettingsOf(asked());

function entry(over: Partial<RunQueueEntry> = {}): RunQueueEntry {
  return {
    jobId: 'job-00000000-0000-4000-8000-000000000001',
    kind: 'REVIEW',
    productId: 'product-42',
    status: 'QUEUED',
    agentProfileId: 'profile-reviewer',
    reason: 'review_started',
    excludeFromCoalescing: false,
    enqueuedAt: at(0),
    idempotencyKeys: [{ key: 'product-42/queue_run:k1', requestHash: HASH_A, at: at(0) }],
    inputBytes: 100,
    runsWith: SETTINGS,
    branch: null,
    ...over,
  };
}

function request(over: Partial<RunQueueRequest> = {}): RunQueueRequest {
  return {
    kind: 'REVIEW',
    productId: 'product-42',
    agentProfileId: 'profile-reviewer',
    reason: 'review_started',
    excludeFromCoalescing: false,
    idempotencyKey: 'product-42/queue_run:k2',
    requestHash: HASH_B,
    inputBytes: 100,
    runsWith: SETTINGS,
    branchAs: () => null,
    now: at(1000),
    ...over,
  };
}

describe('the run queue', () => {
  describe('idempotency window (24 h)', () => {
    it('a repeated key within 24 hours is deduplicated to the existing job', () => {
      expect(routeEnqueue(request({ idempotencyKey: 'product-42/queue_run:k1', requestHash: HASH_A, now: at(IDEMPOTENCY_WINDOW_MS - 1) }), [entry({ status: 'DONE' })])).toEqual({
        outcome: 'deduplicated',
        jobId: entry().jobId,
      });
    });

    it('a repeated key after 24 hours creates a new job', () => {
      const decision = routeEnqueue(
        request({ idempotencyKey: 'product-42/queue_run:k1', requestHash: HASH_A, now: at(IDEMPOTENCY_WINDOW_MS), excludeFromCoalescing: true }),
        [entry({ status: 'DONE' })],
      );
      expect(decision).toEqual({ outcome: 'created' });
    });

    it('a repeated key with a different request is an explicit conflict', () => {
      let thrown: unknown;
      try {
        routeEnqueue(request({ idempotencyKey: 'product-42/queue_run:k1', requestHash: HASH_B }), [entry()]);
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(GantryError);
      expect((thrown as GantryError).code).toBe(ErrorCode.IDEMPOTENCY_CONFLICT);
    });

    it('the key of a request that was coalesced into a job deduplicates to that job', () => {
      const job = entry({ idempotencyKeys: [...entry().idempotencyKeys, { key: 'product-42/queue_run:k2', requestHash: HASH_B, at: at(2000) }] });
      expect(routeEnqueue(request({ now: at(60_000) }), [job])).toEqual({ outcome: 'deduplicated', jobId: job.jobId });
    });

    it('deduplication wins over the coalescing exclusion: an excluded replay is still suppressed', () => {
      expect(routeEnqueue(request({ idempotencyKey: 'product-42/queue_run:k1', requestHash: HASH_A, excludeFromCoalescing: true }), [entry()]).outcome).toBe('deduplicated');
    });
  });

  describe('coalescing window (5 s)', () => {
    it('the same agent profile and reason within 5 seconds coalesces into the queued job', () => {
      expect(routeEnqueue(request({ now: at(COALESCING_WINDOW_MS - 1) }), [entry()])).toEqual({ outcome: 'coalesced', jobId: entry().jobId });
    });

    it('at 5 seconds the window has closed: a new job', () => {
      expect(routeEnqueue(request({ now: at(COALESCING_WINDOW_MS) }), [entry()])).toEqual({ outcome: 'created' });
    });

    it('a request excluded from coalescing creates its own job', () => {
      expect(routeEnqueue(request({ excludeFromCoalescing: true }), [entry()])).toEqual({ outcome: 'created' });
    });

    it('a queued job excluded from coalescing takes no other request', () => {
      expect(routeEnqueue(request(), [entry({ excludeFromCoalescing: true })])).toEqual({ outcome: 'created' });
    });

    it('a job no longer QUEUED takes no coalesced request', () => {
      for (const status of ['CLAIMED', 'RUNNING', 'DONE', 'CANCELLED'] as const) {
        expect(routeEnqueue(request(), [entry({ status })])).toEqual({ outcome: 'created' });
      }
    });

    it('another reason, agent profile, kind or product does not coalesce', () => {
      expect(routeEnqueue(request({ reason: 'comment' }), [entry()]).outcome).toBe('created');
      expect(routeEnqueue(request({ agentProfileId: 'profile-other' }), [entry()]).outcome).toBe('created');
      expect(routeEnqueue(request({ kind: 'PLAN_CHAT' }), [entry()]).outcome).toBe('created');
      expect(routeEnqueue(request({ productId: 'product-7' }), [entry()]).outcome).toBe('created');
    });

    it('a request that would run with other settings does not join the job: configuration, where the work lands, attempts', () => {
      const other = [
        asked({ configOverrides: { product: { model: 'claude-opus-4-7' } } }),
        asked({ configOverrides: { product: { model: 'claude-sonnet-4-6', thinkingBudget: 24000 } } }),
        asked({ configOverrides: { product: { model: 'claude-sonnet-4-6' }, job: { maxTurns: 5 } } }),
        asked({ agentProfile: { id: 'profile-reviewer', model: 'claude-haiku-4-5', thinkingBudget: 0 }, configOverrides: null }),
        asked({ targetBranch: 'develop' }),
        asked({ repositoryUrl: '/srv/git/shop.git' }),
        asked({ maxAttempts: 1 }),
      ];
      for (const settings of other) expect(routeEnqueue(request({ runsWith: runSettingsOf(settings) }), [entry()])).toEqual({ outcome: 'created' });
    });

    it('settings that resolve alike are the same settings: the request joins the job', () => {
      const spelledOtherwise = asked({ configOverrides: { sprint: { model: 'claude-sonnet-4-6' }, job: { maxTurns: 60 } } });
      expect(routeEnqueue(request({ runsWith: runSettingsOf(spelledOtherwise) }), [entry()])).toEqual({ outcome: 'coalesced', jobId: entry().jobId });
    });

    it('a request joins only a job on the branch it would work on as that job', () => {
      const onBranch = (branch: string | null) => request({ branchAs: () => branch });
      expect(routeEnqueue(onBranch('review/two'), [entry({ branch: 'review/one' })])).toEqual({ outcome: 'created' });
      expect(routeEnqueue(onBranch(null), [entry({ branch: 'review/one' })])).toEqual({ outcome: 'created' });
      expect(routeEnqueue(onBranch('review/one'), [entry({ branch: null })])).toEqual({ outcome: 'created' });
      expect(routeEnqueue(onBranch('review/one'), [entry({ branch: 'review/one' })])).toEqual({ outcome: 'coalesced', jobId: entry().jobId });
      // a branch derived from the job: the request would work on the job's own
      const derived = request({ branchAs: (jobId) => `gantry/product-42/${jobId}` });
      expect(routeEnqueue(derived, [entry({ branch: `gantry/product-42/${entry().jobId}` })])).toEqual({ outcome: 'coalesced', jobId: entry().jobId });
    });

    it('a request without an agent profile is never coalesced', () => {
      expect(routeEnqueue(request({ agentProfileId: null }), [entry({ agentProfileId: null })]).outcome).toBe('created');
    });

    it('of two candidates the earlier queued job takes the request', () => {
      const first = entry({ jobId: 'job-00000000-0000-4000-8000-000000000002', enqueuedAt: at(200), idempotencyKeys: [] });
      const second = entry({ jobId: 'job-00000000-0000-4000-8000-000000000001', enqueuedAt: at(500), idempotencyKeys: [] });
      expect(routeEnqueue(request(), [second, first])).toEqual({ outcome: 'coalesced', jobId: first.jobId });
    });

    it('a request joins a job only while the job\'s prompts and payloads stay within the bound', () => {
      const full = entry({ inputBytes: MAX_JOB_INPUT_BYTES - 100 });
      expect(routeEnqueue(request({ inputBytes: 100 }), [full])).toEqual({ outcome: 'coalesced', jobId: full.jobId });
      expect(routeEnqueue(request({ inputBytes: 101 }), [full])).toEqual({ outcome: 'created' });
    });

    it('a request too large for the earlier job joins a later one with room', () => {
      const full = entry({ jobId: 'job-00000000-0000-4000-8000-000000000002', enqueuedAt: at(200), idempotencyKeys: [], inputBytes: MAX_JOB_INPUT_BYTES });
      const roomy = entry({ jobId: 'job-00000000-0000-4000-8000-000000000001', enqueuedAt: at(500), idempotencyKeys: [] });
      expect(routeEnqueue(request(), [full, roomy])).toEqual({ outcome: 'coalesced', jobId: roomy.jobId });
    });

    it('a job\'s input is weighed as JSON writes it, prompts and payloads alike: a control character is six bytes', () => {
      expect(jobInputBytes(['é'], [{ a: 1 }])).toBe('"é"'.length + 1 + '{"a":1}'.length);
      expect(jobInputBytes(['\u0001'], [])).toBe('"\\u0001"'.length);
    });
  });

  it('with nothing recent, a request creates a job', () => {
    expect(routeEnqueue(request(), [])).toEqual({ outcome: 'created' });
  });
});
