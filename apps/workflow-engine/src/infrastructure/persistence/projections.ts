import type pg from 'pg';
import type { StoredEvent, Projection, SqlWriter } from '@gantry/eventstore';
import type { WorkflowDefinedData } from '@gantry/contracts';
import { evolveTask, initialTaskState, taskEventTypes, type Task, type TaskEvent, type TaskState } from '../../domain/index.js';

/** Workflows: the latest definition, and its template-level seats. */
const workflowsProjection: Projection = {
  name: 'workflows_view',
  // The seats table is rebuilt by this projection (template seats) and the participants one (task seats).
  tables: ['workflows', 'step_participants'],
  types: ['WorkflowDefined'],
  async apply(sql: pg.PoolClient, event: StoredEvent): Promise<void> {
    const d = event.data as WorkflowDefinedData;
    await sql.query(
      `INSERT INTO workflows (workflow_id, version, definition, unknown_action_types, defined_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (workflow_id) DO UPDATE SET version = EXCLUDED.version, definition = EXCLUDED.definition,
         unknown_action_types = EXCLUDED.unknown_action_types, defined_at = EXCLUDED.defined_at`,
      [d.workflowId, d.version, JSON.stringify(d.definition), JSON.stringify(d.unknownActionTypes), d.definedAt],
    );
    await sql.query(`DELETE FROM step_participants WHERE workflow_id = $1 AND task_id IS NULL`, [d.workflowId]);
    for (const step of d.definition.steps) {
      for (const seat of step.participants) {
        await sql.query(
          `INSERT INTO step_participants (seat_key, participant_id, workflow_id, step_id, task_id, role, agent_profile_id, decision_required, position)
           VALUES ($1, $2, $3, $4, NULL, $5, $6, $7, $8)`,
          [`template/${d.workflowId}/${step.id}/${seat.id}`, seat.id, d.workflowId, step.id, seat.role, seat.agentProfileId, seat.decisionRequired, seat.position],
        );
      }
    }
  },
};

const agentProfilesProjection: Projection = {
  name: 'agent_profiles_view',
  tables: ['agent_profiles'],
  types: ['AgentProfileRegistered'],
  async apply(sql, event) {
    const d = event.data as { agentProfileId: string; model: string; thinkingBudget: number };
    await sql.query(
      `INSERT INTO agent_profiles (agent_profile_id, model, thinking_budget) VALUES ($1, $2, $3)
       ON CONFLICT (agent_profile_id) DO UPDATE SET model = EXCLUDED.model, thinking_budget = EXCLUDED.thinking_budget`,
      [d.agentProfileId, d.model, d.thinkingBudget],
    );
  },
};

