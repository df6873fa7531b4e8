import type { ExpectedChange, PrecheckResult } from '../../domain/idempotency-precheck.js';
import { classifyVerification, planCheckOf, workAlreadyOnTarget, type PlanCheck, type PlanFacts, type VerifyResult } from '../../domain/verify-classification.js';
import { git, isSha, resolveCommit } from './git.js';
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

export async function verifyWorktree(input: VerifyWorktreeInput): Promise<VerificationReport> {
  const dir = input.worktreeDir;
  if (!isSha(input.baseSha)) {
    throw new GantryError(ErrorCode.INVALID_COMMAND, `base_sha must be a full commit SHA, got "${input.baseSha}"`);
  }
  const baseSha = await resolveCommit(dir, input.baseSha);
  const headSha = await resolveCommit(dir, 'HEAD');
  const targetSha = await resolveCommit(dir, input.target);

  const newCommits = lines((await git(dir, ['rev-list', '--reverse', `${baseSha}..${headSha}`, '--'])).stdout);
  const netDiff = parseNameStatus((await git(dir, ['diff', '--name-status', '-z', '--no-renames', ...NO_PROGRAMS, `${baseSha}...${headSha}`, '--'])).stdout);
  const netDiffStat = parseShortStat((await git(dir, ['diff', '--shortstat', '--no-renames', ...NO_PROGRAMS, `${baseSha}...${headSha}`, '--'])).stdout);
  const descendsFromBase = await isAncestor(dir, baseSha, headSha);
  const branchMerged = newCommits.length > 0 && (await isAncestor(dir, headSha, targetSha));
  const merge = await mergeIntoTarget(dir, targetSha, headSha);
  const netChangeOnTarget = netDiff.length > 0 && merge.clean && merge.tree === (await treeOf(dir, targetSha));
  const diffIdenticalToMergedBranch =
    netDiff.length > 0 && (branchMerged || (await netDiffLandedAsOneStep(dir, baseSha, headSha, targetSha)));
  const expected = input.expectedChanges && input.expectedChanges.length > 0 ? input.expectedChanges : null;
  const planOnTarget = expected ? await precheckPlan({ repoDir: dir, target: targetSha, expectedChanges: expected }) : null;
  const partialCompletion = (input.partialCompletion ?? false) || planOnTarget?.kind === 'partial';
  const plan = expected ? await planAgainstBranch(dir, baseSha, headSha, expected, new Set(netDiff.map((e) => e.path))) : null;

  return {
    result: classifyVerification({ newCommitCount: newCommits.length, netDiff: netDiff.length > 0, descendsFromBase, partialCompletion, plan }),
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
      planOnTarget: netDiff.length === 0 && planOnTarget?.kind === 'already_done',
    }),
    uncommittedPaths: await uncommittedPaths(dir),
  };
}

/**
 * Each expected change in place at HEAD (as the pre-check tests a branch), and whether the branch made
 * it — its path is in the net diff — or it was there at base already.
 */
async function planAgainstBranch(dir: string, baseSha: string, headSha: string, expected: readonly ExpectedChange[], changedPaths: Set<string>): Promise<PlanFacts> {
  const atHead = await precheckPlan({ repoDir: dir, target: headSha, expectedChanges: expected });
  const atBase = await precheckPlan({ repoDir: dir, target: baseSha, expectedChanges: expected });
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
  const branchPatch = (await git(dir, ['diff', '--no-color', ...NO_PROGRAMS, '--no-renames', `${baseSha}...${headSha}`, '--'])).stdout;
  const [branchId] = await patchIds(dir, branchPatch);
  if (!branchId) return false;
  const targetSteps = (
    await git(dir, [
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
    ])
  ).stdout;
  return (await patchIds(dir, targetSteps)).includes(branchId);
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

function parseNameStatus(output: string): NetDiffEntry[] {
  const fields = output.split('\0').filter((f) => f !== '');
  const entries: NetDiffEntry[] = [];
  for (let i = 0; i + 1 < fields.length; i += 2) entries.push({ status: fields[i]!, path: fields[i + 1]! });
  return entries;
}

function parseShortStat(output: string): NetDiff {
  const count = (pattern: RegExp) => Number(pattern.exec(output)?.[1] ?? 0);
  return {
    filesChanged: count(/(\d+) files? changed/),
    insertions: count(/(\d+) insertions?\(\+\)/),
    deletions: count(/(\d+) deletions?\(-\)/),
  };
}

function lines(output: string): string[] {
  return output.split('\n').filter((l) => l !== '');
}
