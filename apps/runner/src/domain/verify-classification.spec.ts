import { classifyVerification, planCheckOf, workAlreadyOnTarget, type VerificationFacts, type VerifyResult } from './verify-classification.js';

const aligned: VerificationFacts = { newCommitCount: 2, netDiff: true, descendsFromBase: true, partialCompletion: false, plan: null };

describe('verify classification', () => {
  it.each<[string, VerificationFacts, VerifyResult]>([
    ['new commits with a net diff on top of base', aligned, 'ALIGNED'],
    ['a single new commit on top of base', { ...aligned, newCommitCount: 1 }, 'ALIGNED'],
    ['new commits on top of base that the agent reported as partial', { ...aligned, partialCompletion: true }, 'PARTIAL'],
    ['no commit and no diff', { newCommitCount: 0, netDiff: false, descendsFromBase: true, partialCompletion: false, plan: null }, 'EMPTY'],
    ['commits that cancel each other out', { newCommitCount: 2, netDiff: false, descendsFromBase: true, partialCompletion: false, plan: null }, 'EMPTY'],
    ['no net diff even when the agent claimed partial work', { newCommitCount: 0, netDiff: false, descendsFromBase: true, partialCompletion: true, plan: null }, 'EMPTY'],
    ['no net diff on a branch that no longer descends from base', { newCommitCount: 0, netDiff: false, descendsFromBase: false, partialCompletion: false, plan: null }, 'EMPTY'],
    ['a net diff on a branch that does not descend from base', { ...aligned, descendsFromBase: false }, 'DIVERGENT'],
    ['a partial report on a branch that does not descend from base', { ...aligned, descendsFromBase: false, partialCompletion: true }, 'DIVERGENT'],
    ['a net diff without any commit of the branch since base', { ...aligned, newCommitCount: 0 }, 'DIVERGENT'],
    // held against the plan's expected changes
    ['every expected change made by the branch', { ...aligned, plan: { expected: 2, present: 2, madeByBranch: 2 } }, 'ALIGNED'],
    ['every expected change in place, some of them there at base already', { ...aligned, plan: { expected: 2, present: 2, madeByBranch: 1 } }, 'ALIGNED'],
    ['some expected changes missing', { ...aligned, plan: { expected: 2, present: 1, madeByBranch: 1 } }, 'PARTIAL'],
    ['none of the expected changes, other changes instead (an unrelated deletion)', { ...aligned, plan: { expected: 1, present: 0, madeByBranch: 0 } }, 'DIVERGENT'],
    ['all expected changes, but the agent reported partial', { ...aligned, partialCompletion: true, plan: { expected: 1, present: 1, madeByBranch: 1 } }, 'PARTIAL'],
    ['no net diff, whatever the plan says', { ...aligned, netDiff: false, plan: { expected: 1, present: 0, madeByBranch: 0 } }, 'EMPTY'],
  ])('%s is %s', (_behaviour, facts, result) => {
    expect(classifyVerification(facts)).toBe(result);
  });

  it('says how the plan was checked', () => {
    expect(planCheckOf(null)).toBe('NO_EXPECTED_CHANGES');
    expect(planCheckOf({ expected: 2, present: 2, madeByBranch: 1 })).toBe('ALL_PRESENT');
    expect(planCheckOf({ expected: 2, present: 1, madeByBranch: 1 })).toBe('SOME_PRESENT');
    expect(planCheckOf({ expected: 2, present: 0, madeByBranch: 0 })).toBe('NONE_PRESENT');
  });
});

describe('work already on the target', () => {
  it.each([
    [{ branchMerged: true, netChangeOnTarget: false, planOnTarget: false }, true],
    [{ branchMerged: false, netChangeOnTarget: true, planOnTarget: false }, true],
    [{ branchMerged: false, netChangeOnTarget: false, planOnTarget: true }, true],
    [{ branchMerged: false, netChangeOnTarget: false, planOnTarget: false }, false],
  ])('%o → %s', (facts, onTarget) => {
    expect(workAlreadyOnTarget(facts)).toBe(onTarget);
  });
});
