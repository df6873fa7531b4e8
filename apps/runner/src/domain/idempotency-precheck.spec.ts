import { ErrorCode } from '@gantry/contracts';
import { decidePrecheck, validateExpectedChanges, type ExpectedChange } from './idempotency-precheck.js';

const a: ExpectedChange = { path: 'src/a.ts', contains: 'export const a' };
const b: ExpectedChange = { path: 'src/b.ts' };
const c: ExpectedChange = { path: 'old/c.ts', deleted: true };
const newest = (commits: string[]) => commits[commits.length - 1]!;

describe('the idempotency pre-check', () => {
  it('a plan fully present on the target is already done, naming the commit that completed it', () => {
    const result = decidePrecheck(
      [
        { change: a, present: true, commit: 'aaa111' },
        { change: b, present: true, commit: 'bbb222' },
        { change: c, present: true, commit: 'ccc333' },
      ],
      newest,
    );
    expect(result).toEqual({
      kind: 'already_done',
      commit: 'ccc333',
      present: [
        { ...a, commit: 'aaa111' },
        { ...b, commit: 'bbb222' },
        { ...c, commit: 'ccc333' },
      ],
    });
  });

  it('a plan partly present lists what is present and what is missing', () => {
    const result = decidePrecheck(
      [
        { change: a, present: true, commit: 'aaa111' },
        { change: b, present: false, commit: null },
        { change: c, present: false, commit: null },
      ],
      newest,
    );
    expect(result).toEqual({ kind: 'partial', commit: 'aaa111', present: [{ ...a, commit: 'aaa111' }], missing: [b, c] });
  });

  it('a plan of which nothing is present is not started', () => {
    expect(decidePrecheck([{ change: a, present: false, commit: null }], newest)).toEqual({ kind: 'not_started' });
  });

  it('an empty plan proves nothing and is not started', () => {
    expect(decidePrecheck([], newest)).toEqual({ kind: 'not_started' });
  });

  it('a present change without the commit that introduced it is an internal error, not a guess', () => {
    expect(() => decidePrecheck([{ change: a, present: true, commit: null }], newest)).toThrow(
      expect.objectContaining({ code: ErrorCode.INTERNAL }),
    );
  });

  it.each([
    [{ path: '/etc/passwd' }],
    [{ path: '../outside.ts' }],
    [{ path: 'src/../../outside.ts' }],
    [{ path: './src/a.ts' }],
    [{ path: '' }],
    [{ path: 'src//a.ts' }],
    [{ path: 'src/a.ts', contains: '' }],
    [{ path: 'src/a.ts', contains: 'x', deleted: true }],
  ])('refuses the plan entry %o', (change) => {
    expect(() => validateExpectedChanges([change])).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_COMMAND }));
  });

  it('accepts plain relative plan entries', () => {
    expect(() => validateExpectedChanges([a, b, c, { path: '.github/workflows/ci.yml' }])).not.toThrow();
  });
});
