import { deriveWorktreeKey } from '@gantry/contracts';
import { planReconciliation } from './reconciliation.js';
import { worktreeLeaseDecider, type WorktreeLeaseCommand, type WorktreeLeaseState } from './worktree-lease.js';

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

  it('plans nothing when leases and disk agree', () => {
    expect(planReconciliation([ready.state], { worktrees: [{ worktreeKey: ready.key, prunable: false }], orphanDirectories: [] })).toEqual([]);
  });
});
