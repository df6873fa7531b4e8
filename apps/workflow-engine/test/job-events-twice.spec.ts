import { EVENT_COLUMNS, toStoredEvent, type EventRow } from '@gantry/eventstore';
import { toEnvelope } from '@gantry/messaging';
import { streamName, type EventEnvelope } from '@gantry/contracts';
import { consumerCaughtUp, deliverAgain, handledByConsumer } from '@gantry/testing';
import { JOB_EVENTS_CONSUMER } from '../src/application/job-events.js';
import { WorkflowWorld } from './harness.js';

/*
 * The engine's consumer of the jobs stream (docs/architecture.md, "Consumers and their duplicates"), on
 * two engines: a job's start and finish that come again — as copies taken at once by both engines, and
 * once more after they were handled — record the session started once, and run the turn's trigger
 * once: one run per participant queued, one move to the next step.
 */
describe('job events delivered more than once to two workflow engines', () => {
  const world = new WorkflowWorld('wf_events_twice');

  beforeAll(async () => {
    await world.start();
    await world.startEngine();
    await world.profile('rev-a');
    await world.importYaml('twice', `
name: Twice
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

  /** The job's event of `type` as the job service's relay published it. */
  const jobEvent = async (jobId: string, type: string): Promise<EventEnvelope> => {
    const { rows } = await world.jobsDb.query<EventRow>(`SELECT ${EVENT_COLUMNS} FROM events WHERE stream_id = $1 AND type = $2`, [jobId, type]);
    return toEnvelope(toStoredEvent(rows[0]!));
  };
  const caughtUp = (upTo: number) => consumerCaughtUp(world.bus.jsm, streamName(world.naming, 'jobs'), JOB_EVENTS_CONSUMER, { upTo, timeoutMs: 60_000 });

  it("a job's start and finish, each four times at once and again once handled: one session start, one run queued, one move", async () => {
    const { taskId } = await world.task('twice');
    await world.move(taskId, 'work');
    await world.atStep(taskId, 'work');
    const jobId = await world.agentTurn(taskId);
    // Copies sent as the relay publishes the events themselves: the two engines take them at once.
    const started = await jobEvent(jobId, 'JobStarted');
    const finished = await jobEvent(jobId, 'JobFinished');
    await deliverAgain(world.bus.js, world.naming, 'jobs', started, 3);
    await caughtUp(await deliverAgain(world.bus.js, world.naming, 'jobs', finished, 3));
    await handledByConsumer(world.db, JOB_EVENTS_CONSUMER, finished.eventId);
    await world.atStep(taskId, 'review');

    // Once more each, after they were handled: acknowledgements lost.
    await deliverAgain(world.bus.js, world.naming, 'jobs', started);
    await caughtUp(await deliverAgain(world.bus.js, world.naming, 'jobs', finished));

    const effects = await world.effects(taskId);
    expect(effects.filter((e) => e.type === 'AgentSessionStarted')).toHaveLength(1);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a']);
    expect(effects.filter((e) => e.type === 'TaskAdmittedToStep').map((e) => e.data.stepId)).toEqual(['work', 'review']);
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'review', admitted: true });
  }, 180_000);
});
