import { decideFinish, VERIFY_DIVERGENT, VERIFY_PRODUCED_NO_OUTPUT, type FinishingFacts, type FinishOutcome } from './finishing-rule.js';

const NO_DIFF = { filesChanged: 0, insertions: 0, deletions: 0 };
const DIFF = { filesChanged: 3, insertions: 40, deletions: 7 };
const DELETE_ONLY = { filesChanged: 2, insertions: 0, deletions: 120 };
const PUSHED_AT = '2026-11-30T06:13:00.000Z';
const HEAD = '9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807';

function facts(over: Partial<FinishingFacts>): FinishingFacts {
  return {
    verifyResult: 'ALIGNED',
    newCommit: false,
    netDiff: NO_DIFF,
    workAlreadyOnTarget: false,
    diffIdenticalToMergedBranch: false,
    failure: null,
    push: null,
    ...over,
  };
}

const outcome = (jobStatus: FinishOutcome['jobStatus'], taskStatus: FinishOutcome['taskStatus'], error: string | null = null): FinishOutcome => ({
  jobStatus,
  taskStatus,
  error,
  pushedAt: null,
});

describe('the finishing rule (docs/jobs.md table)', () => {
  it.each<[string, Partial<FinishingFacts>, FinishOutcome]>([
    ['ALIGNED with a new commit → DONE / DONE', { verifyResult: 'ALIGNED', newCommit: true, netDiff: DIFF }, outcome('DONE', 'DONE')],
    ['PARTIAL with a new commit → DONE / DONE', { verifyResult: 'PARTIAL', newCommit: true, netDiff: DIFF }, outcome('DONE', 'DONE')],
    ['EMPTY, no diff, work already on the target → SKIPPED / DONE', { verifyResult: 'EMPTY', workAlreadyOnTarget: true }, outcome('SKIPPED', 'DONE')],
    [
      'EMPTY, no diff, work not on the target → FAILED "verify produced no output" / IN_PROGRESS',
      { verifyResult: 'EMPTY', workAlreadyOnTarget: false },
      outcome('FAILED', 'IN_PROGRESS', 'verify produced no output'),
    ],
    [
      'DIVERGENT, diff identical to an already merged branch → SKIPPED / DONE',
      { verifyResult: 'DIVERGENT', netDiff: DIFF, diffIdenticalToMergedBranch: true, workAlreadyOnTarget: true },
      outcome('SKIPPED', 'DONE'),
    ],
    [
      'DIVERGENT, diff not matching the target → FAILED "verify divergent — manual review" / IN_PROGRESS',
      { verifyResult: 'DIVERGENT', netDiff: DIFF },
      outcome('FAILED', 'IN_PROGRESS', 'verify divergent — manual review'),
    ],
    [
      'a compile failure → FAILED with the compiler error / IN_PROGRESS',
      { verifyResult: 'ALIGNED', newCommit: true, netDiff: DIFF, failure: { kind: 'COMPILE', message: "src/a.ts(3,1): error TS2304: Cannot find name 'x'" } },
      outcome('FAILED', 'IN_PROGRESS', "compile failure: src/a.ts(3,1): error TS2304: Cannot find name 'x'"),
    ],
    [
      'a test failure → FAILED with the test error / IN_PROGRESS',
      { verifyResult: 'ALIGNED', newCommit: true, netDiff: DIFF, failure: { kind: 'TEST', message: 'cart.spec.ts: expected 3, got 2' } },
      outcome('FAILED', 'IN_PROGRESS', 'test failure: cart.spec.ts: expected 3, got 2'),
    ],
    [
      'a push failure → FAILED with the push error / IN_PROGRESS',
      { verifyResult: 'ALIGNED', newCommit: true, netDiff: DIFF, failure: { kind: 'PUSH', message: 'rejected: non-fast-forward' } },
      outcome('FAILED', 'IN_PROGRESS', 'push failure: rejected: non-fast-forward'),
    ],
    [
      'an exception → FAILED with its text / IN_PROGRESS',
      { verifyResult: 'EMPTY', failure: { kind: 'EXCEPTION', message: 'ENOSPC: no space left on device' } },
      outcome('FAILED', 'IN_PROGRESS', 'exception: ENOSPC: no space left on device'),
    ],
  ])('%s', (_name, given, expected) => {
    expect(decideFinish(facts(given))).toEqual(expected);
  });

  it('uses the documented sentences for the two verify failures', () => {
    expect(VERIFY_PRODUCED_NO_OUTPUT).toBe('verify produced no output');
    expect(VERIFY_DIVERGENT).toBe('verify divergent — manual review');
  });

  describe('a delete-only change is not EMPTY', () => {
    it('a delete-only change with a new commit is DONE even when verify called it EMPTY', () => {
      expect(decideFinish(facts({ verifyResult: 'EMPTY', newCommit: true, netDiff: DELETE_ONLY }))).toEqual(outcome('DONE', 'DONE'));
    });
    it('a delete-only change is not SKIPPED as "already on the target" just because nothing was added', () => {
      expect(decideFinish(facts({ verifyResult: 'EMPTY', newCommit: true, netDiff: DELETE_ONLY, workAlreadyOnTarget: true })).jobStatus).toBe('DONE');
    });
    it('a delete-only diff without a commit of its own fails rather than passing as no output', () => {
      const result = decideFinish(facts({ verifyResult: 'EMPTY', newCommit: false, netDiff: DELETE_ONLY }));
      expect(result.jobStatus).toBe('FAILED');
      expect(result.error).not.toBe(VERIFY_PRODUCED_NO_OUTPUT);
      expect(result.error).toMatch(/no new commit/);
    });
  });

  describe('DONE needs a new commit', () => {
    it('ALIGNED without a new commit and nothing on the target fails', () => {
      expect(decideFinish(facts({ verifyResult: 'ALIGNED', newCommit: false, netDiff: DIFF }))).toMatchObject({ jobStatus: 'FAILED', taskStatus: 'IN_PROGRESS' });
    });
    it('ALIGNED without a commit or a diff, with the work already on the target, is SKIPPED', () => {
      expect(decideFinish(facts({ verifyResult: 'ALIGNED', workAlreadyOnTarget: true }))).toEqual(outcome('SKIPPED', 'DONE'));
    });
    it('a DIVERGENT diff on an already merged branch is never DONE (the PBI-33 case)', () => {
      const result = decideFinish(facts({ verifyResult: 'DIVERGENT', newCommit: true, netDiff: DIFF, diffIdenticalToMergedBranch: true, workAlreadyOnTarget: true }));
      expect(result.jobStatus).toBe('SKIPPED');
    });
  });

  it('a job that writes no code (verify NOT_APPLICABLE) finishes DONE when nothing failed', () => {
    expect(decideFinish(facts({ verifyResult: 'NOT_APPLICABLE' }))).toEqual(outcome('DONE', 'DONE'));
    expect(decideFinish(facts({ verifyResult: 'NOT_APPLICABLE', failure: { kind: 'EXCEPTION', message: 'boom' } })).jobStatus).toBe('FAILED');
  });

  describe('pushed_at only when something was really pushed', () => {
    it('is the push time when the push report says it pushed', () => {
      expect(decideFinish({ ...facts({ newCommit: true, netDiff: DIFF }), push: { headSha: HEAD, pushedAt: PUSHED_AT } }).pushedAt).toBe(PUSHED_AT);
    });
    it('is empty when the remote already had the head (nothing pushed)', () => {
      expect(decideFinish({ ...facts({ newCommit: true, netDiff: DIFF }), push: { headSha: HEAD, pushedAt: null } }).pushedAt).toBeNull();
    });
    it('is empty when there was no push at all, e.g. a SKIPPED job', () => {
      const result = decideFinish(facts({ verifyResult: 'EMPTY', workAlreadyOnTarget: true }));
      expect(result).toEqual(outcome('SKIPPED', 'DONE'));
      expect(result.pushedAt).toBeNull();
    });
  });
});
