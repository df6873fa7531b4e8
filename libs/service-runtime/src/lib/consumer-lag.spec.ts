import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { streamName } from '@gantry/contracts';
import { Bus, CommandClient } from '@gantry/messaging';
import { eventually, logRecordsOf, removeTestNamespace, testDatabaseUrl, testNatsUrl, testNaming, uniqueName } from '@gantry/testing';
import { RuntimeProbeNote } from '../testing/probe-service-contract.js';
import { startProbe, type ProbeProcess } from '../testing/probe-process.js';

/*
 * The probe service (src/testing/probe-service.ts) as a process; its durable consumer
 * `runtime-probe` holds an event whose `hold` is true while PROBE_HOLD=1. The lag limit is 1 s, the
 * consumer's ack wait JetStream's 30 s.
 */
describe('consumer lag judged by what is waiting for this process, not by what a dead one held', () => {
  const schema = uniqueName('lag_kill');
  const naming = testNaming(schema);
  const limit = { GANTRY_READY_CONSUMER_MAX_LAG_MS: '1000' };
  let probe: ProbeProcess | null = null;
  let bus: Bus;
  let db: pg.Pool;

  beforeAll(async () => {
    bus = await Bus.connect({ servers: testNatsUrl, naming, name: 'lag-test' });
    db = new pg.Pool({ connectionString: testDatabaseUrl, max: 2 });
  });

  afterAll(async () => {
    await probe?.kill('SIGKILL');
    await bus?.close();
    await db?.end();
    await removeTestNamespace(naming, schema);
  });

  const consumerInfo = () => bus.jsm.consumers.info(streamName(naming, 'workflow'), 'runtime-probe');
  const handled = async (eventId: string) =>
    Number((await db.query(`SELECT count(*) AS n FROM ${schema}.inbox WHERE consumer = 'runtime-probe' AND event_id = $1`, [eventId])).rows[0].n) === 1;
  const logged = (message: string, eventId: string) => logRecordsOf(probe!.output()).some((r) => r.message === message && r.eventId === eventId);

  it('after a kill -9 of a process holding an event, the restarted one is ready while that delivery waits out its ack wait; an event it holds itself past the limit makes it not ready', async () => {
    probe = await startProbe({ schema, naming, env: { ...limit, PROBE_HOLD: '1' } });
    await eventually(async () => (await probe!.ready()).status === 200, { what: 'the first probe ready', timeoutMs: 30_000 });
    const commands = new CommandClient(bus);
    const held = await commands.request(RuntimeProbeNote, { jobId: 'job-held', text: randomUUID(), hold: true });
    await eventually(() => logged('probe holding the event', held.eventId), { what: 'the probe to hold the event' });

    // A real backlog: the event this process holds grows older than the limit.
    const stuck = await eventually(async () => {
      const answer = await probe!.ready();
      return answer.status === 503 ? answer : null;
    }, { what: '/ready 503 while the probe holds the event' });
    expect(Object.keys(stuck.body.error)).toEqual(['consumers']);
    expect(stuck.body.error.consumers).toMatchObject({ status: 'down', consumers: { 'runtime-probe': { attached: true } } });

    await probe.kill('SIGKILL');
    probe = await startProbe({ schema, naming, env: limit });
    await eventually(async () => (await probe!.ready()).status === 200, { what: 'the restarted probe ready', timeoutMs: 30_000 });
    // Ready while the dead process's delivery is still out: readiness did not wait for its ack wait.
    expect((await consumerInfo()).num_ack_pending).toBe(1);
    expect(await handled(held.eventId)).toBe(false);

    // Nothing is lost: once the ack wait runs out the event comes back, and the new process handles it.
    await eventually(() => handled(held.eventId), { what: 'the held event handled by the new process', timeoutMs: 90_000, intervalMs: 250 });
    expect(logged('probe event handled', held.eventId)).toBe(true);
    expect((await probe.ready()).status).toBe(200);
  }, 180_000);
});
