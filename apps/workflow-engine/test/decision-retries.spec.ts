import { addStepParticipant, ErrorCode, moveTask, recordDecision, removeStepParticipant, switchWorkflow, updateTask } from '@gantry/contracts';
import { eventually, type RunningApp } from '@gantry/testing';
import { WorkflowWorld } from './harness.js';

/*
 * A decision sent again (its answer lost, two deliveries at once, a crash after its commit) against
 * the on_enter of the step its quorum moves the task to (docs/workflow-engine.md, "Decisions and
 * quorum", "Commands and events"): one move, one entry, its actions once.
 */
const declaration = `
name: Decision retries
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: true }
      - { id: seat-b, role: reviewer, agent_profile_id: rev-b, decision_required: true, position: 1 }
    on_turn_complete:
      - { type: move_to_next, guard: { wait_for_quorum: all_approve } }
      - { type: move_to_step, config: { step_id: work }, guard: { wait_for_quorum: any_reject } }
  - id: approval
    name: Approval
    participants:
      - { id: seat-x, role: approver, agent_profile_id: app-x, decision_required: true }
    on_enter:
      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: approver, reason: approval_started }
  - id: done
    name: Done
`;

describe('a decision sent again against the on_enter its quorum dispatches', () => {
  const world = new WorkflowWorld('wf_decision_retries');

  beforeAll(async () => {
    await world.start();
    for (const p of ['rev-a', 'rev-b', 'app-x']) await world.profile(p);
    await world.importYaml('dr', declaration);
  }, 300_000);
  afterAll(() => world.close(), 60_000);

  const decision = (taskId: string, participantId: string, idempotencyKey: string, verdict: 'approve' | 'reject' = 'approve') =>
    ({ taskId, stepId: 'review', participantId, verdict, actor: 'person-1', idempotencyKey });

  /** What the approval step's entries did: admissions, clears and approver runs. */
  async function approvalCounts(taskId: string) {
    const effects = await world.effects(taskId);
    return {
      admissions: effects.filter((e) => e.type === 'TaskAdmittedToStep' && e.data.stepId === 'approval').map((e) => e.data.entrySeq),
      clears: effects.filter((e) => e.type === 'DecisionsCleared' && e.streamId === world.pairStream(taskId, 'dr', 'approval')).length,
      decisions: effects.filter((e) => e.type === 'DecisionRecorded' && e.streamId === world.pairStream(taskId, 'dr', 'review')).length,
      approverRuns: (await world.jobs(taskId, 'REVIEW')).filter((j) => j.agentProfileId === 'app-x').length,
    };
  }

  async function atReview(): Promise<string> {
    const { taskId } = await world.task('dr');
    await world.move(taskId, 'review');
    return taskId;
  }

  it('the deciding decision sent again under its key (its answer lost) gets the same answer; the task entered approval once and its on_enter ran once', async () => {
    const taskId = await atReview();
    await world.client.request(recordDecision, decision(taskId, 'seat-a', world.key('d')));
    const key = world.key('d');
    const first = await world.client.request(recordDecision, decision(taskId, 'seat-b', key));
    expect(first.moved?.placement).toMatchObject({ stepId: 'approval', admitted: true });
    await world.terminalEntry(taskId, 'approval', 1);
    await expect(world.client.request(recordDecision, decision(taskId, 'seat-b', key))).resolves.toEqual(first);
    const dispatched = () => world.records().filter((r) => r.message === 'step entry dispatched' && r.taskId === taskId && r.stepId === 'approval');
    await eventually(() => dispatched().length === 2, { what: 'the repeat\'s dispatch' });
    expect(dispatched().map((r) => [r.mode, r.outcome])).toEqual([['live', 'completed'], ['resume', 'terminal']]);
    expect(await approvalCounts(taskId)).toEqual({ admissions: [1], clears: 1, decisions: 2, approverRuns: 1 });
  });

  it('the deciding decision delivered twice at once: one decision, one move, one entry, its on_enter once; both answers alike', async () => {
    for (let round = 0; round < 3; round++) {
      const taskId = await atReview();
      await world.client.request(recordDecision, decision(taskId, 'seat-a', world.key('d')));
      const request = decision(taskId, 'seat-b', world.key('d'));
      const [one, two] = await Promise.all([world.client.request(recordDecision, request), world.client.request(recordDecision, request)]);
      expect(two).toEqual(one);
      await world.terminalEntry(taskId, 'approval', 1);
      expect(await approvalCounts(taskId)).toEqual({ admissions: [1], clears: 1, decisions: 2, approverRuns: 1 });
    }
  });

  it('the engine killed after the deciding decision committed, before the entry\'s first action: the start resumes the entry, the decision sent again under its key adds nothing', async () => {
    const taskId = await atReview();
    await world.client.request(recordDecision, decision(taskId, 'seat-a', world.key('d')));
    await world.stopEngine(world.engine, 'SIGTERM');
    const doomed = await world.startEngine({ GANTRY_TEST_WORKFLOW_KILL_AT: `${taskId}@approval#1/claimed:0` });
    const key = world.key('d');
    await world.client.request(recordDecision, decision(taskId, 'seat-b', key)).catch(() => undefined);
    await eventually(() => doomed.process.signalCode === 'SIGKILL', { what: 'the engine killed at its fault point', timeoutMs: 120_000 });
    const engine: RunningApp = await world.startEngine();
    await world.terminalEntry(taskId, 'approval', 1, { timeoutMs: 120_000 });
    const again = await world.client.request(recordDecision, decision(taskId, 'seat-b', key));
    expect(again.moved).toMatchObject({ placement: { stepId: 'approval', admitted: true }, entry: { stepId: 'approval', entrySeq: 1 } });
    await eventually(() => world.records(engine).some((r) => r.message === 'step entry dispatched' && r.taskId === taskId && r.mode === 'resume' && r.outcome === 'terminal'), { what: 'the repeat\'s dispatch' });
    expect(await approvalCounts(taskId)).toEqual({ admissions: [1], clears: 1, decisions: 2, approverRuns: 1 });
  }, 300_000);

  it('the deciding decision re-run after its move met the task changed meanwhile (VERSION_CONFLICT inside): one decision, one move, one entry, its on_enter once', async () => {
    const taskId = await atReview();
    await world.client.request(recordDecision, decision(taskId, 'seat-a', world.key('d')));
    await world.stopEngine(world.engine, 'SIGTERM');
    // the decision's move held once it has read the task; the task's stream then grows under it
    await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/placing:approval` });
    const deciding = world.client.request(recordDecision, decision(taskId, 'seat-b', world.key('d')));
    void deciding.catch(() => undefined);
    await world.reachedHold(`${taskId}@review#1__placing:approval`);
    await world.client.request(updateTask, { taskId, title: 'renamed while deciding', idempotencyKey: world.key('rename') });
    await world.releaseHold(`${taskId}@review#1__placing:approval`);
    const decided = await deciding;
    expect(decided.moved?.placement).toMatchObject({ stepId: 'approval', admitted: true });
    await world.terminalEntry(taskId, 'approval', 1);
    expect(await approvalCounts(taskId)).toEqual({ admissions: [1], clears: 1, decisions: 2, approverRuns: 1 });
    await world.stopEngine(world.engine, 'SIGTERM');
    await world.startEngine();
  }, 300_000);

  it('the engine killed inside the deciding decision\'s transaction: nothing of it landed; sent again under its key it records and moves once', async () => {
    const taskId = await atReview();
    await world.client.request(recordDecision, decision(taskId, 'seat-a', world.key('d')));
    await world.stopEngine(world.engine, 'SIGTERM');
    const doomed = await world.startEngine({ GANTRY_TEST_WORKFLOW_KILL_AT: `${taskId}@review#1/quorum` });
    const request = decision(taskId, 'seat-b', world.key('d'));
    await world.client.request(recordDecision, request).catch(() => undefined);
    await eventually(() => doomed.process.signalCode === 'SIGKILL', { what: 'the engine killed at its fault point', timeoutMs: 120_000 });
    await world.startEngine();
    expect(await approvalCounts(taskId)).toEqual({ admissions: [], clears: 0, decisions: 1, approverRuns: 0 });
    const again = await world.client.request(recordDecision, request);
    expect(again.moved?.placement).toMatchObject({ stepId: 'approval', admitted: true });
    await world.terminalEntry(taskId, 'approval', 1);
    expect(await approvalCounts(taskId)).toEqual({ admissions: [1], clears: 1, decisions: 2, approverRuns: 1 });
  }, 300_000);

  it('the deciding decision sent again after the task left approval and came back: the later entry is left alone, nothing of the first runs again', async () => {
    const taskId = await atReview();
    await world.client.request(recordDecision, decision(taskId, 'seat-a', world.key('d')));
    const key = world.key('d');
    const first = await world.client.request(recordDecision, decision(taskId, 'seat-b', key));
    await world.terminalEntry(taskId, 'approval', 1);
    await world.move(taskId, 'work');
    await world.move(taskId, 'approval');
    await world.terminalEntry(taskId, 'approval', 2);
    await expect(world.client.request(recordDecision, decision(taskId, 'seat-b', key))).resolves.toEqual(first);
    await eventually(async () => world.records().filter((r) => r.message === 'step entry dispatched' && r.taskId === taskId && r.mode === 'resume').length === 1, { what: 'the repeat\'s dispatch' });
    expect(await approvalCounts(taskId)).toEqual({ admissions: [1, 2], clears: 2, decisions: 2, approverRuns: 2 });
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'approval', admitted: true });
  });

  it('a reviewer deciding twice: the latest verdict counts, once the quorum moved the task a further decision is refused and records nothing', async () => {
    const taskId = await atReview();
    // seat-b's pending: a rejection would move the task back (any_reject), so seat-a first approves, then approves again
    await world.client.request(recordDecision, decision(taskId, 'seat-a', world.key('d'), 'approve'));
    await world.client.request(recordDecision, decision(taskId, 'seat-a', world.key('d'), 'approve'));
    const moved = await world.client.request(recordDecision, decision(taskId, 'seat-b', world.key('d')));
    expect(moved.moved?.placement.stepId).toBe('approval');
    await expect(world.client.request(recordDecision, decision(taskId, 'seat-a', world.key('d'), 'reject'))).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
    await world.terminalEntry(taskId, 'approval', 1);
    expect(await approvalCounts(taskId)).toEqual({ admissions: [1], clears: 1, decisions: 3, approverRuns: 1 });
  });

  it('bad input changes nothing: an unknown task, a step the task is not at, a seat the step does not have, a malformed request', async () => {
    const taskId = await atReview();
    const before = await world.effects(taskId);
    await expect(world.client.request(recordDecision, decision('task-nobody', 'seat-a', world.key('d')))).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
    await expect(world.client.request(recordDecision, { ...decision(taskId, 'seat-a', world.key('d')), stepId: 'no-such-step' })).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
    await expect(world.client.request(recordDecision, decision(taskId, 'seat-x', world.key('d')))).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
    await expect(world.client.request(recordDecision, decision(taskId, 'seat-nobody', world.key('d')))).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
    await expect(world.client.request(recordDecision, { ...decision(taskId, 'seat-a', world.key('d')), verdict: 'maybe' } as never)).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
    expect(await world.effects(taskId)).toEqual(before);
  });
  it('bad input to the moves and seats changes nothing: an unknown task, step or workflow, an update whose step is unknown keeps its title too', async () => {
    const taskId = await atReview();
    const before = await world.effects(taskId);
    const refused = (p: Promise<unknown>, code: string) => expect(p).rejects.toMatchObject({ code });
    await refused(world.client.request(moveTask, { taskId: 'task-nobody', toStepId: 'work', idempotencyKey: world.key('m') }), ErrorCode.NOT_FOUND);
    await refused(world.client.request(moveTask, { taskId, toStepId: 'no-such-step', idempotencyKey: world.key('m') }), ErrorCode.NOT_FOUND);
    await refused(world.client.request(switchWorkflow, { taskId, toWorkflowId: 'no-such-workflow', idempotencyKey: world.key('s') }), ErrorCode.NOT_FOUND);
    await refused(world.client.request(switchWorkflow, { taskId, toWorkflowId: 'dr', toStepId: 'no-such-step', idempotencyKey: world.key('s') }), ErrorCode.NOT_FOUND);
    await refused(world.client.request(updateTask, { taskId, title: 'never', workflowStepId: 'no-such-step', idempotencyKey: world.key('u') }), ErrorCode.NOT_FOUND);
    await refused(world.client.request(addStepParticipant, { taskId, workflowId: 'dr', stepId: 'no-such-step', participantId: 'seat-new', role: 'reviewer', agentProfileId: 'rev-a', decisionRequired: true, position: 0, idempotencyKey: world.key('a') }), ErrorCode.NOT_FOUND);
    await refused(world.client.request(removeStepParticipant, { participantId: 'seat-nobody', idempotencyKey: world.key('r') }), ErrorCode.NOT_FOUND);
    await refused(world.client.request(moveTask, { taskId, idempotencyKey: world.key('m') } as never), ErrorCode.INVALID_COMMAND);
    expect(await world.effects(taskId)).toEqual(before);
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'review', admitted: true });
  });
});
