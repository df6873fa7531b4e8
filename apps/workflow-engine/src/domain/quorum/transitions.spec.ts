import { workflowDefinitionExample } from '@gantry/contracts';
import { transitionOnDecision, transitionTarget } from './transitions.js';

const review = workflowDefinitionExample.steps[1]!;
const seats = [{ participantId: 'a', decisionRequired: true }, { participantId: 'b', decisionRequired: true }];
const d = (participantId: string, verdict: 'approve' | 'reject') => ({ decisionId: `${participantId}-${verdict}`, participantId, verdict, decidedBy: { kind: 'review_job' as const, jobId: 'job-1' } });

describe('transitions', () => {
  it('move_to_next, move_to_previous, move_to_step and switch_workflow name their targets', () => {
    const def = workflowDefinitionExample;
    expect(transitionTarget({ type: 'move_to_next', config: {}, guard: null }, def, 'work')).toEqual({ workflowId: null, stepId: 'review', entryPath: 'turn_complete' });
    expect(transitionTarget({ type: 'move_to_next', config: {}, guard: null }, def, 'done')).toBeNull();
    expect(transitionTarget({ type: 'move_to_previous', config: {}, guard: null }, def, 'review')).toEqual({ workflowId: null, stepId: 'work', entryPath: 'turn_complete' });
    expect(transitionTarget({ type: 'move_to_step', config: { step_id: 'done' }, guard: null }, def, 'work')).toEqual({ workflowId: null, stepId: 'done', entryPath: 'turn_complete' });
    expect(transitionTarget({ type: 'switch_workflow', config: { workflow_id: 'hotfix' }, guard: null }, def, 'work')).toEqual({ workflowId: 'hotfix', stepId: null, entryPath: 'switch_workflow' });
  });

  it('a decision moves the task when a guarded transition holds: approvals forward, a rejection back', () => {
    const on = (decisions: ReturnType<typeof d>[]) => transitionOnDecision(review.onTurnComplete, workflowDefinitionExample, 'review', seats, decisions);
    expect(on([d('a', 'approve')])).toBeNull();
    expect(on([d('a', 'approve'), d('b', 'approve')])).toEqual({ workflowId: null, stepId: 'done', entryPath: 'turn_complete' });
    expect(on([d('a', 'approve'), d('b', 'reject')])).toEqual({ workflowId: null, stepId: 'work', entryPath: 'turn_complete' });
  });

  it('an unguarded transition waits for a turn to complete', () => {
    expect(transitionOnDecision([{ type: 'move_to_next', config: {}, guard: null }], workflowDefinitionExample, 'work', seats, [d('a', 'approve')])).toBeNull();
  });
});
