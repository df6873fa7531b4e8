import { z } from 'zod';
import { ErrorCode, GantryError } from './errors.js';
import type { EventEnvelope } from './envelope.js';
import {
  commandContractKey,
  contractRegistry,
  defineCommand,
  defineEvent,
  type EventsOf,
  eventContractKey,
  eventTypesOf,
  parseEventData,
  parseRequest,
} from './registry.js';

// A self-contained example, registered only in this test file's module instance.
const pingJob = defineCommand({
  context: 'jobs',
  name: 'ping_job',
  request: z.object({ jobId: z.string().min(1), times: z.number().int().positive().default(1) }),
  reply: z.object({ pongs: z.number().int() }),
  examples: { valid: [{ jobId: 'j-1' }, { jobId: 'j-1', times: 3 }], invalid: [{}, { jobId: '', times: 1 }] },
});

const jobPinged = defineEvent({
  context: 'jobs',
  type: 'JobPinged',
  schemaVersion: 1,
  data: z.object({ jobId: z.string().min(1), at: z.iso.datetime({ offset: true }) }),
  examples: { valid: [{ jobId: 'j-1', at: '2026-01-01T00:00:00Z' }], invalid: [{ jobId: 'j-1' }] },
});

function envelope(type: string, schemaVersion: number, data: unknown): EventEnvelope {
  return {
    eventId: '0196d1e2-7c1a-7000-8000-000000000000',
    type,
    schemaVersion,
    streamId: 'j-1',
    streamVersion: 1,
    position: 1,
    occurredAt: '2026-01-01T00:00:00Z',
    correlationId: 'c-1',
    causationId: null,
    idempotencyKey: null,
    actor: null,
    data,
  };
}

function refusal(run: () => unknown): GantryError {
  try {
    run();
  } catch (error) {
    if (error instanceof GantryError) return error;
    throw error;
  }
  throw new Error('expected a GantryError, nothing was thrown');
}

describe('the contract registry', () => {
  it('finds what was defined by context and name, or context, type and version', () => {
    expect(contractRegistry.command('jobs', 'ping_job')).toBe(contractRegistry.commands().find((c) => c.name === 'ping_job'));
    expect(contractRegistry.command('jobs', 'ping_job')?.request).toBe(pingJob.request);
    expect(contractRegistry.event('jobs', 'JobPinged', 1)?.data).toBe(jobPinged.data);
    expect(contractRegistry.event('jobs', 'JobPinged', 2)).toBeUndefined();
    expect(contractRegistry.command('prs', 'ping_job')).toBeUndefined();
    expect(commandContractKey(pingJob)).toBe('jobs.ping_job');
    expect(eventContractKey(jobPinged)).toBe('jobs.JobPinged@1');
  });

  it('refuses a second definition of the same command', () => {
    expect(() =>
      defineCommand({ context: 'jobs', name: 'ping_job', request: z.object({}), reply: z.null(), examples: { valid: [{}], invalid: [1] } }),
    ).toThrow(/jobs\.ping_job is defined twice/);
    expect(contractRegistry.command('jobs', 'ping_job')?.request).toBe(pingJob.request);
  });

  it('refuses a second definition of the same event version but accepts a new version beside it', () => {
    expect(() =>
      defineEvent({ context: 'jobs', type: 'JobPinged', schemaVersion: 1, data: z.object({}), examples: { valid: [{}], invalid: [1] } }),
    ).toThrow(/jobs\.JobPinged@1 is defined twice/);
    const v2 = defineEvent({
      context: 'jobs',
      type: 'JobPinged',
      schemaVersion: 2,
      data: z.object({ jobId: z.string(), count: z.number() }),
      examples: { valid: [{ jobId: 'j', count: 1 }], invalid: [{ jobId: 'j' }] },
    });
    expect(contractRegistry.event('jobs', 'JobPinged', 1)).toBeDefined();
    expect(contractRegistry.event('jobs', 'JobPinged', 2)?.data).toBe(v2.data);
  });

  it('refuses names that break the conventions, unknown contexts and versions below 1', () => {
    const base = { request: z.object({}), reply: z.null(), examples: { valid: [{}], invalid: [1] } };
    expect(() => defineCommand({ ...base, context: 'jobs', name: 'PingJob' })).toThrow(/snake_case/);
    expect(() => defineCommand({ ...base, context: 'jobs', name: 'ping.job' })).toThrow(/snake_case/);
    expect(() => defineCommand({ ...base, context: 'system' as 'jobs', name: 'ping' })).toThrow(/unknown context/);
    const event = { data: z.object({}), examples: { valid: [{}], invalid: [1] } };
    expect(() => defineEvent({ ...event, context: 'jobs', type: 'jobPinged', schemaVersion: 1 })).toThrow(/PascalCase/);
    expect(() => defineEvent({ ...event, context: 'jobs', type: 'Job_Pinged', schemaVersion: 1 })).toThrow(/PascalCase/);
    expect(() => defineEvent({ ...event, context: 'jobs', type: 'JobPonged', schemaVersion: 0 })).toThrow(/schemaVersion/);
    expect(() => defineEvent({ ...event, context: 'jobs', type: 'JobPonged', schemaVersion: 1.5 })).toThrow(/schemaVersion/);
    expect(contractRegistry.event('jobs', 'JobPonged', 0)).toBeUndefined();
  });
});

