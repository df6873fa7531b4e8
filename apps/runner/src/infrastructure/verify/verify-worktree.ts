import type { ExpectedChange, PrecheckResult } from '../../domain/idempotency-precheck.js';
import { classifyVerification, planCheckOf, workAlreadyOnTarget, type PlanCheck, type PlanFacts, type VerifyResult } from '../../domain/verify-classification.js';
import { git, isSha, resolveCommits } from './git.js';
import { precheckPlan } from './plan-precheck.js';
import { ErrorCode, GantryError, type NetDiff } from '@gantry/contracts';

export interface VerifyWorktreeInput {
  worktreeDir: string;
  /** The commit the job started from, recorded at claim. */
  baseSha: string;
  /** The branch the work is meant for, e.g. `origin/main`; fetched by the caller. */
  target: string;
  /** The agent's last `update_job_status` was PARTIAL, or the pre-check found the plan partly done. */
  partialCompletion?: boolean;
  /**
   * The task's plan, when known: the net diff is held against it, and it decides "work already on the
   * target" for a branch that produced nothing.
   */
  expectedChanges?: readonly ExpectedChange[];
}

export interface NetDiffEntry {
  /** `A`, `M`, `D`, `T` as `git diff --name-status --no-renames` prints them. */
  status: string;
  path: string;
}

/** The facts the job service decides the finishing status from (docs/jobs.md, "The finishing rule"), plus the classification. */
export interface VerificationReport {
  result: VerifyResult;
  baseSha: string;
  headSha: string;
  target: string;
  targetSha: string;
  /** `git rev-list <base>..HEAD`, oldest first. */
  newCommits: string[];
  /** `git diff <base>...HEAD`; a delete-only change is a diff. */
  netDiff: NetDiffEntry[];
  /** `git diff --shortstat <base>...HEAD`. */
  netDiffStat: NetDiff;
  descendsFromBase: boolean;
  /** The branch has commits of its own since base and all of them are in the target. */
  branchMerged: boolean;
  /** There is a net diff and merging HEAD into the target would change nothing (cherry-picked, squashed). */
  netChangeOnTarget: boolean;
  /**
   * The branch's net diff has the same patch-id as one step of the target's first-parent history
   * (a squash commit, a merge commit, a single commit), or the branch itself is merged.
   */
  diffIdenticalToMergedBranch: boolean;
  /** Merging HEAD into the target would conflict (reported for the PR flow; not a verify failure). */
  conflictsWithTarget: boolean;
  /** The plan compared with the target, when the plan was given. */
  planOnTarget: PrecheckResult | null;
  /** The plan compared with the branch (null without a plan), and what that says. */
  plan: PlanFacts | null;
  planCheck: PlanCheck;
  /** The finishing table's "work already on the target branch / branch already merged" column. */
  workAlreadyOnTarget: boolean;
  /** Changes the agent left uncommitted: they will not be pushed. */
  uncommittedPaths: string[];
}

/**
 * Every diff verify takes compares the bytes git stores: no `diff.<driver>.textconv` program (it
 * would run, and change the patch ids), no external diff — whatever the worktree's attributes say.
 */
const NO_PROGRAMS = ['--no-textconv', '--no-ext-diff'];

/*
 * Verify asks git a dozen questions about three commits. They do not depend on one another, so they
 * are asked side by side, in two rounds: what every verdict needs, then what only a branch with
 * commits or a diff needs. Each question is a process that spends most of its life starting up and
 * reading the disk; one after another they took about 100 ms of a job's end.
 */
