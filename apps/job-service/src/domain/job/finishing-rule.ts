import type { NetDiff, TaskStatus, TerminalJobStatus, VerificationFacts } from '@gantry/contracts';

/** What the job knows of its push when it finishes (from its JobPushReported, if any). */
export interface PushRecord {
  headSha: string;
  /** Null when the remote already had headSha: nothing was pushed. */
  pushedAt: string | null;
}

/**
 * The runner's verification facts plus the job's own push record. Without `cancelled`: a cancelled
 * run is never finished by this rule — `cancel_job` ends the job, and a runner's finish that says
 * `cancelled` is its stop report or is refused (decider.ts, `FinishJob`).
 */
export interface FinishingFacts extends Omit<VerificationFacts, 'cancelled'> {
  push: PushRecord | null;
}

export interface FinishOutcome {
  jobStatus: Exclude<TerminalJobStatus, 'CANCELLED'>;
  taskStatus: TaskStatus;
  error: string | null;
  /** Only when something was really pushed. */
  pushedAt: string | null;
}

export const VERIFY_PRODUCED_NO_OUTPUT = 'verify produced no output';
export const VERIFY_DIVERGENT = 'verify divergent — manual review';

/** A delete-only change has deletions and no insertions: it is a diff all the same. */
export function hasNetDiff(diff: NetDiff): boolean {
  return diff.filesChanged > 0 || diff.insertions > 0 || diff.deletions > 0;
}

/**
 * The finishing rule (docs/jobs.md), the only place a job's terminal status is decided.
 * SKIPPED means "no net output and no error: the work was already done"; FAILED is only for
 * real errors; DONE needs a new commit on the feature branch.
 */
export function decideFinish(facts: FinishingFacts): FinishOutcome {
  const pushedAt = facts.push?.pushedAt ?? null;
  const outcome = (jobStatus: FinishOutcome['jobStatus'], taskStatus: TaskStatus, error: string | null = null): FinishOutcome => ({
    jobStatus,
    taskStatus,
    error,
    pushedAt,
  });

  if (facts.failure) return outcome('FAILED', 'IN_PROGRESS', `${failureLabel[facts.failure.kind]}: ${facts.failure.message}`);

  const diff = hasNetDiff(facts.netDiff);
  // A verify that calls a real diff EMPTY (the delete-only case) is judged by the diff, not the label.
  const verify = facts.verifyResult === 'EMPTY' && diff ? 'ALIGNED' : facts.verifyResult;

  switch (verify) {
    case 'NOT_APPLICABLE':
      return outcome('DONE', 'DONE');
    case 'ALIGNED':
    case 'PARTIAL':
      if (facts.newCommit) return outcome('DONE', 'DONE');
      if (!diff && facts.workAlreadyOnTarget) return outcome('SKIPPED', 'DONE');
      return outcome('FAILED', 'IN_PROGRESS', `verify reported ${facts.verifyResult} but there is no new commit on the feature branch since base_sha`);
    case 'EMPTY':
      return facts.workAlreadyOnTarget ? outcome('SKIPPED', 'DONE') : outcome('FAILED', 'IN_PROGRESS', VERIFY_PRODUCED_NO_OUTPUT);
    case 'DIVERGENT':
      if (facts.diffIdenticalToMergedBranch || (!diff && facts.workAlreadyOnTarget)) return outcome('SKIPPED', 'DONE');
      return outcome('FAILED', 'IN_PROGRESS', VERIFY_DIVERGENT);
    default:
      return assertNever(verify);
  }
}

const failureLabel = {
  COMPILE: 'compile failure',
  TEST: 'test failure',
  PUSH: 'push failure',
  EXCEPTION: 'exception',
} as const;

function assertNever(value: never): never {
  throw new Error(`unhandled verify result ${String(value)}`);
}