describe('parseRequest', () => {
  it('returns the parsed request, defaults applied', () => {
    expect(parseRequest(pingJob, { jobId: 'j-1' })).toEqual({ jobId: 'j-1', times: 1 });
  });

  it('refuses an invalid request with INVALID_COMMAND listing each issue with its path', () => {
    const error = refusal(() => parseRequest(pingJob, { jobId: '', times: 0 }));
    expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
    expect(error.message).toMatch(/^invalid jobs\.ping_job request: /);
    expect(error.issues?.map((i) => i.path)).toEqual([['jobId'], ['times']]);
  });

  it('refuses a payload that is not an object at all', () => {
    for (const input of [null, 'ping', 42, [], undefined]) {
      const error = refusal(() => parseRequest(pingJob, input));
      expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
      expect(error.issues?.length).toBeGreaterThan(0);
    }
  });
});

describe('parseEventData', () => {
  it('returns the data of a registered event version', () => {
    expect(parseEventData('jobs', envelope('JobPinged', 1, { jobId: 'j-1', at: '2026-01-01T00:00:00Z' }))).toEqual({
      jobId: 'j-1',
      at: '2026-01-01T00:00:00Z',
    });
  });

  it('refuses data that does not match the schema of its version, listing the issues', () => {
    const error = refusal(() => parseEventData('jobs', envelope('JobPinged', 1, { jobId: 'j-1', at: 'yesterday' })));
    expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
    expect(error.issues?.map((i) => i.path)).toEqual([['at']]);
  });

  it('refuses an event type, version or context that is not registered', () => {
    for (const [context, type, version] of [
      ['jobs', 'JobVanished', 1],
      ['jobs', 'JobPinged', 9],
      ['prs', 'JobPinged', 1],
    ] as const) {
      const error = refusal(() => parseEventData(context, envelope(type, version, { jobId: 'j-1', at: '2026-01-01T00:00:00Z' })));
      expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
      expect(error.message).toBe(`unknown event ${context}.${type}@${version}`);
      expect(error.details).toEqual({ context, type, schemaVersion: version });
    }
  });
});

describe('an aggregate’s events from its contracts', () => {
  const jobPonged = defineEvent({
    context: 'jobs',
    type: 'JobPonged',
    schemaVersion: 1,
    data: z.object({ jobId: z.string().min(1), pongs: z.number().int() }),
    examples: { valid: [{ jobId: 'j-1', pongs: 2 }], invalid: [{ jobId: 'j-1' }] },
  });
  const pingPong = [jobPinged, jobPonged] as const;
  type PingPongEvent = EventsOf<typeof pingPong>;

  it('names the types in the order of the list', () => {
    expect(eventTypesOf(pingPong)).toEqual(['JobPinged', 'JobPonged']);
  });

  it('is a union discriminated by type, each with exactly its contract’s data', () => {
    const events: PingPongEvent[] = [
      { type: 'JobPinged', data: { jobId: 'j-1', at: '2026-01-01T00:00:00Z' } },
      { type: 'JobPonged', data: { jobId: 'j-1', pongs: 2 } },
    ];
    const pongs = events.map((event) => (event.type === 'JobPonged' ? event.data.pongs : 0));
    expect(pongs).toEqual([0, 2]);
    // @ts-expect-error a type no contract of the list has
    const unknown: PingPongEvent = { type: 'JobPunted', data: { jobId: 'j-1' } };
    // @ts-expect-error another contract’s data under a type
    const mixed: PingPongEvent = { type: 'JobPinged', data: { jobId: 'j-1', pongs: 2 } };
    expect([unknown, mixed]).toHaveLength(2);
  });
});
