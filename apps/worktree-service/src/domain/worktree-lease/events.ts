import type {
  DataOf,
  WorktreeBooksClosed,
  WorktreeBooksOpened,
  WorktreeCreated,
  WorktreeEvicted,
  WorktreeEvictionRequested,
  WorktreeLeaseExpired,
  WorktreeLeaseRenewed,
  WorktreeLeaseRequested,
  WorktreeLeaseRequestWithdrawn,
  WorktreeLockAcquired,
  WorktreeLockQueued,
  WorktreeLockTimedOut,
  WorktreeReleased,
  WorktreeReleasePending,
  WorktreeReleaseRequested,
  WorktreeRescued,
  WorktreeReused,
  WorktreeSynced,
  WorktreeSyncFailed,
} from '@gantry/contracts';

/** A WorktreeLease event as the decider emits it; `data` is exactly the contract's event data. */
type Ev<T extends string, C> = { readonly type: T; readonly data: DataOf<C> };

export type WorktreeLeaseEvent =
  | Ev<'WorktreeLeaseRequested', typeof WorktreeLeaseRequested>
  | Ev<'WorktreeLockQueued', typeof WorktreeLockQueued>
  | Ev<'WorktreeLockAcquired', typeof WorktreeLockAcquired>
  | Ev<'WorktreeLockTimedOut', typeof WorktreeLockTimedOut>
  | Ev<'WorktreeLeaseRequestWithdrawn', typeof WorktreeLeaseRequestWithdrawn>
  | Ev<'WorktreeCreated', typeof WorktreeCreated>
  | Ev<'WorktreeReused', typeof WorktreeReused>
  | Ev<'WorktreeSynced', typeof WorktreeSynced>
  | Ev<'WorktreeSyncFailed', typeof WorktreeSyncFailed>
  | Ev<'WorktreeLeaseRenewed', typeof WorktreeLeaseRenewed>
  | Ev<'WorktreeLeaseExpired', typeof WorktreeLeaseExpired>
  | Ev<'WorktreeReleasePending', typeof WorktreeReleasePending>
  | Ev<'WorktreeReleaseRequested', typeof WorktreeReleaseRequested>
  | Ev<'WorktreeRescued', typeof WorktreeRescued>
  | Ev<'WorktreeReleased', typeof WorktreeReleased>
  | Ev<'WorktreeEvictionRequested', typeof WorktreeEvictionRequested>
  | Ev<'WorktreeEvicted', typeof WorktreeEvicted>
  | Ev<'WorktreeBooksClosed', typeof WorktreeBooksClosed>
  | Ev<'WorktreeBooksOpened', typeof WorktreeBooksOpened>;

export type WorktreeLeaseEventType = WorktreeLeaseEvent['type'];
