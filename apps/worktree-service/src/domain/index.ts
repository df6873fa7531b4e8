// The pure domain of the worktree service: the WorktreeLease decider of one worktree key (its lock,
// its leases, their fencing tokens), the git work it asks for as effects, the start-up
// reconciliation with the disk and the verdict on a lease whose job's claim ended. No NestJS, pg,
// nats or git here. The rules are described in docs/worktrees.md.
//
// Where each rule lives:
//   one stream per (repository, branch): the worktree key      @gantry/contracts worktrees  deriveWorktreeKey,
//                                                               worktree-lease/decider.ts    decideRequest
//   lease states acquiring_lock → … → released, and its ends    worktree-lease/state.ts      evolve ("When a lease ends")
//   one holder, waiters in arrival order, lock timeouts          worktree-lease/lock.ts       requestLock / handOver
//   fencing: a token not the lease's own is STALE_FENCE          worktree-lease/decider.ts    assertFence
//   a late or repeated effect report changes nothing             worktree-lease/decider.ts    reportStage
//   a claim ended elsewhere: release pending, not freed           worktree-lease/decider.ts    endedElsewhere
//   a newer claim of the job supersedes the older one's lease    worktree-lease/decider.ts    decideRequest
//   expiry by the service's clock (`now` in every command)       worktree-lease/decider.ts    ExpireWorktreeLease
//   rescue branches for dirty work ("What a lease starts from")  worktree-lease/decider.ts    rescued (WorktreeRescued)
//   eviction of idle worktrees only ("Eviction and the cap")     worktree-lease/decider.ts    EvictIdleWorktree
//   closing the books: epochs, what the next epoch carries       worktree-lease/books.ts      openingOf
//   the git work as data, the deadlines to watch                 worktree-lease/effects.ts    pendingEffects / upcomingDeadlines
//   a lease as list_worktree_leases shows it; a key's status     worktree-lease/view.ts       leaseViewOf / worktreeStatus
//   restart: the log and the disk made to agree                  reconciliation.ts            planReconciliation ("Restart and recovery")
//   the stale reset: what a job's claim end means for its lease  claim-ends.ts                claimVerdict
//   a claim expired before it was started: no agent, released    claim-ends.ts                noAgentLeft
// Specifications: worktree-lease/*.spec.ts, *.spec.ts, written with DeciderSpecification.for(decider)
// from @gantry/eventstore/testing (given/when/then).

export type { WorktreeLeaseCommand, WorktreeLeaseCommandType, EvictionReason } from './worktree-lease/commands.js';
export type { WorktreeLeaseEvent, WorktreeLeaseEventType } from './worktree-lease/events.js';
export type { LeaseRecord, WorktreeLeaseState } from './worktree-lease/state.js';
export { initialState, evolve, isHolding, isTerminal, isIdle, currentHolder } from './worktree-lease/state.js';
export { decide, worktreeLeaseDecider } from './worktree-lease/decider.js';
export { openingOf } from './worktree-lease/books.js';
export { worktreeStatus, leaseViewOf } from './worktree-lease/view.js';
export type { LockWaiter, WorktreeLock, LockRequestOutcome } from './worktree-lease/lock.js';
export {
  freeLock,
  isPast,
  requestLock,
  handOver,
  overdueWaiters,
  enqueue,
  withoutWaiter,
  grant,
  releaseHolder,
} from './worktree-lease/lock.js';
export type { WorktreeEffect, WorktreeEffectType, WorktreeDeadline } from './worktree-lease/effects.js';
export { effectFor, pendingEffects, effectIdentity, effectsRequestedBy, upcomingDeadlines } from './worktree-lease/effects.js';

export type { DiskWorktree, DiskInventory, ReconciliationAction } from './reconciliation.js';
export { planReconciliation } from './reconciliation.js';
export type { ClaimEndedBy, KnownJob, ClaimVerdict } from './claim-ends.js';
export { claimVerdict, noAgentLeft } from './claim-ends.js';
