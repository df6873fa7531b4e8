import { deriveWorktreeKey } from '@gantry/contracts';
import { planReconciliation } from './reconciliation.js';
import type { WorktreeLeaseCommand } from './worktree-lease/commands.js';
import { worktreeLeaseDecider } from './worktree-lease/decider.js';
import type { WorktreeLeaseState } from './worktree-lease/state.js';

const repositoryUrl = '/srv/git/shop.git';
const at = (s: number) => new Date(Date.parse('2026-11-30T06:00:00.000Z') + s * 1000).toISOString();

function stream(branch: string, leaseId: string, steps: (key: string) => WorktreeLeaseCommand[]): { key: string; state: WorktreeLeaseState } {
  const key = deriveWorktreeKey(repositoryUrl, branch);
  const commands: WorktreeLeaseCommand[] = [
    {
      type: 'RequestWorktreeLease',
      data: { worktreeKey: key, leaseId, jobId: `job-${branch}`, jobLeaseToken: 1, repositoryUrl, branch, baseRef: 'main', leaseDurationMs: 60_000, lockTimeoutMs: 0, now: at(0) },
    },
    ...steps(key),
  ];
  let state = worktreeLeaseDecider.initialState;
  for (const command of commands) state = worktreeLeaseDecider.decide(command, state).reduce(worktreeLeaseDecider.evolve, state);
  return { key, state };
}

const L1 = '00000000-0000-4000-8000-000000000001';
const L2 = '00000000-0000-4000-8000-000000000002';
const L3 = '00000000-0000-4000-8000-000000000003';

describe('reconciling leases with the disk at startup', () => {
  const creating = stream('creating', L1, () => []);
  const ready = stream('ready', L2, () => [
    { type: 'RecordWorktreePrepared', data: { leaseId: L2, token: 1, outcome: 'created', path: '/w/ready', now: at(1) } },
    { type: 'RecordWorktreeSynced', data: { leaseId: L2, token: 1, baseSha: 'a'.repeat(40), now: at(2) } },
  ]);
  const releasing = stream('releasing', L3, () => [
    { type: 'RecordWorktreePrepared', data: { leaseId: L3, token: 1, outcome: 'created', path: '/w/releasing', now: at(1) } },
    { type: 'ReleaseWorktreeLease', data: { leaseId: L3, token: 1, reason: 'shutdown', removeWorktree: false, now: at(2) } },
  ]);

  it('re-runs the effects that were requested and not reported, and moves orphan directories aside first', () => {
    const plan = planReconciliation([creating.state, releasing.state], {
      worktrees: [{ worktreeKey: releasing.key, prunable: false }],
      orphanDirectories: ['leftover'],
    });
    expect(plan.map((a) => (a.type === 'run_effect' ? `${a.type}:${a.effect.type}:${a.effect.type === 'evict' ? '' : a.effect.leaseId}` : a.type))).toEqual([
      'quarantine_orphan',
      `run_effect:create_or_reuse:${L1}`,
      `run_effect:rescue:${L3}`,
    ]);
  });

  it('releases as stale a ready lease whose worktree is gone, after pruning it', () => {
    const plan = planReconciliation([ready.state], { worktrees: [{ worktreeKey: ready.key, prunable: true }], orphanDirectories: [] });
    expect(plan).toEqual([
      { type: 'prune', worktreeKey: ready.key },
      { type: 'release_stale_lease', worktreeKey: ready.key, leaseId: L2, token: 1, removeWorktree: true },
    ]);
  });

  it('completes the record of an idle worktree whose directory is gone, and of no other', () => {
    const released = stream('released', L1, () => [
      { type: 'RecordWorktreePrepared', data: { leaseId: L1, token: 1, outcome: 'created', path: '/w/released', now: at(1) } },
      { type: 'RecordWorktreeSynced', data: { leaseId: L1, token: 1, baseSha: 'a'.repeat(40), now: at(2) } },
      { type: 'ReleaseWorktreeLease', data: { leaseId: L1, token: 1, reason: 'released', removeWorktree: false, now: at(3) } },
      { type: 'RecordWorktreeReleased', data: { leaseId: L1, token: 1, rescue: null, removed: false, now: at(4) } },
    ]);
    const plan = planReconciliation([released.state, ready.state], {
      worktrees: [{ worktreeKey: released.key, prunable: true }, { worktreeKey: ready.key, prunable: false }],
      orphanDirectories: [],
    });
    expect(plan).toEqual([{ type: 'prune', worktreeKey: released.key }, { type: 'forget_missing_worktree', worktreeKey: released.key }]);
    // Not registered at all (pruned already): the same.
    expect(planReconciliation([released.state], { worktrees: [], orphanDirectories: [] })).toEqual([{ type: 'forget_missing_worktree', worktreeKey: released.key }]);
    // An eviction already under way is run again instead (it completes the record itself).
    const evicting = stream('released', L1, () => [
      { type: 'RecordWorktreePrepared', data: { leaseId: L1, token: 1, outcome: 'created', path: '/w/released', now: at(1) } },
      { type: 'RecordWorktreeSynced', data: { leaseId: L1, token: 1, baseSha: 'a'.repeat(40), now: at(2) } },
      { type: 'ReleaseWorktreeLease', data: { leaseId: L1, token: 1, reason: 'released', removeWorktree: false, now: at(3) } },
      { type: 'RecordWorktreeReleased', data: { leaseId: L1, token: 1, rescue: null, removed: false, now: at(4) } },
      { type: 'EvictIdleWorktree', data: { worktreeKey: released.key, reason: 'over_capacity', now: at(5) } },
    ]);
    expect(planReconciliation([evicting.state], { worktrees: [], orphanDirectories: [] }).map((a) => (a.type === 'run_effect' ? a.effect.type : a.type))).toEqual(['evict']);
  });

  it('plans nothing when leases and disk agree', () => {
    expect(planReconciliation([ready.state], { worktrees: [{ worktreeKey: ready.key, prunable: false }], orphanDirectories: [] })).toEqual([]);
  });
});
