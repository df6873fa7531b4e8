import type pg from 'pg';
import type { WorkflowDefinition } from '@gantry/contracts';
import { inlineStatement } from '@gantry/eventstore';
import type { Seat } from '../../domain/index.js';

/** SQL over the engine's read models; every function takes the connection (a transaction's or the pool). */
type Sql = pg.PoolClient | pg.Pool;

export interface StoredWorkflow {
  workflowId: string;
  version: number;
  definition: WorkflowDefinition;
  unknownActionTypes: string[];
  definedAt: string;
}

const WORKFLOW_QUERY = `SELECT version, definition, unknown_action_types, defined_at FROM workflows WHERE workflow_id = $1`;

interface WorkflowRow {
  version: number;
  definition: WorkflowDefinition;
  unknown_action_types: string[];
  defined_at: Date;
}

function storedWorkflow(workflowId: string, row: WorkflowRow | undefined): StoredWorkflow | null {
  return row ? { workflowId, version: row.version, definition: row.definition, unknownActionTypes: row.unknown_action_types, definedAt: row.defined_at.toISOString() } : null;
}

export async function latestWorkflow(sql: Sql, workflowId: string): Promise<StoredWorkflow | null> {
  const { rows } = await sql.query<WorkflowRow>(WORKFLOW_QUERY, [workflowId]);
  return storedWorkflow(workflowId, rows[0]);
}

/**
 * Serialises admissions to the given steps of a workflow for the rest of the transaction, so a seat
 * is counted and taken by one admission at a time, and counts the tasks admitted at each of them
 * now, one task left out (the one being placed). The locks are taken in a fixed order, so two
 * admissions never deadlock; the counts are read once they are held. One message: its statements
 * run one after the other, each count after the locks.
 */
export async function seatsUnderLock(sql: pg.PoolClient, schema: string, workflowId: string, stepIds: readonly string[], exceptTaskId: string): Promise<Map<string, number>> {
  const keys = [...new Set(stepIds.map((stepId) => `gantry.workflow.seats:${schema}:${workflowId}/${stepId}`))].sort();
  const answer = (await sql.query(
    [
      ...keys.map((key) => inlineStatement(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, [key])),
      inlineStatement(
        `SELECT step_id, count(*)::int AS n FROM tasks
          WHERE workflow_id = $1 AND step_id IN (SELECT json_array_elements_text($2::json)) AND admitted AND task_id <> $3 GROUP BY step_id`,
        [workflowId, JSON.stringify(stepIds), exceptTaskId],
      ),
    ].join(';\n'),
  )) as unknown as pg.QueryResult<{ step_id: string; n: number }> | pg.QueryResult<{ step_id: string; n: number }>[];
  const counts = Array.isArray(answer) ? answer.at(-1)! : answer;
  const counted = new Map(counts.rows.map((r) => [r.step_id, r.n]));
  return new Map(stepIds.map((stepId) => [stepId, counted.get(stepId) ?? 0]));
}

/**
 * Serialises, for the rest of the transaction, what re-evaluates a task's quorum against a change
 * of its inputs: a decision recorded and a seat removed. Each reads the other's input, so without it
 * both could commit having read the other's before, and neither would move the task. Taken before
 * anything of the task is read.
 */
export async function lockQuorum(sql: pg.PoolClient, schema: string, taskId: string): Promise<void> {
  await sql.query(quorumLockStatement(schema, taskId));
}

/** lockQuorum as a statement with its values written in, to go in the message that opens the transaction (ExecuteOptions.reads). */
export function quorumLockStatement(schema: string, taskId: string): string {
  return inlineStatement(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, [`gantry.workflow.quorum:${schema}:${taskId}`]);
}

interface SeatRow {
  participant_id: string;
  task_id: string | null;
  role: string;
  agent_profile_id: string;
  decision_required: boolean;
  position: number;
}

const STEP_SEATS_QUERY = `SELECT participant_id, task_id, role, agent_profile_id, decision_required, position FROM step_participants
      WHERE workflow_id = $1 AND step_id = $2 AND (task_id IS NULL OR task_id = $3)`;

