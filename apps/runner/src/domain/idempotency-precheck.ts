import { ErrorCode, GantryError } from '@gantry/contracts';

/**
 * A task's implementation plan in the structured form the pre-check can test against a branch:
 * each entry names a file that must exist on the target and, optionally, text it must contain.
 * `deleted: true` means the plan removes the file, so it is done when the file is absent.
 */
export interface ExpectedChange {
  path: string;
  contains?: string;
  deleted?: boolean;
}

/** What the verifier saw on the target for one expected change. */
export interface ExpectedChangeObservation {
  change: ExpectedChange;
  present: boolean;
  /** The target commit that brought the change about (added the file or text, deleted the file); null when absent. */
  commit: string | null;
}

export interface FoundChange extends ExpectedChange {
  commit: string;
}

export type PrecheckResult =
  | { kind: 'already_done'; commit: string; present: FoundChange[] }
  | { kind: 'partial'; commit: string; present: FoundChange[]; missing: ExpectedChange[] }
  | { kind: 'not_started' };

/**
 * Fully present → already done (the runner finishes SKIPPED naming the commit without starting the
 * agent); partly → partial (the agent does only the rest); none — or an empty plan, which proves
 * nothing — → not started.
 *
 * `commit` names the newest of the commits that brought the present changes (for already_done: the
 * one that completed the plan). The caller passes `newestOf`, because ordering commits takes git.
 */
export function decidePrecheck(
  observations: readonly ExpectedChangeObservation[],
  newestOf: (commits: string[]) => string,
): PrecheckResult {
  const present: FoundChange[] = [];
  const missing: ExpectedChange[] = [];
  for (const { change, present: isPresent, commit } of observations) {
    if (!isPresent) {
      missing.push(change);
      continue;
    }
    if (commit === null) {
      throw new GantryError(ErrorCode.INTERNAL, `the change to ${change.path} is present on the target but no commit introduced it`);
    }
    present.push({ ...change, commit });
  }
  if (present.length === 0) return { kind: 'not_started' };
  const commit = newestOf(present.map((p) => p.commit));
  if (missing.length > 0) return { kind: 'partial', commit, present, missing };
  return { kind: 'already_done', commit, present };
}

/** Refuses a plan entry the pre-check could not test safely (absolute or escaping paths, an empty needle). */
export function validateExpectedChanges(changes: readonly ExpectedChange[]): void {
  for (const change of changes) {
    const parts = change.path.split('/');
    // A NUL no git operand can carry: spawning git with it failed untyped at the pre-check, after the job had started.
    if (change.path === '' || change.path.startsWith('/') || parts.includes('..') || parts.includes('.') || parts.includes('') || change.path.includes('\u0000')) {
      throw new GantryError(ErrorCode.INVALID_COMMAND, `expected change path "${change.path}" must be a plain path relative to the repository root`);
    }
    if (change.contains !== undefined && change.contains === '') {
      throw new GantryError(ErrorCode.INVALID_COMMAND, `expected change for ${change.path} has an empty "contains"`);
    }
    if (change.deleted && change.contains !== undefined) {
      throw new GantryError(ErrorCode.INVALID_COMMAND, `expected change for ${change.path} cannot both delete the file and expect text in it`);
    }
  }
}
