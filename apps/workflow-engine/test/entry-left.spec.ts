import { randomUUID } from 'node:crypto';
import { WorkflowWorld } from './harness.js';

/*
 * A live dispatch whose task leaves the entry while it walks it (docs/workflow-engine.md, "Markers"):
 * at the next action boundary the rest of the entry does not run, and the entry records why.
 */
describe('an on_enter dispatch whose task left the entry meanwhile', () => {
  const moved = `T-left-${randomUUID().slice(0, 8)}`;
  const returned = `T-back-${randomUUID().slice(0, 8)}`;
  // each held once the entry's fan-out (position 0) is marked, before its queue_run (position 1)
  const holds = [moved, returned].map((t) => `${t}@review#1/finished:0`);
  const world = new WorkflowWorld('wf_entry_left');

  beforeAll(async () => {
    await world.start({ engineEnv: { GANTRY_TEST_WORKFLOW_HOLD_AT: holds.join(',') } });
    for (const p of ['rev-a', 'rev-b', 'closer', 'implementer']) await world.profile(p);
    await world.importYaml('left', `
name: Left
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    agent_profile_id: implementer
    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: false }
      - { id: seat-b, role: reviewer, agent_profile_id: rev-b, decision_required: false }
    on_enter:
      - type: queue_run_for_each_participant
        config: { role: reviewer }
      - type: queue_run
        config: { target: 'agent_profile_id:closer' }
      - type: auto_start_agent
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('moved on: nothing after the boundary runs (no run queued, no agent started), the entry ends step_left', async () => {
    await world.task('left', { taskId: moved });
    await world.move(moved, 'review');
    await world.reachedHold(holds[0]!.replace(/\//g, '__'));
    await world.move(moved, 'done');
    await world.releaseHold(holds[0]!.replace(/\//g, '__'));

    const entry = await world.terminalEntry(moved, 'review', 1);
    expect(entry.termination).toBe('step_left');
    expect(entry.markers.map((m) => [m.position, m.state, m.skipReason])).toEqual([[0, 'done', null], [1, 'skipped', 'step_left']]);
    expect((await world.jobs(moved, 'REVIEW')).map((j) => j.agentProfileId).sort()).toEqual(['rev-a', 'rev-b']);
    expect(await world.jobs(moved, 'TASK_IMPLEMENTATION')).toEqual([]);
  }, 120_000);

  it('moved out and back in: the earlier entry ends superseded, the new entry runs in full', async () => {
    await world.task('left', { taskId: returned });
    await world.move(returned, 'review');
    await world.reachedHold(holds[1]!.replace(/\//g, '__'));
    await world.move(returned, 'work');
    await world.move(returned, 'review');
    await world.releaseHold(holds[1]!.replace(/\//g, '__'));

    const earlier = await world.terminalEntry(returned, 'review', 1);
    expect(earlier.termination).toBe('superseded');
    expect(earlier.markers.find((m) => m.position === 1)).toMatchObject({ state: 'skipped', skipReason: 'superseded' });
    const later = await world.terminalEntry(returned, 'review', 2);
    expect(later.termination).toBe('completed');
    expect((await world.jobs(returned, 'REVIEW')).map((j) => j.agentProfileId).sort()).toEqual(['closer', 'rev-a', 'rev-a', 'rev-b', 'rev-b']);
    expect(await world.jobs(returned, 'TASK_IMPLEMENTATION')).toHaveLength(1);
  }, 120_000);
});