export async function verifyWorktree(input: VerifyWorktreeInput): Promise<VerificationReport> {
  const dir = input.worktreeDir;
  if (!isSha(input.baseSha)) {
    throw new GantryError(ErrorCode.INVALID_COMMAND, `base_sha must be a full commit SHA, got "${input.baseSha}"`);
  }
  const [baseSha, headSha, targetSha] = (await resolveCommits(dir, [input.baseSha, 'HEAD', input.target])) as [string, string, string];
  const expected = input.expectedChanges && input.expectedChanges.length > 0 ? input.expectedChanges : null;

  const [newCommits, { netDiff, netDiffStat }, descendsFromBase, merge, planOnTarget, uncommitted] = await Promise.all([
    git(dir, ['rev-list', '--reverse', `${baseSha}..${headSha}`, '--']).then(({ stdout }) => lines(stdout)),
    netDiffOf(dir, baseSha, headSha),
    isAncestor(dir, baseSha, headSha),
    mergeIntoTarget(dir, targetSha, headSha),
    expected ? precheckPlan({ repoDir: dir, target: targetSha, expectedChanges: expected }) : null,
    uncommittedPaths(dir),
  ]);
  const hasDiff = netDiff.length > 0;
  const [branchMerged, targetTree, landedAsOneStep, plan] = await Promise.all([
    newCommits.length > 0 && isAncestor(dir, headSha, targetSha),
    hasDiff && merge.clean ? treeOf(dir, targetSha) : null,
    // Not needed when the branch turns out merged; asked beside that question rather than after it.
    hasDiff && netDiffLandedAsOneStep(dir, baseSha, headSha, targetSha),
    expected ? planAgainstBranch(dir, baseSha, headSha, expected, new Set(netDiff.map((e) => e.path))) : null,
  ]);
  const netChangeOnTarget = hasDiff && merge.clean && merge.tree === targetTree;
  const diffIdenticalToMergedBranch = hasDiff && (branchMerged || landedAsOneStep);
  const partialCompletion = (input.partialCompletion ?? false) || planOnTarget?.kind === 'partial';

  return {
    result: classifyVerification({ newCommitCount: newCommits.length, netDiff: hasDiff, descendsFromBase, partialCompletion, plan }),
    baseSha,
    headSha,
    target: input.target,
    targetSha,
    newCommits,
    netDiff,
    netDiffStat,
    descendsFromBase,
    branchMerged,
    netChangeOnTarget,
    diffIdenticalToMergedBranch,
    conflictsWithTarget: !merge.clean,
    planOnTarget,
    plan,
    planCheck: planCheckOf(plan),
    workAlreadyOnTarget: workAlreadyOnTarget({
      branchMerged,
      netChangeOnTarget: netChangeOnTarget || diffIdenticalToMergedBranch,
      planOnTarget: !hasDiff && planOnTarget?.kind === 'already_done',
    }),
    uncommittedPaths: uncommitted,
  };
}

/**
 * Each expected change in place at HEAD (as the pre-check tests a branch), and whether the branch made
 * it — its path is in the net diff — or it was there at base already.
 */
async function planAgainstBranch(dir: string, baseSha: string, headSha: string, expected: readonly ExpectedChange[], changedPaths: Set<string>): Promise<PlanFacts> {
  const [atHead, atBase] = await Promise.all([
    precheckPlan({ repoDir: dir, target: headSha, expectedChanges: expected }),
    precheckPlan({ repoDir: dir, target: baseSha, expectedChanges: expected }),
  ]);
  const presentAt = (result: PrecheckResult) => new Set(result.kind === 'not_started' ? [] : result.present.map((c) => c.path));
  const head = presentAt(atHead);
  const base = presentAt(atBase);
  let present = 0;
  let madeByBranch = 0;
  for (const change of expected) {
    if (!head.has(change.path)) continue;
    if (changedPaths.has(change.path)) {
      present++;
      madeByBranch++;
    } else if (base.has(change.path)) {
      present++;
    }
  }
  return { expected: expected.length, present, madeByBranch };
}

async function isAncestor(dir: string, ancestor: string, descendant: string): Promise<boolean> {
  const { exitCode } = await git(dir, ['merge-base', '--is-ancestor', ancestor, descendant], { okExitCodes: [1] });
  return exitCode === 0;
}

