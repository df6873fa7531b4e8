import { firstWithin, MAX_PR_LIST_BYTES, type PullRequestView } from '@gantry/contracts';
import { forHead, phaseOf, scopeDone } from './phase.js';
import { baseBranchOf, type PullRequestState } from './state.js';

/** The pull request as `get_pull_request` answers it. */
export function pullRequestView(state: PullRequestState): PullRequestView {
  const checks = forHead(state, state.checks);
  const decision = forHead(state, state.mergeDecision);
  const conflict = forHead(state, state.conflict);
  // A sprint run's scope may be thousands of tasks: the answer keeps the first and counts the rest, so that it fits one NATS message.
  const tasks = firstWithin(state.scope.items.map((i) => ({ taskId: i.id, done: i.done })), MAX_PR_LIST_BYTES);
  return {
    pullRequestId: state.pullRequestId,
    repository: state.repository,
    branch: state.branch,
    phase: phaseOf(state),
    strategy: state.flow?.strategy ?? null,
    // The PR's own base once it is opened: one adopted, or changed since, on another base than the product's is on that one.
    baseBranch: baseBranchOf(state),
    mergeMethod: state.flow?.mergeMethod ?? null,
    requiredChecks: state.flow?.requiredChecks ?? [],
    headSha: state.headSha,
    prNumber: state.pr?.number ?? null,
    prUrl: state.pr?.url ?? null,
    draft: state.pr?.draft ?? null,
    scope: { done: scopeDone(state), tasks, tasksLeftOut: state.scope.items.length - tasks.length, sprintRunId: state.scope.sprintRunId },
    checks: checks ? { headSha: checks.headSha, verdict: checks.verdict, names: checks.names, namesLeftOut: checks.namesLeftOut ?? 0 } : null,
    mergeDecision: decision,
    conflict: conflict ? { headSha: conflict.headSha, conflictingFiles: conflict.files, conflictingFilesLeftOut: conflict.filesLeftOut ?? 0 } : null,
    merged: state.outcome?.kind === 'MERGED' ? { headSha: state.outcome.headSha, mergeCommitSha: state.outcome.mergeCommitSha, mergedAt: state.outcome.at } : null,
    lastFailure: state.lastFailure,
    updatedAt: state.updatedAt,
  };
}
