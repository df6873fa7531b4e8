import { coalescingStreamId, enqueueJob, getJob } from '@gantry/contracts';
import { startApp, type RunningApp } from '@gantry/testing';
import { createWorld, key, registerProducts, type TestWorld } from './harness.js';

// Starts the compiled service (apps/job-service/dist): build first.
describe('the run queue on two replicas (no lock: the coalescing key stream is the compare-and-set)', () => {
  let world: TestWorld;
  const running: RunningApp[] = [];

  beforeAll(async () => {
    world = await createWorld('runqueue2');
    for (let i = 0; i < 2; i++) running.push(await startApp('job-service', { schema: world.name, naming: world.naming }));
    await registerProducts(world.client, ['product-rq']);
  }, 60_000);

  afterAll(async () => {
    await Promise.all(running.map((r) => r.kill('SIGKILL')));
    await world?.close();
  });

  it('16 concurrent coalescible requests spread over both replicas make exactly one job holding every payload', async () => {
    const agentProfile = { id: 'profile-reviewer', model: 'claude-opus-4-7', thinkingBudget: 12000 };
    const replies = await Promise.all(
      Array.from({ length: 16 }, (_, n) =>
        world.client.request(enqueueJob, {
          kind: 'REVIEW',
          productId: 'product-rq',
          agentProfile,
          reason: 'review_started',
          payload: { n },
          idempotencyKey: key('review'),
        }),
      ),
    );
    const created = replies.filter((r) => r.outcome === 'created');
    expect(created).toHaveLength(1);
    expect(replies.filter((r) => r.outcome === 'coalesced')).toHaveLength(15);
    expect(new Set(replies.map((r) => r.jobId))).toEqual(new Set([created[0]!.jobId]));
    const job = await world.client.request(getJob, { jobId: created[0]!.jobId });
    expect(job.payloads.map((p) => (p as { n: number }).n).sort((a, b) => a - b)).toEqual([...Array(16).keys()]);

    // The key's stream recorded the one job it opened.
    const streamId = coalescingStreamId({ productId: 'product-rq', kind: 'REVIEW', agentProfileId: 'profile-reviewer', reason: 'review_started' });
    const { rows } = await world.db.query(`SELECT type, data->>'jobId' AS job FROM events WHERE stream_id = $1`, [streamId]);
    expect(rows).toEqual([{ type: 'CoalescingWindowOpened', job: created[0]!.jobId }]);
  });
});