const participantsProjection: Projection = {
  name: 'step_participants_view',
  tables: [],
  types: ['StepParticipantAdded', 'StepParticipantRemoved'],
  async apply(sql, event) {
    const d = event.data as { participantId: string; workflowId: string; stepId: string; taskId: string; role?: string; agentProfileId?: string; decisionRequired?: boolean; position?: number };
    if (event.type === 'StepParticipantRemoved') {
      await sql.query(`DELETE FROM step_participants WHERE seat_key = $1`, [`task/${d.participantId}`]);
      return;
    }
    await sql.query(
      `INSERT INTO step_participants (seat_key, participant_id, workflow_id, step_id, task_id, role, agent_profile_id, decision_required, position)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
      [`task/${d.participantId}`, d.participantId, d.workflowId, d.stepId, d.taskId, d.role, d.agentProfileId, d.decisionRequired, d.position],
    );
  },
};

/** Tasks: the folded aggregate plus what admission counts and promotion looks up. A deleted task's row goes (and its step entries with it). */
const tasksProjection: Projection = {
  name: 'tasks_view',
  // step_entries and step_exits reference tasks: all are emptied together, then refilled in log order.
  tables: ['tasks', 'step_entries', 'step_exits'],
  types: taskEventTypes as string[],
  async apply(sql, event) {
    const { rows } = await sql.query<{ state: Task }>(`SELECT state FROM tasks WHERE task_id = $1`, [(event.data as { taskId: string }).taskId]);
    const before: TaskState = rows[0]?.state ?? initialTaskState;
    const task = evolveTask(before, { type: event.type, data: event.data } as TaskEvent);
    if (task.status === 'ABSENT') return;
    if (task.status === 'DELETED') {
      await sql.query(`DELETE FROM tasks WHERE task_id = $1`, [task.taskId]);
      return;
    }
    const p = task.placement;
    await sql.query(
      `INSERT INTO tasks (task_id, product_id, workflow_id, step_id, admitted, queued_for_step_id, queued_since, current_entry_seq, state)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
       ON CONFLICT (task_id) DO UPDATE SET workflow_id = EXCLUDED.workflow_id, step_id = EXCLUDED.step_id, admitted = EXCLUDED.admitted,
         queued_for_step_id = EXCLUDED.queued_for_step_id, queued_since = EXCLUDED.queued_since,
         current_entry_seq = EXCLUDED.current_entry_seq, state = EXCLUDED.state`,
      [task.taskId, task.productId, p.workflowId, p.stepId, p.admitted, p.queuedForStepId, p.queuedSince, task.currentEntry?.entrySeq ?? null, JSON.stringify(task)],
    );
  },
};

/**
 * A projection whose writes need no answer: on a command's path they go where the command holds
 * its writes (`writer`: with its commit, or in its one-message write) rather than in a round trip
 * each; `immediate` events are written on the transaction's connection at once (a failure then
 * fails the append it follows, where the caller reports it).
 */
function writtenWithTheCommit(spec: {
  name: string;
  types: string[];
  immediate?: string[];
  write(sql: SqlWriter, event: StoredEvent): Promise<unknown>;
}): Projection {
  return {
    name: spec.name,
    tables: [],
    types: spec.types,
    async apply(sql, event) {
      await spec.write(sql, event);
    },
    async applyMany(sql, events, _before, writer) {
      for (const event of events) await spec.write(spec.immediate?.includes(event.type) ? sql : (writer ?? sql), event);
    },
  };
}

/** Step-entry records: identity, the opener and the terminal flag (the markers are folded from the pair's stream). */
const stepEntriesProjection = writtenWithTheCommit({
  name: 'step_entries_view',
  types: ['StepEntryOpened', 'StepEntryTerminated'],
  // The record of a move's entry: a failure to write it fails the move, reported as such (AC-B7).
  immediate: ['StepEntryOpened'],
  write(sql, event) {
    const d = event.data as { taskId: string; workflowId: string; stepId: string; entrySeq: number; entryPath?: string; declarationDigest?: string; openedByEpoch?: string; openedAt?: string; reason?: string };
    if (event.type === 'StepEntryOpened') {
      return sql.query(
        `INSERT INTO step_entries (task_id, workflow_id, step_id, entry_seq, entry_path, declaration_digest, opened_by_epoch, opened_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
        [d.taskId, d.workflowId, d.stepId, d.entrySeq, d.entryPath, d.declarationDigest, d.openedByEpoch, d.openedAt],
      );
    }
    return sql.query(`UPDATE step_entries SET terminal = true, termination = $5 WHERE task_id = $1 AND workflow_id = $2 AND step_id = $3 AND entry_seq = $4`, [
      d.taskId, d.workflowId, d.stepId, d.entrySeq, d.reason,
    ]);
  },
});

/** Recorded exits of step occupancies (on_exit), and whether each finished. */
const stepExitsProjection = writtenWithTheCommit({
  name: 'step_exits_view',
  types: ['StepExitOpened', 'StepExitFinished'],
  write(sql, event) {
    const d = event.data as { taskId: string; workflowId: string; stepId: string; entrySeq: number; openedByEpoch?: string; openedAt?: string };
    if (event.type === 'StepExitOpened') {
      return sql.query(
        `INSERT INTO step_exits (task_id, workflow_id, step_id, entry_seq, opened_by_epoch, opened_at) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (task_id, workflow_id, step_id, entry_seq) DO NOTHING`,
        [d.taskId, d.workflowId, d.stepId, d.entrySeq, d.openedByEpoch, d.openedAt],
      );
    }
    return sql.query(`UPDATE step_exits SET finished = true WHERE task_id = $1 AND workflow_id = $2 AND step_id = $3 AND entry_seq = $4`, [d.taskId, d.workflowId, d.stepId, d.entrySeq]);
  },
});

export const workflowEngineProjections: Projection[] = [workflowsProjection, agentProfilesProjection, participantsProjection, tasksProjection, stepEntriesProjection, stepExitsProjection];
