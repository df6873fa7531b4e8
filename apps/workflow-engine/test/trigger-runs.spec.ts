import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { enqueueJob, getTaskSession, updateTask } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { WorkflowWorld } from './harness.js';

/*
 * Runs queued by a trigger other than on_enter (docs/workflow-engine.md, "Triggers other than
 * on_enter"): keyed by the event that fired them, so each firing queues its own run and none is
 * taken for a repeat of on_enter's.
 */
describe('auto_start_agent on a turn trigger', () => {
  const world = new WorkflowWorld('wf_trigger_runs');

  beforeAll(async () => {
    await world.start();
    await world.profile('implementer');
    await world.importYaml('loop', `
name: Agent loop
steps:
  - id: todo
    name: To do
  - id: work
    name: Work
    agent_profile_id: implementer
    prompt: Keep going
    on_enter:
      - type: auto_start_agent
    on_turn_complete:
      - type: auto_start_agent
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);


  it('each completed turn starts the agent again: a new job per turn, none suppressed as on_enter\'s', async () => {
    const { taskId } = await world.task('loop');
    await world.move(taskId, 'work');
    const [first] = await eventually(async () => {
      const jobs = await world.jobs(taskId, 'TASK_IMPLEMENTATION');
      return jobs.length === 1 ? jobs : null;
    }, { what: 'the entry\'s auto-started job' });

    await world.skippedTurn(first!.jobId);
    const afterFirstTurn = await eventually(async () => {
      const jobs = await world.jobs(taskId, 'TASK_IMPLEMENTATION');
      return jobs.length === 2 ? jobs : null;
    }, { what: 'a second job after the first turn', timeoutMs: 15_000 });

    const second = afterFirstTurn.find((j) => j.jobId !== first!.jobId)!;
    await world.skippedTurn(second.jobId);
    await eventually(async () => ((await world.jobs(taskId, 'TASK_IMPLEMENTATION')).length === 3 ? true : null), { what: 'a third job after the second turn', timeoutMs: 15_000 });
  });
});

describe('a turn whose task moved on while its trigger ran', () => {
  const taskId = `T-stale-${randomUUID().slice(0, 8)}`;
  // The turn's fan-out holds after its first run: the trigger is under way, its transition not reached.
  const hold = `${taskId}@work#1/run:0:1`;
  const world = new WorkflowWorld('wf_stale_turn');

  beforeAll(async () => {
    await world.start({ engineEnv: { GANTRY_TEST_WORKFLOW_HOLD_AT: hold } });
    await world.profile('rev-a');
    await world.importYaml('flow', `
name: Flow
steps:
  - id: todo
    name: To do
  - id: work
    name: Work
    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: false }
    on_turn_complete:
      - type: queue_run_for_each_participant
        config: { role: reviewer }
      - type: move_to_next
  - id: review
    name: Review
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('its transition does not pull the task back from where it was moved meanwhile', async () => {
    await world.task('flow', { taskId });
    await world.move(taskId, 'work');
    const jobId = await world.agentTurn(taskId);
    await world.reachedHold(hold.replace(/\//g, '__'));
    await world.move(taskId, 'done');
    await world.releaseHold(hold.replace(/\//g, '__'));

    const { rows } = await world.jobsDb.query(`SELECT event_id FROM events WHERE type = 'JobFinished' AND data->>'jobId' = $1`, [jobId]);
    await eventually(async () => (await world.db.query(`SELECT 1 FROM inbox WHERE event_id = $1`, [rows[0].event_id])).rowCount === 1, { what: 'the turn handled' });
    const admissions = (await world.effects(taskId)).filter((e) => e.type === 'TaskAdmittedToStep').map((e) => e.data.stepId);
    expect(admissions).toEqual(['work', 'done']);
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'done', admitted: true });
  });
});

describe('a turn trigger handled again after a crash', () => {
  const taskId = `T-again-${randomUUID().slice(0, 8)}`;
  // killed once the turn's code review is queued and its fan-out has queued its run
  const world = killedMidTurnTrigger('wf_turn_again', 'review-turn', taskId, { firstAction: 'run_code_review', stepAgentProfile: 'code-reviewer' });

  it('the job\'s finish delivered again re-runs the trigger under the same keys: one code review, one run per participant, one move', async () => {
    await turnKilledMidTriggerThenRedelivered(world, 'review-turn', taskId);
    const reviews = await world.jobs(taskId, 'REVIEW');
    expect(reviews.filter((j) => j.reason === 'code_review').map((j) => j.agentProfileId)).toEqual(['code-reviewer']);
    expect(reviews.filter((j) => j.reason !== 'code_review').map((j) => j.agentProfileId)).toEqual(['rev-a']);
  }, 300_000);
});

describe('job events whose writes meet the task stream kept busy past their patience', () => {
  const taskId = `T-busy-${randomUUID().slice(0, 8)}`;
  const starting = `T-busy-${randomUUID().slice(0, 8)}`;
  // An update of the task (its title, and the step it is at) held with its transaction open once its title is appended.
  const hold = `${taskId}@work#1/placing:work`;
  const holdStarting = `${starting}@work#1/placing:work`;
  const world = new WorkflowWorld('wf_busy_turn');

  beforeAll(async () => {
    // The turn's move waits on that open append for longer than its conflict patience, within one query's bound.
    await world.start({ engineEnv: { GANTRY_TEST_WORKFLOW_HOLD_AT: `${hold},${holdStarting}`, GANTRY_DB_QUERY_TIMEOUT_MS: '60000' } });
    await world.importYaml('busy', `
name: Busy
steps:
  - id: todo
    name: To do
  - id: work
    name: Work
    on_turn_complete:
      - type: move_to_step
        config: { step_id: done }
  - id: review
    name: Review
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('a move answered VERSION_CONFLICT is not taken for a refusal: the job\'s finish is handled again and the task moves', async () => {
    await world.task('busy', { taskId });
    await world.move(taskId, 'work');
    const updating = world.client.request(updateTask, { taskId, title: 'Renamed', workflowStepId: 'work', idempotencyKey: world.key('update') }).catch(() => undefined);
    await world.reachedHold(hold.replace(/\//g, '__'));
    await world.agentTurn(taskId, 'REVIEW');
    // the turn's move is under way, waiting on the update's append; it has waited past its 5 s patience when the update goes on
    await sleep(8_000);
    await world.releaseHold(hold.replace(/\//g, '__'));
    await updating;
    await world.atStep(taskId, 'done');
    expect((await world.getTask(taskId)).title).toBe('Renamed');
  }, 180_000);

  it('a job\'s start whose record meets the task stream kept busy past its patience is handed back, not dropped: the session is recorded as started', async () => {
    await world.task('busy', { taskId: starting });
    await world.move(starting, 'work');
    const updating = world.client.request(updateTask, { taskId: starting, title: 'Renamed', workflowStepId: 'work', idempotencyKey: world.key('update') }).catch(() => undefined);
    await world.reachedHold(holdStarting.replace(/\//g, '__'));
    // a job of the task starts (not a REVIEW job: it starts the task's agent session)
    const { jobId } = await world.client.request(enqueueJob, { kind: 'PLAN_CHAT', productId: 'product-t', taskId: starting, prompt: 'plan', idempotencyKey: world.key('job'), excludeFromCoalescing: true });
    await world.claimAsRunner(jobId, 'PLAN_CHAT');
    await sleep(8_000);
    await world.releaseHold(holdStarting.replace(/\//g, '__'));
    await updating;
    const session = await eventually(async () => {
      const s = await world.client.request(getTaskSession, { taskId: starting });
      return s.started ? s : null;
    }, { what: 'the session recorded as started' });
    expect(session.sessionId).toBe((await world.getTask(starting)).session.sessionId);
  }, 180_000);
});

describe('a turn trigger\'s reset_agent_context handled again after a crash', () => {
  const taskId = `T-reset-${randomUUID().slice(0, 8)}`;
  // killed once the turn's reset is recorded and its fan-out has queued its run
  const world = killedMidTurnTrigger('wf_turn_reset', 'reset-turn', taskId, { firstAction: 'reset_agent_context', stepAgentProfile: null });

  it('the job\'s finish delivered again draws no second session id: one reset, the task\'s session the one it drew', async () => {
    await turnKilledMidTriggerThenRedelivered(world, 'reset-turn', taskId);
    const resets = (await world.effects(taskId)).filter((e) => e.type === 'AgentContextReset');
    expect(resets).toHaveLength(1);
    expect((await world.getTask(taskId)).session).toMatchObject({ sessionId: resets[0]!.data.sessionId, started: false });
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a']);
  }, 300_000);
});

describe('a turn trigger\'s session action that met the task\'s stream kept busy', () => {
  const taskId = `T-busy-${randomUUID().slice(0, 8)}`;
  const rerun = `T-rerun-${randomUUID().slice(0, 8)}`;
  const world = new WorkflowWorld('wf_turn_busy');

  beforeAll(async () => {
    // the first append of each session action of the task is answered VERSION_CONFLICT (nothing written)
    await world.start({ engineEnv: { GANTRY_TEST_WORKFLOW_FAIL: `session-conflict:${taskId},session-conflict:${rerun}` } });
    await world.importYaml('busy-turn', `
name: Busy turns
steps:
  - id: todo
    name: To do
  - id: work
    name: Work
    on_turn_complete:
      - type: reset_agent_context
      - type: move_to_next
  - id: done
    name: Done
`);
    await world.importYaml('rerun-turn', `
name: Turns run again
steps:
  - id: todo
    name: To do
  - id: work
    name: Work
    on_turn_complete:
      - type: enable_plan_mode
      - type: set_session_mode
        config: { mode: acceptEdits }
      - type: configure_session
        config: { model: claude-sonnet-4-6 }
      - type: move_to_next
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('hands the job\'s finish back: delivered again, the reset is recorded once and the turn\'s move is made', async () => {
    await turnToDone(world, 'busy-turn', taskId);
    const resets = (await world.effects(taskId)).filter((e) => e.type === 'AgentContextReset');
    expect(resets).toHaveLength(1);
    expect((await world.getTask(taskId)).session).toMatchObject({ sessionId: resets[0]!.data.sessionId });
  }, 180_000);

  it('run again from its first action at each session action handed back, records each session action once: a later run does not record again what an earlier one did', async () => {
    await turnToDone(world, 'rerun-turn', rerun);
    const types = (await world.effects(rerun)).map((e) => e.type);
    expect(types.filter((t) => t === 'PlanModeChanged')).toHaveLength(1);
    expect(types.filter((t) => t === 'SessionModeSet')).toHaveLength(1);
    expect(types.filter((t) => t === 'SessionConfigured')).toHaveLength(1);
    expect(await world.client.request(getTaskSession, { taskId: rerun })).toMatchObject({ planMode: true, mode: 'acceptEdits', settings: { model: 'claude-sonnet-4-6' } });
  }, 180_000);
});

/** A task of `workflow` moved into `work` completes a turn, and its trigger takes it on to `done`. */
async function turnToDone(world: WorkflowWorld, workflow: string, taskId: string): Promise<void> {
  await world.task(workflow, { taskId });
  await world.move(taskId, 'work');
  await world.agentTurn(taskId);
  await world.atStep(taskId, 'done', 60_000);
}

/**
 * A task of `workflow` moved into `work` completes a turn; the engine, started with a kill point in the
 * turn's trigger, dies there (SIGKILL) before the job's finish is acknowledged; a new engine starts and
 * the finish, delivered again once its acknowledgement is overdue, runs the trigger again to `done`.
 */
async function turnKilledMidTriggerThenRedelivered(world: WorkflowWorld, workflow: string, taskId: string): Promise<void> {
  await world.task(workflow, { taskId });
  await world.move(taskId, 'work');
  const doomed = world.engine;
  await world.agentTurn(taskId);
  await eventually(() => doomed.process.signalCode === 'SIGKILL', { what: 'the engine killed mid-trigger', timeoutMs: 120_000 });
  await world.startEngine();
  await world.atStep(taskId, 'done', 120_000);
}

/**
 * A world whose engine is killed (SIGKILL) in the turn trigger of `taskId`'s first turn in `work`, once
 * its first action is done and its fan-out has queued its run — the job's finish not yet handled. Its
 * workflow `workflow`: `work`'s on_turn_complete is `firstAction`, a fan-out to one reviewer, a move to
 * `done`. Call at the top of a describe block; the set-up and tear-down are that block's.
 */
function killedMidTurnTrigger(label: string, workflow: string, taskId: string, turn: { firstAction: string; stepAgentProfile: string | null }): WorkflowWorld {
  const world = new WorkflowWorld(label);
  beforeAll(async () => {
    await world.start({ withEngine: false });
    await world.startEngine({ GANTRY_TEST_WORKFLOW_KILL_AT: `${taskId}@work#1/run:1:1` });
    for (const p of ['rev-a', ...(turn.stepAgentProfile ? [turn.stepAgentProfile] : [])]) await world.profile(p);
    await world.importYaml(workflow, `
name: Turns of ${workflow}
steps:
  - id: todo
    name: To do
  - id: work
    name: Work${turn.stepAgentProfile ? `\n    agent_profile_id: ${turn.stepAgentProfile}` : ''}
    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: false }
    on_turn_complete:
      - type: ${turn.firstAction}
      - type: queue_run_for_each_participant
        config: { role: reviewer }
      - type: move_to_next
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);
  return world;
}
