import {
  decidePrecheck,
  validateExpectedChanges,
  type ExpectedChange,
  type ExpectedChangeObservation,
  type PrecheckResult,
} from '../../domain/idempotency-precheck.js';
import { git, resolveCommit } from './git.js';

export interface PlanPrecheckInput {
  /** Any checkout (worktree or clone) whose object database has the target ref. */
  repoDir: string;
  /** The branch the work must end up on, e.g. `origin/main` (fetched by the caller). */
  target: string;
  expectedChanges: readonly ExpectedChange[];
}

/** The pre-check (docs/jobs.md, "Before writing: the pre-check"): compares the task's plan with the target branch. */
export async function precheckPlan(input: PlanPrecheckInput): Promise<PrecheckResult> {
  validateExpectedChanges(input.expectedChanges);
  const targetSha = await resolveCommit(input.repoDir, input.target);
  const observations: ExpectedChangeObservation[] = [];
  for (const change of input.expectedChanges) {
    observations.push(await observe(input.repoDir, targetSha, change));
  }
  const presentCommits = observations.flatMap((o) => (o.present && o.commit ? [o.commit] : []));
  const newest = presentCommits.length > 0 ? await newestOf(input.repoDir, presentCommits) : '';
  return decidePrecheck(observations, () => newest);
}

async function observe(repoDir: string, targetSha: string, change: ExpectedChange): Promise<ExpectedChangeObservation> {
  const entry = await treeEntry(repoDir, targetSha, change.path);
  if (change.deleted) {
    if (entry !== null) return { change, present: false, commit: null };
    // A file that never existed was not deleted by anyone: no commit can be named, so it is not "done".
    const commit = await lastCommit(repoDir, targetSha, change.path, ['--diff-filter=D']);
    return { change, present: commit !== null, commit };
  }
  if (entry === null) return { change, present: false, commit: null };
  if (change.contains !== undefined) {
    if (entry.type !== 'blob') return { change, present: false, commit: null };
    const { stdout } = await git(repoDir, ['cat-file', 'blob', entry.sha]);
    if (!stdout.includes(change.contains)) return { change, present: false, commit: null };
    const commit =
      (await lastCommit(repoDir, targetSha, change.path, [`-S${change.contains}`])) ??
      (await lastCommit(repoDir, targetSha, change.path, []));
    return { change, present: true, commit };
  }
  const commit =
    (await lastCommit(repoDir, targetSha, change.path, ['--diff-filter=A'])) ?? (await lastCommit(repoDir, targetSha, change.path, []));
  return { change, present: true, commit };
}

/**
 * A planned path as git must read it: the file it names. A pathspec is a pattern (`[id]`, `*`, `?`,
 * a leading `:` with its magic), and a Next.js route `app/[id]/page.tsx` would match `app/d/page.tsx`:
 * its deletion there would count as the plan's.
 */
const literal = (path: string): string => `:(literal)${path}`;

async function treeEntry(repoDir: string, commit: string, path: string): Promise<{ type: string; sha: string } | null> {
  const { stdout } = await git(repoDir, ['ls-tree', '-z', commit, '--', literal(path)]);
  const record = stdout.split('\0').find((r) => r.endsWith(`\t${path}`));
  if (!record) return null;
  const [, type, sha] = record.slice(0, record.indexOf('\t')).split(' ');
  return { type: type!, sha: sha! };
}

async function lastCommit(repoDir: string, from: string, path: string, filters: string[]): Promise<string | null> {
  // `-S` compares contents: never through a textconv program the worktree's attributes name.
  const { stdout } = await git(repoDir, ['log', '-1', '--format=%H', '--no-textconv', '--no-ext-diff', ...filters, from, '--', literal(path)]);
  const sha = stdout.trim();
  return sha === '' ? null : sha;
}

/** The commit among `commits` that no other one descends from: where the last piece of the plan arrived. */
async function newestOf(repoDir: string, commits: string[]): Promise<string> {
  const { stdout } = await git(repoDir, ['rev-list', '--topo-order', '--max-count=1', ...new Set(commits), '--']);
  return stdout.trim();
}
