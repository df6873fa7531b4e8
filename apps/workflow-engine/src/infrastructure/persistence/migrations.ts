import type { MigrationInterface, QueryRunner } from 'typeorm';
import { jsonTextColumnsMigration, lz4ColumnsMigration, processTableDdl } from '@gantry/eventstore';

/**
 * The read side of the workflow engine (docs/workflow-engine.md, "Commands and events"). The tables
 * fed by projections are rebuildable from the log; `queued_runs` and `task_jobs` index what the
 * engine asked of, and learned from, the job service; `engine_epochs` lists the live processes.
 */
export class WorkflowEngineViews1765000000000 implements MigrationInterface {
  name = 'WorkflowEngineViews1765000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE workflows (
        workflow_id           text PRIMARY KEY,
        version               integer NOT NULL,
        definition            jsonb NOT NULL,
        unknown_action_types  jsonb NOT NULL,
        defined_at            timestamptz NOT NULL
      )`);
    await q.query(`
      CREATE TABLE agent_profiles (
        agent_profile_id  text PRIMARY KEY,
        model             text NOT NULL,
        thinking_budget   integer NOT NULL
      )`);
    // Template-level seats (task_id NULL, from the workflow's definition) and task-level ones.
    await q.query(`
      CREATE TABLE step_participants (
        seat_key           text PRIMARY KEY,
        participant_id     text NOT NULL,
        workflow_id        text NOT NULL,
        step_id            text NOT NULL,
        task_id            text,
        role               text NOT NULL,
        agent_profile_id   text NOT NULL,
        decision_required  boolean NOT NULL,
        position           integer NOT NULL
      )`);
    await q.query(`CREATE INDEX step_participants_by_step ON step_participants (workflow_id, step_id)`);
    await q.query(`
      CREATE TABLE tasks (
        task_id             text PRIMARY KEY,
        product_id          text NOT NULL,
        workflow_id         text NOT NULL,
        step_id             text NOT NULL,
        admitted            boolean NOT NULL,
        queued_for_step_id  text,
        queued_since        timestamptz,
        current_entry_seq   integer,
        state               jsonb NOT NULL
      )`);
    await q.query(`CREATE INDEX tasks_occupying ON tasks (workflow_id, step_id) WHERE admitted`);
    await q.query(`CREATE INDEX tasks_waiting ON tasks (workflow_id, queued_for_step_id, queued_since) WHERE queued_for_step_id IS NOT NULL`);
    // One row per step-entry record. The cascade keeps records from outliving their task; the
    // startup scan still treats a record it cannot resolve as skipped(unresolvable).
    await q.query(`
      CREATE TABLE step_entries (
        task_id          text NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
        workflow_id      text NOT NULL,
        step_id          text NOT NULL,
        entry_seq        integer NOT NULL,
        entry_path       text NOT NULL,
        declaration_digest text NOT NULL,
        opened_by_epoch  uuid NOT NULL,
        opened_at        timestamptz NOT NULL,
        terminal         boolean NOT NULL DEFAULT false,
        termination      text,
        CONSTRAINT step_entries_identity UNIQUE (task_id, workflow_id, step_id, entry_seq)
      )`);
    await q.query(`CREATE INDEX step_entries_open ON step_entries (task_id, workflow_id, step_id, entry_seq) WHERE NOT terminal`);
    // Which seat and entry each run the engine queued is for; written before the enqueue (by key), completed with the job id.
    await q.query(`
      CREATE TABLE queued_runs (
        idempotency_key   text PRIMARY KEY,
        job_id            text UNIQUE,
        task_id           text NOT NULL,
        workflow_id       text NOT NULL,
        step_id           text NOT NULL,
        entry_seq         integer NOT NULL,
        position          integer NOT NULL,
        action_type       text NOT NULL,
        participant_id    text,
        agent_profile_id  text NOT NULL,
        queued_at         timestamptz NOT NULL DEFAULT now()
      )`);
    // The task's jobs, as the job service's events announced them, with the step occupancy each belongs to.
    await q.query(`
      CREATE TABLE task_jobs (
        job_id       text PRIMARY KEY,
        task_id      text NOT NULL,
        kind         text NOT NULL,
        workflow_id  text NOT NULL,
        step_id      text NOT NULL,
        entry_seq    integer NOT NULL
      )`);
    await q.query(processTableDdl('engine_epochs'));
  }

  async down(q: QueryRunner): Promise<void> {
    for (const table of ['engine_epochs', 'task_jobs', 'queued_runs', 'step_entries', 'tasks', 'step_participants', 'agent_profiles', 'workflows']) {
      await q.query(`DROP TABLE IF EXISTS ${table}`);
    }
  }
}

/** The tasks' `state` column, rewritten by every command on their row, compressed with lz4 where the server has it (setColumnCompression). */
export const WorkflowEngineStateCompression1780272000000 = lz4ColumnsMigration('WorkflowEngineStateCompression1780272000000', [['tasks', 'state']]);

/** The tasks' `state` as `json`, written and read whole (jsonTextColumnsMigration; docs/architecture.md, "The log's JSON is text"). */
export const WorkflowEngineStateJsonText1782050000000 = jsonTextColumnsMigration('WorkflowEngineStateJsonText1782050000000', [['tasks', 'state']]);

/**
 * The runs an entry queued, looked up by a resumed on_enter run (`entryRunOf`): one index look-up
 * rather than a scan of every run the engine ever queued.
 */
export class WorkflowEngineQueuedRunsByEntry1783000000000 implements MigrationInterface {
  name = 'WorkflowEngineQueuedRunsByEntry1783000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE INDEX IF NOT EXISTS queued_runs_by_entry ON queued_runs (task_id, workflow_id, step_id, entry_seq, position)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX IF EXISTS queued_runs_by_entry`);
  }
}

