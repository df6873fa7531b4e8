import { checksVerdict } from './checks.js';
import { check } from './testing/story.js';

describe('PR-4: the verdict on a head\'s checks (check runs and statuses together)', () => {
  it('nothing reported and nothing required is NONE, never green', () => {
    expect(checksVerdict([], [])).toEqual({ verdict: 'NONE' });
  });

  it('required checks: each must be reported and succeed; a missing or running one keeps it pending', () => {
    expect(checksVerdict(['ci/test', 'lint'], [check('ci/test', 'SUCCESS')])).toEqual({ verdict: 'PENDING', waitingFor: ['lint'] });
    expect(checksVerdict(['ci/test'], [check('ci/test', 'PENDING')])).toEqual({ verdict: 'PENDING', waitingFor: ['ci/test'] });
    expect(checksVerdict(['ci/test', 'lint'], [check('ci/test', 'SUCCESS'), check('lint', 'SUCCESS', 'status'), check('other', 'FAILURE')])).toEqual({
      verdict: 'GREEN',
      passed: ['ci/test', 'lint'],
    });
  });

  it('a required check that failed is RED even while others run; a check that is not required does not count', () => {
    expect(checksVerdict(['ci/test', 'lint'], [check('ci/test', 'FAILURE'), check('lint', 'PENDING')])).toMatchObject({ verdict: 'RED', failed: [{ name: 'ci/test' }] });
    expect(checksVerdict(['ci/test'], [check('ci/test', 'SUCCESS'), check('flaky', 'FAILURE')])).toMatchObject({ verdict: 'GREEN' });
  });

  it('without required checks every reported check counts', () => {
    expect(checksVerdict([], [check('a', 'SUCCESS'), check('b', 'PENDING', 'status')])).toEqual({ verdict: 'PENDING', waitingFor: ['b'] });
    expect(checksVerdict([], [check('a', 'SUCCESS'), check('b', 'FAILURE', 'status')])).toMatchObject({ verdict: 'RED' });
    expect(checksVerdict([], [check('a', 'SUCCESS'), check('b', 'SUCCESS', 'status')])).toEqual({ verdict: 'GREEN', passed: ['a', 'b'] });
  });
});
