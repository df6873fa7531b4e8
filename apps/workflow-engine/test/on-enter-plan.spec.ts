import { returnTasksToTodo, startTask, switchWorkflow, updateTask } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { expectDiscreteFields } from './expectations.js';
import { WorkflowWorld } from './harness.js';

/*
 * Who executes each on_enter action, in which order, on each entry path (docs/workflow-engine.md,
 * "The on_enter plan"): V02, V03, V04, V07, V08, V11, V28, V38. Effects are compared by the order
 * the log committed them (the task's session events and the (task, step) markers).
 */
const SESSION_EFFECT: Record<string, string> = {
  AgentContextReset: 'reset_agent_context',
  SessionConfigured: 'configure_session',
  SessionModeSet: 'set_session_mode',
  AgentAutoStarted: 'auto_start_agent',
};

describe('the on_enter plan on every entry path', () => {
  const world = new WorkflowWorld('wf_plan');

  /** What took effect for the task at a step, in commit order: session actions and finished marked positions. */
  async function taken(taskId: string, stepId: string, entrySeq?: number): Promise<string[]> {
    return (await world.effects(taskId)).flatMap((e) => {
      const d = e.data as { stepId?: string; entrySeq?: number; kind?: string; enabled?: boolean; cause?: { stepId: string; entrySeq: number } };
      if (SESSION_EFFECT[e.type]) return d.cause!.stepId === stepId && (entrySeq === undefined || d.cause!.entrySeq === entrySeq) ? [SESSION_EFFECT[e.type]!] : [];
      if (e.type === 'PlanModeChanged') return d.cause!.stepId === stepId && (entrySeq === undefined || d.cause!.entrySeq === entrySeq) ? [d.enabled ? 'enable_plan_mode' : 'disable_plan_mode'] : [];
      if ((e.type === 'DecisionsCleared' || e.type === 'OnEnterActionFinished') && d.stepId === stepId && (entrySeq === undefined || d.entrySeq === entrySeq)) return [d.kind!];
      return [];
    });
  }

  async function settled(taskId: string, stepId: string, entrySeq: number): Promise<void> {
    await world.terminalEntry(taskId, stepId, entrySeq);
    // the last session action (auto_start_agent) is recorded after the markers
    await eventually(async () => (await taken(taskId, stepId, entrySeq)).includes('auto_start_agent'), { what: 'auto_start_agent recorded' });
  }

  const full = `      - type: reset_agent_context
      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer }
      - type: set_session_mode
        config: { mode: plan }
      - type: auto_start_agent
        config: { prompt: Start reviewing }
      - type: configure_session
        config: { model: claude-opus-4-7 }`;

  beforeAll(async () => {
    await world.start();
    await world.profile('rev-a');
    await world.importYaml('cov', `
name: Coverage
start_step: review
steps:
  - id: work
    name: Work
    on_turn_complete: [{ type: move_to_next }]
  - id: review
    name: Review
    wip_limit: 1
    participants: [{ id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: true }]
    on_enter:
${full}
  - id: done
    name: Done
`);
    await world.importYaml('elsewhere', `
name: Elsewhere
steps:
  - id: intake
    name: Intake
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  const everyEffectOnce = ['reset_agent_context', 'clear_decisions', 'queue_run_for_each_participant', 'set_session_mode', 'auto_start_agent', 'configure_session'];

  async function expectCoverage(taskId: string, entrySeq: number, path: string): Promise<void> {
    await settled(taskId, 'review', entrySeq);
    const effects = await taken(taskId, 'review', entrySeq);
    // The same set on every path (order is not compared here, AC-A2(ii)); configure_session is the named exemption on switch_workflow.
    const expected = path === 'switch_workflow' ? everyEffectOnce.filter((e) => e !== 'configure_session') : everyEffectOnce;
    expect({ path, effects: [...effects].sort() }).toEqual({ path, effects: [...expected].sort() });
    expect((await world.entries(taskId, 'review')).find((e) => e.entrySeq === entrySeq)!.entryPath).toBe(path);
  }

  async function leaveReview(taskId: string): Promise<void> {
    await world.move(taskId, 'done');
  }

  it('V02 AC-A2: the same actions take effect once on every entry path — turn complete, manual move, both WIP promotions, workflow switch, generic update, task start, the sprint run\'s return', async () => {
    // turn complete
    const turn = (await world.task('cov', { stepId: 'work' })).taskId;
    await world.agentTurn(turn);
    await expectCoverage(turn, 1, 'turn_complete');
    // a promotion of a task held at work: review is full (the turn's task occupies it)
    const held = (await world.task('cov', { stepId: 'work' })).taskId;
    await world.agentTurn(held);
    await eventually(async () => (await world.getTask(held)).placement.queuedForStepId === 'review', { what: 'held for review' });
    await leaveReview(turn);
    await expectCoverage(held, 1, 'wip_promotion');
    // admission in place: a task created into the full review is parked there
    const parked = (await world.task('cov', { stepId: 'review' })).taskId;
    expect((await world.getTask(parked)).placement).toMatchObject({ stepId: 'review', admitted: false, queuedForStepId: 'review' });
    await leaveReview(held);
    await expectCoverage(parked, 1, 'wip_promotion_in_place');
    await leaveReview(parked);
    // manual move
    const moved = (await world.task('cov', { stepId: 'work' })).taskId;
    await world.move(moved, 'review');
    await expectCoverage(moved, 1, 'manual_move');
    await leaveReview(moved);
    // workflow switch
    const switched = (await world.task('elsewhere')).taskId;
    await world.client.request(switchWorkflow, { taskId: switched, toWorkflowId: 'cov', toStepId: 'review', idempotencyKey: world.key('switch') });
    await expectCoverage(switched, 1, 'switch_workflow');
    await leaveReview(switched);
    // the generic update
    const updated = (await world.task('cov', { stepId: 'work' })).taskId;
    await world.client.request(updateTask, { taskId: updated, workflowStepId: 'review', idempotencyKey: world.key('update') });
    await expectCoverage(updated, 1, 'task_update');
    await leaveReview(updated);
    // task start (to the start step)
    const started = (await world.task('cov', { stepId: 'work' })).taskId;
    await world.client.request(startTask, { taskId: started, idempotencyKey: world.key('start') });
    await expectCoverage(started, 1, 'task_start');
    await leaveReview(started);
    // the sprint run's return to the start step
    const returned = (await world.task('cov', { stepId: 'done' })).taskId;
    const reply = await world.client.request(returnTasksToTodo, { taskIds: [returned, 'T-not-ours'], idempotencyKey: world.key('return') });
    expect(reply.unknownTaskIds).toEqual(['T-not-ours']);
    await expectCoverage(returned, 1, 'return_to_todo');
    await leaveReview(returned);
  });

  it('V03 AC-A9: [auto_start_agent, clear_decisions, reset_agent_context] entered on turn complete → reset first, agent last; entered by switch_workflow → in declared order', async () => {
    await world.importYaml('fixed', `
name: Fixed positions
steps:
  - id: work
    name: Work
    on_turn_complete: [{ type: move_to_next }]
  - id: review
    name: Review
    on_enter:
      - type: auto_start_agent
      - type: clear_decisions
      - type: reset_agent_context
`);
    const e1 = (await world.task('fixed')).taskId;
    await world.agentTurn(e1);
    await settled(e1, 'review', 1);
    expect(await taken(e1, 'review', 1)).toEqual(['reset_agent_context', 'clear_decisions', 'auto_start_agent']);
    const e4 = (await world.task('elsewhere')).taskId;
    await world.client.request(switchWorkflow, { taskId: e4, toWorkflowId: 'fixed', toStepId: 'review', idempotencyKey: world.key('switch') });
    await settled(e4, 'review', 1);
    await eventually(async () => (await taken(e4, 'review', 1)).length === 3, { what: 'three effects' });
    expect(await taken(e4, 'review', 1)).toEqual(['auto_start_agent', 'clear_decisions', 'reset_agent_context']);
  });

  it('V04 AC-A2(ii) / AC-A13: one declared list through turn complete and switch_workflow — the same coverage, explicitly different orders', async () => {
    const viaTurn = (await world.task('fixed')).taskId;
    await world.agentTurn(viaTurn);
    await settled(viaTurn, 'review', 1);
    const viaSwitch = (await world.task('elsewhere')).taskId;
    await world.client.request(switchWorkflow, { taskId: viaSwitch, toWorkflowId: 'fixed', toStepId: 'review', idempotencyKey: world.key('switch') });
    await settled(viaSwitch, 'review', 1);
    await eventually(async () => (await taken(viaSwitch, 'review', 1)).length === 3, { what: 'three effects' });
    const a = await taken(viaTurn, 'review', 1);
    const b = await taken(viaSwitch, 'review', 1);
    expect([...a].sort()).toEqual([...b].sort());
    expect(a).not.toEqual(b);
  });

  it('V07 AC-A11: reset, plan mode, session mode and auto-start beside an engine action each take effect exactly once (counted, not inferred from the end state)', async () => {
    await world.importYaml('once', `
name: Once
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    on_enter:
      - type: reset_agent_context
      - type: enable_plan_mode
      - type: set_session_mode
        config: { mode: acceptEdits }
      - type: clear_decisions
      - type: auto_start_agent
`);
    const { taskId } = await world.task('once');
    await world.move(taskId, 'review');
    await settled(taskId, 'review', 1);
    const counts: Record<string, number> = {};
    for (const e of await world.effects(taskId)) counts[e.type] = (counts[e.type] ?? 0) + 1;
    expect(counts).toMatchObject({ AgentContextReset: 1, PlanModeChanged: 1, SessionModeSet: 1, AgentAutoStarted: 1, DecisionsCleared: 1 });
    expect(await world.jobs(taskId, 'TASK_IMPLEMENTATION')).toHaveLength(1);
    expect((await world.getTask(taskId)).session).toMatchObject({ planMode: true, mode: 'acceptEdits', permissionMode: 'plan', started: false });
  });

  it('V08 AC-A6: configure_session warns on switch_workflow (naming the path) and nowhere else; reset_agent_context never warns', async () => {
    const records = world.records().filter((r) => r.rule === 'AC-A6');
    const configureWarnings = records.filter((r) => r.actionType === 'configure_session');
    expect(configureWarnings.map((r) => r.entryPath)).toEqual(['switch_workflow']);
    expectDiscreteFields(configureWarnings[0], { workflowId: 'cov', stepId: 'review', stepName: 'Review', actionType: 'configure_session', entryPath: 'switch_workflow', skipReason: 'no_executor' });
    expect(records.filter((r) => r.actionType === 'reset_agent_context')).toEqual([]);
  });

  it('V08 AC-A6(a) / V23 AC-G2: a type the engine does not know is skipped(unrecognised) with a warning, and the rest runs', async () => {
    await world.importYaml('unknown', `
name: Unknown
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    on_enter:
      - type: send_slack_message
        config: { channel: reviews }
      - type: queue_run_for_each_participant
        config: { role: reviewer }
`);
    const { taskId } = await world.task('unknown');
    await world.seat(taskId, 'unknown', 'review', 'reviewer', 'rev-a');
    await world.move(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => [m.kind, m.state, m.skipReason])).toEqual([
      ['send_slack_message', 'skipped', 'unrecognised'],
      ['queue_run_for_each_participant', 'done', null],
    ]);
    const warning = (await world.logged((r) => r.rule === 'AC-A6' && r.taskId === taskId, 'AC-A6')).find((r) => r.rule === 'AC-A6' && r.taskId === taskId);
    expect(warning!.level).toBe('warn');
    expectDiscreteFields(warning, { workflowId: 'unknown', stepId: 'review', stepName: 'Review', actionType: 'send_slack_message' });
    expect(await world.jobs(taskId, 'REVIEW')).toHaveLength(1);
  });

  it('V11 AC-A13: switch_workflow into enable_plan_mode, reset_agent_context, set_session_mode and auto_start_agent — all four take effect on that path', async () => {
    await world.importYaml('switched', `
name: Switched
steps:
  - id: triage
    name: Triage
    on_enter:
      - type: enable_plan_mode
      - type: reset_agent_context
      - type: set_session_mode
        config: { mode: bypassPermissions }
      - type: auto_start_agent
`);
    const { taskId } = await world.task('elsewhere');
    const sessionBefore = (await world.getTask(taskId)).session.sessionId;
    await world.client.request(switchWorkflow, { taskId, toWorkflowId: 'switched', idempotencyKey: world.key('switch') });
    await eventually(async () => (await taken(taskId, 'triage')).length === 4, { what: 'four effects' });
    expect(await taken(taskId, 'triage')).toEqual(['enable_plan_mode', 'reset_agent_context', 'set_session_mode', 'auto_start_agent']);
    const session = (await world.getTask(taskId)).session;
    expect(session.sessionId).not.toBe(sessionBefore);
    expect(session).toMatchObject({ planMode: true, mode: 'bypassPermissions' });
    expect(await world.jobs(taskId, 'TASK_IMPLEMENTATION')).toHaveLength(1);
  });

  it('V28 AC-A12: interleaved owners run in declared order — set_session_mode, clear_decisions, enable_plan_mode, the fan-out — with auto_start_agent (declared first) last', async () => {
    await world.importYaml('interleaved', `
name: Interleaved
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    participants: [{ role: reviewer, agent_profile_id: rev-a, decision_required: true }]
    on_enter:
      - type: auto_start_agent
      - type: set_session_mode
        config: { mode: plan }
      - type: clear_decisions
      - type: enable_plan_mode
      - type: queue_run_for_each_participant
        config: { role: reviewer }
`);
    const { taskId } = await world.task('interleaved');
    await world.move(taskId, 'review');
    await settled(taskId, 'review', 1);
    expect(await taken(taskId, 'review', 1)).toEqual(['set_session_mode', 'clear_decisions', 'enable_plan_mode', 'queue_run_for_each_participant', 'auto_start_agent']);
  });

  it('V38 AC-D1 / AC-E5: a step of session actions only, and one with nothing on_enter, allocate no record; the session actions run in their fixed order', async () => {
    await world.importYaml('plain', `
name: Plain
steps:
  - id: work
    name: Work
  - id: session
    name: Session
    on_enter:
      - type: auto_start_agent
      - type: set_session_mode
        config: { mode: plan }
      - type: reset_agent_context
  - id: empty
    name: Empty
`);
    const { taskId } = await world.task('plain');
    const reply = await world.move(taskId, 'session');
    expect(reply.entry).toMatchObject({ stepId: 'session', stepEntryRecorded: false });
    await eventually(async () => (await taken(taskId, 'session')).length === 3, { what: 'three session effects' });
    expect(await taken(taskId, 'session')).toEqual(['reset_agent_context', 'set_session_mode', 'auto_start_agent']);
    const moved = await world.move(taskId, 'empty');
    expect(moved.entry).toMatchObject({ stepId: 'empty', stepEntryRecorded: false });
    const { rows } = await world.db.query(`SELECT count(*)::int AS n FROM step_entries WHERE task_id = $1`, [taskId]);
    expect(rows[0].n).toBe(0);
    expect((await world.effects(taskId)).filter((e) => e.type === 'StepEntryOpened')).toEqual([]);
  });

  it('V38 AC-D2 / V08 AC-A6(b): with the office actions unwired a transition still moves, and each engine action warns skipped(no_executor) instead of failing or stalling', async () => {
    await world.stopEngine(world.engine, 'SIGTERM');
    const kanban = await world.startEngine({ GANTRY_WORKFLOW_OFFICE_ACTIONS: 'off' });
    const { taskId } = await world.task('cov', { stepId: 'work' });
    await world.agentTurn(taskId);
    await world.atStep(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => [m.kind, m.state, m.skipReason])).toEqual([
      ['clear_decisions', 'skipped', 'no_executor'],
      ['queue_run_for_each_participant', 'skipped', 'no_executor'],
    ]);
    await world.logged((r) => r.message === 'step entry dispatched' && r.taskId === taskId, 'the dispatch', kanban);
    const warnings = world.records(kanban).filter((r) => r.rule === 'AC-A6' && r.taskId === taskId);
    expect(warnings.map((w) => [w.actionType, w.skipReason, w.level])).toEqual([
      ['clear_decisions', 'no_executor', 'warn'],
      ['queue_run_for_each_participant', 'no_executor', 'warn'],
    ]);
    expect(world.records(kanban).filter((r) => r.level === 'error' && r.taskId === taskId)).toEqual([]);
    expect(await world.jobs(taskId, 'REVIEW')).toEqual([]);
  });
});