const seatOf = (r: SeatRow): Seat => ({ participantId: r.participant_id, taskId: r.task_id, role: r.role, agentProfileId: r.agent_profile_id, decisionRequired: r.decision_required, position: r.position });

/** The seats of a step for one task, template and task level, read in one query (AC-F2). */
export async function stepSeats(sql: Sql, workflowId: string, stepId: string, taskId: string): Promise<Seat[]> {
  const { rows } = await sql.query<SeatRow>(STEP_SEATS_QUERY, [workflowId, stepId, taskId]);
  return rows.map(seatOf);
}

/** latestWorkflow and stepSeats in one message: what a quorum is weighed on. */
export async function workflowAndSeats(sql: pg.PoolClient, workflowId: string, stepId: string, taskId: string): Promise<{ workflow: StoredWorkflow | null; seats: Seat[] }> {
  const [workflow, seats] = (await sql.query(
    [inlineStatement(WORKFLOW_QUERY, [workflowId]), inlineStatement(STEP_SEATS_QUERY, [workflowId, stepId, taskId])].join(';\n'),
  )) as unknown as [pg.QueryResult<WorkflowRow>, pg.QueryResult<SeatRow>];
  return { workflow: storedWorkflow(workflowId, workflow.rows[0]), seats: seats.rows.map(seatOf) };
}

export interface RegisteredProfile {
  agentProfileId: string;
  model: string;
  thinkingBudget: number;
}

export async function agentProfiles(sql: Sql, ids: readonly string[]): Promise<Map<string, RegisteredProfile>> {
  if (ids.length === 0) return new Map();
  const { rows } = await sql.query<{ agent_profile_id: string; model: string; thinking_budget: number }>(
    `SELECT agent_profile_id, model, thinking_budget FROM agent_profiles WHERE agent_profile_id = ANY($1)`,
    [[...new Set(ids)]],
  );
  return new Map(rows.map((r) => [r.agent_profile_id, { agentProfileId: r.agent_profile_id, model: r.model, thinkingBudget: r.thinking_budget }]));
}

/**
 * The tasks a freed seat at a step may go to, longest waiting first: those waiting for the step
 * (parked at it or held elsewhere), and those parked at the step it feeds (they may land here).
 */
export async function tasksWaitingFor(sql: Sql, workflowId: string, stepId: string, fedStepId: string | null): Promise<string[]> {
  const { rows } = await sql.query<{ task_id: string }>(
    `SELECT task_id FROM tasks
      WHERE workflow_id = $1 AND (queued_for_step_id = $2 OR (NOT admitted AND step_id = $3 AND queued_for_step_id = $3))
      ORDER BY queued_since, task_id`,
    [workflowId, stepId, fedStepId],
  );
  return rows.map((r) => r.task_id);
}

/** Every step some task waits for (held elsewhere or parked at it), per workflow. */
export async function awaitedSteps(sql: Sql): Promise<{ workflowId: string; stepId: string }[]> {
  const { rows } = await sql.query<{ workflow_id: string; step_id: string }>(
    `SELECT DISTINCT workflow_id, queued_for_step_id AS step_id FROM tasks WHERE queued_for_step_id IS NOT NULL ORDER BY workflow_id, step_id`,
  );
  return rows.map((r) => ({ workflowId: r.workflow_id, stepId: r.step_id }));
}

export interface OpenEntryRow {
  taskId: string;
  workflowId: string;
  stepId: string;
  entrySeq: number;
}

/** The startup scan's one query: every step-entry record whose terminal flag is unset. */
export async function openStepEntries(sql: Sql): Promise<OpenEntryRow[]> {
  const { rows } = await sql.query<{ task_id: string; workflow_id: string; step_id: string; entry_seq: number }>(
    `SELECT task_id, workflow_id, step_id, entry_seq FROM step_entries WHERE NOT terminal ORDER BY task_id, workflow_id, step_id, entry_seq`,
  );
  return rows.map((r) => ({ taskId: r.task_id, workflowId: r.workflow_id, stepId: r.step_id, entrySeq: r.entry_seq }));
}