/** `git merge-tree --write-tree` merges in memory: the worktree and index are never touched. */
async function mergeIntoTarget(dir: string, targetSha: string, headSha: string): Promise<{ clean: boolean; tree: string | null }> {
  const { stdout, exitCode } = await git(dir, ['merge-tree', '--write-tree', '--no-messages', targetSha, headSha], {
    okExitCodes: [1, 128],
  });
  if (exitCode !== 0) return { clean: false, tree: null };
  return { clean: true, tree: stdout.split('\n')[0]!.trim() };
}

/** How far back the target's history is searched for a step carrying the branch's diff. */
const MERGED_STEPS_SEARCHED = 500;

async function netDiffLandedAsOneStep(dir: string, baseSha: string, headSha: string, targetSha: string): Promise<boolean> {
  const branchPatchId = git(dir, ['diff', '--no-color', ...NO_PROGRAMS, '--no-renames', `${baseSha}...${headSha}`, '--']).then(({ stdout }) =>
    patchIds(dir, stdout),
  );
  const targetStepIds = git(dir, [
    'log',
    '--first-parent',
    '--diff-merges=first-parent',
    '-p',
    '--no-color',
    ...NO_PROGRAMS,
    '--no-renames',
    `--max-count=${MERGED_STEPS_SEARCHED}`,
    `${headSha}..${targetSha}`,
    '--',
  ]).then(({ stdout }) => patchIds(dir, stdout));
  const [[branchId], targetIds] = await Promise.all([branchPatchId, targetStepIds]);
  return branchId !== undefined && targetIds.includes(branchId);
}

async function patchIds(dir: string, patches: string): Promise<string[]> {
  if (patches.trim() === '') return [];
  const { stdout } = await git(dir, ['patch-id', '--stable'], { input: patches });
  return lines(stdout).map((line) => line.split(' ')[0]!);
}

async function treeOf(dir: string, commit: string): Promise<string> {
  return (await git(dir, ['rev-parse', '--verify', `${commit}^{tree}`])).stdout.trim();
}

async function uncommittedPaths(dir: string): Promise<string[]> {
  const { stdout } = await git(dir, ['status', '--porcelain=v1', '-z', '--untracked-files=all']);
  const paths: string[] = [];
  const records = stdout.split('\0');
  for (let i = 0; i < records.length; i++) {
    const record = records[i]!;
    if (record.length < 4) continue;
    paths.push(record.slice(3));
    // A rename or copy is followed by its source path as a record of its own.
    if (record[0] === 'R' || record[0] === 'C') i++;
  }
  return paths;
}

/**
 * `git diff <base>...HEAD` as `--name-status` and `--shortstat` would print it, from one process:
 * `--raw --numstat -z` prints a raw record (`:<modes> <shas> <status>` NUL path NUL) per file, then
 * a numstat record (`<added> TAB <deleted> TAB <path>` NUL, `-` for a binary file's counts, which
 * `--shortstat` counts as a file changed and no lines).
 */
async function netDiffOf(dir: string, baseSha: string, headSha: string): Promise<{ netDiff: NetDiffEntry[]; netDiffStat: NetDiff }> {
  const { stdout } = await git(dir, ['diff', '--raw', '--numstat', '-z', '--no-renames', ...NO_PROGRAMS, `${baseSha}...${headSha}`, '--']);
  const fields = stdout.split('\0');
  const netDiff: NetDiffEntry[] = [];
  let i = 0;
  for (; i + 1 < fields.length && fields[i]!.startsWith(':'); i += 2) {
    netDiff.push({ status: fields[i]!.slice(fields[i]!.lastIndexOf(' ') + 1), path: fields[i + 1]! });
  }
  const netDiffStat: NetDiff = { filesChanged: 0, insertions: 0, deletions: 0 };
  for (; i < fields.length; i++) {
    const [added, deleted] = fields[i]!.split('\t', 2);
    if (deleted === undefined) continue;
    netDiffStat.filesChanged++;
    netDiffStat.insertions += Number(added) || 0;
    netDiffStat.deletions += Number(deleted) || 0;
  }
  return { netDiff, netDiffStat };
}

function lines(output: string): string[] {
  return output.split('\n').filter((l) => l !== '');
}
