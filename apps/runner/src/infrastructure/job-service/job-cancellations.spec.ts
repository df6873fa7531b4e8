import { randomUUID } from 'node:crypto';
import { eventSubject, JobCancelled } from '@gantry/contracts';
import { Bus } from '@gantry/messaging';
import { eventually, removeTestNamespace, testNatsUrl, testNaming, uniqueName } from '@gantry/testing';
import { CancellationWatch, type JobCancellation } from './job-cancellations.js';

const naming = testNaming(uniqueName('job_cancellations'));

/*
 * docs/jobs.md, "A runner's clock": the watch attaches again after an interruption from where it was in
 * the stream, not from a moment of the runner's clock, which the NATS server would read as its own.
 */
describe('the watch for cancelled jobs', () => {
  let bus: Bus;
  let services: Bus;

  beforeAll(async () => {
    bus = await Bus.connect({ servers: testNatsUrl, naming, name: 'runner' });
    services = await Bus.connect({ servers: testNatsUrl, naming, name: 'job-service' });
  });
  afterAll(async () => {
    await bus.close();
    await services.close();
    await removeTestNamespace(naming);
  });

  async function cancel(jobId: string): Promise<void> {
    const data = { ...JobCancelled.examples.valid[0]!, jobId, revokedLeaseToken: 1 };
    await services.js.publish(eventSubject(naming, 'jobs', JobCancelled.type, jobId), JSON.stringify({ type: JobCancelled.type, data }));
  }

  it('hears a cancel after an interruption, the runner\'s clock five minutes ahead of the NATS server\'s', async () => {
    const heard: JobCancellation[] = [];
    const realNow = Date.now;
    const watch = new CancellationWatch(bus, (c) => heard.push(c), { warn: () => undefined });
    watch.start();
    try {
      await eventually(async () => watch.ready, { what: 'the watch attached', timeoutMs: 10_000 });
      const before = `job-${randomUUID()}`;
      await cancel(before);
      await eventually(async () => heard.some((c) => c.jobId === before), { what: 'the first cancel heard', timeoutMs: 10_000 });

      Date.now = () => realNow.call(Date) + 300_000;
      // An interruption: the consume ends, and the watch attaches again.
      await (watch as unknown as { messages: { close(): Promise<void> } }).messages.close();
      const during = `job-${randomUUID()}`;
      await cancel(during);
      await eventually(async () => watch.ready, { what: 'the watch attached again', timeoutMs: 10_000 });
      const after = `job-${randomUUID()}`;
      await cancel(after);
      await eventually(async () => heard.some((c) => c.jobId === during) && heard.some((c) => c.jobId === after), { what: 'the cancels around the interruption heard', timeoutMs: 10_000 });
      expect(heard.filter((c) => c.jobId === before)).toHaveLength(1);
    } finally {
      Date.now = realNow;
      await watch.stop();
    }
  });
});