/** The scans' one query for exits: every recorded exit of a step occupancy whose on_exit has not finished. */
export async function openStepExits(sql: Sql): Promise<OpenEntryRow[]> {
  const { rows } = await sql.query<{ task_id: string; workflow_id: string; step_id: string; entry_seq: number }>(
    `SELECT task_id, workflow_id, step_id, entry_seq FROM step_exits WHERE NOT finished ORDER BY task_id, workflow_id, step_id, entry_seq`,
  );
  return rows.map((r) => ({ taskId: r.task_id, workflowId: r.workflow_id, stepId: r.step_id, entrySeq: r.entry_seq }));
}

export interface StepEntryKey {
  workflowId: string;
  stepId: string;
  entrySeq: number;
}

/**
 * The task's step entries (of one step, or of all) after `after`, in (workflow, step, entrySeq)
 * order, at most `limit` of them: the keys of a list_step_entries page. The key is unique and never
 * changes, so reading on after the last key seen neither skips nor repeats an entry.
 */
export async function stepEntryKeysOf(sql: Sql, query: { taskId: string; stepId?: string; after: StepEntryKey | null; limit: number }): Promise<StepEntryKey[]> {
  const { taskId, stepId, after, limit } = query;
  const { rows } = await sql.query<{ workflow_id: string; step_id: string; entry_seq: number }>(
    `SELECT workflow_id, step_id, entry_seq FROM step_entries
      WHERE task_id = $1 AND ($2::text IS NULL OR step_id = $2)
        AND ($3::text IS NULL OR (workflow_id, step_id, entry_seq) > ($3, $4, $5))
      ORDER BY workflow_id, step_id, entry_seq LIMIT $6`,
    [taskId, stepId ?? null, after?.workflowId ?? null, after?.stepId ?? null, after?.entrySeq ?? null, limit],
  );
  return rows.map((r) => ({ workflowId: r.workflow_id, stepId: r.step_id, entrySeq: r.entry_seq }));
}

export interface QueuedRunRow {
  idempotencyKey: string;
  jobId: string | null;
  taskId: string;
  workflowId: string;
  stepId: string;
  entrySeq: number;
  position: number;
  actionType: string;
  participantId: string | null;
  agentProfileId: string;
}

/** Written before the enqueue, so the job's events are attributed to its entry however fast they come. */
export async function rememberQueuedRun(sql: Sql, run: Omit<QueuedRunRow, 'jobId'>): Promise<void> {
  await sql.query(
    `INSERT INTO queued_runs (idempotency_key, task_id, workflow_id, step_id, entry_seq, position, action_type, participant_id, agent_profile_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (idempotency_key) DO NOTHING`,
    [run.idempotencyKey, run.taskId, run.workflowId, run.stepId, run.entrySeq, run.position, run.actionType, run.participantId, run.agentProfileId],
  );
}

export async function recordQueuedRunJob(sql: Sql, idempotencyKey: string, jobId: string): Promise<void> {
  // A reply recorded after the job's end was handled takes its end too, or the row would never be pruned.
  await sql.query(
    `UPDATE queued_runs SET job_id = $2, ended_at = (SELECT t.ended_at FROM task_jobs t WHERE t.job_id = $2)
      WHERE idempotency_key = $1 AND job_id IS NULL`,
    [idempotencyKey, jobId],
  );
}

function toQueuedRun(r: Record<string, unknown>): QueuedRunRow {
  return {
    idempotencyKey: r.idempotency_key as string,
    jobId: r.job_id as string | null,
    taskId: r.task_id as string,
    workflowId: r.workflow_id as string,
    stepId: r.step_id as string,
    entrySeq: r.entry_seq as number,
    position: r.position as number,
    actionType: r.action_type as string,
    participantId: r.participant_id as string | null,
    agentProfileId: r.agent_profile_id as string,
  };
}

/**
 * The run an on_enter action queued earlier for this entry, position and agent profile, under a key
 * of the same scope (`keyScope`, the key's text up to its digest) — whatever config it was queued with.
 */
