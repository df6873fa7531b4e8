import { eventually, logRecordsOf, removeTestNamespace, testNaming, uniqueName } from '@gantry/testing';
import { startProbe } from '../testing/probe-process.js';

/*
 * A SIGTERM that comes while a service starts — its modules made, its start-up hooks run, its HTTP not
 * listening yet — stops it in order once the start is done, instead of killing it outright with the
 * work its start began (docs/operations.md, "Stopping").
 */
describe('a service sent SIGTERM while it starts', () => {
  it('is not killed: the start goes on to its end, does not listen, and the stop closes it and exits 0', async () => {
    const schema = uniqueName('stop_at_start');
    const naming = testNaming(schema);
    const probe = await startProbe({ schema, naming, env: { GANTRY_TEST_HOLD_AT: 'runtime:listen' } });
    try {
      await eventually(() => probe.output().includes('"testHold":"runtime:listen"'), { what: 'the start held before listening', timeoutMs: 60_000 });
      probe.process.kill('SIGTERM');
      const exited = () => probe.process.exitCode !== null || probe.process.signalCode !== null;
      await eventually(() => exited() || logRecordsOf(probe.output()).some((r) => r.message === 'stopping'), { what: 'the stop begun' });
      expect({ exitCode: probe.process.exitCode, signal: probe.process.signalCode }).toEqual({ exitCode: null, signal: null });
      expect(logRecordsOf(probe.output()).find((r) => r.message === 'stopping')).toMatchObject({ signal: 'SIGTERM', starting: true });
      probe.process.kill('SIGUSR2'); // the start goes on
      await eventually(exited, { what: 'the process exited', timeoutMs: 60_000 });
      expect({ exitCode: probe.process.exitCode, signal: probe.process.signalCode }).toEqual({ exitCode: 0, signal: null });
      const lines = logRecordsOf(probe.output());
      expect(lines.filter((r) => r.message === 'listening')).toEqual([]);
      expect(lines.filter((r) => /shutdown took too long|failed to start|shutdown failed/.test(String(r.message)))).toEqual([]);
    } finally {
      await probe.kill('SIGKILL');
      await removeTestNamespace(naming, schema);
    }
  }, 90_000);
});
