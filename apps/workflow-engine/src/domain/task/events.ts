import type {
  AgentAutoStartedData,
  AgentContextResetData,
  AgentSessionStartedData,
  PlanModeChangedData,
  SessionConfiguredData,
  SessionModeSetData,
  TaskAdmittedToStepData,
  TaskCreatedData,
  TaskDeletedData,
  TaskQueuedForStepData,
  TaskUpdatedData,
} from '@gantry/contracts';

/** The task's events as its decider emits them; `data` is exactly the contract's event data. */
export type TaskEvent =
  | { type: 'TaskCreated'; data: TaskCreatedData }
  | { type: 'TaskQueuedForStep'; data: TaskQueuedForStepData }
  | { type: 'TaskAdmittedToStep'; data: TaskAdmittedToStepData }
  | { type: 'TaskUpdated'; data: TaskUpdatedData }
  | { type: 'TaskDeleted'; data: TaskDeletedData }
  | { type: 'AgentContextReset'; data: AgentContextResetData }
  | { type: 'SessionConfigured'; data: SessionConfiguredData }
  | { type: 'SessionModeSet'; data: SessionModeSetData }
  | { type: 'PlanModeChanged'; data: PlanModeChangedData }
  | { type: 'AgentAutoStarted'; data: AgentAutoStartedData }
  | { type: 'AgentSessionStarted'; data: AgentSessionStartedData };

export type TaskEventType = TaskEvent['type'];

export const taskEventTypes: readonly TaskEventType[] = [
  'TaskCreated',
  'TaskQueuedForStep',
  'TaskAdmittedToStep',
  'TaskUpdated',
  'TaskDeleted',
  'AgentContextReset',
  'SessionConfigured',
  'SessionModeSet',
  'PlanModeChanged',
  'AgentAutoStarted',
  'AgentSessionStarted',
];
