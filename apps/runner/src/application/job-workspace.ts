import { z } from 'zod';
import {
  ErrorCode,
  featureBranchFor,
  GantryError,
  leaseNamesProblem,
  type ClaimedJob,
  type JobKind,
} from '@gantry/contracts';
import { validateExpectedChanges, type ExpectedChange } from '../domain/idempotency-precheck.js';

/**
 * Where a job works comes from the claim: the job service resolved the repository, the clone URL,
 * the branch and the target branch against the job's product at enqueue (the runner's
 * GANTRY_REPOSITORY_URL / GANTRY_TARGET_BRANCH only stand in for jobs enqueued before products).
 * A job without a branch works in a scratch directory; a job that writes code needs one.
 *
 * From the payloads (opaque to the job service; a coalesced job has several, a later payload's field
 * winning over an earlier one's) the runner reads only what concerns the agent run:
 *   expectedChanges the task's plan in testable form, for the idempotency pre-check
 *   timeoutMs       the agent's timeout for this job (else GANTRY_AGENT_TIMEOUT_MS)
 */
const ExpectedChangeSchema = z.strictObject({
  path: z.string().min(1).max(1000),
  contains: z.string().min(1).max(10_000).optional(),
  deleted: z.boolean().optional(),
});

const WorkspaceFieldsSchema = z.object({
  expectedChanges: z.array(ExpectedChangeSchema).max(500).optional(),
  timeoutMs: z.number().int().min(1).max(2 ** 31 - 1).optional(),
});

export interface JobWorkspace {
  /** TASK_ and SPRINT_IMPLEMENTATION: verified, pushed, finished with the verification facts. */
  writesCode: boolean;
  repositoryUrl: string | null;
  branch: string | null;
  baseRef: string | null;
  targetBranch: string;
  expectedChanges: ExpectedChange[];
  timeoutMs: number;
}

export function writesCode(kind: JobKind): boolean {
  switch (kind) {
    case 'TASK_IMPLEMENTATION':
    case 'SPRINT_IMPLEMENTATION':
      return true;
    case 'IDEA_GRILL':
    case 'IDEA_MAKE_PLAN':
    case 'PLAN_CHAT':
    case 'REVIEW':
      return false;
  }
}

/**
 * A job the runner cannot set up is refused with the reason: INVALID_COMMAND when the job itself is
 * malformed (no runner could run it), PRECONDITION_FAILED when only this runner lacks what it needs
 * (no repository for a code job enqueued before products, and no GANTRY_REPOSITORY_URL).
 */
export function jobWorkspaceOf(
  job: Pick<ClaimedJob, 'jobId' | 'kind' | 'payloads' | 'baseRef' | 'repositoryUrl' | 'branch' | 'targetBranch' | 'productId' | 'storyId' | 'taskId'>,
  defaults: { repositoryUrl: string | null; targetBranch: string; agentTimeoutMs: number },
): JobWorkspace {
  const code = writesCode(job.kind);
  const merged: z.infer<typeof WorkspaceFieldsSchema> = {};
  job.payloads.forEach((payload, index) => {
    const parsed = WorkspaceFieldsSchema.safeParse(payload);
    if (!parsed.success) {
      throw new GantryError(ErrorCode.INVALID_COMMAND, `payload ${index + 1} of the job has invalid workspace fields: ${z.prettifyError(parsed.error)}`);
    }
    for (const [key, value] of Object.entries(parsed.data)) if (value !== undefined) (merged as Record<string, unknown>)[key] = value;
  });
  const repositoryUrl = job.repositoryUrl ?? defaults.repositoryUrl;
  // A job enqueued before products names no repository: a code job then works on a feature branch
  // derived from it (never on its base ref, usually the target); any other job on its base ref.
  const branch =
    job.repositoryUrl !== null ? job.branch : (job.branch ?? (code ? featureBranchFor(job) : (job.baseRef ?? null)));
  const targetBranch = job.targetBranch ?? defaults.targetBranch;
  if (code && repositoryUrl === null) {
    // This runner's lack (a runner with GANTRY_REPOSITORY_URL can run the job), not the job's malformation.
    throw new GantryError(ErrorCode.PRECONDITION_FAILED, `a ${job.kind} job needs a repository: the job names none and the runner has no GANTRY_REPOSITORY_URL`);
  }
  if (code && branch === null) {
    throw new GantryError(ErrorCode.INVALID_COMMAND, `a ${job.kind} job needs a branch to push to: the job names neither a branch nor a base ref`);
  }
  const baseRef = job.baseRef ?? targetBranch;
  // What acquire_worktree refuses of the names (recorded before the job service held enqueues to the same
  // check) it refuses at every claim and on every host: given back, the job would spend all its attempts on it.
  const unleasable = branch === null || repositoryUrl === null ? null : leaseNamesProblem({ repositoryUrl, branch, baseRef });
  if (unleasable !== null) throw new GantryError(ErrorCode.INVALID_COMMAND, `the job's ${unleasable.what} cannot be leased: ${unleasable.problem}`);
  const expectedChanges = (merged.expectedChanges ?? []) as ExpectedChange[];
  validateExpectedChanges(expectedChanges);
  return {
    writesCode: code,
    repositoryUrl: branch === null ? null : repositoryUrl,
    branch,
    baseRef,
    targetBranch,
    expectedChanges,
    timeoutMs: merged.timeoutMs ?? defaults.agentTimeoutMs,
  };
}
