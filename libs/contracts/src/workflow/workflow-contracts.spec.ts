import type { CommandContract, EventContract } from '../registry.js';
import { isSubjectToken } from '../subjects.js';
import {
  ActionSchema,
  OnEnterActionFinished,
  StepDefinitionSchema,
  TaskIdSchema,
  WorkflowDefinitionSchema,
  workflowCommandContracts,
  workflowDefinitionExample,
  workflowEventContracts,
  workflowQueryContracts,
} from './index.js';

const all = [...workflowCommandContracts, ...workflowQueryContracts, ...workflowEventContracts] as unknown as (CommandContract | EventContract)[];
const schemaOf = (c: CommandContract | EventContract) => (c.kind === 'command' ? c.request : c.data);
const nameOf = (c: CommandContract | EventContract) => (c.kind === 'command' ? c.name : c.type);

const step = (over: Record<string, unknown>) => ({
  id: 'review', name: 'Review', wipLimit: null, prompt: null, agentProfileId: null, participants: [],
  onEnter: [], onTurnStart: [], onTurnComplete: [], onExit: [], ...over,
});
const issuePaths = (input: unknown) => {
  const parsed = WorkflowDefinitionSchema.safeParse(input);
  return parsed.success ? [] : parsed.error.issues.map((i) => i.path.join('.'));
};

describe('workflow-engine contracts', () => {
  it('declares the commands, queries and events of the workflow context', () => {
    expect(workflowCommandContracts.map((c) => c.name)).toEqual([
      'import_workflow', 'register_agent_profile', 'add_step_participant', 'remove_step_participant', 'create_task', 'move_task',
      'update_task', 'start_task', 'switch_workflow', 'delete_task', 'return_tasks_to_todo', 'record_decision', 'record_review_decision',
    ]);
    expect(workflowQueryContracts.map((c) => c.name)).toEqual(['get_workflow', 'get_task', 'get_task_session', 'list_step_entries']);
    expect(workflowEventContracts.every((c) => c.context === 'workflow')).toBe(true);
  });

  describe.each(all.map((c) => [nameOf(c), c] as const))('%s', (_name, contract) => {
    it('accepts its valid examples (also after JSON) and refuses its invalid ones', () => {
      for (const example of contract.examples.valid) expect(schemaOf(contract).safeParse(JSON.parse(JSON.stringify(example))).error?.issues ?? []).toEqual([]);
      for (const example of contract.examples.invalid) expect(schemaOf(contract).safeParse(example).success).toBe(false);
    });
  });

  describe('a workflow definition', () => {
    it('accepts the Office Default shape', () => {
      expect(WorkflowDefinitionSchema.safeParse(workflowDefinitionExample).success).toBe(true);
    });

    it('accepts an action type the engine does not know (it is warned about at dispatch), keeping its config', () => {
      const parsed = ActionSchema.parse({ type: 'send_slack_message', config: { channel: '#reviews' }, guard: null });
      expect(parsed.config).toEqual({ channel: '#reviews' });
    });

    it('accepts a fan-out with an empty or absent role: that is reported at dispatch, not at import', () => {
      expect(ActionSchema.safeParse({ type: 'queue_run_for_each_participant', config: {}, guard: null }).success).toBe(true);
      expect(ActionSchema.safeParse({ type: 'queue_run_for_each_participant', config: { role: '' }, guard: null }).success).toBe(true);
    });

    it('refuses a known type whose config is malformed, naming the field', () => {
      const parsed = ActionSchema.safeParse({ type: 'queue_run_for_each_participant', config: { role: 5 }, guard: null });
      expect(parsed.success).toBe(false);
      expect(parsed.error!.issues.map((i) => i.path.join('.'))).toEqual(['config.role']);
      expect(ActionSchema.safeParse({ type: 'queue_run', config: { target: 'somebody' }, guard: null }).success).toBe(false);
    });

    it('keeps unknown config keys of a known type (they never change a key)', () => {
      expect(ActionSchema.parse({ type: 'clear_decisions', config: { note: 'x' }, guard: null }).config).toEqual({ note: 'x' });
    });

    it('refuses a guard on an action that is not a transition, and a malformed quorum rule', () => {
      expect(ActionSchema.safeParse({ type: 'queue_run_for_each_participant', config: { role: 'r' }, guard: { wait_for_quorum: 'all_approve' } }).success).toBe(false);
      expect(ActionSchema.safeParse({ type: 'move_to_next', config: {}, guard: { wait_for_quorum: 'n_approve:0' } }).success).toBe(false);
      expect(ActionSchema.safeParse({ type: 'move_to_next', config: {}, guard: { wait_for_quorum: 'n_approve:2' } }).success).toBe(true);
    });

    it('refuses duplicate step ids, an unknown start step, a transition on on_enter and a move to a step that does not exist', () => {
      const base = workflowDefinitionExample;
      expect(issuePaths({ ...base, steps: [...base.steps, base.steps[0]] })).toEqual(['steps.3.id']);
      expect(issuePaths({ ...base, startStepId: 'backlog' })).toEqual(['startStepId']);
      expect(issuePaths({ ...base, steps: [step({ onEnter: [{ type: 'move_to_next', config: {}, guard: null }] })], startStepId: 'review' })).toEqual(['steps.0.onEnter.0.type']);
      expect(issuePaths({ ...base, steps: [step({ onTurnComplete: [{ type: 'move_to_step', config: { step_id: 'nowhere' }, guard: null }] })], startStepId: 'review' })).toEqual([
        'steps.0.onTurnComplete.0.config.step_id',
      ]);
    });

    it('refuses a WIP limit below one', () => {
      expect(StepDefinitionSchema.safeParse(step({ wipLimit: 0 })).success).toBe(false);
    });
  });

  it('a failed marker carries its failure, a skipped one its reason, a done one neither', () => {
    const base = { taskId: 'T-1', workflowId: 'w', stepId: 's', entrySeq: 1, position: 0, kind: 'queue_run', runs: [], epoch: null, finishedAt: '2026-11-30T08:00:00.000Z' };
    expect(OnEnterActionFinished.data.safeParse({ ...base, outcome: 'done', skipReason: null, failure: null }).success).toBe(true);
    expect(OnEnterActionFinished.data.safeParse({ ...base, outcome: 'failed', skipReason: null, failure: null }).success).toBe(false);
    expect(OnEnterActionFinished.data.safeParse({ ...base, outcome: 'done', skipReason: 'malformed', failure: null }).success).toBe(false);
  });

  it('task ids are single subject tokens (they name streams)', () => {
    for (const id of ['T-533', 'task_1', 'A']) {
      expect(TaskIdSchema.safeParse(id).success).toBe(true);
      expect(isSubjectToken(id)).toBe(true);
    }
    for (const id of ['T.533', 'T 533', 'T>1', '']) expect(TaskIdSchema.safeParse(id).success).toBe(false);
  });
});
