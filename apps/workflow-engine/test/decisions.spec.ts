import { enqueueJob, ErrorCode, recordReviewDecision, removeStepParticipant, switchWorkflow } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { WorkflowWorld, reviewYaml } from './harness.js';

/* Decisions and quorum (docs/workflow-engine.md, "Decisions and quorum"): the move on a quorum, and V43 (AC-R1) at the engine. */
describe('decisions and quorum', () => {
  const world = new WorkflowWorld('wf_decisions');
  const fanOut = `      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer, reason: review_started }`;

  beforeAll(async () => {
    await world.start();
    for (const p of ['rev-a', 'rev-b']) await world.profile(p);
    await world.importYaml('q', reviewYaml(fanOut, `    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: true }
      - { id: seat-b, role: reviewer, agent_profile_id: rev-b, decision_required: true, position: 1 }`));
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  const admissionsTo = async (taskId: string, stepId: string) => (await world.effects(taskId)).filter((e) => e.type === 'TaskAdmittedToStep' && e.data.stepId === stepId);

  it('two approvals recorded at the same time satisfy all_approve once: the task moves once', async () => {
    for (let round = 0; round < 5; round++) {
      const { taskId } = await world.task('q');
      await world.move(taskId, 'review');
      await world.terminalEntry(taskId, 'review', 1);
      const replies = await Promise.all([world.decide(taskId, 'review', 'seat-a', 'approve'), world.decide(taskId, 'review', 'seat-b', 'approve')]);
      expect(replies.filter((r) => r.moved !== null)).toHaveLength(1);
      expect(await admissionsTo(taskId, 'done')).toHaveLength(1);
    }
  });

  it('two rejections at the same time move the task back once (any_reject)', async () => {
    const { taskId } = await world.task('q');
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    const outcomes = await Promise.allSettled([world.decide(taskId, 'review', 'seat-a', 'reject'), world.decide(taskId, 'review', 'seat-b', 'reject')]);
    // the second may find the task gone from review: a late decision is refused, never a second move
    expect(outcomes.filter((o) => o.status === 'fulfilled' && o.value.moved !== null)).toHaveLength(1);
    for (const o of outcomes) if (o.status === 'rejected') expect(o.reason).toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
    expect(await admissionsTo(taskId, 'work')).toHaveLength(1);
  });

  it('requires_approval: a reviewer job\'s approval does not move the task, a person\'s does', async () => {
    await world.importYaml('approval', `
name: Approval
steps:
  - id: start
    name: Start
  - id: draft
    name: Draft
    participants: [{ id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: true }]
    on_enter:
      - type: queue_run_for_each_participant
        config: { role: reviewer }
    on_turn_complete:
      - { type: move_to_next, guard: { requires_approval: true } }
  - id: published
    name: Published
`);
    const { taskId } = await world.task('approval');
    await world.move(taskId, 'draft');
    await world.terminalEntry(taskId, 'draft', 1);
    const [review] = await world.jobs(taskId, 'REVIEW');
    const { reply } = await world.reviewerDecides(review!.jobId, 'approve');
    expect(reply.moved).toBeNull();
    expect((await world.getTask(taskId)).placement.stepId).toBe('draft');
    const person = await world.decide(taskId, 'draft', undefined, 'approve');
    expect(person.moved!.placement.stepId).toBe('published');
  });

  it('V43 AC-R1: a REVIEW job\'s decision counts for the seat it was queued for, only under its own claim; an earlier round\'s job is refused', async () => {
    const { taskId } = await world.task('q');
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    const [forA, forB] = await world.jobs(taskId, 'REVIEW');
    const fence = await world.claimAsRunner(forA!.jobId, 'REVIEW', 'runner-r1');
    await expect(world.client.request(recordReviewDecision, { ...fence, leaseToken: fence.leaseToken + 1, verdict: 'approve', idempotencyKey: world.key('d') })).rejects.toMatchObject({ code: ErrorCode.STALE_FENCE });
    await expect(world.client.request(recordReviewDecision, { ...fence, runnerId: 'runner-other', verdict: 'approve', idempotencyKey: world.key('d') })).rejects.toMatchObject({ code: ErrorCode.STALE_FENCE });
    const accepted = await world.client.request(recordReviewDecision, { ...fence, verdict: 'approve', comment: 'fine', idempotencyKey: world.key('d') });
    expect(accepted).toMatchObject({ entrySeq: 1, moved: null });
    expect((await world.getTask(taskId)).decisions).toEqual([expect.objectContaining({ participantId: 'seat-a', verdict: 'approve', decidedBy: { kind: 'review_job', jobId: forA!.jobId } })]);
    await world.finishAsRunner(forA!.jobId, 'REVIEW', fence);
    // the job finished: it holds no claim any more
    await expect(world.client.request(recordReviewDecision, { ...fence, verdict: 'reject', idempotencyKey: world.key('d') })).rejects.toMatchObject({ code: ErrorCode.STALE_FENCE });
    // the round ends (the task leaves and comes back): B's job of round 1 decides too late
    await world.move(taskId, 'work');
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 2);
    const fenceB = await world.claimAsRunner(forB!.jobId, 'REVIEW', 'runner-r2');
    await expect(world.client.request(recordReviewDecision, { ...fenceB, verdict: 'approve', idempotencyKey: world.key('d') })).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
    // a job the engine did not queue decides nothing
    const { jobId: foreign } = await world.client.request(enqueueJob, {
      kind: 'REVIEW', productId: 'product-t', taskId, agentProfile: { id: 'rev-a', model: 'm', thinkingBudget: 0 }, idempotencyKey: world.key('foreign'), excludeFromCoalescing: true,
    });
    const foreignFence = await world.claimAsRunner(foreign, 'REVIEW', 'runner-r3');
    await expect(world.client.request(recordReviewDecision, { ...foreignFence, verdict: 'approve', idempotencyKey: world.key('d') })).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
    expect((await world.getTask(taskId)).decisions).toEqual([]);
  });

  it('AC-R1: a REVIEW job deciding before the engine recorded which job its enqueue made (the answer slow, its JobEnqueued not handled yet) is not refused: the decision counts for its seat', async () => {
    const { taskId } = await world.task('q');
    await world.stopEngine(world.engine, 'SIGTERM');
    const point = `${taskId}@review#1/enqueued:1`;
    const engine = await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: point, GANTRY_TEST_WORKFLOW_FAIL: `job-enqueued:${taskId}` });
    try {
      await world.move(taskId, 'review');
      await world.reachedHold(point.replace('/', '__'));
      // the job service made seat-a's job; the engine has not recorded it (neither from the answer nor the event)
      const [forA] = await world.jobs(taskId, 'REVIEW');
      const { reply } = await world.reviewerDecides(forA!.jobId, 'approve', false);
      expect(reply).toMatchObject({ entrySeq: 1, moved: null });
      await world.releaseHold(point.replace('/', '__'));
      await world.terminalEntry(taskId, 'review', 1);
      const forB = (await world.jobs(taskId, 'REVIEW')).find((j) => j.jobId !== forA!.jobId);
      // seat-a's approval counted: seat-b's completes all_approve
      expect((await world.reviewerDecides(forB!.jobId, 'approve', false)).reply.moved?.placement).toMatchObject({ stepId: 'done', admitted: true });
    } finally {
      await world.stopEngine(engine, 'SIGTERM');
      await world.startEngine();
    }
  }, 180_000);

  it('AC-R1: a REVIEW job\'s decision sent again under its key after the job finished (its first answer lost) gets the stored answer and records nothing more', async () => {
    const { taskId } = await world.task('q');
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    const [forA] = await world.jobs(taskId, 'REVIEW');
    const fence = await world.claimAsRunner(forA!.jobId, 'REVIEW', 'runner-again');
    const request = { ...fence, verdict: 'approve' as const, comment: 'fine', idempotencyKey: world.key('d') };
    const first = await world.client.request(recordReviewDecision, request);
    // the runner never saw that answer; its job finished meanwhile, so the job holds no claim any more
    await world.finishAsRunner(forA!.jobId, 'REVIEW', fence);
    await expect(world.client.request(recordReviewDecision, request)).resolves.toEqual(first);
    expect((await world.getTask(taskId)).decisions).toEqual([expect.objectContaining({ decisionId: first.decisionId, participantId: 'seat-a', verdict: 'approve' })]);
    // the same key with other content is still no repeat
    await expect(world.client.request(recordReviewDecision, { ...request, verdict: 'reject' })).rejects.toMatchObject({ code: ErrorCode.STALE_FENCE });
  });

  it('a decision whose quorum calls for a move, while the task is moved elsewhere at the same time: the decision is refused and records nothing, the task stays where it was moved', async () => {
    await world.importYaml('q1', reviewYaml(fanOut, `    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: true }`));
    const { taskId } = await world.task('q1');
    await world.stopEngine(world.engine, 'SIGTERM');
    // the decision's transaction held open once the decision is recorded and its quorum (all_approve) found holding
    await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/quorum` });
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    const deciding = world.decide(taskId, 'review', 'seat-a', 'approve');
    void deciding.catch(() => undefined);
    await world.reachedHold(`${taskId}@review#1__quorum`);
    const moved = await world.move(taskId, 'work');
    expect(moved.placement).toMatchObject({ stepId: 'work', admitted: true });
    await world.releaseHold(`${taskId}@review#1__quorum`);
    await expect(deciding).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
    const task = await world.getTask(taskId);
    expect(task.placement).toMatchObject({ stepId: 'work', admitted: true });
    expect(await admissionsTo(taskId, 'done')).toEqual([]);
    expect((await world.events(world.pairStream(taskId, 'q1', 'review'))).filter((e) => e.type === 'DecisionRecorded')).toEqual([]);
    await world.stopEngine(world.engine, 'SIGTERM');
    await world.startEngine();
  });

  it('a decision whose quorum calls for a move, while the task is moved elsewhere after that move read the task: the decision is refused and records nothing, the task stays where it was moved', async () => {
    await world.importYaml('q1', reviewYaml(fanOut, `    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: true }`));
    const { taskId } = await world.task('q1');
    await world.stopEngine(world.engine, 'SIGTERM');
    // the decision's move to done held open once it has read the task (still in review#1)
    await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/placing:done` });
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    const deciding = world.decide(taskId, 'review', 'seat-a', 'approve');
    void deciding.catch(() => undefined);
    await world.reachedHold(`${taskId}@review#1__placing:done`);
    expect((await world.move(taskId, 'work')).placement).toMatchObject({ stepId: 'work', admitted: true });
    await world.releaseHold(`${taskId}@review#1__placing:done`);
    await expect(deciding).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'work', admitted: true });
    expect(await admissionsTo(taskId, 'done')).toEqual([]);
    expect((await world.events(world.pairStream(taskId, 'q1', 'review'))).filter((e) => e.type === 'DecisionRecorded')).toEqual([]);
    await world.stopEngine(world.engine, 'SIGTERM');
    await world.startEngine();
  });

  it('a seat removed, its quorum now holding, while the task is moved elsewhere at the same time: the seat goes, the task stays where it was moved', async () => {
    const { taskId } = await world.task('q');
    const b = await world.seat(taskId, 'q', 'review', 'observer', 'rev-b');
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    // seat-a and seat-b approve: all_approve waits for the task's own seat b; its removal makes it hold
    await world.decide(taskId, 'review', 'seat-a', 'approve');
    await world.decide(taskId, 'review', 'seat-b', 'approve');
    expect((await world.getTask(taskId)).placement.stepId).toBe('review');
    await world.stopEngine(world.engine, 'SIGTERM');
    await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/quorum` });
    const removing = world.client.request(removeStepParticipant, { participantId: b, idempotencyKey: world.key('unseat') });
    void removing.catch(() => undefined);
    await world.reachedHold(`${taskId}@review#1__quorum`);
    expect((await world.move(taskId, 'work')).placement).toMatchObject({ stepId: 'work', admitted: true });
    await world.releaseHold(`${taskId}@review#1__quorum`);
    await expect(removing).resolves.toEqual({ participantId: b });
    const task = await world.getTask(taskId);
    expect(task.placement).toMatchObject({ stepId: 'work', admitted: true });
    expect(task.participants.map((p) => p.participantId)).not.toContain(b);
    expect(await admissionsTo(taskId, 'done')).toEqual([]);
    await world.stopEngine(world.engine, 'SIGTERM');
    await world.startEngine();
  });

  it('AC-R1: a REVIEW job queued in one workflow decides nothing after the task switched to another workflow whose step has the same id, entry number and seat ids', async () => {
    // A copy of q: the same step ids and seat ids, so review#1 of q2 looks like review#1 of q but for its workflow.
    await world.importYaml('q2', reviewYaml(fanOut, `    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: true }
      - { id: seat-b, role: reviewer, agent_profile_id: rev-b, decision_required: true, position: 1 }`));
    const { taskId } = await world.task('q');
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    const earlier = await world.jobs(taskId, 'REVIEW');
    expect(earlier).toHaveLength(2);
    await world.client.request(switchWorkflow, { taskId, toWorkflowId: 'q2', toStepId: 'review', idempotencyKey: world.key('switch') });
    await eventually(async () => (await world.entries(taskId, 'review')).find((e) => e.workflowId === 'q2' && e.entrySeq === 1 && e.terminal), { what: 'review#1 of q2 terminal' });
    // q's reviewers decide late: their round was q's review#1, not q2's
    for (const job of earlier) {
      const fence = await world.claimAsRunner(job.jobId, 'REVIEW', `runner-${job.jobId.slice(4, 12)}`);
      await expect(world.client.request(recordReviewDecision, { ...fence, verdict: 'approve', idempotencyKey: world.key('d') })).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
    }
    const task = await world.getTask(taskId);
    expect(task.placement).toMatchObject({ workflowId: 'q2', stepId: 'review', admitted: true });
    expect(task.decisions).toEqual([]);
  });
});
