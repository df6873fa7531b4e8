import type pg from 'pg';
import { foldStream, type EventStore } from '@gantry/eventstore';
import {
  agentProfileDecider,
  participantDecider,
  taskAtStepDecider,
  taskDecider,
  workflowDecider,
  type ParticipantState,
  type RecordedDecision,
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

/**
 * Who recorded the decision `decisionId` of the task at the step, in any workflow the task was
 * admitted to that step in (created there, or admitted later); null when no such decision is in the log.
 */
export async function decisionRecordedBy(sql: Sql, taskId: string, stepId: string, decisionId: string): Promise<RecordedDecision['decidedBy'] | null> {
  const { rows: admissions } = await sql.query<{ workflow_id: string }>(
    `SELECT DISTINCT data->>'workflowId' AS workflow_id FROM events WHERE stream_id = $1 AND type IN ('TaskCreated', 'TaskAdmittedToStep') AND data->>'stepId' = $2`,
    [streamIds.task(taskId), stepId],
  );
  const { rows } = await sql.query<{ decided_by: RecordedDecision['decidedBy'] }>(
    `SELECT data->'decidedBy' AS decided_by FROM events WHERE stream_id = ANY($1) AND type = 'DecisionRecorded' AND data->>'decisionId' = $2`,
    [admissions.map((a) => streamIds.taskAtStep(taskId, a.workflow_id, stepId)), decisionId],
  );
  return rows[0]?.decided_by ?? null;
}

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
