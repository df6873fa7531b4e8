import { z } from 'zod';
import { contractProblems } from './conformance.js';
import type { CommandContract, EventContract } from './registry.js';

// Contracts built by hand (not registered), one flaw each, to show the generic contract test can fail.
function command(overrides: Partial<CommandContract>): CommandContract {
  return {
    kind: 'command',
    context: 'jobs',
    name: 'cancel_job',
    request: z.object({ jobId: z.string().min(1) }),
    reply: z.object({ cancelled: z.boolean() }),
    examples: { valid: [{ jobId: 'j-1' }], invalid: [{ jobId: '' }] },
    ...overrides,
  };
}

function event(overrides: Partial<EventContract>): EventContract {
  return {
    kind: 'event',
    context: 'jobs',
    type: 'JobCancelled',
    schemaVersion: 1,
    data: z.object({ jobId: z.string().min(1), reason: z.string() }),
    examples: { valid: [{ jobId: 'j-1', reason: 'user' }], invalid: [{ jobId: 'j-1' }] },
    ...overrides,
  };
}

describe('contractProblems', () => {
  it('finds nothing wrong with a conforming command and event', () => {
    expect(contractProblems(command({}))).toEqual([]);
    expect(contractProblems(event({}))).toEqual([]);
  });

  it('reports a contract without valid or without invalid examples', () => {
    expect(contractProblems(command({ examples: { valid: [], invalid: [{}] } }))).toEqual(['command jobs.cancel_job: has no valid example']);
    expect(contractProblems(event({ examples: { valid: [{ jobId: 'j', reason: 'r' }], invalid: [] } }))).toEqual([
      'event jobs.JobCancelled@1: has no invalid example',
    ]);
    expect(contractProblems(command({ examples: undefined as never }))).toEqual(['command jobs.cancel_job: has no examples']);
  });

  it('reports a valid example the schema refuses, with the issue', () => {
    expect(contractProblems(command({ examples: { valid: [{ jobId: 'j' }, { job: 'j' }], invalid: [{}] } }))).toEqual([
      expect.stringMatching(/^command jobs\.cancel_job: valid example #1 is refused: jobId: /),
    ]);
  });

  it('reports an invalid example the schema accepts', () => {
    expect(contractProblems(event({ examples: { valid: [{ jobId: 'j', reason: 'r' }], invalid: [{ jobId: 'j', reason: '' }] } }))).toEqual([
      'event jobs.JobCancelled@1: invalid example #0 is accepted: {"jobId":"j","reason":""}',
    ]);
  });

  it('reports a reply or request that is not a zod schema', () => {
    expect(contractProblems(command({ reply: { parse: () => null } as never }))).toEqual(['command jobs.cancel_job: reply is not a zod schema']);
    expect(contractProblems(command({ request: {} as never }))).toEqual(['command jobs.cancel_job: request is not a zod schema']);
  });

  it('reports names that break the conventions', () => {
    expect(contractProblems(command({ name: 'cancelJob' }))).toEqual(['command jobs.cancelJob: name "cancelJob" is not snake_case']);
    expect(contractProblems(event({ type: 'job_cancelled' }))).toEqual(['event jobs.job_cancelled@1: type "job_cancelled" is not PascalCase']);
  });

  it('reports a request example that cannot cross the bus as JSON', () => {
    const request = z.object({ at: z.date() });
    expect(contractProblems(command({ request, examples: { valid: [{ at: new Date(0) }], invalid: [{}] } }))).toEqual([
      'command jobs.cancel_job: valid example #0 is refused once sent as JSON',
    ]);
  });

  it('reports event data that does not read back from JSON as it was written', () => {
    const stamped = z.object({ note: z.string().transform((s) => `${s}!`) });
    expect(contractProblems(event({ data: stamped, examples: { valid: [{ note: 'hi' }], invalid: [{}] } }))).toEqual([
      'event jobs.JobCancelled@1: valid example #0 reads back from JSON as a different value',
    ]);

    // A Date written as its ISO string and parsed back into the same Date is fine.
    const dated = z.object({ at: z.union([z.date(), z.iso.datetime().transform((s) => new Date(s))]) });
    expect(contractProblems(event({ data: dated, examples: { valid: [{ at: '2026-01-01T00:00:00Z' }], invalid: [{}] } })).filter((p) => !/JSON Schema form/.test(p))).toEqual([]);

    const counted = z.object({ n: z.string().transform((s) => s.length) });
    expect(contractProblems(event({ data: counted, examples: { valid: [{ n: 'abc' }], invalid: [{}] } }))).toEqual([
      expect.stringMatching(/valid example #0 parses to data that is refused when read back from JSON: n: /),
    ]);
  });

  it('reports event data that has no JSON Schema form for the compatibility snapshot', () => {
    const data = z.object({ at: z.date() });
    expect(contractProblems(event({ data, examples: { valid: [{ at: new Date(0) }], invalid: [{}] } }))).toContainEqual(
      expect.stringMatching(/has no JSON Schema form/),
    );
  });
});
