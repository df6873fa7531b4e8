import { deriveWorktreeKey } from '@gantry/contracts';
import { effectsRequestedBy, pendingEffects, upcomingDeadlines } from './effects.js';
import type { WorktreeLeaseCommand } from './commands.js';
import { worktreeLeaseDecider } from './decider.js';
import type { WorktreeLeaseEvent } from './events.js';
import type { WorktreeLeaseState } from './state.js';

const repositoryUrl = '/srv/git/shop.git';
const branch = 'main';
const worktreeKey = deriveWorktreeKey(repositoryUrl, branch);
const A = '0b7a4c3e-2f7d-4b8e-9a51-6c2d1e0f9a11';
const B = '1c8b5d4f-3a8e-4c9f-8b62-7d3e2f1a0b22';
const at = (s: number) => new Date(Date.parse('2026-11-30T06:00:00.000Z') + s * 1000).toISOString();

function run(state: WorktreeLeaseState, command: WorktreeLeaseCommand): { state: WorktreeLeaseState; events: WorktreeLeaseEvent[] } {
  const events = worktreeLeaseDecider.decide(command, state);
  return { state: events.reduce(worktreeLeaseDecider.evolve, state), events };
}

const requestOf = (leaseId: string, jobId: string, now: string): WorktreeLeaseCommand => ({
  type: 'RequestWorktreeLease',
  data: { worktreeKey, leaseId, jobId, jobLeaseToken: 1, repositoryUrl, branch, baseRef: 'main', leaseDurationMs: 60_000, lockTimeoutMs: 30_000, now },
});

describe('worktree effects', () => {
  it('asks for create_or_reuse, then sync, then a rescue, each once, as the lease moves on', () => {
    const common = { worktreeKey, leaseId: A, token: 1, repositoryUrl, branch };
    let step = run(worktreeLeaseDecider.initialState, requestOf(A, 'job-a', at(0)));
    expect(effectsRequestedBy(step.state, step.events)).toEqual([{ ...common, type: 'create_or_reuse', baseRef: 'main' }]);
    expect(pendingEffects(step.state)).toEqual([{ ...common, type: 'create_or_reuse', baseRef: 'main' }]);

    step = run(step.state, { type: 'RecordWorktreePrepared', data: { leaseId: A, token: 1, outcome: 'created', path: '/w', now: at(1) } });
    expect(effectsRequestedBy(step.state, step.events)).toEqual([{ ...common, type: 'sync', baseRef: 'main' }]);

    step = run(step.state, { type: 'RecordWorktreeSynced', data: { leaseId: A, token: 1, baseSha: 'a'.repeat(40), now: at(2) } });
    expect(effectsRequestedBy(step.state, step.events)).toEqual([]);
    expect(pendingEffects(step.state)).toEqual([]);

    step = run(step.state, { type: 'ReleaseWorktreeLease', data: { leaseId: A, token: 1, reason: 'job_terminal', removeWorktree: false, now: at(3) } });
    expect(effectsRequestedBy(step.state, step.events)).toEqual([{ ...common, type: 'rescue', reason: 'job_terminal' }]);
  });

  it('asks for rescue_and_remove when the release removes the worktree', () => {
    let step = run(worktreeLeaseDecider.initialState, requestOf(A, 'job-a', at(0)));
    step = run(step.state, { type: 'ReleaseWorktreeLease', data: { leaseId: A, token: 1, reason: 'stale_reset', removeWorktree: true, now: at(1) } });
    expect(pendingEffects(step.state)).toEqual([{ worktreeKey, leaseId: A, token: 1, repositoryUrl, branch, type: 'rescue_and_remove', reason: 'stale_reset' }]);
  });

  it('asks the next holder for its worktree in the same decision that releases the previous one', () => {
    let step = run(worktreeLeaseDecider.initialState, requestOf(A, 'job-a', at(0)));
    step = run(step.state, requestOf(B, 'job-b', at(1)));
    expect(effectsRequestedBy(step.state, step.events)).toEqual([]);
    step = run(step.state, { type: 'ReleaseWorktreeLease', data: { leaseId: A, token: 1, reason: 'released', removeWorktree: false, now: at(2) } });
    step = run(step.state, { type: 'RecordWorktreeReleased', data: { leaseId: A, token: 1, rescue: null, removed: false, now: at(3) } });
    expect(effectsRequestedBy(step.state, step.events).map((e) => (e.type === 'evict' ? [e.type] : [e.type, e.leaseId, e.token]))).toEqual([['create_or_reuse', B, 2]]);
  });

  it('lists the expiry of a ready holder and the deadlines of the waiters, earliest first; a lease being prepared has no expiry', () => {
    let step = run(worktreeLeaseDecider.initialState, requestOf(A, 'job-a', at(0)));
    step = run(step.state, requestOf(B, 'job-b', at(1)));
    expect(upcomingDeadlines(step.state)).toEqual([{ kind: 'lock_deadline', leaseId: B, at: at(31) }]);
    step = run(step.state, { type: 'RecordWorktreePrepared', data: { leaseId: A, token: 1, outcome: 'created', path: '/w', now: at(5) } });
    expect(upcomingDeadlines(step.state)).toEqual([{ kind: 'lock_deadline', leaseId: B, at: at(31) }]);
    step = run(step.state, { type: 'RecordWorktreeSynced', data: { leaseId: A, token: 1, baseSha: 'a'.repeat(40), now: at(10) } });
    expect(upcomingDeadlines(step.state)).toEqual([
      { kind: 'lock_deadline', leaseId: B, at: at(31) },
      { kind: 'lease_expiry', leaseId: A, at: at(70) },
    ]);
  });
});