/**
 * When the engine learnt that a job ended (its JobFinished, JobCancelled, or a claim end that failed
 * it), on the job's `task_jobs` and `queued_runs` rows: the pruning goes by it (RunRecordsRetention).
 * Rows from before have none and are kept.
 */
export class WorkflowEngineRunRecordsEnded1784000000000 implements MigrationInterface {
  name = 'WorkflowEngineRunRecordsEnded1784000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE task_jobs ADD COLUMN IF NOT EXISTS ended_at timestamptz`);
    await q.query(`ALTER TABLE queued_runs ADD COLUMN IF NOT EXISTS ended_at timestamptz`);
    await q.query(`CREATE INDEX IF NOT EXISTS task_jobs_ended ON task_jobs (ended_at) WHERE ended_at IS NOT NULL`);
    await q.query(`CREATE INDEX IF NOT EXISTS queued_runs_ended ON queued_runs (ended_at) WHERE ended_at IS NOT NULL`);
    await q.query(`CREATE INDEX IF NOT EXISTS queued_runs_never_known ON queued_runs (queued_at) WHERE job_id IS NULL`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX IF EXISTS queued_runs_never_known`);
    await q.query(`DROP INDEX IF EXISTS queued_runs_ended`);
    await q.query(`DROP INDEX IF EXISTS task_jobs_ended`);
    await q.query(`ALTER TABLE queued_runs DROP COLUMN IF EXISTS ended_at`);
    await q.query(`ALTER TABLE task_jobs DROP COLUMN IF EXISTS ended_at`);
  }
}

/**
 * One row per recorded exit of a step occupancy (on_exit after a move): the startup and takeover scans
 * read the unfinished ones in one query. Like step_entries, the rows go with their task.
 */
export class WorkflowEngineStepExits1785000000000 implements MigrationInterface {
  name = 'WorkflowEngineStepExits1785000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE IF NOT EXISTS step_exits (
        task_id          text NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
        workflow_id      text NOT NULL,
        step_id          text NOT NULL,
        entry_seq        integer NOT NULL,
        opened_by_epoch  uuid NOT NULL,
        opened_at        timestamptz NOT NULL,
        finished         boolean NOT NULL DEFAULT false,
        CONSTRAINT step_exits_identity UNIQUE (task_id, workflow_id, step_id, entry_seq)
      )`);
    await q.query(`CREATE INDEX IF NOT EXISTS step_exits_open ON step_exits (task_id, workflow_id, step_id, entry_seq) WHERE NOT finished`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE IF EXISTS step_exits`);
  }
}

export const workflowEngineMigrations = [
  WorkflowEngineViews1765000000000,
  WorkflowEngineStateCompression1780272000000,
  WorkflowEngineStateJsonText1782050000000,
  WorkflowEngineQueuedRunsByEntry1783000000000,
  WorkflowEngineRunRecordsEnded1784000000000,
  WorkflowEngineStepExits1785000000000,
];
