import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { eventSubject, JobEnqueued, JobFinished, JobPushReported, ProductRegistered, productExample, pullRequestIdFor, streamName, type EventEnvelope } from '@gantry/contracts';
import { EVENT_COLUMNS, toStoredEvent, type EventRow } from '@gantry/eventstore';
import { Bus, toEnvelope } from '@gantry/messaging';
import { consumerCaughtUp, deliverAgain, eventually, handledByConsumer, testDatabaseUrl, testNatsUrl } from '@gantry/testing';
import { JOB_FACTS_CONSUMER } from '../src/application/job-facts.js';
import { EFFECTS_CONSUMER } from '../src/application/reconciler.js';
import { inProcessPrService, pushedBranch } from './in-process-world.js';

/*
 * The pr-service's consumer of the jobs stream (docs/architecture.md, "Consumers and their duplicates"):
 * a job's enqueue and push that come again — as copies taken at once by two replicas of the durable, and
 * once more after they were handled — are recorded once on the pull request's stream, and the pull
 * request is opened on GitHub once; the pull request's own events that come again to its effects
 * consumer run the reconciler again, which finds the work done on GitHub. Facts of a job that come
 * before what they need (its enqueue, its product) wait for it and are then recorded once.
 */
describe('job events delivered more than once to the pr-service (two replicas, the local GitHub)', () => {
  const world = inProcessPrService('pr_events_twice');
  let bus: Bus;
  let db: pg.Pool;
  let replica: { close(): Promise<unknown> };
  let position = 1000;

  beforeAll(async () => {
    bus = await Bus.connect({ servers: testNatsUrl, naming: world.service.naming, name: 'pr-events-twice-test' });
    db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${world.service.schema}`, max: 2 });
    replica = await world.secondReplica();
    await bus.ensureEventStream('jobs');
  }, 60_000);
  afterAll(async () => {
    await replica?.close();
    await bus?.close();
    await db?.end();
  });

  /** A job event as the job service's relay publishes it (its event id as its message id). */
  const publish = async (type: string, streamId: string, data: Record<string, unknown>): Promise<EventEnvelope> => {
    const envelope: EventEnvelope = {
      eventId: randomUUID(), type, schemaVersion: 1, streamId, streamVersion: 1, position: ++position,
      occurredAt: new Date().toISOString(), correlationId: `test-${streamId}`, causationId: null, idempotencyKey: null, actor: null, data,
    };
    await bus.js.publish(eventSubject(bus.naming, 'jobs', type, streamId), JSON.stringify(envelope), { msgID: envelope.eventId });
    return envelope;
  };
  const caughtUp = (upTo: number) => consumerCaughtUp(bus.jsm, streamName(bus.naming, 'jobs'), JOB_FACTS_CONSUMER, { upTo });
  const prStream = async (pullRequestId: string) =>
    (await db.query<{ type: string }>(`SELECT type FROM events WHERE stream_id = $1 ORDER BY stream_version`, [pullRequestId])).rows.map((r) => r.type);

  /**
   * A product's repository on the local GitHub with a feature branch pushed (`head`), and the job
   * events of one job of it (not published): the product's registration, the job's enqueue and push.
   */
  async function jobOnPushedBranch(label: string) {
    const name = `${label}-${randomUUID().slice(0, 6)}`;
    const productId = `product-${name}`;
    const branch = `feat/story-${randomUUID().slice(0, 6)}`;
    const repo = await world.fake.control.createRepository({ owner: 'acme', name, initialFiles: { 'README.md': '# shop\n' } });
    const head = pushedBranch(repo.cloneUrl, branch, { 'src/one.ts': 'export const one = 1;\n' }, 'the task');
    const jobId = `job-${randomUUID()}`;
    return {
      repo, branch, jobId,
      pullRequestId: pullRequestIdFor(repo.fullName, branch),
      opens: async () => (await world.fake.control.requests({ method: 'POST', path: `/repos/${repo.fullName}/pulls` })).length,
      register: () => publish(ProductRegistered.type, productId, {
        ...ProductRegistered.examples.valid[0], ...productExample, productId, repository: repo.fullName, cloneUrl: repo.cloneUrl, requiredChecks: [],
      }),
      enqueue: () => publish(JobEnqueued.type, jobId, {
        ...JobEnqueued.examples.valid[0], jobId, productId, repository: repo.fullName, repositoryUrl: repo.cloneUrl, branch, baseRef: branch, targetBranch: 'main', taskId: 'T-533', storyTaskIds: ['T-533', 'T-534'],
      }),
      push: () => publish(JobPushReported.type, jobId, { ...JobPushReported.examples.valid[0], jobId, branch, headSha: head }),
    };
  }

  it('an enqueue and a push, each four times at once and again once handled: one task queued, one push recorded, one pull request opened on GitHub', async () => {
    const { repo, pullRequestId, opens, register, enqueue, push } = await jobOnPushedBranch('twice');
    await handledByConsumer(db, JOB_FACTS_CONSUMER, (await register()).eventId);
    const enqueued = await enqueue();
    await caughtUp(await deliverAgain(bus.js, bus.naming, 'jobs', enqueued, 3));
    const pushed = await push();
    await caughtUp(await deliverAgain(bus.js, bus.naming, 'jobs', pushed, 3));
    await eventually(async () => (await prStream(pullRequestId)).includes('PullRequestOpened'), { what: 'the pull request opened' });

    // Each once more, after it was handled: acknowledgements lost.
    await deliverAgain(bus.js, bus.naming, 'jobs', enqueued);
    await caughtUp(await deliverAgain(bus.js, bus.naming, 'jobs', pushed));
    const runs = (world.reconciler as unknown as { runs: { active: number } }).runs;
    await eventually(() => runs.active === 0, { what: 'no reconciler run under way' });

    const events = await prStream(pullRequestId);
    expect(events.filter((type) => type === 'PullRequestScopeTaskQueued')).toHaveLength(1);
    expect(events.filter((type) => type === 'PullRequestFlowStarted')).toHaveLength(1);
    expect(events.filter((type) => type === 'PullRequestOpened')).toHaveLength(1);
    expect(await opens()).toBe(1);
    for (const event of [enqueued, pushed]) {
      expect((await db.query(`SELECT count(*)::int AS n FROM inbox WHERE consumer = $1 AND event_id = $2`, [JOB_FACTS_CONSUMER, event.eventId])).rows[0].n).toBe(1);
    }

    // The pull request's own events delivered again to its effects consumer, twice each at once: the
    // reconciler runs again, finds the pull request open on GitHub, and neither opens it again nor records anything.
    const { rows } = await db.query<EventRow>(`SELECT ${EVENT_COLUMNS} FROM events WHERE stream_id = $1 ORDER BY stream_version`, [pullRequestId]);
    const opened = rows.map(toStoredEvent).find((e) => e.type === 'PullRequestOpened')!;
    const reads = world.prReads(repo.fullName, (opened.data as { prNumber: number }).prNumber);
    const readsBefore = (await reads.all()).length;
    let last = 0;
    for (const row of rows) last = await deliverAgain(bus.js, bus.naming, 'prs', toEnvelope(toStoredEvent(row)), 2);
    await consumerCaughtUp(bus.jsm, streamName(bus.naming, 'prs'), EFFECTS_CONSUMER, { upTo: last });
    await eventually(async () => (await reads.all()).length > readsBefore, { what: 'the reconciler run again, reading the pull request' });
    await eventually(() => runs.active === 0, { what: 'no reconciler run under way' });
    expect(await prStream(pullRequestId)).toEqual(events);
    expect(await opens()).toBe(1);
  }, 120_000);

  it("a job's push and its finish delivered before its enqueue, and the enqueue before the product's registration (events of a process that died, come again late): each handed back until what it needs has been handled, then recorded once, and the pull request opened once", async () => {
    const { jobId, pullRequestId, opens, register, enqueue, push } = await jobOnPushedBranch('late');
    const pushed = await push();
    await deliverAgain(bus.js, bus.naming, 'jobs', pushed);
    const finished = await publish(JobFinished.type, jobId, { ...JobFinished.examples.valid[0], jobId, jobStatus: 'DONE', taskStatus: 'DONE' });
    const enqueued = await enqueue();
    await handledByConsumer(db, JOB_FACTS_CONSUMER, enqueued.eventId);
    // The enqueue is recorded; the push waits for the product.
    expect(await prStream(pullRequestId)).toContain('PullRequestScopeTaskQueued');
    expect(await prStream(pullRequestId)).not.toContain('PullRequestFlowStarted');
    await register();
    for (const event of [pushed, finished]) await handledByConsumer(db, JOB_FACTS_CONSUMER, event.eventId, { timeoutMs: 60_000 });
    await eventually(async () => (await prStream(pullRequestId)).includes('PullRequestOpened'), { what: 'the pull request opened' });
    const runs = (world.reconciler as unknown as { runs: { active: number } }).runs;
    await eventually(() => runs.active === 0, { what: 'no reconciler run under way' });

    const events = await prStream(pullRequestId);
    for (const type of ['PullRequestScopeTaskQueued', 'PullRequestFlowStarted', 'PullRequestScopeTaskDone', 'PullRequestOpened']) {
      expect([type, events.filter((t) => t === type).length]).toEqual([type, 1]);
    }
    expect(await opens()).toBe(1);
    expect((await db.query(`SELECT count(*)::int AS n FROM dead_letters`)).rows[0].n).toBe(0);
  }, 120_000);
});
