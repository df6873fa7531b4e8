import { classifyVerification, workAlreadyOnTarget, type VerificationFacts, type VerifyResult } from './verify-classification.js';

const aligned: VerificationFacts = { newCommitCount: 2, netDiff: true, descendsFromBase: true, partialCompletion: false };

describe('verify classification', () => {
  it.each<[string, VerificationFacts, VerifyResult]>([
    ['new commits with a net diff on top of base', aligned, 'ALIGNED'],
    ['a single new commit on top of base', { ...aligned, newCommitCount: 1 }, 'ALIGNED'],
    ['new commits on top of base that the agent reported as partial', { ...aligned, partialCompletion: true }, 'PARTIAL'],
    ['no commit and no diff', { newCommitCount: 0, netDiff: false, descendsFromBase: true, partialCompletion: false }, 'EMPTY'],
    ['commits that cancel each other out', { newCommitCount: 2, netDiff: false, descendsFromBase: true, partialCompletion: false }, 'EMPTY'],
    ['no net diff even when the agent claimed partial work', { newCommitCount: 0, netDiff: false, descendsFromBase: true, partialCompletion: true }, 'EMPTY'],
    ['no net diff on a branch that no longer descends from base', { newCommitCount: 0, netDiff: false, descendsFromBase: false, partialCompletion: false }, 'EMPTY'],
    ['a net diff on a branch that does not descend from base', { ...aligned, descendsFromBase: false }, 'DIVERGENT'],
    ['a partial report on a branch that does not descend from base', { ...aligned, descendsFromBase: false, partialCompletion: true }, 'DIVERGENT'],
    ['a net diff without any commit of the branch since base', { ...aligned, newCommitCount: 0 }, 'DIVERGENT'],
  ])('%s is %s', (_behaviour, facts, result) => {
    expect(classifyVerification(facts)).toBe(result);
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