export async function entryRunOf(
  sql: Sql,
  run: Pick<QueuedRunRow, 'taskId' | 'workflowId' | 'stepId' | 'entrySeq' | 'position' | 'actionType' | 'agentProfileId'> & { keyScope: string },
): Promise<QueuedRunRow | null> {
  const { rows } = await sql.query(
    `SELECT * FROM queued_runs
      WHERE task_id = $1 AND workflow_id = $2 AND step_id = $3 AND entry_seq = $4 AND position = $5 AND action_type = $6 AND agent_profile_id = $7
        AND left(idempotency_key, length($8)) = $8
      ORDER BY queued_at, idempotency_key LIMIT 1`,
    [run.taskId, run.workflowId, run.stepId, run.entrySeq, run.position, run.actionType, run.agentProfileId, run.keyScope],
  );
  return rows[0] ? toQueuedRun(rows[0]) : null;
}

export async function queuedRunByKey(sql: Sql, idempotencyKey: string): Promise<QueuedRunRow | null> {
  const { rows } = await sql.query(`SELECT * FROM queued_runs WHERE idempotency_key = $1`, [idempotencyKey]);
  return rows[0] ? toQueuedRun(rows[0]) : null;
}

export async function queuedRunByJob(sql: Sql, jobId: string): Promise<QueuedRunRow | null> {
  const { rows } = await sql.query(`SELECT * FROM queued_runs WHERE job_id = $1`, [jobId]);
  return rows[0] ? toQueuedRun(rows[0]) : null;
}

export interface TaskJobRow {
  jobId: string;
  taskId: string;
  kind: string;
  workflowId: string;
  stepId: string;
  entrySeq: number;
}

export async function rememberTaskJob(sql: Sql, job: TaskJobRow): Promise<void> {
  await sql.query(
    `INSERT INTO task_jobs (job_id, task_id, kind, workflow_id, step_id, entry_seq) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (job_id) DO NOTHING`,
    [job.jobId, job.taskId, job.kind, job.workflowId, job.stepId, job.entrySeq],
  );
}

export async function taskJob(sql: Sql, jobId: string): Promise<TaskJobRow | null> {
  const { rows } = await sql.query<{ job_id: string; task_id: string; kind: string; workflow_id: string; step_id: string; entry_seq: number }>(
    `SELECT job_id, task_id, kind, workflow_id, step_id, entry_seq FROM task_jobs WHERE job_id = $1`,
    [jobId],
  );
  const r = rows[0];
  return r ? { jobId: r.job_id, taskId: r.task_id, kind: r.kind, workflowId: r.workflow_id, stepId: r.step_id, entrySeq: r.entry_seq } : null;
}

/** The job ended (finished, cancelled, failed at a claim's end): its rows' retention counts from now (RunRecordsRetention). */
export async function recordJobEnded(sql: Sql, jobId: string): Promise<void> {
  await sql.query(
    `WITH jobs AS (UPDATE task_jobs SET ended_at = now() WHERE job_id = $1 AND ended_at IS NULL)
     UPDATE queued_runs SET ended_at = now() WHERE job_id = $1 AND ended_at IS NULL`,
    [jobId],
  );
}

/** Where the task is now, from its row (written with each of its events): null for a task that is gone. */
export async function taskPlacementNow(sql: Sql, taskId: string): Promise<{ workflowId: string; stepId: string; admitted: boolean; currentEntrySeq: number | null } | null> {
  const { rows } = await sql.query<{ workflow_id: string; step_id: string; admitted: boolean; current_entry_seq: number | null }>(
    `SELECT workflow_id, step_id, admitted, current_entry_seq FROM tasks WHERE task_id = $1`,
    [taskId],
  );
  const row = rows[0];
  return row ? { workflowId: row.workflow_id, stepId: row.step_id, admitted: row.admitted, currentEntrySeq: row.current_entry_seq } : null;
}

export async function taskExistsRow(sql: Sql, taskId: string): Promise<boolean> {
  const { rows } = await sql.query(`SELECT 1 FROM tasks WHERE task_id = $1`, [taskId]);
  return rows.length > 0;
}
