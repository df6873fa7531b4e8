/** A worktree key's events as the WorktreeLease decider emits them: the contracts' (`data` is exactly the contract's event data). */
export type { WorktreeLeaseEvent, WorktreeLeaseEventType } from '@gantry/contracts';
