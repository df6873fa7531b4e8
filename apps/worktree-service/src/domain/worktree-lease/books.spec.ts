import { contractRegistry, ErrorCode } from '@gantry/contracts';
import { DeciderSpecification } from '@gantry/eventstore/testing';
import { openingOf } from './books.js';
import { worktreeLeaseDecider } from './decider.js';
import type { WorktreeLeaseEvent } from './events.js';
import { isIdle } from './state.js';
import { A, acquired, aReady, at, B, branch, C, created, path, queued, releaseRequested, released, repositoryUrl, request, requested, synced, worktreeKey } from '../testing/lease-fixtures.js';

const given = DeciderSpecification.for(worktreeLeaseDecider);

describe('WorktreeLease: closing the books', () => {
  const aReleased = [...aReady, releaseRequested(A, 1, at(3)), released(A, 1, at(4))];
  const closed: WorktreeLeaseEvent = { type: 'WorktreeBooksClosed', data: { worktreeKey, epoch: 0, nextEpoch: 1, closedAt: at(5) } };
  const fold = (events: WorktreeLeaseEvent[]) => events.reduce(worktreeLeaseDecider.evolve, worktreeLeaseDecider.initialState);

  it('closes an idle key’s books; the next epoch opens with the last token, the worktree and the key’s repository, and no lease', () => {
    const state = given(aReleased).when({ type: 'CloseBooks', data: { worktreeKey, now: at(5) } }).then([closed]);
    expect(state.closed).toBe(true);
    const opened = openingOf(state, at(5));
    expect(opened).toEqual({
      type: 'WorktreeBooksOpened',
      data: { worktreeKey, epoch: 1, lastToken: 1, path, repositoryUrl, branch, lock: { holder: null, waiters: [] }, leases: [], eviction: null, openedAt: at(5) },
    });
    const next = given([opened]).when(request(B, at(6))).then([requested(B, at(6)), acquired(B, 2, at(6))]);
    expect(next).toMatchObject({ epoch: 1, lastToken: 2, path });
    expect(Object.keys(next.leases)).toEqual([B]);
  });

  it('closes the books of a key in use too: the holder, the line and the live leases go on unchanged, the ended ones stay behind', () => {
    const history = [...aReleased, requested(B, at(10)), acquired(B, 2, at(10)), created(B, 2, at(11)), synced(B, 2, at(12)), requested(C, at(13)), queued(C, 1, at(13))];
    const before = fold(history);
    const state = given(history).when({ type: 'CloseBooks', data: { worktreeKey, now: at(14) } }).then([{ ...closed, data: { ...closed.data, closedAt: at(14) } }]);
    const opened = openingOf(state, at(14));
    expect(contractRegistry.event('worktrees', 'WorktreeBooksOpened', 1)!.data.safeParse(opened.data).error).toBeUndefined();
    const after = fold([opened]);
    expect(after.lock).toEqual(before.lock);
    expect(after.leases).toEqual({ [B]: before.leases[B], [C]: before.leases[C] });
    // Decisions go on in the new epoch as they would have in the old one.
    given([opened])
      .when({ type: 'ReleaseWorktreeLease', data: { leaseId: B, token: 2, reason: 'released', removeWorktree: false, now: at(20) } })
      .then([releaseRequested(B, 2, at(20))]);
    given([opened, releaseRequested(B, 2, at(20))])
      .when({ type: 'RecordWorktreeReleased', data: { leaseId: B, token: 2, rescue: null, removed: false, now: at(21) } })
      .then([released(B, 2, at(21)), acquired(C, 3, at(21))]);
    given([opened]).when({ type: 'RenewWorktreeLease', data: { leaseId: A, token: 1, now: at(20) } }).thenThrows(ErrorCode.NOT_FOUND);
  });

  it('decides nothing on a closed stream', () => {
    given([...aReleased, closed]).when(request(B, at(6))).thenThrows(ErrorCode.INVALID_TRANSITION, /closed/);
    expect(() => openingOf(fold(aReleased), at(5))).toThrow(/closed/);
    expect(isIdle(fold(aReleased))).toBe(true);
  });

  it('evicts from an opened epoch with the repository and branch it carried', () => {
    const opened = openingOf(fold([...aReleased, closed]), at(5));
    given([opened])
      .when({ type: 'EvictIdleWorktree', data: { worktreeKey, reason: 'over_capacity', now: at(7) } })
      .then([{ type: 'WorktreeEvictionRequested', data: { worktreeKey, repositoryUrl, branch, reason: 'over_capacity', requestedAt: at(7) } }]);
  });

  it('events satisfy their published contracts', () => {
    for (const event of [closed, openingOf(fold([...aReleased, closed]), at(5))]) {
      expect(contractRegistry.event('worktrees', event.type, 1)!.data.safeParse(event.data).error).toBeUndefined();
    }
  });
});
