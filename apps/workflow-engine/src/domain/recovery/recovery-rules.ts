import type { StepEntryRecord } from '../step-entry/state.js';

/*
 * The startup scan's rules for one non-terminal step-entry record (docs/workflow-engine.md,
 * "Recovery", AC-B9). The scan reads every non-terminal record once, in (task, workflow, step,
 * entry_seq) order, and asks this what to do with each. The declaration digest check (AC-B9(d)) is
 * the dispatcher's own first step, so a resumed record meets it there.
 */

export interface RecoveryFacts {
  /** null: the task is gone. */
  task: { workflowId: string; stepId: string; admitted: boolean; currentEntrySeq: number | null } | null;
  /** false: the workflow or the step is gone (a re-import removed it). */
  stepResolvable: boolean;
}

export type RecoveryVerdict =
  | { kind: 'unresolvable' }
  | { kind: 'step_left' }
  | { kind: 'superseded' }
  | { kind: 'clear_decisions_failed' }
  | { kind: 'resume' };

export function recoveryVerdict(record: StepEntryRecord & { workflowId: string; stepId: string }, facts: RecoveryFacts): RecoveryVerdict {
  // (e) what cannot be resolved is never run.
  if (facts.task === null || !facts.stepResolvable) return { kind: 'unresolvable' };
  // (a1) the task has left the step (or only waits there, occupying nothing).
  const at = facts.task;
  if (at.workflowId !== record.workflowId || at.stepId !== record.stepId || !at.admitted) return { kind: 'step_left' };
  // (a2) the task is at the step, but in a later entry: this record's round is over.
  if (at.currentEntrySeq === null || record.entrySeq !== at.currentEntrySeq) return { kind: 'superseded' };
  // (b) a failed clear_decisions stops its entry for good.
  if (Object.values(record.markers).some((m) => m.kind === 'clear_decisions' && m.state === 'failed')) return { kind: 'clear_decisions_failed' };
  return { kind: 'resume' };
}

/** (c) the scan's order: task, workflow, step, entry_seq. */
export function recoveryOrder<T extends { taskId: string; workflowId: string; stepId: string; entrySeq: number }>(records: readonly T[]): T[] {
  const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  return [...records].sort((a, b) => cmp(a.taskId, b.taskId) || cmp(a.workflowId, b.workflowId) || cmp(a.stepId, b.stepId) || a.entrySeq - b.entrySeq);
}
