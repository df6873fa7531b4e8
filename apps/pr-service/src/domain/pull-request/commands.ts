import type { MergeMethod, PrStrategy, PullRequestEffectFailureCode, PullRequestFailureCode } from '@gantry/contracts';
import type { ReportedCheck } from './checks.js';
import type { PullRequestEffectType } from './effects.js';

/**
 * A pull request as GitHub showed it at `observedAt`: the PR, its head's checks (check runs and
 * statuses together), and — when GitHub says it conflicts — the files in conflict, which GitHub does
 * not tell and the effect processor works out with git.
 */
export interface GitHubObservation {
  prNumber: number;
  prUrl: string;
  nodeId: string;
  state: 'open' | 'closed';
  merged: boolean;
  mergeCommitSha: string | null;
  draft: boolean;
  headSha: string;
  baseBranch: string;
  /** null: GitHub is still computing it — no verdict (PR-11). */
  mergeable: boolean | null;
  mergeableState: string;
  autoMergeEnabled: boolean;
  checks: ReportedCheck[];
  conflictingFiles: string[] | null;
  observedAt: string;
  /** GitHub's `updated_at` of the PR in this read (null or absent: none): how recent the replica that answered it is (PR-18). */
  updatedAt?: string | null;
  /**
   * PR-15, PR-18: since when GitHub has shown what this read shows back — a head the branch had before the current one,
   * or the base the PR was on before the recorded change — every read in between showing it too (the effect
   * processor keeps it in the database, whatever replica made the reads, and measures it by the database's clock, given here
   * on this read's clock; absent: this read is the first). Such a read is followed only once shown for HEAD_BACK_CONFIRM_MS.
   */
  shownSince?: string;
}

type Of<T extends string, D> = { type: T; data: { pullRequestId: string; repository: string; branch: string; now: string } & D };

/**
 * The pull request's commands. Every one records a fact learnt elsewhere — a job-service event, the
 * job service's request, what GitHub answered an effect or showed on a read — and time comes in with it.
 */
export type PullRequestCommand =
  | Of<'RecordTaskQueued', { jobId: string; taskId: string; storyId: string | null; storyTaskIds: string[] }>
  | Of<'RecordTaskDone', { jobId: string; taskId: string }>
  | Of<'RecordTaskReopened', { jobId: string; taskId: string; reason: string }>
  | Of<'RecordSprintRunDone', { sprintRunId: string }>
  | Of<
      'RecordBranchPushed',
      {
        headSha: string;
        /** When the job reported the push. */
        pushedAt: string;
        /** The report's position in the job service's log (its event's): the jobs of a branch push one after the other, so a later report is a later push. */
        position: number | null;
        jobId: string | null;
        /** The sprint run of the job that pushed, if it is one's. */
        sprintRunId: string | null;
        flow: { productId: string; baseBranch: string; strategy: PrStrategy; mergeMethod: MergeMethod; requiredChecks: string[]; title: string };
      }
    >
  /** `baseBranch`: the base GitHub shows the PR on (an adopted PR's may not be the product's). */
  | Of<'RecordOpened', { prNumber: number; prUrl: string; nodeId: string; draft: boolean; headSha: string; adopted: boolean; baseBranch?: string }>
  /** GitHub refused a draft (422 "Draft pull requests are not supported in this repository."), or another PR of the repository was refused one. */
  | Of<'RecordDraftsNotSupported', { message: string }>
  | Of<'RecordObservation', { observation: GitHubObservation }>
  | Of<'RecordReadyForReview', { headSha: string; alreadyReady: boolean }>
  | Of<'RecordAutoMergeEnabled', { headSha: string }>
  | Of<'RecordAutoMergeRefused', { headSha: string; reason: 'CLEAN' | 'UNSTABLE' | 'NOT_ALLOWED'; message: string }>
  | Of<'RecordAutoMergeDisabled', { headSha: string }>
  | Of<'RecordMerged', { headSha: string; mergeCommitSha: string | null }>
  /** git could not work out the files of the conflict GitHub shows on this head (PR-10): one failed look-up. */
  | Of<'RecordConflictFilesUnknown', { headSha: string; message: string }>
  /** `refusedMergeMethod`: the repository's settings do not allow the method (a person must change them). */
  | Of<'RecordMergeFailed', { headSha: string; code: PullRequestFailureCode; message: string; mergeableState: string | null; refusedMergeMethod?: MergeMethod }>
  /** The repository allows a merge method now (read while a merge stands refused for it). */
  | Of<'RecordMergeMethodAllowed', { headSha: string; mergeMethod: MergeMethod }>
  | Of<'RecordEffectFailed', { effect: PullRequestEffectType | 'READ_PULL_REQUEST'; code: PullRequestEffectFailureCode; message: string; retryAt?: string }>;

export type PullRequestCommandType = PullRequestCommand['type'];
