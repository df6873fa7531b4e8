import type { INestApplication } from '@nestjs/common';
import { claimJob, enqueueJob, getJob } from '@gantry/contracts';
import { createWorld, key, registerProducts, startInProcess, taskEnqueueRequest, type TestWorld } from './harness.js';

/**
 * One claim delivered several times at once (a runner's retry that overtook its first try, a NATS
 * redelivery): the claims of one process pick different jobs when they arrive together, but these are
 * one claim — one job is claimed, every copy gets that job, and the others stay in the queue.
 */
describe('a claim asked several times at once under one key', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('jobs_claim_dup');
    app = await startInProcess(world);
    await registerProducts(world.client, ['product-dup']);
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  it('claims one job, answers every copy with it, and leaves the other jobs queued', async () => {
    const jobs: string[] = [];
    for (let i = 0; i < 4; i++) jobs.push((await world.client.request(enqueueJob, taskEnqueueRequest('product-dup'))).jobId);
    const request = { runnerId: 'runner-dup', kinds: ['TASK_IMPLEMENTATION' as const], idempotencyKey: key('claim') };
    const replies = await Promise.all(Array.from({ length: 4 }, () => world.client.request(claimJob, request, { timeoutMs: 30_000 })));
    const first = replies[0]!;
    if (!first.claimed) throw new Error('not claimed');
    for (const reply of replies) expect(reply).toMatchObject({ claimed: true, job: { jobId: first.job.jobId, leaseToken: first.job.leaseToken } });
    const statuses = await Promise.all(jobs.map(async (jobId) => (await world.client.request(getJob, { jobId })).status));
    expect(statuses.filter((s) => s === 'CLAIMED')).toHaveLength(1);
    expect(statuses.filter((s) => s === 'QUEUED')).toHaveLength(3);
  });
});
