import type pg from 'pg';
import { foldStream, type EventStore } from '@gantry/eventstore';
import {
  agentProfileDecider,
  participantDecider,
  taskAtStepDecider,
  taskDecider,
  workflowDecider,
  type ParticipantState,
  type TaskAtStep,
  type TaskAtStepEvent,
  type TaskEvent,
  type TaskState,
} from '../../domain/index.js';

/** The stream ids of the workflow context (docs/workflow-engine.md, "Commands and events"). */
export const streamIds = {
  workflow: (workflowId: string) => `workflow-${workflowId}`,
  agentProfile: (agentProfileId: string) => `agentprofile-${agentProfileId}`,
  participant: (participantId: string) => `participant-${participantId}`,
  task: (taskId: string) => `task-${taskId}`,
  /** `~` is never part of an id, so two pairs never share a stream. */
  taskAtStep: (taskId: string, workflowId: string, stepId: string) => `taskstep-${taskId}~${workflowId}~${stepId}`,
};

type Sql = pg.PoolClient | pg.Pool;

export async function loadTask(store: EventStore, taskId: string, sql: Sql = store.pool): Promise<TaskState> {
  return foldStream<TaskState, TaskEvent>(taskDecider, await store.readStream(streamIds.task(taskId), sql as pg.PoolClient));
}

export async function loadTaskAtStep(store: EventStore, taskId: string, workflowId: string, stepId: string, sql: Sql = store.pool): Promise<TaskAtStep> {
  return foldStream<TaskAtStep, TaskAtStepEvent>(taskAtStepDecider, await store.readStream(streamIds.taskAtStep(taskId, workflowId, stepId), sql as pg.PoolClient));
}

export async function loadParticipant(store: EventStore, participantId: string, sql: Sql = store.pool): Promise<ParticipantState> {
  return foldStream<ParticipantState, never>(participantDecider, await store.readStream(streamIds.participant(participantId), sql as pg.PoolClient));
}

export { agentProfileDecider, participantDecider, taskAtStepDecider, taskDecider, workflowDecider };
