import { jetstreamManager } from '@nats-io/jetstream';
import { dispatchStreamName, streamName } from '@gantry/contracts';
import { connectTestNats, removeTestNamespace, startApp, startAppExpectingExit, startupRefusal, testNaming, uniqueName } from '@gantry/testing';

/**
 * A service brings the streams it owns to the stream settings it is given at every start, not only
 * when it creates them: a setting changed later reaches a stream that already exists, the change is
 * logged, and one NATS refuses fails the start naming the setting (docs/operations.md, "Changing a
 * stream's settings"). NATS here is one server: a change of replicas can only be refused.
 */
describe("a service's start and the settings of the streams it owns", () => {
  const name = uniqueName('stream_settings');
  const naming = testNaming(name);
  const HOUR_MS = 3_600_000;

  afterAll(async () => {
    await removeTestNamespace(naming, name);
  });

  async function streamConfig(stream: string) {
    const nc = await connectTestNats();
    try {
      return (await (await jetstreamManager(nc)).streams.info(stream)).config;
    } finally {
      await nc.close();
    }
  }

  it('a max age changed after the streams were created reaches them at the next start, and the change is logged', async () => {
    const first = await startApp('job-service', { schema: name, naming, env: { GANTRY_STREAM_MAX_AGE_MS: String(24 * HOUR_MS), GANTRY_RECEIPT_TTL_MS: String(24 * HOUR_MS) } });
    await first.kill('SIGTERM');
    expect((await streamConfig(streamName(naming, 'jobs'))).max_age).toBe(24 * HOUR_MS * 1e6);

    const second = await startApp('job-service', {
      schema: name,
      naming,
      env: { GANTRY_STREAM_MAX_AGE_MS: String(48 * HOUR_MS), GANTRY_RECEIPT_TTL_MS: String(48 * HOUR_MS), LOG_LEVEL: 'info' },
    });
    await second.kill('SIGTERM');

    for (const stream of [streamName(naming, 'jobs'), dispatchStreamName(naming)]) {
      expect((await streamConfig(stream)).max_age).toBe(48 * HOUR_MS * 1e6);
      const logged = second
        .output()
        .split('\n')
        .filter((line) => line.includes('stream settings changed'))
        .map((line) => JSON.parse(line) as { stream: string; changes: Array<{ setting: string; variable: string; from: number; to: number }> })
        .find((line) => line.stream === stream);
      expect(logged?.changes).toContainEqual({ setting: 'max_age', variable: 'GANTRY_STREAM_MAX_AGE_MS', from: 24 * HOUR_MS, to: 48 * HOUR_MS });
    }
  });

  it('a start whose streams NATS will not change (3 replicas on one server) fails naming GANTRY_STREAM_REPLICAS, and leaves the streams as they were', async () => {
    const result = await startAppExpectingExit('job-service', {
      schema: name,
      naming,
      env: { GANTRY_STREAM_REPLICAS: '3', GANTRY_STREAM_MAX_AGE_MS: String(48 * HOUR_MS), GANTRY_RECEIPT_TTL_MS: String(48 * HOUR_MS) },
    });

    expect(result.started).toBe(false);
    expect(result.code).not.toBe(0);
    const refusal = startupRefusal(result.output);
    expect(refusal).toContain(streamName(naming, 'jobs'));
    expect(refusal).toContain('GANTRY_STREAM_REPLICAS');
    expect(refusal).toContain('1 to 3');
    expect((await streamConfig(streamName(naming, 'jobs'))).num_replicas).toBe(1);
  });
});
