import { z } from 'zod';
import { commandReplySchema, EventEnvelopeSchema } from './envelope.js';

const envelope = {
  eventId: '0196d1e2-7c1a-7000-8000-000000000000',
  type: 'JobClaimed',
  schemaVersion: 1,
  streamId: 'job-1',
  streamVersion: 2,
  position: 17,
  occurredAt: '2026-01-01T00:00:00.000+01:00',
  correlationId: 'corr-1',
  causationId: null,
  idempotencyKey: 'p-1:claim:abc',
  actor: 'runner-1',
  data: { anything: true },
};

describe('the event envelope', () => {
  it('accepts a complete envelope and leaves data to the event schema', () => {
    expect(EventEnvelopeSchema.parse(envelope)).toEqual(envelope);
  });

  it('carries how many messages the relay published with the event, when it published any', () => {
    expect(EventEnvelopeSchema.parse({ ...envelope, companions: 1 })).toEqual({ ...envelope, companions: 1 });
    expect(EventEnvelopeSchema.safeParse({ ...envelope, companions: 0 }).success).toBe(false);
  });

  it.each<[string, Record<string, unknown>]>([
    ['a stream id that is not one subject token', { streamId: 'job.1' }],
    ['a type that is not PascalCase', { type: 'jobClaimed' }],
    ['a schema version of 0', { schemaVersion: 0 }],
    ['a stream version of 0', { streamVersion: 0 }],
    ['an event id that is not a uuid', { eventId: 'e-1' }],
    ['a time without offset', { occurredAt: '2026-01-01 00:00' }],
    ['a missing correlation id', { correlationId: undefined }],
  ])('refuses %s', (_name, change) => {
    expect(EventEnvelopeSchema.safeParse({ ...envelope, ...change }).success).toBe(false);
  });
});

describe('the command reply', () => {
  const Reply = commandReplySchema(z.object({ jobId: z.string() }));

  it('is either a result or a typed error', () => {
    expect(Reply.parse({ ok: true, result: { jobId: 'j-1' } })).toEqual({ ok: true, result: { jobId: 'j-1' } });
    expect(Reply.parse({ ok: false, error: { code: 'STALE_FENCE', message: 'stale' } })).toEqual({
      ok: false,
      error: { code: 'STALE_FENCE', message: 'stale' },
    });
  });

  it('refuses a result of the wrong shape, an unknown error code, and a reply without ok', () => {
    expect(Reply.safeParse({ ok: true, result: { job: 'j-1' } }).success).toBe(false);
    expect(Reply.safeParse({ ok: false, error: { code: 'WHATEVER', message: 'x' } }).success).toBe(false);
    expect(Reply.safeParse({ result: { jobId: 'j-1' } }).success).toBe(false);
  });

  it('is one schema per result schema, made once (not built and compiled again for every reply)', () => {
    const result = z.object({ jobId: z.string() });
    const first = commandReplySchema(result);
    expect(commandReplySchema(result)).toBe(first);
    const other = commandReplySchema(z.object({ jobId: z.string() }));
    expect(other).not.toBe(first);
    expect(other.safeParse({ ok: true, result: { jobId: 7 } }).success).toBe(false);
  });
});
