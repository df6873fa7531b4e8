import { eventually } from '@gantry/testing';
import { expectDiscreteFields, ruleRecords } from './expectations.js';
import { WorkflowWorld, reviewYaml } from './harness.js';

/*
 * queue_run_for_each_participant reached through ordinary transitions (a job of the task finishing
 * in the job service, a manual move), never by calling the dispatcher: V01, V06, V13, V14, V22,
 * V25, V32, V35, V39 of docs/workflow-engine.md.
 */
describe('the reviewer fan-out', () => {
  const world = new WorkflowWorld('wf_fanout');
  const fanOut = `      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer, reason: review_started }`;

  beforeAll(async () => {
    await world.start();
    await world.importYaml('loop', reviewYaml(fanOut));
    for (const p of ['rev-a', 'rev-b', 'rev-c', 'rev-d', 'rev-e']) await world.profile(p);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('V39 AC-D3: one reviewer, an ordinary turn-complete transition → exactly one REVIEW job, for that reviewer\'s profile, with the configured reason', async () => {
    const { taskId } = await world.task('loop');
    await world.seat(taskId, 'loop', 'review', 'reviewer', 'rev-a');
    await world.agentTurn(taskId);
    const task = await world.atStep(taskId, 'review');
    expect(task.currentEntry).toMatchObject({ entrySeq: 1, entryPath: 'turn_complete', stepEntryRecorded: true });
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => [m.kind, m.state])).toEqual([['clear_decisions', 'done'], ['queue_run_for_each_participant', 'done']]);
    const reviews = await world.jobs(taskId, 'REVIEW');
    expect(reviews).toHaveLength(1);
    expect(reviews[0]).toMatchObject({ kind: 'REVIEW', agentProfileId: 'rev-a', reason: 'review_started', status: 'QUEUED', productId: 'product-t' });
    const [enqueued] = (await world.enqueued(taskId)).filter((e) => e.kind === 'REVIEW');
    expect(enqueued).toMatchObject({ excludeFromCoalescing: true, payload: null });
    expect(enqueued!.idempotencyKey).toMatch(/^product-t\/on-enter:[0-9a-f]{40}$/);
  });

  it('V32 AC-B3 / AC-D4 / V12 AC-B1: a rejection round and a second entry within 24 hours → a second job for the same reviewer, under another key', async () => {
    const { taskId } = await world.task('loop');
    await world.seat(taskId, 'loop', 'review', 'reviewer', 'rev-a');
    await world.agentTurn(taskId);
    await world.terminalEntry(taskId, 'review', 1);
    const [first] = await eventually(async () => { const j = await world.jobs(taskId, 'REVIEW'); return j.length === 1 ? j : null; });
    await world.reviewerDecides(first!.jobId, 'reject');
    await world.atStep(taskId, 'work');
    await world.agentTurn(taskId);
    const back = await world.atStep(taskId, 'review');
    expect(back.currentEntry!.entrySeq).toBe(2);
    await world.terminalEntry(taskId, 'review', 2);
    const reviews = await world.jobs(taskId, 'REVIEW');
    expect(reviews.map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-a']);
    const keys = (await world.enqueued(taskId)).filter((e) => e.kind === 'REVIEW').map((e) => e.idempotencyKey);
    expect(new Set(keys).size).toBe(2);
    // The second entry cleared the first round's rejection.
    expect((await world.getTask(taskId)).decisions).toEqual([]);
  });

  it('V01 AC-A4 / AC-A5 / AC-H3: one run per distinct seat of the role, template and task seats merged (the task\'s row wins), in role, position, id order; other roles none; decision_required no filter', async () => {
    await world.importYaml('seated', reviewYaml(fanOut, `    participants:
      - { id: t-b, role: reviewer, agent_profile_id: rev-b, decision_required: true, position: 1 }
      - { id: t-a, role: reviewer, agent_profile_id: rev-a, decision_required: true, position: 3 }
      - { id: t-x, role: approver, agent_profile_id: rev-c, decision_required: true, position: 0 }`));
    const { taskId } = await world.task('seated');
    const taskA = await world.seat(taskId, 'seated', 'review', 'reviewer', 'rev-a', { position: 5, participantId: 'k-a' });
    await world.seat(taskId, 'seated', 'review', 'reviewer', 'rev-d', { position: 0, participantId: 'k-d2', decisionRequired: false });
    await world.seat(taskId, 'seated', 'review', 'reviewer', 'rev-d', { position: 0, participantId: 'k-d1' });
    await world.move(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    const runs = entry.markers[1]!.runs;
    // position 0: k-d1 before k-d2 (id order), kept once; then t-b (1); rev-a's template seat lost to the task's (5)
    expect(runs.map((r) => [r.participantId, r.agentProfileId])).toEqual([['k-d1', 'rev-d'], ['t-b', 'rev-b'], [taskA, 'rev-a']]);
    const reviews = await world.jobs(taskId, 'REVIEW');
    expect(reviews.map((j) => j.agentProfileId)).toEqual(['rev-d', 'rev-b', 'rev-a']);
    expect(reviews.some((j) => j.agentProfileId === 'rev-c')).toBe(false);
  });

  it('V01 AC-H1 / AC-H2: no reason → the literal on_enter; no payload → none at all; a declared payload is passed on', async () => {
    await world.importYaml('defaults', reviewYaml(`      - type: queue_run_for_each_participant
        config: { role: reviewer }
      - type: queue_run_for_each_participant
        config: { role: lead, payload: { focus: migrations } }`));
    const { taskId } = await world.task('defaults');
    await world.seat(taskId, 'defaults', 'review', 'reviewer', 'rev-a');
    await world.seat(taskId, 'defaults', 'review', 'lead', 'rev-b');
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    const byProfile = Object.fromEntries((await world.enqueued(taskId)).map((e) => [e.agentProfile!.id, e]));
    expect(byProfile['rev-a']).toMatchObject({ reason: 'on_enter', payload: null });
    expect(byProfile['rev-b']).toMatchObject({ reason: 'on_enter', payload: { focus: 'migrations' } });
  });

  it('V01 AC-E1 / V23 AC-G2: a fan-out matching nobody queues nothing, does not fail the entry, and warns with step id, step name and role', async () => {
    const { taskId } = await world.task('loop');
    await world.move(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers[1]).toMatchObject({ state: 'done', runs: [] });
    expect(await world.jobs(taskId, 'REVIEW')).toEqual([]);
    const [warning] = ruleRecords(await world.logged((r) => r.rule === 'AC-E1' && r.taskId === taskId, 'AC-E1'), 'AC-E1', taskId);
    expect(warning!.level).toBe('warn');
    expectDiscreteFields(warning, { stepId: 'review', stepName: 'Review', role: 'reviewer' });
  });

  it('V01 AC-E3 / V23 AC-G2: a fan-out with an empty or absent role queues nothing, errs with workflow and step, and is skipped(malformed) — empty is not "all roles"', async () => {
    await world.importYaml('roleless', reviewYaml(`      - type: queue_run_for_each_participant
        config: { reason: x }
      - type: queue_run_for_each_participant
        config: { role: '' }`));
    const { taskId } = await world.task('roleless');
    await world.seat(taskId, 'roleless', 'review', 'reviewer', 'rev-a');
    await world.move(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => [m.state, m.skipReason])).toEqual([['skipped', 'malformed'], ['skipped', 'malformed']]);
    expect(await world.jobs(taskId)).toEqual([]);
    const records = await world.logged((r) => ruleRecords([r], 'AC-E3', taskId).length > 0 && ruleRecords(world.records(), 'AC-E3', taskId).length === 2, 'two AC-E3');
    const errors = ruleRecords(records, 'AC-E3', taskId);
    expect(errors).toHaveLength(2);
    expect(errors[0]!.level).toBe('error');
    expectDiscreteFields(errors[0], { workflowId: 'roleless', stepId: 'review' });
  });

  it('V13 AC-H5 / V12 AC-B1: the same fan-out declared twice with one reviewer → two runs, one per declaration; V14: neither is a suppression', async () => {
    await world.importYaml('twice', reviewYaml(`      - type: queue_run_for_each_participant
        config: { role: reviewer }
      - type: queue_run_for_each_participant
        config: { role: reviewer }`));
    const { taskId } = await world.task('twice');
    await world.seat(taskId, 'twice', 'review', 'reviewer', 'rev-a');
    await world.move(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => m.runs.map((r) => r.outcome))).toEqual([['created'], ['created']]);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-a']);
    const keys = (await world.enqueued(taskId)).map((e) => e.idempotencyKey);
    expect(new Set(keys).size).toBe(2);
    await world.logged(() => ruleRecords(world.records(), 'AC-G1', taskId).length === 2, 'two AC-G1');
    expect(ruleRecords(world.records(), 'AC-G1', taskId).map((r) => r.suppressed)).toEqual([0, 0]);
  });

  it('V06 AC-A10: a manual move of a task that never had a job (no agent session) into a fan-out step fans out', async () => {
    const { taskId } = await world.task('loop');
    await world.seat(taskId, 'loop', 'review', 'reviewer', 'rev-b');
    expect((await world.getTask(taskId)).session.started).toBe(false);
    expect(await world.jobs(taskId)).toEqual([]);
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-b']);
  });

  it('V22 AC-G1 (all succeeded) / V25 AC-E2: three matching, one without an agent profile → one AC-C1 error, INFO matching 3 enqueued 2, a failed marker counting it', async () => {
    const { taskId } = await world.task('loop');
    await world.seat(taskId, 'loop', 'review', 'reviewer', 'rev-a', { position: 0, participantId: 'e2-a' });
    await world.seat(taskId, 'loop', 'review', 'reviewer', '', { position: 1, participantId: 'e2-empty' });
    await world.seat(taskId, 'loop', 'review', 'reviewer', 'rev-b', { position: 2, participantId: 'e2-b' });
    await world.move(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers[1]).toMatchObject({ state: 'failed', failure: { attempted: 3, failed: 1, cause: 'participant e2-empty has no agent profile' } });
    expect(entry.markers[1]!.runs.map((r) => r.participantId)).toEqual(['e2-a', 'e2-b']);
    const records = await world.logged((r) => r.rule === 'AC-G1' && r.taskId === taskId, 'AC-G1');
    const errors = ruleRecords(records, 'AC-C1', taskId);
    expect(errors).toHaveLength(1);
    expectDiscreteFields(errors[0], { taskId, stepId: 'review', participantId: 'e2-empty', agentProfileId: '', cause: 'participant e2-empty has no agent profile' });
    const [info] = ruleRecords(records, 'AC-G1', taskId);
    expect(info).toMatchObject({ level: 'info', role: 'reviewer', matching: 3, enqueued: 2, suppressed: 0, failed: 1 });
    // the all-succeeded path, for comparison
    const { taskId: other } = await world.task('loop');
    await world.seat(other, 'loop', 'review', 'reviewer', 'rev-a');
    await world.move(other, 'review');
    await world.terminalEntry(other, 'review', 1);
    await world.logged((r) => r.rule === 'AC-G1' && r.taskId === other, 'AC-G1');
    expect(ruleRecords(world.records(), 'AC-G1', other)).toEqual([expect.objectContaining({ level: 'info', matching: 1, enqueued: 1, suppressed: 0, failed: 0 })]);
  });

  it('V25 AC-E2: every matching seat without a profile → nothing queued, INFO enqueued 0, a terminal failed marker the next start does not resume', async () => {
    const { taskId } = await world.task('loop');
    await world.seat(taskId, 'loop', 'review', 'reviewer', '', { participantId: 'none-1' });
    await world.seat(taskId, 'loop', 'review', 'reviewer', '', { participantId: 'none-2', position: 1 });
    await world.move(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry).toMatchObject({ terminal: true, termination: 'completed' });
    // Two seats of one role without a profile are one (role, profile) pair: de-duplicated to one (AC-A5).
    expect(entry.markers[1]).toMatchObject({ state: 'failed', failure: { attempted: 1, failed: 1, cause: 'participant none-1 has no agent profile' } });
    await world.logged((r) => r.rule === 'AC-G1' && r.taskId === taskId, 'AC-G1');
    expect(ruleRecords(world.records(), 'AC-C1', taskId)).toHaveLength(1);
    expect(ruleRecords(world.records(), 'AC-G1', taskId)).toEqual([expect.objectContaining({ matching: 1, enqueued: 0, failed: 1 })]);
    expect(await world.jobs(taskId)).toEqual([]);
    const { rows } = await world.db.query(`SELECT terminal FROM step_entries WHERE task_id = $1`, [taskId]);
    expect(rows).toEqual([{ terminal: true }]);
    await world.stopEngine(world.engine, 'SIGTERM');
    const again = await world.startEngine();
    await eventually(() => world.records(again).some((r) => r.message === 'recovery scan finished'), { what: 'the startup scan' });
    expect(world.records(again).filter((r) => r.taskId === taskId)).toEqual([]);
    expect((await world.entries(taskId, 'review'))[0]!.markers[1]!.state).toBe('failed');
  });

  it('V35 AC-C1 vs AC-C3 / V22 (partial failure) / V23 AC-G2: three matching, two failing for different reasons → two AC-C1 errors, no AC-C3, one INFO, failed(attempted 3, failed 2, the first cause in enumeration order)', async () => {
    const { taskId } = await world.task('loop');
    await world.seat(taskId, 'loop', 'review', 'reviewer', 'rev-unregistered', { position: 0, participantId: 'c-1' });
    await world.seat(taskId, 'loop', 'review', 'reviewer', 'rev-c', { position: 1, participantId: 'c-2' });
    await world.seat(taskId, 'loop', 'review', 'reviewer', '', { position: 2, participantId: 'c-3' });
    await world.move(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers[1]).toMatchObject({ state: 'failed', failure: { attempted: 3, failed: 2, cause: 'agent profile rev-unregistered is not registered' } });
    const records = await world.logged((r) => r.rule === 'AC-G1' && r.taskId === taskId, 'AC-G1');
    const errors = ruleRecords(records, 'AC-C1', taskId);
    expect(errors.map((e) => [e.participantId, e.cause])).toEqual([
      ['c-1', 'agent profile rev-unregistered is not registered'],
      ['c-3', 'participant c-3 has no agent profile'],
    ]);
    expectDiscreteFields(errors[0], { taskId, stepId: 'review', participantId: 'c-1', agentProfileId: 'rev-unregistered' });
    expect(ruleRecords(records, 'AC-C3', taskId)).toEqual([]);
    expect(ruleRecords(records, 'AC-G1', taskId)).toEqual([expect.objectContaining({ matching: 3, enqueued: 1, suppressed: 0, failed: 2 })]);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-c']);
  });
});
