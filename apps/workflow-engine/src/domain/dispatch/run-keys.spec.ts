import { IdempotencyKeySchema } from '@gantry/contracts';
import { canonicalRunConfig, configDigest, entryRunKey, triggerSessionId } from './run-keys.js';

const identity = {
  productId: 'product_42',
  taskId: 'T-533',
  workflowId: 'office-default',
  stepId: 'review',
  entrySeq: 1,
  position: 1,
  agentProfileId: 'profile-a',
  configDigest: configDigest(canonicalRunConfig('queue_run_for_each_participant', { role: 'reviewer' })),
};

describe('run idempotency keys', () => {
  it('AC-B1: two entries of one step get different keys; so do two declarations at different positions', () => {
    expect(entryRunKey({ ...identity, entrySeq: 2 })).not.toBe(entryRunKey(identity));
    expect(entryRunKey({ ...identity, position: 3 })).not.toBe(entryRunKey(identity));
    expect(entryRunKey({ ...identity, agentProfileId: 'profile-b' })).not.toBe(entryRunKey(identity));
    expect(entryRunKey(identity)).toBe(entryRunKey({ ...identity }));
  });

  it('is a valid, product-scoped job-service key that reveals nothing of its parts', () => {
    const key = entryRunKey(identity);
    expect(IdempotencyKeySchema.safeParse(key).success).toBe(true);
    expect(key).toMatch(/^product-42\/on-enter:[0-9a-f]{40}$/);
  });

  it('AC-H1 / AC-H7: an omitted reason and reason on_enter digest alike; AC-H2: an omitted payload and null alike', () => {
    const digest = (config: Record<string, unknown>) => configDigest(canonicalRunConfig('queue_run_for_each_participant', config));
    expect(canonicalRunConfig('queue_run_for_each_participant', { role: 'reviewer' })).toEqual({ role: 'reviewer', reason: 'on_enter', payload: null });
    expect(digest({ role: 'reviewer' })).toBe(digest({ role: 'reviewer', reason: 'on_enter' }));
    expect(digest({ role: 'reviewer' })).toBe(digest({ role: 'reviewer', payload: null }));
    expect(digest({ role: 'reviewer', payload: { a: 1, b: 2 } })).toBe(digest({ payload: { b: 2, a: 1 }, role: 'reviewer' }));
    expect(digest({ role: 'reviewer', note: 'ignored' })).toBe(digest({ role: 'reviewer' }));
    expect(digest({ role: 'reviewer', reason: 'other' })).not.toBe(digest({ role: 'reviewer' }));
  });
});

describe('triggerSessionId', () => {
  const parts = { taskId: 'T-1', trigger: 'on_turn_complete', cause: 'evt-1', position: 0 };

  it('is a UUID, the same for the same event and position, another for another event or position', () => {
    const id = triggerSessionId(parts);
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(triggerSessionId({ ...parts })).toBe(id);
    expect(triggerSessionId({ ...parts, cause: 'evt-2' })).not.toBe(id);
    expect(triggerSessionId({ ...parts, position: 1 })).not.toBe(id);
  });
});
