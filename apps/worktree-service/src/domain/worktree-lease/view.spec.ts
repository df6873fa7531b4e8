import { WorktreeLeaseViewSchema } from '@gantry/contracts';
import { worktreeLeaseDecider } from './decider.js';
import type { WorktreeLeaseEvent } from './events.js';
import { leaseViewOf, worktreeStatus } from './view.js';
import { A, aAcquired, aReady, aReadyBWaiting, at, B, path, releaseRequested, released, sha, timedOut } from '../testing/lease-fixtures.js';

const fold = (events: WorktreeLeaseEvent[]) => events.reduce(worktreeLeaseDecider.evolve, worktreeLeaseDecider.initialState);

describe('WorktreeLease views', () => {
  it('shows a lease in every status as the list_worktree_leases contract describes it', () => {
    const state = fold([...aReadyBWaiting, timedOut(B, at(70), at(70))]);
    for (const lease of Object.values(state.leases)) {
      expect(WorktreeLeaseViewSchema.safeParse(leaseViewOf(lease)).error).toBeUndefined();
    }
    expect(leaseViewOf(state.leases[A]!)).toMatchObject({ status: 'ready', token: 1, baseSha: sha, path });
    expect(leaseViewOf(state.leases[B]!)).toMatchObject({ status: 'lock_timeout', token: null, path: null });
  });

  it('gives a key the status of its holder, and idle when nobody holds it (a waiter alone does not make it busy)', () => {
    expect(worktreeStatus(worktreeLeaseDecider.initialState)).toBe('idle');
    expect(worktreeStatus(fold(aAcquired))).toBe('creating_or_reusing');
    expect(worktreeStatus(fold(aReady))).toBe('ready');
    expect(worktreeStatus(fold([...aReady, releaseRequested(A, 1, at(3))]))).toBe('releasing');
    expect(worktreeStatus(fold([...aReady, releaseRequested(A, 1, at(3)), released(A, 1, at(4))]))).toBe('idle');
  });
});
