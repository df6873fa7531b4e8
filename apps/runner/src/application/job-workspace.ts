import { z } from 'zod';
import { ErrorCode, GantryError, GitRefSchema, type ClaimedJob, type JobKind } from '@gantry/contracts';
import { validateExpectedChanges, type ExpectedChange } from '../domain/idempotency-precheck.js';

/**
 * What the runner reads from a job's payloads (the agent reads the rest). Payloads are opaque to the
 * job service and a coalesced job has several; a later payload's field wins over an earlier one's.
 *
 *   repositoryUrl   the origin to work on (else the runner's GANTRY_REPOSITORY_URL)
 *   branch          the feature branch the work is committed and pushed to (else the job's base ref)
 *   baseRef         where a new branch starts (else the job's base ref, else the target branch)
 *   targetBranch    where the work must end up, for the pre-check and verify (else GANTRY_TARGET_BRANCH)
 *   expectedChanges the task's plan in testable form, for the idempotency pre-check
 *   timeoutMs       the agent's timeout for this job (else GANTRY_AGENT_TIMEOUT_MS)
 */
const ExpectedChangeSchema = z.strictObject({
  path: z.string().min(1).max(1000),
  contains: z.string().min(1).max(10_000).optional(),
  deleted: z.boolean().optional(),
});

const WorkspaceFieldsSchema = z.object({
  repositoryUrl: z.string().min(1).max(2000).optional(),
  branch: GitRefSchema.optional(),
  baseRef: GitRefSchema.optional(),
  targetBranch: GitRefSchema.optional(),
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

/** A job the runner cannot set up (no repository for a code job, a malformed field) is refused with the reason. */
export function jobWorkspaceOf(
  job: Pick<ClaimedJob, 'kind' | 'payloads' | 'baseRef'>,
  defaults: { repositoryUrl: string | null; targetBranch: string; agentTimeoutMs: number },
): JobWorkspace {
  const merged: z.infer<typeof WorkspaceFieldsSchema> = {};
  job.payloads.forEach((payload, index) => {
    const parsed = WorkspaceFieldsSchema.safeParse(payload);
    if (!parsed.success) {
      throw new GantryError(ErrorCode.INVALID_COMMAND, `payload ${index + 1} of the job has invalid workspace fields: ${z.prettifyError(parsed.error)}`);
    }
    for (const [key, value] of Object.entries(parsed.data)) if (value !== undefined) (merged as Record<string, unknown>)[key] = value;
  });
  const code = writesCode(job.kind);
  const repositoryUrl = merged.repositoryUrl ?? defaults.repositoryUrl;
  const branch = merged.branch ?? job.baseRef ?? null;
  const targetBranch = merged.targetBranch ?? defaults.targetBranch;
  if (code && repositoryUrl === null) {
    throw new GantryError(ErrorCode.INVALID_COMMAND, `a ${job.kind} job needs a repository: its payload names no repositoryUrl and the runner has no GANTRY_REPOSITORY_URL`);
  }
  if (repositoryUrl !== null && branch === null) {
    throw new GantryError(ErrorCode.INVALID_COMMAND, `a ${job.kind} job on a repository needs a branch: its payload names none and the job has no base ref`);
  }
  const expectedChanges = (merged.expectedChanges ?? []) as ExpectedChange[];
  validateExpectedChanges(expectedChanges);
  return {
    writesCode: code,
    repositoryUrl,
    branch,
    baseRef: merged.baseRef ?? job.baseRef ?? targetBranch,
    targetBranch,
    expectedChanges,
    timeoutMs: merged.timeoutMs ?? defaults.agentTimeoutMs,
  };
}
