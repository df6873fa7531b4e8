import type { MergeMethod } from '@gantry/contracts';
import { forHead, scopeDone } from './phase.js';
import { strategies } from './strategies.js';
import { isSettled, type PullRequestState } from './state.js';

/**
 * What the state asks of GitHub, as data. Effects are a function of the state, not of the event
 * that led to it: after a crash the same state asks for the same effects, and the effect processor
 * reads GitHub's real state before carrying any of them out (PR-13).
 */
export type PullRequestEffect =
  | { type: 'OPEN_PULL_REQUEST'; repository: string; branch: string; baseBranch: string; title: string; draft: boolean; headSha: string }
  | { type: 'MARK_READY_FOR_REVIEW'; repository: string; prNumber: number; nodeId: string }
  | { type: 'ENABLE_AUTO_MERGE'; repository: string; prNumber: number; nodeId: string; expectedHeadSha: string; mergeMethod: MergeMethod }
  | { type: 'DISABLE_AUTO_MERGE'; repository: string; prNumber: number; nodeId: string; enabledFor: string }
  | { type: 'MERGE'; repository: string; prNumber: number; sha: string; mergeMethod: MergeMethod };

export type PullRequestEffectType = PullRequestEffect['type'];

export function pendingEffects(state: PullRequestState): PullRequestEffect[] {
  const { flow, headSha, pr, repository } = state;
  if (isSettled(state) || !flow || !headSha) return [];
  const rules = strategies[flow.strategy];
  if (!pr) {
    // A repository without drafts (GitHub refused one) gets a ready PR; the strategy's rules stay the same (PR-2, PR-8).
    const draft = rules.opensAsDraft && state.draftsSupported !== false;
    return [{ type: 'OPEN_PULL_REQUEST', repository, branch: state.branch, baseBranch: flow.baseBranch, title: flow.title, draft, headSha }];
  }
  const effects: PullRequestEffect[] = [];
  // PR-7: auto-merge enabled for a head that is no longer the head would merge what nobody saw green;
  // PR-9: so would auto-merge left on for a head whose checks turned red since.
  const red = forHead(state, state.checks)?.verdict === 'RED';
  if (state.autoMergeEnabledFor !== null && (state.autoMergeEnabledFor !== headSha || red)) {
    effects.push({ type: 'DISABLE_AUTO_MERGE', repository, prNumber: pr.number, nodeId: pr.nodeId, enabledFor: state.autoMergeEnabledFor });
  }
  if (rules.whenScopeDone === 'MARK_READY_FOR_REVIEW' && scopeDone(state) && !state.readyForReview) {
    effects.push({ type: 'MARK_READY_FOR_REVIEW', repository, prNumber: pr.number, nodeId: pr.nodeId });
  }
  const decision = forHead(state, state.mergeDecision);
  if (decision?.via === 'AUTO_MERGE' && state.autoMergeEnabledFor !== headSha) {
    effects.push({ type: 'ENABLE_AUTO_MERGE', repository, prNumber: pr.number, nodeId: pr.nodeId, expectedHeadSha: decision.headSha, mergeMethod: flow.mergeMethod });
  }
  if (decision?.via === 'DIRECT') effects.push({ type: 'MERGE', repository, prNumber: pr.number, sha: decision.headSha, mergeMethod: flow.mergeMethod });
  return effects;
}
