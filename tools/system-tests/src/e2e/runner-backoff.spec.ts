import { dispatchSubject, jobOfferMessageId, type JobOffer } from '@gantry/contracts';
import { Bus } from '@gantry/messaging';
import { eventually, logRecordsOf, startApp, testNatsUrl, testNaming, uniqueName, removeTestNamespace, type RunningApp } from '@gantry/testing';
import { standInBin } from './e2e-system.js';

/** A runner whose job service does not answer: it starts, is ready, and backs off exponentially. */
describe('a runner without a job service', () => {
  const name = uniqueName('e2e_backoff');
  const naming = testNaming(name);
  let runner: RunningApp;
  let bus: Bus;

  beforeAll(async () => {
    runner = await startApp('runner', {
      schema: `${name}_runner`,
      naming,
      env: {
        GANTRY_RUNNER_ID: 'runner-lonely',
        GANTRY_RUNNER_KINDS: 'PLAN_CHAT',
        GANTRY_AGENT_BIN: standInBin,
        GANTRY_RUNNER_BACKOFF_INITIAL_MS: '200',
        GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '200',
      },
    });
    bus = await Bus.connect({ servers: testNatsUrl, naming, name: 'e2e-backoff' });
  }, 60_000);
  afterAll(async () => {
    await runner?.kill('SIGKILL');
    await bus?.close();
    await removeTestNamespace(naming);
  });

  it('is healthy and ready with no job service and no job', async () => {
    expect((await fetch(`${runner.url}/health`)).status).toBe(200);
    const ready = await fetch(`${runner.url}/ready`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ok', details: { dispatch: { status: 'up', runnerId: 'runner-lonely', kinds: ['PLAN_CHAT'] } } });
  });

  it('gives an offer it cannot claim back with an exponentially growing delay', async () => {
    const offer: JobOffer = {
      jobId: 'job-00000000-0000-4000-8000-00000000000b',
      kind: 'PLAN_CHAT',
      productId: 'product-1',
      sprintRunId: null,
      attempt: 1,
      afterLeaseToken: 0,
      baseRef: null,
      offeredAt: new Date().toISOString(),
    };
    await bus.js.publish(dispatchSubject(naming, 'PLAN_CHAT'), JSON.stringify(offer), { msgID: jobOfferMessageId(offer) });
    const delays = await eventually(
      () => {
        // without a job service the runner can neither settle its earlier run nor claim: either way the offer goes back
        const found = logRecordsOf(runner.output())
          .filter((r) => r.message === 'claim failed; the offer goes back' || r.message === 'the earlier run is not settled yet; the offer goes back')
          .map((r) => Number(r.retryInMs));
        return found.length >= 4 ? found : null;
      },
      { what: 'four failed claims', timeoutMs: 20_000 },
    );
    // 200, 400, 800, 1600 ms, each with up to a fifth taken off
    expect(delays[0]).toBeLessThanOrEqual(200);
    for (let i = 1; i < delays.length; i++) expect(delays[i]!).toBeGreaterThan(delays[i - 1]! * 1.2);
    expect((await fetch(`${runner.url}/health`)).status).toBe(200);
  });
});
