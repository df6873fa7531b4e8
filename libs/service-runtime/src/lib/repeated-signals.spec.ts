import { randomUUID } from 'node:crypto';
import { Bus, CommandClient } from '@gantry/messaging';
import { eventually, logRecordsOf, removeTestNamespace, testNatsUrl, testNaming, uniqueName } from '@gantry/testing';
import { RuntimeProbeNote } from '../testing/probe-service-contract.js';
import { startProbe } from '../testing/probe-process.js';

/*
 * SIGTERM, then SIGTERM and SIGINT again while a command is in flight (a second `npm run stop`,
 * Ctrl-C pressed twice): the stop goes on as the first signal began it (docs/operations.md, "Stopping").
 */
describe('signals repeated while a service stops', () => {
  it('do not kill it: the command in flight is answered and the process exits 0', async () => {
    const schema = uniqueName('signals');
    const naming = testNaming(schema);
    const probe = await startProbe({ schema, naming, env: { GANTRY_TEST_HOLD_AT: 'runtime-probe-note', GANTRY_SHUTDOWN_GRACE_MS: '20000' } });
    const bus = await Bus.connect({ servers: testNatsUrl, naming, name: 'signals-test' });
    try {
      await eventually(async () => (await fetch(`${probe.url}/ready`)).status === 200, { what: 'the probe ready', timeoutMs: 30_000 });
      const answer = new CommandClient(bus).request(RuntimeProbeNote, { jobId: 'job-signals', text: randomUUID() }, { timeoutMs: 15_000 }).then(
        (reply) => ({ reply }),
        (error: unknown) => ({ error: String(error) }),
      );
      await eventually(() => probe.output().includes('"testHold":"runtime-probe-note"'), { what: 'the command held' });
      probe.process.kill('SIGTERM');
      await eventually(() => logRecordsOf(probe.output()).some((r) => r.message === 'stopping'), { what: 'the stop begun' });
      probe.process.kill('SIGTERM');
      probe.process.kill('SIGINT');
      await eventually(() => logRecordsOf(probe.output()).filter((r) => r.message === 'already stopping; waiting for work in flight').length === 2, {
        what: 'both signals noted',
      });
      expect(probe.process.exitCode).toBeNull();
      expect(probe.process.signalCode).toBeNull();
      probe.process.kill('SIGUSR2'); // the command goes on
      expect(await answer).toEqual({ reply: { eventId: expect.any(String) } });
      expect(await probe.kill('SIGTERM')).toBe(0);
    } finally {
      await probe.kill('SIGKILL');
      await bus.close();
      await removeTestNamespace(naming, schema);
    }
  }, 90_000);
});
