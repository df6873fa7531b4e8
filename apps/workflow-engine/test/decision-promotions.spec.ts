import { randomUUID } from 'node:crypto';
import { deleteTask, recordDecision, type PlacementReply } from '@gantry/contracts';
import type { RunningApp } from '@gantry/testing';
import { WorkflowWorld } from './harness.js';

/*
 * The seat a decision's move frees goes to the task waiting for it (docs/workflow-engine.md, "Tasks
 * and WIP admission"), whatever happens to that promotion after the decision committed: a waiting
 * task that is gone by then is passed over for the next one, and a promotion that could not be made
 * then does not change the decision's answer (it was recorded) and is made a moment later.
 */
const declaration = `
name: Promotions after a decision
steps:
  - id: work
    name: Work
  - id: approval
    name: Approval
    wip_limit: 1
    participants:
      - { id: seat-x, role: approver, agent_profile_id: app-x, decision_required: true }
    on_enter:
      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: approver }
    on_turn_complete:
      - { type: move_to_next, guard: { wait_for_quorum: all_approve } }
  - id: done
    name: Done
`;

describe('the seat a decision frees', () => {
  const world = new WorkflowWorld('wf_decision_promotions');

  beforeAll(async () => {
    await world.start({ withEngine: false });
    await world.startEngine();
    await world.profile('app-x');
    // one workflow per case: each case's approval step is its own
    for (const workflowId of ['wp1', 'wp2', 'wp3']) await world.importYaml(workflowId, declaration);
  }, 300_000);
  afterAll(() => world.close(), 60_000);

  async function restartEngine(env: Record<string, string> = {}): Promise<RunningApp> {
    await world.stopEngine(world.engine, 'SIGTERM');
    return world.startEngine(env);
  }

  /** B admitted at approval (its entry done), then the tasks `waiting` created there: parked, in that order. */
  async function approvalFull(workflowId: string, waiting: string[]): Promise<string> {
    const { taskId: b } = await world.task(workflowId);
    await world.move(b, 'approval');
    await world.terminalEntry(b, 'approval', 1);
    for (const taskId of waiting) {
      const { reply } = await world.task(workflowId, { taskId, stepId: 'approval' });
      expect(reply.placement).toMatchObject({ stepId: 'approval', admitted: false, queuedForStepId: 'approval' });
    }
    return b;
  }

  const approve = (taskId: string, idempotencyKey = world.key('d')) =>
    world.client.request(recordDecision, { taskId, stepId: 'approval', participantId: 'seat-x', verdict: 'approve', actor: 'person-1', idempotencyKey });

  const approverRuns = async (taskId: string) => (await world.jobs(taskId, 'REVIEW')).length;

  it('a waiting task deleted while it was being promoted is passed over: the next one gets the seat, and the decision that freed it is answered as recorded', async () => {
    const a = `T-${randomUUID().slice(0, 8)}`;
    const c = `T-${randomUUID().slice(0, 8)}`;
    await restartEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${a}@approval#0/placing:approval` });
    const b = await approvalFull('wp1', [a, c]);
    const deciding = approve(b);
    void deciding.catch(() => undefined);
    // the promotion of the longest-waiting task has read it; the task is deleted before it is placed
    await world.reachedHold(`${a}@approval#0__placing:approval`);
    await world.client.request(deleteTask, { taskId: a, idempotencyKey: world.key('delete') });
    await world.releaseHold(`${a}@approval#0__placing:approval`);
    const decided = await deciding;
    expect(decided.moved?.placement).toMatchObject({ stepId: 'done', admitted: true });
    expect((await world.atStep(c, 'approval')).placement).toMatchObject({ stepId: 'approval', admitted: true, queuedForStepId: null });
    await world.terminalEntry(c, 'approval', 1);
    expect(await approverRuns(c)).toBe(1);
    await restartEngine();
  }, 300_000);

  // The command that frees the seat: the decision moving the task that held it on, or that task's deletion.
  const freeing: [string, string, (b: string, key: string) => Promise<unknown>][] = [
    ['the decision moving the task that held the seat on', 'wp2', (b, key) => approve(b, key)],
    ['the deletion of the task that held the seat', 'wp3', (b, key) => world.client.request(deleteTask, { taskId: b, idempotencyKey: key })],
  ];

  it.each(freeing)('a promotion that met the waiting task\'s stream kept busy (VERSION_CONFLICT) does not make %s answer as if nothing was written: it is answered as committed, and the seat is offered again by itself; its on_enter runs once', async (what, workflowId, free) => {
    const a = `T-${randomUUID().slice(0, 8)}`;
    const engine = await restartEngine({ GANTRY_TEST_WORKFLOW_FAIL: `promotion-conflict:${a}` });
    const b = await approvalFull(workflowId, [a]);
    const key = world.key('free');
    const answer = await free(b, key);
    if (what.startsWith('the decision')) expect((answer as { moved: PlacementReply | null }).moved?.placement).toMatchObject({ stepId: 'done', admitted: true });
    else expect(answer).toEqual({ taskId: b, deleted: true });
    // the engine's output is read as it comes: the record may follow the answer
    const unoffered = (r: { message?: unknown; workflowId?: unknown }) => r.message === 'a freed seat could not be offered now; it is offered again after a pause' && r.workflowId === workflowId;
    expect((await world.logged(unoffered, 'the promotion put off', engine)).filter(unoffered)).toHaveLength(1);
    expect((await world.atStep(a, 'approval')).placement).toMatchObject({ admitted: true, queuedForStepId: null });
    await world.terminalEntry(a, 'approval', 1);
    // sent once more: the same answer, nothing more
    await expect(free(b, key)).resolves.toEqual(answer);
    expect(await approverRuns(a)).toBe(1);
    expect((await world.effects(a)).filter((e) => e.type === 'TaskAdmittedToStep')).toHaveLength(1);
    await restartEngine();
  }, 300_000);
});
