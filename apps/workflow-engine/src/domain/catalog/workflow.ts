import { canonicalJson, ErrorCode, GantryError, type WorkflowDefinition, type WorkflowEvent } from '@gantry/contracts';

export type { WorkflowEvent };

/*
 * A workflow's definition history: each import that changes the definition is a new version;
 * a dispatch reads the latest. Importing the same definition again changes nothing.
 */

export type WorkflowCommand = {
  type: 'DefineWorkflow';
  data: { workflowId: string; definition: WorkflowDefinition; unknownActionTypes: string[]; now: string };
};
export type WorkflowState = { status: 'ABSENT' } | { status: 'DEFINED'; workflowId: string; version: number; definition: WorkflowDefinition; unknownActionTypes: string[]; definedAt: string };

export const initialWorkflowState: WorkflowState = { status: 'ABSENT' };

export function evolveWorkflow(_state: WorkflowState, event: WorkflowEvent): WorkflowState {
  const d = event.data;
  return { status: 'DEFINED', workflowId: d.workflowId, version: d.version, definition: d.definition, unknownActionTypes: d.unknownActionTypes, definedAt: d.definedAt };
}

export function decideWorkflow(command: WorkflowCommand, state: WorkflowState): WorkflowEvent[] {
  const d = command.data;
  if (state.status === 'DEFINED' && state.workflowId !== d.workflowId) {
    throw new GantryError(ErrorCode.INVALID_COMMAND, `stream of workflow ${state.workflowId} asked to define ${d.workflowId}`);
  }
  if (state.status === 'DEFINED' && canonicalJson(state.definition) === canonicalJson(d.definition)) return [];
  const version = state.status === 'DEFINED' ? state.version + 1 : 1;
  return [{ type: 'WorkflowDefined', data: { workflowId: d.workflowId, version, definition: d.definition, unknownActionTypes: d.unknownActionTypes, definedAt: d.now } }];
}

export const workflowDecider = { initialState: initialWorkflowState, decide: decideWorkflow, evolve: evolveWorkflow };
