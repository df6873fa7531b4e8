import { headers as natsHeaders } from '@nats-io/nats-core';
import { dispatchStreamName, dispatchSubject, jobOfferMessageId, type JobOffer } from '@gantry/contracts';
import { Bus } from '@gantry/messaging';
import { eventually, testNatsUrl, testNaming, uniqueName, removeTestNamespace } from '@gantry/testing';
import { MetricsController } from '@gantry/service-runtime';
import { DispatchIntake, dispatchConsumerName } from './offer-intake.js';

const quiet = { warn: () => undefined };

/** What `/metrics` says of a consumer's settlements of one kind. */
async function settlements(consumer: string, settlement: string): Promise<number> {
  const text = await new MetricsController().metrics();
  const line = text.split('\n').find((l) => l.startsWith(`gantry_consumer_settlements_total{consumer="${consumer}",settlement="${settlement}"} `));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

const name = uniqueName('offer_intake');
const naming = testNaming(name);

function offer(n: number, kind: JobOffer['kind'] = 'TASK_IMPLEMENTATION'): JobOffer {
  const hex = n.toString(16).padStart(12, '0');
  return {
    jobId: `job-00000000-0000-4000-8000-${hex}`,
    kind,
    productId: 'product-1',
    sprintRunId: null,
    attempt: 1,
    afterLeaseToken: 0,
    baseRef: 'main',
    offeredAt: new Date().toISOString(),
  };
}

describe('taking offers from the dispatch stream', () => {
  let busA: Bus;
  let busB: Bus;

  beforeAll(async () => {
    busA = await Bus.connect({ servers: testNatsUrl, naming, name: 'runner-a' });
    busB = await Bus.connect({ servers: testNatsUrl, naming, name: 'runner-b' });
  });

  afterAll(async () => {
    await busA.close();
    await busB.close();
    await removeTestNamespace(naming);
  });

  async function publish(o: JobOffer): Promise<void> {
    const h = natsHeaders();
    h.set('Nats-Msg-Id', jobOfferMessageId(o));
    await busA.js.publish(dispatchSubject(naming, o.kind), JSON.stringify(o), { headers: h });
  }

  it('creates the stream and one shared consumer per kind, however many runners ensure them at once', async () => {
    const a = new DispatchIntake({ bus: busA, ackWaitMs: 5000, log: quiet });
    const b = new DispatchIntake({ bus: busB, ackWaitMs: 5000, log: quiet });
    await Promise.all([a.ensure(['TASK_IMPLEMENTATION', 'REVIEW']), b.ensure(['TASK_IMPLEMENTATION', 'REVIEW']), a.ensure(['TASK_IMPLEMENTATION'])]);
    const consumers: string[] = [];
    for await (const info of busA.jsm.consumers.list(dispatchStreamName(naming))) consumers.push(`${info.name}=${info.config.filter_subject}`);
    expect(consumers.sort()).toEqual([
      `${dispatchConsumerName('REVIEW')}=${name}.dispatch.REVIEW`,
      `${dispatchConsumerName('TASK_IMPLEMENTATION')}=${name}.dispatch.TASK_IMPLEMENTATION`,
    ]);
  });

  it('gives each offer to one runner only, and forgets it once acknowledged', async () => {
    const a = new DispatchIntake({ bus: busA, ackWaitMs: 5000, log: quiet });
    const b = new DispatchIntake({ bus: busB, ackWaitMs: 5000, log: quiet });
    await publish(offer(1));
    await publish(offer(2));
    const [first, second] = await Promise.all([a.next('TASK_IMPLEMENTATION', 2000), b.next('TASK_IMPLEMENTATION', 2000)]);
    expect([first?.offer?.jobId, second?.offer?.jobId].sort()).toEqual([offer(1).jobId, offer(2).jobId]);
    first!.ack();
    second!.ack();
    expect(await a.next('TASK_IMPLEMENTATION', 1000)).toBeNull();
    const info = await busA.jsm.streams.info(dispatchStreamName(naming));
    expect(info.state.messages).toBe(0);
  });

  it('offers a job again to the other runner when the first one hands it back', async () => {
    const a = new DispatchIntake({ bus: busA, ackWaitMs: 5000, log: quiet });
    const b = new DispatchIntake({ bus: busB, ackWaitMs: 5000, log: quiet });
    await publish(offer(3));
    const held = await a.next('TASK_IMPLEMENTATION', 2000);
    expect(held?.deliveryCount).toBe(1);
    held!.nak(0);
    const again = await b.next('TASK_IMPLEMENTATION', 2000);
    expect(again?.offer?.jobId).toBe(offer(3).jobId);
    expect(again?.deliveryCount).toBe(2);
    again!.ack();
  });

  it('keeps a held offer from anyone else while the runner says it is working on it', async () => {
    const a = new DispatchIntake({ bus: busA, ackWaitMs: 3000, log: quiet });
    const b = new DispatchIntake({ bus: busB, ackWaitMs: 3000, log: quiet });
    await publish(offer(4));
    const held = await a.next('TASK_IMPLEMENTATION', 2000);
    const keepAlive = setInterval(() => held!.working(), 1000);
    try {
      expect(await b.next('TASK_IMPLEMENTATION', 4500)).toBeNull();
    } finally {
      clearInterval(keepAlive);
    }
    held!.ack();
  });

  it('fails the pull of a consumer that was deleted, and takes offers again once the consumer is re-created', async () => {
    const a = new DispatchIntake({ bus: busA, ackWaitMs: 3000, log: quiet });
    await a.ensure(['PLAN_CHAT']);
    expect(await a.next('PLAN_CHAT', 1000)).toBeNull();
    await busB.jsm.consumers.delete(dispatchStreamName(naming), dispatchConsumerName('PLAN_CHAT'));
    await expect(a.next('PLAN_CHAT', 1000)).rejects.toThrow();
    await a.ensure(['PLAN_CHAT']);
    await publish(offer(6, 'PLAN_CHAT'));
    const again = await a.next('PLAN_CHAT', 2000);
    expect(again?.offer?.jobId).toBe(offer(6).jobId);
    again!.ack();
  });

  it('terminates a message that is not an offer of the kind and hands the runner no job', async () => {
    const a = new DispatchIntake({ bus: busA, ackWaitMs: 3000, log: quiet });
    await busA.js.publish(dispatchSubject(naming, 'REVIEW'), JSON.stringify({ jobId: 'nope' }));
    await publish({ ...offer(5), kind: 'TASK_IMPLEMENTATION' });
    const bad = await a.next('REVIEW', 2000);
    expect(bad).toMatchObject({ kind: 'REVIEW', offer: null });
    expect(await a.next('REVIEW', 1000)).toBeNull();
    // Given up for good, not left pending to come back after every ack wait.
    await eventually(async () => (await busA.jsm.consumers.info(dispatchStreamName(naming), dispatchConsumerName('REVIEW'))).num_ack_pending === 0, {
      what: 'nothing pending',
      timeoutMs: 3000,
    });
    (await a.next('TASK_IMPLEMENTATION', 2000))!.ack();
  });

  it('says which message it terminated and why, without its payload, and counts it (docs/operations.md, "Metrics")', async () => {
    const warnings: Array<{ message: string; fields: Record<string, unknown> }> = [];
    const a = new DispatchIntake({ bus: busA, ackWaitMs: 3000, log: { warn: (message, fields = {}) => warnings.push({ message, fields }) } });
    await a.ensure(['SPRINT_IMPLEMENTATION']);
    const terminated = () => settlements(dispatchConsumerName('SPRINT_IMPLEMENTATION'), 'term');
    const before = await terminated();
    const subject = dispatchSubject(naming, 'SPRINT_IMPLEMENTATION');
    // Not an offer: a wrong attempt and a field that carries a secret, where a job id belongs.
    const ack = await busA.js.publish(subject, JSON.stringify({ ...offer(8, 'SPRINT_IMPLEMENTATION'), jobId: 'ghp_0123456789abcdefghijklmnopqrstuvwxyz', attempt: 0 }));
    const notJson = await busA.js.publish(subject, 'password=hunter2 {');
    expect(await a.next('SPRINT_IMPLEMENTATION', 2000)).toMatchObject({ offer: null });
    expect(await a.next('SPRINT_IMPLEMENTATION', 2000)).toMatchObject({ offer: null });
    expect(warnings).toEqual([
      {
        message: 'invalid job offer terminated',
        fields: expect.objectContaining({ kind: 'SPRINT_IMPLEMENTATION', subject, streamSequence: ack.seq, problem: expect.stringMatching(/^invalid job offer: jobId: .*; attempt: /) }),
      },
      { message: 'invalid job offer terminated', fields: expect.objectContaining({ subject, streamSequence: notJson.seq, problem: 'the payload is not JSON' }) },
    ]);
    expect(JSON.stringify(warnings)).not.toMatch(/ghp_|hunter2/);
    expect(await terminated()).toBe(before + 2);
  });

  it('an offer settled after the connection closed does not throw, and is offered again to another runner', async () => {
    const closing = await Bus.connect({ servers: testNatsUrl, naming, name: 'runner-closing' });
    const a = new DispatchIntake({ bus: closing, ackWaitMs: 1000, log: quiet });
    await a.ensure(['IDEA_GRILL']);
    await publish(offer(7, 'IDEA_GRILL'));
    const taken = await a.next('IDEA_GRILL', 2000);
    expect(taken?.offer?.jobId).toBe(offer(7).jobId);
    await closing.close();
    expect(() => {
      taken!.working();
      taken!.nak(0);
      taken!.ack();
    }).not.toThrow();
    const b = new DispatchIntake({ bus: busB, ackWaitMs: 1000, log: quiet });
    const again = await b.next('IDEA_GRILL', 5000);
    expect(again?.offer?.jobId).toBe(offer(7).jobId);
    again!.ack();
  });
});
