import { deleteTask, ErrorCode, returnTasksToTodo, startTask, switchWorkflow, updateTask } from '@gantry/contracts';
import { EventStore, rebuildProjections } from '@gantry/eventstore';
import { eventually } from '@gantry/testing';
import { ruleRecords } from './expectations.js';
import { declarationDigest } from '../src/domain/index.js';
import { workflowEngineProjections } from '../src/infrastructure/persistence/projections.js';
import { WorkflowWorld } from './harness.js';

/*
 * Every path that admits a task to a step records the step entry in the same append as the
 * admission; nothing else does (docs/workflow-engine.md, "Entry paths", "Step entries"): V05, V19,
 * V31, V36.
 */
describe('step entries on every entry path', () => {
  const world = new WorkflowWorld('wf_paths');

  /** The admission and the record of one entry, and the transactions that wrote them. */
  async function allocation(taskId: string, workflowId: string, stepId: string, entrySeq: number) {
    const { rows } = await world.db.query(
      `SELECT type, data, tx_id::text AS tx FROM events
        WHERE ((stream_id = $1 AND type = 'TaskAdmittedToStep') OR (stream_id = $2 AND type = 'StepEntryOpened'))
          AND data->>'stepId' = $3 AND (data->>'entrySeq')::int = $4`,
      [`task-${taskId}`, world.pairStream(taskId, workflowId, stepId), stepId, entrySeq],
    );
    const admission = rows.find((r) => r.type === 'TaskAdmittedToStep');
    const record = rows.find((r) => r.type === 'StepEntryOpened');
    const { rows: entryRows } = await world.db.query(`SELECT * FROM step_entries WHERE task_id = $1 AND workflow_id = $2 AND step_id = $3 AND entry_seq = $4`, [taskId, workflowId, stepId, entrySeq]);
    return { admission, record, row: entryRows[0] };
  }

  async function expectRecorded(taskId: string, workflowId: string, stepId: string, entrySeq: number, entryPath: string) {
    const { admission, record, row } = await allocation(taskId, workflowId, stepId, entrySeq);
    expect({ entryPath: admission?.data.entryPath, recorded: admission?.data.stepEntryRecorded }).toEqual({ entryPath, recorded: true });
    expect(record).toBeDefined();
    // the same append: one PostgreSQL transaction wrote both
    expect(record.tx).toBe(admission.tx);
    expect(record.data.declarationDigest).toBe(admission.data.declarationDigest);
    expect(row).toMatchObject({ entry_path: entryPath, terminal: expect.any(Boolean) });
    return { admission, record };
  }

  async function recordsOf(taskId: string): Promise<number> {
    const { rows } = await world.db.query(`SELECT count(*)::int AS n FROM events WHERE stream_id LIKE $1 AND type = 'StepEntryOpened'`, [`taskstep-${taskId}~%`]);
    return rows[0].n;
  }

  beforeAll(async () => {
    await world.start();
    await world.profile('rev-a');
    await world.importYaml('paths', `
name: Paths
start_step: review
steps:
  - id: work
    name: Work
    on_turn_complete: [{ type: move_to_next }]
  - id: review
    name: Review
    participants: [{ id: judge, role: reviewer, agent_profile_id: rev-a, decision_required: true }]
    on_enter:
      - type: clear_decisions
    on_turn_complete:
      - { type: move_to_next, guard: { wait_for_quorum: all_approve } }
  - id: approval
    name: Approval
    on_enter:
      - type: clear_decisions
  - id: done
    name: Done
`);
    await world.importYaml('away', 'name: Away\nsteps:\n  - { id: intake, name: Intake }\n');
    await world.importYaml('wip', `
name: WIP
steps:
  - id: work
    name: Work
    wip_limit: 1
    on_enter:
      - type: queue_run
        config: { target: 'agent_profile_id:rev-a', reason: work_entry }
  - id: review
    name: Review
    wip_limit: 1
    on_enter:
      - type: clear_decisions
  - id: done
    name: Done
`);
    await world.importYaml('inplace', `
name: In place
steps:
  - id: triage
    name: Triage
    wip_limit: 1
    on_enter:
      - type: clear_decisions
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('V36 AC-B7: a record is allocated with the admission on turn complete, a decision\'s transition, a manual move, switch_workflow, the generic update, task start and the return to the start step', async () => {
    const turn = (await world.task('paths', { stepId: 'work' })).taskId;
    await world.agentTurn(turn);
    await world.atStep(turn, 'review');
    await expectRecorded(turn, 'paths', 'review', 1, 'turn_complete');

    const decided = (await world.task('paths', { stepId: 'review' })).taskId;
    const { moved } = await world.decide(decided, 'review', 'judge', 'approve');
    expect(moved!.entry).toMatchObject({ stepId: 'approval', entrySeq: 1, entryPath: 'turn_complete' });
    const { admission } = await expectRecorded(decided, 'paths', 'approval', 1, 'turn_complete');
    const { rows: decision } = await world.db.query(`SELECT tx_id::text AS tx FROM events WHERE stream_id = $1 AND type = 'DecisionRecorded'`, [world.pairStream(decided, 'paths', 'review')]);
    expect(decision[0].tx).toBe(admission.tx);

    const moved2 = (await world.task('paths', { stepId: 'work' })).taskId;
    await world.move(moved2, 'review');
    await expectRecorded(moved2, 'paths', 'review', 1, 'manual_move');

    const switched = (await world.task('away')).taskId;
    await world.client.request(switchWorkflow, { taskId: switched, toWorkflowId: 'paths', toStepId: 'approval', idempotencyKey: world.key('switch') });
    await expectRecorded(switched, 'paths', 'approval', 1, 'switch_workflow');

    const updated = (await world.task('paths', { stepId: 'work' })).taskId;
    await world.client.request(updateTask, { taskId: updated, workflowStepId: 'approval', title: 'renamed', idempotencyKey: world.key('update') });
    await expectRecorded(updated, 'paths', 'approval', 1, 'task_update');
    expect((await world.getTask(updated)).title).toBe('renamed');

    const started = (await world.task('paths', { stepId: 'work' })).taskId;
    await world.client.request(startTask, { taskId: started, idempotencyKey: world.key('start') });
    await expectRecorded(started, 'paths', 'review', 1, 'task_start');

    const returned = (await world.task('paths', { stepId: 'done' })).taskId;
    await world.client.request(returnTasksToTodo, { taskIds: [returned], idempotencyKey: world.key('return') });
    await expectRecorded(returned, 'paths', 'review', 1, 'return_to_todo');
  });

  it('V36: no record where nothing is entered — creation, asking for the current step (move, update, task start at the start step)', async () => {
    const { taskId } = await world.task('paths', { stepId: 'review' });
    expect(await recordsOf(taskId)).toBe(0);
    const same = await world.move(taskId, 'review');
    expect(same.entry).toBeNull();
    expect((await world.client.request(updateTask, { taskId, workflowStepId: 'review', idempotencyKey: world.key('update') })).entry).toBeNull();
    expect((await world.client.request(startTask, { taskId, idempotencyKey: world.key('start') })).entry).toBeNull();
    expect(await recordsOf(taskId)).toBe(0);
    expect((await world.effects(taskId)).filter((e) => e.type === 'TaskAdmittedToStep')).toEqual([]);
  });

  it('V36 / V05: WIP promotions — from where the task was held, and into a full target\'s feeder (the record and its digest are the feeder\'s, not the requested step\'s)', async () => {
    const inReview = (await world.task('wip', { stepId: 'review' })).taskId;
    const inWork = (await world.task('wip', { stepId: 'work' })).taskId;
    // review is full: a task created into it is parked there, occupying nothing, recording nothing
    const parked = (await world.task('wip', { stepId: 'review' })).taskId;
    expect((await world.getTask(parked)).placement).toMatchObject({ stepId: 'review', admitted: false, queuedForStepId: 'review' });
    expect(await recordsOf(parked)).toBe(0);
    // work's seat comes free: the parked task lands in work, review's feeder, still waiting for review
    await world.move(inWork, 'done');
    const landed = await world.atStep(parked, 'work');
    expect(landed.placement.queuedForStepId).toBe('review');
    const { admission, record } = await expectRecorded(parked, 'wip', 'work', 1, 'wip_promotion');
    expect(admission.data.requestedStepId).toBe('review');
    const { rows } = await world.db.query(`SELECT definition FROM workflows WHERE workflow_id = 'wip'`);
    const work = rows[0].definition.steps[0];
    expect(record.data.declarationDigest).toBe(declarationDigest(work.onEnter));
    expect(record.data.declarationDigest).not.toBe(declarationDigest(rows[0].definition.steps[1].onEnter));
    await eventually(async () => (await world.jobs(parked, 'REVIEW')).length === 1, { what: 'work\'s on_enter ran for the feeder entry' });
    // review's seat comes free: the task held in work moves on
    await world.move(inReview, 'done');
    await world.atStep(parked, 'review');
    await expectRecorded(parked, 'wip', 'review', 1, 'wip_promotion');
  });

  it('V36: a queued placement records nothing; the promotion that admits the task in place (no step change) does', async () => {
    const occupant = (await world.task('inplace')).taskId;
    const waiting = (await world.task('inplace')).taskId;
    expect((await world.getTask(waiting)).placement).toMatchObject({ stepId: 'triage', admitted: false });
    expect(await recordsOf(waiting)).toBe(0);
    await world.move(occupant, 'done');
    const admitted = await world.atStep(waiting, 'triage');
    expect(admitted.currentEntry).toMatchObject({ entrySeq: 1, entryPath: 'wip_promotion_in_place' });
    const { admission } = await expectRecorded(waiting, 'inplace', 'triage', 1, 'wip_promotion_in_place');
    expect(admission.data.from).toEqual({ workflowId: 'inplace', stepId: 'triage', admitted: false });
  });

  it('V05: a step declaring only session actions allocates no record on any path', async () => {
    await world.importYaml('session', `
name: Session only
start_step: s
steps:
  - id: w
    name: W
    on_turn_complete: [{ type: move_to_next }]
  - id: s
    name: S
    wip_limit: 1
    on_enter: [{ type: reset_agent_context }, { type: enable_plan_mode }]
  - id: d
    name: D
`);
    const turn = (await world.task('session', { stepId: 'w' })).taskId;
    await world.agentTurn(turn);
    await world.atStep(turn, 's');
    await world.move(turn, 'd');
    const moved = (await world.task('session', { stepId: 'w' })).taskId;
    expect((await world.move(moved, 's')).entry).toMatchObject({ stepEntryRecorded: false });
    const parked = (await world.task('session', { stepId: 's' })).taskId; // full: parked
    await world.move(moved, 'd');
    await world.atStep(parked, 's');
    await world.move(parked, 'd');
    const switched = (await world.task('away')).taskId;
    expect((await world.client.request(switchWorkflow, { taskId: switched, toWorkflowId: 'session', idempotencyKey: world.key('switch') })).entry).toMatchObject({ stepId: 's', stepEntryRecorded: false });
    await world.move(switched, 'd');
    const updated = (await world.task('session', { stepId: 'w' })).taskId;
    expect((await world.client.request(updateTask, { taskId: updated, workflowStepId: 's', idempotencyKey: world.key('update') })).entry).toMatchObject({ stepEntryRecorded: false });
    await world.move(updated, 'd');
    const started = (await world.task('session', { stepId: 'w' })).taskId;
    expect((await world.client.request(startTask, { taskId: started, idempotencyKey: world.key('start') })).entry).toMatchObject({ stepEntryRecorded: false });
    for (const taskId of [turn, moved, parked, switched, updated, started]) {
      expect({ taskId, records: await recordsOf(taskId) }).toEqual({ taskId, records: 0 });
      // the session action of each entry took effect (the dispatch runs after the command's reply)
      await eventually(async () => (await world.effects(taskId)).filter((e) => e.type === 'AgentContextReset').length === 1, { what: `the reset of ${taskId}` });
    }
  });

  it('V31 AC-B7: two admissions racing for one task and step — one is allocated, the other finds the task there; the identity is unique', async () => {
    const { taskId } = await world.task('paths', { stepId: 'work' });
    const replies = await Promise.all(Array.from({ length: 8 }, () => world.move(taskId, 'review')));
    expect(replies.filter((r) => r.entry !== null).map((r) => r.entry!.entrySeq)).toEqual([1]);
    const admissions = (await world.effects(taskId)).filter((e) => e.type === 'TaskAdmittedToStep' || e.type === 'StepEntryOpened');
    expect(admissions.map((e) => [e.type, e.data.entrySeq])).toEqual([['TaskAdmittedToStep', 1], ['StepEntryOpened', 1]]);
    const row = (await world.db.query(`SELECT * FROM step_entries WHERE task_id = $1`, [taskId])).rows[0];
    await expect(
      world.db.query(`INSERT INTO step_entries (task_id, workflow_id, step_id, entry_seq, entry_path, declaration_digest, opened_by_epoch, opened_at) VALUES ($1, $2, $3, $4, $5, $6, $7, now())`, [
        taskId, row.workflow_id, row.step_id, row.entry_seq, row.entry_path, row.declaration_digest, row.opened_by_epoch,
      ]),
    ).rejects.toMatchObject({ code: '23505', constraint: 'step_entries_identity' });
  });

  it('V31 AC-B7: when the record cannot be written the move fails as a unit — the task stays, nothing runs — and an error names the task and the step', async () => {
    await world.stopEngine(world.engine, 'SIGTERM');
    const failing = await world.startEngine({ GANTRY_TEST_WORKFLOW_FAIL: 'allocation:review' });
    const { taskId } = await world.task('paths', { stepId: 'work' });
    await expect(world.move(taskId, 'review')).rejects.toMatchObject({ code: ErrorCode.INTERNAL });
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'work', admitted: true });
    expect((await world.effects(taskId)).map((e) => e.type)).toEqual(['TaskCreated']);
    const [error] = ruleRecords(world.records(failing), 'AC-B7', taskId);
    expect(error).toMatchObject({ level: 'error', taskId, stepId: 'review' });
    await world.stopEngine(failing, 'SIGTERM');
    await world.startEngine();
    // the same move goes through once the record can be written
    expect((await world.move(taskId, 'review')).entry).toMatchObject({ stepId: 'review', entrySeq: 1 });
  });

  it('V19: deleting a task with a non-terminal step-entry record removes the record; the next scan never sees it', async () => {
    const { taskId } = await world.task('paths', { stepId: 'work' });
    await world.stopEngine(world.engine, 'SIGTERM');
    const holding = await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/claimed:0` });
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#1__claimed:0`);
    expect((await world.db.query(`SELECT terminal FROM step_entries WHERE task_id = $1`, [taskId])).rows).toEqual([{ terminal: false }]);
    await world.client.request(deleteTask, { taskId, idempotencyKey: world.key('delete') });
    expect((await world.db.query(`SELECT 1 FROM step_entries WHERE task_id = $1`, [taskId])).rows).toEqual([]);
    await world.stopEngine(holding, 'SIGKILL');
    const pairEvents = (await world.events(world.pairStream(taskId, 'paths', 'review'))).length;
    const next = await world.startEngine();
    const scan = await eventually(() => world.records(next).find((r) => r.message === 'recovery scan finished' && r.reason === 'startup'), { what: 'the startup scan' });
    expect(scan.records).toBe(0);
    expect(world.records(next).filter((r) => r.taskId === taskId)).toEqual([]);
    expect((await world.events(world.pairStream(taskId, 'paths', 'review'))).length).toBe(pairEvents);
  });

  it("the engine's views equal a rebuild from its log, the deleted task and its step entry included", async () => {
    // Stopped, so that the log does not move between the two looks.
    for (const engine of [...world.engines]) if (engine.process.exitCode === null && engine.process.signalCode === null) await world.stopEngine(engine, 'SIGTERM');
    const keys: Record<string, string> = {
      workflows: 'workflow_id',
      agent_profiles: 'agent_profile_id',
      step_participants: 'seat_key',
      tasks: 'task_id',
      step_entries: 'task_id, workflow_id, step_id, entry_seq',
    };
    const views = async () => Object.fromEntries(await Promise.all(Object.entries(keys).map(async ([table, key]) => [table, (await world.db.query(`SELECT * FROM ${table} ORDER BY ${key}`)).rows])));
    const live = await views();
    expect(live['tasks']!.length).toBeGreaterThan(0);
    expect(live['step_entries']!.length).toBeGreaterThan(0);
    expect((await world.db.query(`SELECT 1 FROM events WHERE type = 'TaskDeleted'`)).rows).not.toHaveLength(0);
    await rebuildProjections(new EventStore({ pool: world.db, schema: world.engineSchema }), workflowEngineProjections);
    expect(await views()).toEqual(live);
  });
});
