import { randomUUID } from 'node:crypto';
import { eventually } from '@gantry/testing';
import { WorkflowWorld, reviewYaml } from './harness.js';

/*
 * The round of decisions of a step entry (docs/workflow-engine.md, "Decisions and quorum", AC-F3):
 * an entry whose on_enter declares clear_decisions opens a new round; until its clear commits, the
 * decisions of the previous round are still on the pair's stream and must not move the task.
 */
describe('decisions of a round not opened yet', () => {
  const taskId = `T-round-${randomUUID().slice(0, 8)}`;
  const hold = `${taskId}@review#2/claimed:0`;
  const turnTaskId = `T-turn-${randomUUID().slice(0, 8)}`;
  const turnHold = `${turnTaskId}@review#2/claimed:0`;
  const lateTaskId = `T-late-${randomUUID().slice(0, 8)}`;
  const lateHold = `${lateTaskId}@review#1/claimed:0`;
  const world = new WorkflowWorld('wf_rounds');

  beforeAll(async () => {
    // The second entry into review stops with its clear claimed, not committed: the window a slow or crashed dispatch leaves open.
    await world.start({ engineEnv: { GANTRY_TEST_WORKFLOW_HOLD_AT: `${hold},${turnHold},${lateHold}` } });
    for (const p of ['rev-a', 'rev-b']) await world.profile(p);
    await world.importYaml('q', reviewYaml(`      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer, reason: review_started }`, `    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: true }
      - { id: seat-b, role: reviewer, agent_profile_id: rev-b, decision_required: true, position: 1 }`));
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('a decision recorded before the new entry\'s clear does not count the previous round\'s rejection: the task stays', async () => {
    await world.task('q', { taskId });
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    const rejected = await world.decide(taskId, 'review', 'seat-a', 'reject');
    expect(rejected.moved?.placement.stepId).toBe('work');

    await world.move(taskId, 'review');
    await world.reachedHold(hold.replace(/\//g, '__'));
    // Round 2 is not open yet: seat-a's rejection of round 1 is still on the stream, the clear will remove it.
    const early = await world.decide(taskId, 'review', 'seat-b', 'approve');
    expect(early.moved).toBeNull();
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'review', admitted: true });

    await world.releaseHold(hold.replace(/\//g, '__'));
    await world.terminalEntry(taskId, 'review', 2);
    const task = await world.getTask(taskId);
    expect(task.placement).toMatchObject({ stepId: 'review', admitted: true });
    // AC-F3: the decision committed before the clear is removed with the rest of round 1.
    expect(task.decisions).toEqual([]);
  });

  it('a turn completed before the new entry\'s clear does not count the previous round\'s rejection either', async () => {
    await world.task('q', { taskId: turnTaskId });
    await world.move(turnTaskId, 'review');
    await world.terminalEntry(turnTaskId, 'review', 1);
    expect((await world.decide(turnTaskId, 'review', 'seat-a', 'reject')).moved?.placement.stepId).toBe('work');

    await world.move(turnTaskId, 'review');
    await world.reachedHold(turnHold.replace(/\//g, '__'));
    // A job of the task finishes in review's second occupancy: on_turn_complete evaluates the guards.
    const jobId = await world.agentTurn(turnTaskId);
    const { rows } = await world.jobsDb.query(`SELECT event_id FROM events WHERE type = 'JobFinished' AND data->>'jobId' = $1`, [jobId]);
    await eventually(async () => (await world.db.query(`SELECT 1 FROM inbox WHERE event_id = $1`, [rows[0].event_id])).rowCount === 1, { what: 'the job\'s JobFinished handled' });
    expect((await world.getTask(turnTaskId)).placement).toMatchObject({ stepId: 'review', admitted: true });

    await world.releaseHold(turnHold.replace(/\//g, '__'));
    await world.terminalEntry(turnTaskId, 'review', 2);
    expect((await world.getTask(turnTaskId)).placement).toMatchObject({ stepId: 'review', admitted: true });
  });

  it('the clear of an earlier entry that runs late does not remove the decisions of the entry the task is in now', async () => {
    await world.task('q', { taskId: lateTaskId });
    await world.move(lateTaskId, 'review');
    // Entry 1's dispatch stops with its clear claimed; the task leaves and enters review again meanwhile.
    await world.reachedHold(lateHold.replace(/\//g, '__'));
    await world.move(lateTaskId, 'work');
    await world.move(lateTaskId, 'review');
    await world.terminalEntry(lateTaskId, 'review', 2);
    expect((await world.decide(lateTaskId, 'review', 'seat-a', 'approve')).moved).toBeNull();

    await world.releaseHold(lateHold.replace(/\//g, '__'));
    await world.terminalEntry(lateTaskId, 'review', 1);
    expect((await world.getTask(lateTaskId)).decisions).toEqual([expect.objectContaining({ participantId: 'seat-a', verdict: 'approve', entrySeq: 2 })]);
    // Round 2 is seat-a's approval and now seat-b's: all_approve holds.
    expect((await world.decide(lateTaskId, 'review', 'seat-b', 'approve')).moved?.placement.stepId).toBe('done');
  });

  it('an entry whose last marked action is clear_decisions is terminal once the clear is done', async () => {
    await world.importYaml('clear-only', reviewYaml('      - type: clear_decisions'));
    const { taskId: clearing } = await world.task('clear-only');
    await world.move(clearing, 'review');
    const entry = await world.terminalEntry(clearing, 'review', 1, { timeoutMs: 10_000 });
    expect(entry).toMatchObject({ termination: 'completed', markers: [expect.objectContaining({ kind: 'clear_decisions', state: 'done' })] });
  });
});

describe('decisions of a round whose clear failed', () => {
  const world = new WorkflowWorld('wf_rounds_failed');

  beforeAll(async () => {
    // Every clear fails (AC-C2): the entry's round is never opened, and the previous round's decisions stay on the pair.
    await world.start({ engineEnv: { GANTRY_TEST_WORKFLOW_FAIL: 'action:clear_decisions' } });
    for (const p of ['rev-a', 'rev-b']) await world.profile(p);
    await world.importYaml('q', reviewYaml(`      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer, reason: review_started }`, `    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: true }
      - { id: seat-b, role: reviewer, agent_profile_id: rev-b, decision_required: true, position: 1 }`));
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  const clearFailed = (taskId: string, entrySeq: number) =>
    eventually(async () => (await world.entries(taskId, 'review')).find((e) => e.entrySeq === entrySeq && e.markers[0]?.state === 'failed'), { what: `the clear of entry ${entrySeq} failed` });

  it('the previous round\'s rejection, which the failed clear did not remove, does not move the task on a decision of the new round', async () => {
    const { taskId } = await world.task('q');
    await world.move(taskId, 'review');
    await clearFailed(taskId, 1);
    // This round's own decisions count: seat-a's rejection sends the task back.
    expect((await world.decide(taskId, 'review', 'seat-a', 'reject')).moved?.placement.stepId).toBe('work');

    await world.move(taskId, 'review');
    await clearFailed(taskId, 2);
    const approved = await world.decide(taskId, 'review', 'seat-b', 'approve');
    expect(approved.moved).toBeNull();
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'review', admitted: true });
    // The round is this entry's decisions: seat-a approving now makes all_approve hold.
    expect((await world.decide(taskId, 'review', 'seat-a', 'approve')).moved?.placement.stepId).toBe('done');
  });
});
