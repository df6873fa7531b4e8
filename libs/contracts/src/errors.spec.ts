import { z } from 'zod';
import { ErrorCode, ErrorPayloadSchema, GantryError, invalidCommand, isGantryError, issuesOf } from './errors.js';

describe('GantryError', () => {
  it('survives the trip through its wire payload with code, message, details and issues intact', () => {
    const original = new GantryError(ErrorCode.STALE_FENCE, 'the lease token 3 is older than 4', { jobId: 'j-1', token: 3 }, [
      { path: ['token'], message: 'stale', code: 'custom' },
    ]);
    const payload = ErrorPayloadSchema.parse(JSON.parse(JSON.stringify(original.toPayload())));
    const back = GantryError.fromPayload(payload);

    expect(back).toBeInstanceOf(GantryError);
    expect(isGantryError(back)).toBe(true);
    expect(back.code).toBe(ErrorCode.STALE_FENCE);
    expect(back.message).toBe('the lease token 3 is older than 4');
    expect(back.details).toEqual({ jobId: 'j-1', token: 3 });
    expect(back.issues).toEqual([{ path: ['token'], message: 'stale', code: 'custom' }]);
    expect(back.toPayload()).toEqual(original.toPayload());
  });

  it('leaves absent details and issues out of the payload rather than sending undefined', () => {
    const payload = new GantryError(ErrorCode.NOT_FOUND, 'no job j-9').toPayload();
    expect(payload).toEqual({ code: 'NOT_FOUND', message: 'no job j-9' });
    expect(Object.keys(payload)).toEqual(['code', 'message']);
  });

  it('refuses a payload whose code is not a known error code', () => {
    expect(ErrorPayloadSchema.safeParse({ code: 'OOPS', message: 'x' }).success).toBe(false);
  });

  it('is not mistaken for a plain Error', () => {
    expect(isGantryError(new Error('plain'))).toBe(false);
    expect(isGantryError({ code: 'NOT_FOUND', message: 'duck' })).toBe(false);
  });
});

describe('invalidCommand', () => {
  const Schema = z.object({ job: z.object({ id: z.string().min(1) }), attempts: z.array(z.number().int()) });

  it('is an INVALID_COMMAND listing every zod issue with its path', () => {
    const result = Schema.safeParse({ job: { id: '' }, attempts: [1, 'two'] });
    if (result.success) throw new Error('the payload was expected to be refused');

    const error = invalidCommand(result.error, 'jobs.claim_job request');

    expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
    expect(error.issues).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ path: ['job', 'id'], code: 'too_small' }),
        expect.objectContaining({ path: ['attempts', 1], code: 'invalid_type' }),
      ]),
    );
    expect(error.issues).toHaveLength(2);
    expect(error.message).toMatch(/^invalid jobs\.claim_job request: /);
    expect(error.message).toContain('job.id:');
    expect(error.message).toContain('attempts.1:');
    expect(ErrorPayloadSchema.safeParse(error.toPayload()).success).toBe(true);
  });

  it('names the root when the whole payload is of the wrong type', () => {
    const result = Schema.safeParse('not an object');
    if (result.success) throw new Error('the payload was expected to be refused');
    const error = invalidCommand(result.error);
    expect(error.issues).toEqual([expect.objectContaining({ path: [] })]);
    expect(error.message).toMatch(/^invalid command: \(root\): /);
  });

  it('writes symbol keys of a path as strings so the issues stay JSON', () => {
    const key = Symbol('meta');
    const schema = z.object({ [key]: z.string() });
    const result = schema.safeParse({ [key]: 1 });
    if (result.success) throw new Error('the payload was expected to be refused');
    expect(issuesOf(result.error)[0]!.path).toEqual(['Symbol(meta)']);
  });
});
