import type { StepEntryRecord } from '../step-entry/state.js';
import { recoveryOrder, recoveryVerdict, type RecoveryFacts } from './recovery-rules.js';

const record = (entrySeq: number, markers: StepEntryRecord['markers'] = {}) => ({
  workflowId: 'w', stepId: 'review', entrySeq, declarationDigest: 'c'.repeat(64), entryPath: 'manual_move' as const,
  markedPositions: [{ position: 0, kind: 'clear_decisions' }], openedByEpoch: 'e', openedAt: 't', markers, termination: null,
});
const at = (over: Partial<NonNullable<RecoveryFacts['task']>> = {}): RecoveryFacts => ({ task: { workflowId: 'w', stepId: 'review', admitted: true, currentEntrySeq: 2, ...over }, stepResolvable: true });

describe('the startup scan\'s rules (AC-B9)', () => {
  it('(e) a record whose task, workflow or step is gone is unresolvable', () => {
    expect(recoveryVerdict(record(2), { task: null, stepResolvable: true })).toEqual({ kind: 'unresolvable' });
    expect(recoveryVerdict(record(2), { ...at(), stepResolvable: false })).toEqual({ kind: 'unresolvable' });
  });

  it('(a1) a record of a step the task has left (or only waits at) is step_left', () => {
    expect(recoveryVerdict(record(2), at({ stepId: 'done' }))).toEqual({ kind: 'step_left' });
    expect(recoveryVerdict(record(2), at({ workflowId: 'other' }))).toEqual({ kind: 'step_left' });
    expect(recoveryVerdict(record(2), at({ admitted: false }))).toEqual({ kind: 'step_left' });
  });

  it('(a2) an older record of a step the task has since re-entered is superseded; the current one resumes', () => {
    expect(recoveryVerdict(record(1), at())).toEqual({ kind: 'superseded' });
    expect(recoveryVerdict(record(2), at())).toEqual({ kind: 'resume' });
  });

  it('(b) an entry whose clear_decisions failed is not resumed', () => {
    const failed = { 0: { position: 0, kind: 'clear_decisions', state: 'failed' as const, epoch: 'e', skipReason: null, failure: { cause: 'x', attempted: null, failed: null }, runs: [] } };
    expect(recoveryVerdict(record(2, failed), at())).toEqual({ kind: 'clear_decisions_failed' });
  });

  it('(c) orders by task, workflow, step, entry_seq', () => {
    const r = (taskId: string, stepId: string, entrySeq: number) => ({ taskId, workflowId: 'w', stepId, entrySeq });
    expect(recoveryOrder([r('T-2', 'a', 1), r('T-1', 'b', 2), r('T-1', 'b', 1), r('T-1', 'a', 9)])).toEqual([r('T-1', 'a', 9), r('T-1', 'b', 1), r('T-1', 'b', 2), r('T-2', 'a', 1)]);
  });
});
