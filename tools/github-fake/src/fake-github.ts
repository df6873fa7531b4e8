import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ApiError, DOCUMENTATION, GraphQLFailure, notFound, validationFailed } from './errors.js';
import { BareRepository, type Identity } from './git/bare-repository.js';
import {
  DEFAULT_SETTINGS,
  emptyState,
  gitHubTime,
  latestCheckRuns,
  latestStatuses,
  mergeableState,
  summarizeChecks,
  type AutoMergeRecord,
  type BranchProtection,
  type CheckConclusion,
  type CheckRunRecord,
  type CheckStatus,
  type CheckSuiteRecord,
  type CommitState,
  type FakeState,
  type MergeMethod,
  type PullRecord,
  type RepositoryRecord,
  type RepositorySettings,
} from './model.js';
import {
  renderCheckRun,
  renderCheckSuite,
  renderSimpleCheckSuite,
  renderCombinedStatus,
  renderPull,
  renderRepository,
  renderStatus,
  renderStatusCommit,
  nodeId,
  renderSimpleCommit,
  renderUser,
  suiteSummary,
  userId,
  type PullStats,
  type RenderContext,
} from './render.js';
import type { WebhookDispatcher } from './webhooks.js';

/*
 * The GitHub the fake models: repositories over bare git repositories, pull requests with GitHub's
 * mergeability rules, check runs and statuses, auto-merge, and the webhooks each change emits. Every
 * request and every background step (push detection, mergeability computation, auto-merge) runs
 * one at a time through `run`, so the state is always consistent with the repositories on disk.
 */

export interface FakeGitHubOptions {
  dataDir: string;
  render: RenderContext;
  webhooks: WebhookDispatcher;
  mergeabilityDelayMs: number;
  log: (message: string, fields: Record<string, unknown>) => void;
}

export interface AutoCheck {
  /** Check run name, e.g. "ci". */
  name: string;
  /** How it ends (default success). */
  conclusion?: CheckConclusion;
  /** How long it stays in progress (default 200 ms). */
  delayMs?: number;
}

export interface CreateRepositoryInput {
  owner: string;
  name: string;
  defaultBranch?: string;
  /** Serve an existing bare repository in place instead of creating one. */
  gitDir?: string;
  /** Files of the first commit of a new repository (default: a README). */
  initialFiles?: Record<string, string>;
  settings?: Partial<RepositorySettings>;
  requiredChecks?: string[];
  strict?: boolean;
}

export interface RepositoryUpdate extends Partial<RepositorySettings> {
  requiredChecks?: string[];
  strict?: boolean;
}

const NAME = /^[A-Za-z0-9_.-]{1,100}$/;
const SHA = /^[0-9a-f]{40}$/;
/** Who the automatic checks come from. */
const AUTO_CI = 'github-fake-ci';
/** Who a push the fake noticed is attributed to (git does not say who pushed). */
const PUSHER = 'gantry';
const GITHUB_IDENTITY: Identity = { name: 'GitHub', email: 'noreply@github.com' };

/**
 * A time a caller gives (a check run's `started_at`, `completed_at`: ISO 8601, any offset) as GitHub keeps and shows it:
 * UTC, to the second. Absent is null; one that is no time is GitHub's 422.
 */
function givenTime(value: unknown, field: string, documentation: string): string | null {
  if (value === undefined || value === null) return null;
  const ms = typeof value === 'string' && /^\d{4}-\d{2}-\d{2}T/.test(value) ? Date.parse(value) : NaN;
  if (Number.isNaN(ms)) throw validationFailed(documentation, { resource: 'CheckRun', code: 'invalid', field });
  return gitHubTime(ms);
}

export function identityOf(login: string): Identity {
  return { name: login, email: `${userId(login)}+${login}@users.noreply.github.com` };
}

export class FakeGitHub {
  state: FakeState = emptyState();
  private readonly repositories = new Map<string, BareRepository>();
  private chain: Promise<unknown> = Promise.resolve();
  private savedJson = '';
  private readonly timers = new Set<NodeJS.Timeout>();
  mergeabilityMode: 'auto' | 'manual' = 'auto';
  /** Checks "CI" reports by itself for every new PR head (a stand-in for workflows `on: pull_request`). */
  autoChecks: AutoCheck[] = [];
  private closed = false;
  /** The moment GitHub's clock is held at (control API), or null: it runs. */
  private clockHeldAt: number | null = null;

  constructor(private readonly options: FakeGitHubOptions) {}

  /** A change of the PR at `at`: its `updated_at`, and its next revision (what a stale read tells versions by). */
  private changed(pull: PullRecord, at: string): void {
    pull.updatedAt = at;
    pull.revision = (pull.revision ?? 0) + 1;
  }

  /** GitHub's time now, to the second. */
  now(): string {
    return gitHubTime(this.clockHeldAt ?? Date.now());
  }

  /**
   * Holds GitHub's clock at this second (a test's way to make two changes in one second: GitHub's times are to the
   * second, so they then show the same `updated_at`), or lets it run again. It never goes back.
   */
  holdClock(held: boolean): string {
    this.clockHeldAt = held ? (this.clockHeldAt ?? Date.now()) : null;
    return this.now();
  }

  get ctx(): RenderContext {
    return this.options.render;
  }

  private get statePath(): string {
    return path.join(this.options.dataDir, 'state.json');
  }

  /** Loads the saved state (PRs, checks, statuses of an earlier run) and opens its repositories. */
  load(): void {
    mkdirSync(this.options.dataDir, { recursive: true });
    if (existsSync(this.statePath)) {
      this.state = JSON.parse(readFileSync(this.statePath, 'utf8')) as FakeState;
      this.savedJson = JSON.stringify(this.state);
    }
    for (const [fullName, record] of Object.entries(this.state.repositories)) this.repositories.set(fullName, new BareRepository(record.gitDir));
    // Computations that were pending when the fake stopped start again.
    for (const pull of this.state.pulls) if (pull.state === 'open' && !pull.mergeability.computed) this.scheduleMergeability(pull);
  }

  private save(): void {
    const json = JSON.stringify(this.state);
    if (json === this.savedJson) return;
    const temporary = `${this.statePath}.tmp`;
    writeFileSync(temporary, json);
    renameSync(temporary, this.statePath);
    this.savedJson = json;
  }

  /** Runs `step` after every earlier one, then notices pushes it made and saves. */
  run<T>(step: () => Promise<T>): Promise<T> {
    const next = this.chain.then(async () => {
      await this.refreshAll();
      try {
        return await step();
      } finally {
        await this.refreshAll();
        // An auto-merge moves a base branch: the PRs on it are refreshed before anyone reads them.
        if (await this.reconcileAutoMerge()) await this.refreshAll();
        this.save();
      }
    });
    this.chain = next.catch(() => undefined);
    return next;
  }

  close(): void {
    this.closed = true;
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
  }

  idle(): Promise<void> {
    return this.chain.then(() => undefined);
  }

  private nextId(): number {
    return this.state.nextId++;
  }

  // ---------------------------------------------------------------------------------------------
  // Repositories

  repository(owner: string, name: string): RepositoryRecord {
    const record = this.findRepository(owner, name);
    if (!record) throw notFound();
    return record;
  }

  /**
   * The repository named `owner/name`, or none. GitHub does not treat owner and repository names
   * case-sensitively (`ACME/Shop` is `acme/shop`), and answers with the names as they were registered.
   */
  findRepository(owner: string, name: string): RepositoryRecord | undefined {
    const exact = this.state.repositories[`${owner}/${name}`];
    if (exact) return exact;
    const wanted = `${owner}/${name}`.toLowerCase();
    return Object.values(this.state.repositories).find((r) => `${r.owner}/${r.name}`.toLowerCase() === wanted);
  }

  git(record: RepositoryRecord): BareRepository {
    return this.repositories.get(`${record.owner}/${record.name}`)!;
  }

  async createRepository(input: CreateRepositoryInput): Promise<RepositoryRecord> {
    if (!NAME.test(input.owner) || !NAME.test(input.name)) throw validationFailed(DOCUMENTATION.root, { resource: 'Repository', code: 'invalid', field: 'name' });
    const fullName = `${input.owner}/${input.name}`;
    // The same names in another case are the same repository.
    if (this.findRepository(input.owner, input.name)) {
      throw validationFailed(DOCUMENTATION.root, { resource: 'Repository', code: 'custom', field: 'name', message: 'name already exists on this account' });
    }
    const defaultBranch = input.defaultBranch ?? 'main';
    let bare: BareRepository;
    if (input.gitDir) {
      bare = new BareRepository(path.resolve(input.gitDir));
      if (!existsSync(path.join(bare.gitDir, 'HEAD'))) throw new ApiError(422, `${input.gitDir} is not a git repository`);
    } else {
      bare = await BareRepository.init(path.join(this.options.dataDir, 'repos', input.owner, `${input.name}.git`), defaultBranch);
      const files = input.initialFiles ?? { 'README.md': `# ${input.name}\n` };
      const first = await bare.commitFiles(null, files, 'Initial commit', identityOf(input.owner));
      await bare.updateRef(`refs/heads/${defaultBranch}`, first, null);
    }
    const now = this.now();
    const record: RepositoryRecord = {
      id: this.nextId(),
      owner: input.owner,
      name: input.name,
      gitDir: bare.gitDir,
      defaultBranch,
      createdAt: now,
      pushedAt: now,
      settings: { ...DEFAULT_SETTINGS, ...input.settings },
      protection: { requiredChecks: input.requiredChecks ?? [], strict: input.strict ?? false },
      branches: Object.fromEntries(bare.readBranches()),
    };
    this.state.repositories[fullName] = record;
    this.repositories.set(fullName, bare);
    this.options.log('repository hosted', { repository: fullName, gitDir: bare.gitDir });
    return record;
  }

  updateRepository(record: RepositoryRecord, update: RepositoryUpdate): RepositoryRecord {
    const { requiredChecks, strict, ...settings } = update;
    for (const key of Object.keys(settings) as (keyof RepositorySettings)[]) {
      if (settings[key] !== undefined) record.settings[key] = settings[key]!;
    }
    const protection: BranchProtection = {
      requiredChecks: requiredChecks ?? record.protection.requiredChecks,
      strict: strict ?? record.protection.strict,
    };
    record.protection = protection;
    return record;
  }

  renderRepository(record: RepositoryRecord) {
    return renderRepository(this.ctx, this.state, record);
  }

  /** A commit made inside the fake on `branch` (someone else's push). */
  async commit(record: RepositoryRecord, input: { branch: string; files: Record<string, string | null>; message: string; from?: string; author?: string }) {
    const bare = this.git(record);
    const tip = bare.readBranches().get(input.branch) ?? null;
    const parent = tip ?? (await bare.resolveCommit(input.from ?? record.defaultBranch));
    const sha = await bare.commitFiles(parent, input.files, input.message, identityOf(input.author ?? 'someone-else'));
    if (!(await bare.updateRef(`refs/heads/${input.branch}`, sha, tip))) throw new ApiError(409, `branch ${input.branch} moved meanwhile`);
    return { sha, branch: input.branch };
  }

  // ---------------------------------------------------------------------------------------------
  // Pushes: a branch that moved since it was last seen

  /** Notices the pushes of every repository; true when a branch moved. */
  async refreshAll(): Promise<boolean> {
    let moved = false;
    for (const record of Object.values(this.state.repositories)) if (await this.refreshRepository(record)) moved = true;
    return moved;
  }

  /**
   * The regular look for pushes: like `run` with nothing to do, except that when no branch moved
   * nothing else is looked at and the state is not written out. Every change of the state comes
   * through `run`, which reconciles and saves after it, so a look that found no push has nothing
   * to add; writing the state out (serialized whole, megabytes once a test posts a check with a
   * name of a million characters) ten times a second took a third of a core.
   */
  poll(): Promise<void> {
    const next = this.chain.then(async () => {
      if (!(await this.refreshAll())) return;
      if (await this.reconcileAutoMerge()) await this.refreshAll();
      this.save();
    });
    this.chain = next.catch(() => undefined);
    return next;
  }

  private async refreshRepository(record: RepositoryRecord): Promise<boolean> {
    const bare = this.git(record);
    const now = bare.readBranches();
    const before = record.branches;
    const moved = new Set<string>();
    for (const [branch, sha] of now) if (before[branch] !== sha) moved.add(branch);
    for (const branch of Object.keys(before)) if (!now.has(branch)) moved.add(branch);
    if (moved.size === 0) return false;
    record.branches = Object.fromEntries(now);
    record.pushedAt = this.now();
    const fullName = `${record.owner}/${record.name}`;
    for (const branch of moved) await this.emitPush(record, branch, before[branch] ?? null, now.get(branch) ?? null);
    for (const pull of this.state.pulls) {
      if (pull.repository !== fullName || pull.state !== 'open') continue;
      if (moved.has(pull.headRef)) {
        const sha = now.get(pull.headRef);
        if (sha === undefined) {
          // GitHub keeps a PR whose head branch was deleted open, with its last head.
          pull.headExists = false;
        } else if (sha !== pull.headSha) {
          const beforeSha = pull.headSha;
          pull.headSha = sha;
          pull.headExists = true;
          this.changed(pull, this.now());
          await bare.updateRef(`refs/pull/${pull.number}/head`, sha);
          this.resetMergeability(pull);
          await this.emitPull('synchronize', pull, PUSHER, { before: beforeSha, after: sha });
          await this.startAutoChecks(record, pull);
        }
      }
      if (moved.has(pull.baseRef)) {
        const sha = now.get(pull.baseRef);
        if (sha !== undefined && sha !== pull.baseSha) {
          // A base that moves does not change the PR's head; GitHub recomputes mergeability.
          pull.baseSha = sha;
          this.resetMergeability(pull);
        }
      }
    }
    return true;
  }

  // ---------------------------------------------------------------------------------------------
  // Mergeability: null for a while after a push or a base move, then computed with a real merge

  private resetMergeability(pull: PullRecord): void {
    pull.mergeability = { baseSha: pull.baseSha, headSha: pull.headSha, computed: false, conflicts: [], behind: false, testMergeSha: null };
    this.scheduleMergeability(pull);
  }

  private scheduleMergeability(pull: PullRecord): void {
    if (this.mergeabilityMode === 'manual' || this.closed) return;
    const key = `${pull.baseSha}..${pull.headSha}`;
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      void this.run(async () => {
        const current = this.state.pulls.find((p) => p.id === pull.id);
        if (current && current.state === 'open' && !current.mergeability.computed && `${current.baseSha}..${current.headSha}` === key) {
          await this.computeMergeability(current);
        }
      }).catch((error: unknown) => this.options.log('mergeability computation failed', { pull: pull.number, error: String(error) }));
    }, this.options.mergeabilityDelayMs);
    this.timers.add(timer);
  }

  /** Computes every pending mergeability now (the control API's "GitHub finished computing"). */
  async computeAllMergeability(): Promise<void> {
    for (const pull of this.state.pulls) if (pull.state === 'open' && !pull.mergeability.computed) await this.computeMergeability(pull);
  }

  setMergeabilityMode(mode: 'auto' | 'manual'): void {
    this.mergeabilityMode = mode;
    if (mode === 'auto') for (const pull of this.state.pulls) if (pull.state === 'open' && !pull.mergeability.computed) this.scheduleMergeability(pull);
  }

  private async computeMergeability(pull: PullRecord): Promise<void> {
    const record = this.state.repositories[pull.repository]!;
    const bare = this.git(record);
    const merge = await bare.mergeTree(pull.baseSha, pull.headSha);
    const behind = !(await bare.isAncestor(pull.baseSha, pull.headSha));
    let testMergeSha: string | null = null;
    if (merge.conflicts.length === 0) {
      // GitHub's test merge commit, fetchable as refs/pull/N/merge.
      testMergeSha = await bare.commitTree(merge.tree, [pull.baseSha, pull.headSha], `Merge ${pull.headSha} into ${pull.baseSha}`, GITHUB_IDENTITY);
      await bare.updateRef(`refs/pull/${pull.number}/merge`, testMergeSha);
    }
    pull.mergeability = { baseSha: pull.baseSha, headSha: pull.headSha, computed: true, conflicts: merge.conflicts, behind, testMergeSha };
    this.options.log('mergeability computed', { repository: pull.repository, pull: pull.number, conflicts: merge.conflicts, behind });
  }

  private async ensureMergeability(pull: PullRecord): Promise<void> {
    if (!pull.mergeability.computed || pull.mergeability.baseSha !== pull.baseSha || pull.mergeability.headSha !== pull.headSha) {
      await this.computeMergeability(pull);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Pull requests

  pull(record: RepositoryRecord, number: number): PullRecord {
    const pull = this.state.pulls.find((p) => p.repository === `${record.owner}/${record.name}` && p.number === number);
    if (!pull) throw notFound();
    return pull;
  }

  pullByNodeId(id: number): PullRecord | undefined {
    return this.state.pulls.find((p) => p.id === id);
  }

  async pullStats(pull: PullRecord): Promise<PullStats> {
    const bare = this.git(this.state.repositories[pull.repository]!);
    const commits = await bare.commitsBetween(pull.baseSha, pull.headSha);
    const changed = await bare.changedFiles(pull.baseSha, pull.headSha);
    return { commits: commits.length, additions: changed.additions, deletions: changed.deletions, changedFiles: changed.files };
  }

  async renderPullFull(pull: PullRecord) {
    return renderPull(this.ctx, this.state, pull, { full: true, stats: await this.pullStats(pull) });
  }

  renderPullSimple(pull: PullRecord) {
    return renderPull(this.ctx, this.state, pull, { full: false });
  }

  mergeableState(pull: PullRecord) {
    return mergeableState(this.state, this.state.repositories[pull.repository]!, pull);
  }

  async createPull(
    record: RepositoryRecord,
    input: { title?: unknown; head?: unknown; base?: unknown; body?: unknown; draft?: unknown; maintainer_can_modify?: unknown },
    actor: string,
  ): Promise<PullRecord> {
    const doc = DOCUMENTATION.createPull;
    if (typeof input.title !== 'string' || input.title.length === 0) throw validationFailed(doc, { resource: 'PullRequest', code: 'missing_field', field: 'title' });
    if (typeof input.head !== 'string' || input.head.length === 0) throw validationFailed(doc, { resource: 'PullRequest', code: 'missing_field', field: 'head' });
    if (typeof input.base !== 'string' || input.base.length === 0) throw validationFailed(doc, { resource: 'PullRequest', code: 'missing_field', field: 'base' });
    // `head` is `branch` or `owner:branch`; forks are not modelled, so the owner must be the repository's.
    const colon = input.head.indexOf(':');
    const headOwner = colon === -1 ? record.owner : input.head.slice(0, colon);
    const headRef = colon === -1 ? input.head : input.head.slice(colon + 1);
    const branches = this.git(record).readBranches();
    const headSha = headOwner === record.owner ? branches.get(headRef) : undefined;
    if (!headSha) throw validationFailed(doc, { resource: 'PullRequest', code: 'invalid', field: 'head' });
    const baseSha = branches.get(input.base);
    if (!baseSha) throw validationFailed(doc, { resource: 'PullRequest', code: 'invalid', field: 'base' });
    // GitHub's answer where drafts are not available (private repositories on GitHub Free and Pro): a 422
    // whose message says so, without `errors`. (false only: a state.json from before the setting allows drafts.)
    if (input.draft === true && record.settings.allowDraftPullRequests === false) {
      throw new ApiError(422, 'Draft pull requests are not supported in this repository.', doc);
    }
    const fullName = `${record.owner}/${record.name}`;
    const existing = this.state.pulls.find((p) => p.repository === fullName && p.state === 'open' && p.headRef === headRef && p.baseRef === input.base);
    if (existing) {
      throw validationFailed(doc, { resource: 'PullRequest', code: 'custom', message: `A pull request already exists for ${record.owner}:${headRef}.` });
    }
    const commits = await this.git(record).commitsBetween(baseSha, headSha);
    if (commits.length === 0) {
      throw validationFailed(doc, { resource: 'PullRequest', code: 'custom', message: `No commits between ${input.base} and ${headRef}` });
    }
    const now = this.now();
    const pull: PullRecord = {
      id: this.nextId(),
      // Issues and pull requests share one sequence of numbers per repository; only PRs exist here.
      number: this.state.pulls.filter((p) => p.repository === fullName).length + 1,
      repository: fullName,
      title: input.title,
      body: typeof input.body === 'string' ? input.body : null,
      state: 'open',
      draft: input.draft === true,
      headRef,
      headSha,
      headExists: true,
      baseRef: input.base,
      baseSha,
      user: actor,
      createdAt: now,
      updatedAt: now,
      revision: 0,
      closedAt: null,
      mergedAt: null,
      mergedBy: null,
      mergeCommitSha: null,
      maintainerCanModify: input.maintainer_can_modify !== false,
      autoMerge: null,
      mergeability: { baseSha, headSha, computed: false, conflicts: [], behind: false, testMergeSha: null },
    };
    this.state.pulls.push(pull);
    await this.git(record).updateRef(`refs/pull/${pull.number}/head`, headSha);
    this.scheduleMergeability(pull);
    this.options.log('pull request opened', { repository: fullName, pull: pull.number, head: headRef, base: pull.baseRef, draft: pull.draft });
    await this.emitPull('opened', pull, actor);
    await this.startAutoChecks(record, pull);
    return pull;
  }

  listPulls(record: RepositoryRecord, query: URLSearchParams): PullRecord[] {
    const fullName = `${record.owner}/${record.name}`;
    const state = query.get('state') ?? 'open';
    const head = query.get('head');
    const base = query.get('base');
    let pulls = this.state.pulls.filter((p) => p.repository === fullName);
    if (state !== 'all') pulls = pulls.filter((p) => p.state === state);
    if (head) {
      // GitHub's `head` filter is `user:ref-name`. GitHub does not treat owner names case-sensitively (the
      // owner in any case is the same owner); the ref is a git ref, whose case counts.
      const colon = head.indexOf(':');
      const owner = colon === -1 ? head : head.slice(0, colon);
      const ref = colon === -1 ? null : head.slice(colon + 1);
      pulls = owner.toLowerCase() === record.owner.toLowerCase() ? pulls.filter((p) => ref === null || p.headRef === ref) : [];
    }
    if (base) pulls = pulls.filter((p) => p.baseRef === base);
    const direction = query.get('direction') ?? 'desc';
    pulls.sort((a, b) => (direction === 'asc' ? a.number - b.number : b.number - a.number));
    return pulls;
  }

  async updatePull(record: RepositoryRecord, pull: PullRecord, input: Record<string, unknown>, actor: string): Promise<PullRecord> {
    const doc = DOCUMENTATION.updatePull;
    // Every refusal comes before any change: a refused update changes nothing.
    if (input.state !== undefined && input.state !== 'open' && input.state !== 'closed') {
      throw validationFailed(doc, { resource: 'PullRequest', code: 'invalid', field: 'state' });
    }
    const reopenedHead = input.state === 'open' && pull.state === 'closed' ? await this.reopenableHead(record, pull) : null;
    const changes: Record<string, unknown> = {};
    if (typeof input.title === 'string' && input.title !== pull.title) {
      changes.title = { from: pull.title };
      pull.title = input.title;
    }
    if ((typeof input.body === 'string' || input.body === null) && input.body !== pull.body) {
      changes.body = { from: pull.body ?? '' };
      pull.body = input.body as string | null;
    }
    if (typeof input.maintainer_can_modify === 'boolean') pull.maintainerCanModify = input.maintainer_can_modify;
    if (typeof input.base === 'string' && input.base !== pull.baseRef) {
      // GitHub's answer, also when the same request reopens the PR.
      if (pull.state !== 'open') throw validationFailed(doc, { resource: 'PullRequest', code: 'invalid', field: 'base', message: 'Cannot change the base branch of a closed pull request.' });
      const baseSha = this.git(record).readBranches().get(input.base);
      if (!baseSha) throw validationFailed(doc, { resource: 'PullRequest', code: 'invalid', field: 'base' });
      changes.base = { ref: { from: pull.baseRef }, sha: { from: pull.baseSha } };
      pull.baseRef = input.base;
      pull.baseSha = baseSha;
      this.resetMergeability(pull);
    }
    if (Object.keys(changes).length > 0) {
      this.changed(pull, this.now());
      await this.emitPull('edited', pull, actor, { changes });
    }
    if (input.state === 'closed' && pull.state === 'open') {
      const now = this.now();
      pull.state = 'closed';
      pull.closedAt = now;
      this.changed(pull, now);
      if (pull.autoMerge) {
        pull.autoMerge = null;
      }
      await this.emitPull('closed', pull, actor);
    } else if (reopenedHead !== null) {
      // A reopened PR is the head branch as it is now (commits pushed while it was closed included), on
      // the base branch as it is now; GitHub computes its mergeability again.
      const bare = this.git(record);
      if (reopenedHead !== pull.headSha) {
        pull.headSha = reopenedHead;
        await bare.updateRef(`refs/pull/${pull.number}/head`, reopenedHead);
      }
      pull.headExists = true;
      pull.baseSha = bare.readBranches().get(pull.baseRef) ?? pull.baseSha;
      pull.state = 'open';
      pull.closedAt = null;
      this.changed(pull, this.now());
      this.resetMergeability(pull);
      await this.emitPull('reopened', pull, actor);
      await this.startAutoChecks(record, pull);
    }
    return pull;
  }

  /**
   * Whether a closed PR may be reopened, and on which head. GitHub refuses (422, `state cannot be
   * changed. …`) a merged PR, a PR whose head branch is gone or was force-pushed or recreated while it
   * was closed (its tip no longer contains the PR's head), and a PR whose head and base already have
   * another open PR (one open PR per head and base, as at creation). GitHub's wording is observed for
   * the merged and the force-pushed cases; for a deleted branch and another open PR it is not documented.
   */
  private async reopenableHead(record: RepositoryRecord, pull: PullRecord): Promise<string> {
    const refuse = (why: string) => validationFailed(DOCUMENTATION.updatePull, { resource: 'PullRequest', code: 'custom', field: 'state', message: `state cannot be changed. ${why}` });
    if (pull.mergedAt) throw refuse('The pull request cannot be reopened.');
    const bare = this.git(record);
    const tip = bare.readBranches().get(pull.headRef);
    if (tip === undefined) throw refuse(`The ${pull.headRef} branch has been deleted.`);
    if (tip !== pull.headSha && !(await bare.isAncestor(pull.headSha, tip))) throw refuse(`The ${pull.headRef} branch was force-pushed or recreated.`);
    const other = this.state.pulls.find((p) => p !== pull && p.repository === pull.repository && p.state === 'open' && p.headRef === pull.headRef && p.baseRef === pull.baseRef);
    if (other) throw refuse(`A pull request already exists for ${record.owner}:${pull.headRef}.`);
    return tip;
  }

  /**
   * PUT /pulls/{n}/merge. The order of GitHub's refusals: a closed PR, a head that is not `sha`
   * (409), a disallowed method, a draft, a conflict, branch protection; then the merge itself, which
   * moves the base branch only if nobody pushed to it meanwhile (else 405 "Base branch was modified").
   */
  async mergePull(
    record: RepositoryRecord,
    pull: PullRecord,
    input: { sha?: unknown; merge_method?: unknown; commit_title?: unknown; commit_message?: unknown },
    actor: string,
  ): Promise<{ sha: string }> {
    const doc = DOCUMENTATION.mergePull;
    const method = (input.merge_method ?? 'merge') as MergeMethod;
    if (!['merge', 'squash', 'rebase'].includes(method)) throw validationFailed(doc, { resource: 'PullRequest', code: 'invalid', field: 'merge_method' });
    if (pull.state !== 'open') throw new ApiError(405, 'Pull Request is not mergeable', doc);
    if (input.sha !== undefined && input.sha !== pull.headSha) {
      throw new ApiError(409, 'Head branch was modified. Review and try the merge again.', doc);
    }
    const allowed = { merge: record.settings.allowMergeCommit, squash: record.settings.allowSquashMerge, rebase: record.settings.allowRebaseMerge }[method];
    if (!allowed) {
      const what = { merge: 'Merge commits', squash: 'Squash merges', rebase: 'Rebase merges' }[method];
      throw new ApiError(405, `${what} are not allowed on this repository.`, doc);
    }
    if (pull.draft) throw new ApiError(405, 'Pull Request is still a draft', doc);
    await this.ensureMergeability(pull);
    if (pull.mergeability.conflicts.length > 0) throw new ApiError(405, 'Pull Request is not mergeable', doc);
    if (pull.baseRef === record.defaultBranch) {
      const { verdicts } = summarizeChecks(this.state, pull.repository, pull.headSha);
      for (const name of record.protection.requiredChecks) {
        const verdict = verdicts.get(name);
        // "is expected" is GitHub's wording for a required check not (yet) reported; "is failing"
        // follows it for a failed one (not observed on GitHub: the exact wording may differ).
        if (verdict === 'failing') throw new ApiError(405, `Required status check "${name}" is failing.`, DOCUMENTATION.protectedBranches);
        if (verdict !== 'passing') throw new ApiError(405, `Required status check "${name}" is expected.`, DOCUMENTATION.protectedBranches);
      }
      if (record.protection.strict && pull.mergeability.behind) {
        throw new ApiError(405, 'Head branch is not up to date with the base branch', DOCUMENTATION.protectedBranches);
      }
    }
    const bare = this.git(record);
    const identity = identityOf(actor);
    const title = typeof input.commit_title === 'string' ? input.commit_title : null;
    const message = typeof input.commit_message === 'string' ? input.commit_message : null;
    let sha: string;
    if (method === 'rebase') {
      const rebased = await bare.rebase(pull.baseSha, pull.headSha, GITHUB_IDENTITY);
      if (!rebased) throw new ApiError(405, "This branch can't be rebased", doc);
      sha = rebased;
    } else {
      const merge = await bare.mergeTree(pull.baseSha, pull.headSha);
      if (merge.conflicts.length > 0) throw new ApiError(405, 'Pull Request is not mergeable', doc);
      if (method === 'merge') {
        const subject = title ?? `Merge pull request #${pull.number} from ${record.owner}/${pull.headRef}`;
        sha = await bare.commitTree(merge.tree, [pull.baseSha, pull.headSha], `${subject}\n\n${message ?? pull.title}\n`, identity);
      } else {
        const commits = await bare.commitsBetween(pull.baseSha, pull.headSha);
        const subject = title ?? `${pull.title} (#${pull.number})`;
        const body = message ?? commits.map((c) => `* ${c.subject}${c.body ? `\n\n${c.body}` : ''}`).join('\n\n');
        sha = await bare.commitTree(merge.tree, [pull.baseSha], `${subject}\n\n${body}\n`, identity);
      }
    }
    if (!(await bare.updateRef(`refs/heads/${pull.baseRef}`, sha, pull.baseSha))) {
      // GitHub answers a base that moved under the merge with 405 (its 409 is for a head that is not `sha`).
      throw new ApiError(405, 'Base branch was modified. Review and try the merge again.', doc);
    }
    const now = this.now();
    pull.state = 'closed';
    pull.closedAt = now;
    pull.mergedAt = now;
    this.changed(pull, now);
    pull.mergedBy = actor;
    pull.mergeCommitSha = sha;
    this.options.log('pull request merged', { repository: pull.repository, pull: pull.number, method, sha, head: pull.headSha });
    if (record.settings.deleteBranchOnMerge && pull.headExists) {
      if (await bare.deleteRef(`refs/heads/${pull.headRef}`, pull.headSha)) pull.headExists = false;
    }
    await this.emitPull('closed', pull, actor);
    return { sha };
  }

  // ---------------------------------------------------------------------------------------------
  // Draft / ready for review and auto-merge (GraphQL-only on GitHub)

  async markReadyForReview(pull: PullRecord, actor: string): Promise<PullRecord> {
    if (pull.state !== 'open') throw new GraphQLFailure('UNPROCESSABLE', 'Pull request is closed');
    // An already-ready pull request is not an error on GitHub: the mutation just returns it.
    if (!pull.draft) return pull;
    pull.draft = false;
    this.changed(pull, this.now());
    await this.emitPull('ready_for_review', pull, actor);
    return pull;
  }

  async convertToDraft(pull: PullRecord, actor: string): Promise<PullRecord> {
    if (pull.state !== 'open') throw new GraphQLFailure('UNPROCESSABLE', 'Pull request is closed');
    if (pull.draft) return pull;
    pull.draft = true;
    this.changed(pull, this.now());
    if (pull.autoMerge) await this.disableAutoMerge(pull, actor, 'converted to draft');
    await this.emitPull('converted_to_draft', pull, actor);
    return pull;
  }

  /**
   * enablePullRequestAutoMerge. GitHub refuses it when there is nothing to wait for (the PR is
   * clean or unstable: merge it directly instead), when the repository does not allow auto-merge,
   * and when `expectedHeadOid` is not the head. The refusals are `UNPROCESSABLE` with GitHub's
   * doubled "Pull request Pull request is in … status" wording.
   */
  async enableAutoMerge(
    pull: PullRecord,
    input: { mergeMethod?: MergeMethod; expectedHeadOid?: string; commitHeadline?: string; commitBody?: string; authorEmail?: string },
    actor: string,
  ): Promise<PullRecord> {
    const record = this.state.repositories[pull.repository]!;
    if (!record.settings.allowAutoMerge) throw new GraphQLFailure('UNPROCESSABLE', 'Auto merge is not allowed for this repository');
    if (pull.state !== 'open') throw new GraphQLFailure('UNPROCESSABLE', 'Pull request Pull request is closed');
    // Enabling it again is refused, whoever enabled it (a caller sending the mutation again after its
    // answer was lost gets this). GitHub's wording is observed (the gh CLI prints it), not documented.
    if (pull.autoMerge) throw new GraphQLFailure('UNPROCESSABLE', 'Pull request Auto merge is already enabled');
    if (input.expectedHeadOid !== undefined && input.expectedHeadOid !== pull.headSha) {
      // GitHub's wording for this refusal is not documented; the type is.
      throw new GraphQLFailure('UNPROCESSABLE', `Pull request The head of the pull request (${pull.headSha}) is not the expected head (${input.expectedHeadOid})`);
    }
    const method = input.mergeMethod ?? 'merge';
    const allowed = { merge: record.settings.allowMergeCommit, squash: record.settings.allowSquashMerge, rebase: record.settings.allowRebaseMerge }[method];
    if (!allowed) throw new GraphQLFailure('UNPROCESSABLE', `Pull request Merge method ${method} is not allowed on this repository`);
    await this.ensureMergeability(pull);
    const status = this.mergeableState(pull);
    if (status === 'clean' || status === 'unstable' || status === 'draft' || status === 'dirty') {
      throw new GraphQLFailure('UNPROCESSABLE', `Pull request Pull request is in ${status} status`);
    }
    const autoMerge: AutoMergeRecord = {
      enabledBy: actor,
      mergeMethod: method,
      commitTitle: input.commitHeadline ?? (method === 'squash' ? `${pull.title} (#${pull.number})` : `Merge pull request #${pull.number} from ${record.owner}/${pull.headRef}`),
      commitMessage: input.commitBody ?? (method === 'squash' ? '' : pull.title),
      enabledAt: this.now(),
      authorEmail: input.authorEmail ?? null,
    };
    pull.autoMerge = autoMerge;
    this.changed(pull, autoMerge.enabledAt);
    this.options.log('auto-merge enabled', { repository: pull.repository, pull: pull.number, method, state: status });
    await this.emitPull('auto_merge_enabled', pull, actor);
    return pull;
  }

  /**
   * disablePullRequestAutoMerge. A PR without auto-merge (never enabled, disabled already, or merged or
   * closed since) is refused, `UNPROCESSABLE`: a caller sending the mutation again after its answer was
   * lost gets this. GitHub's wording is observed (the gh CLI prints it), not documented.
   */
  async disableAutoMerge(pull: PullRecord, actor: string, reason = 'disabled by user'): Promise<PullRecord> {
    if (!pull.autoMerge) throw new GraphQLFailure('UNPROCESSABLE', "Can't disable auto-merge for this pull request.");
    pull.autoMerge = null;
    this.changed(pull, this.now());
    await this.emitPull('auto_merge_disabled', pull, actor, { reason });
    return pull;
  }

  /** Auto-merge fires once the PR may be merged: mergeable, required checks passed (clean or unstable). */
  private async reconcileAutoMerge(): Promise<boolean> {
    let merged = false;
    for (const pull of this.state.pulls) {
      if (pull.state !== 'open' || !pull.autoMerge || !pull.mergeability.computed) continue;
      const status = this.mergeableState(pull);
      if (status !== 'clean' && status !== 'unstable') continue;
      const record = this.state.repositories[pull.repository]!;
      try {
        await this.mergePull(
          record,
          pull,
          { merge_method: pull.autoMerge.mergeMethod, commit_title: pull.autoMerge.commitTitle, commit_message: pull.autoMerge.commitMessage },
          pull.autoMerge.enabledBy,
        );
        merged = true;
      } catch (error) {
        this.options.log('auto-merge did not merge', { repository: pull.repository, pull: pull.number, error: error instanceof Error ? error.message : String(error) });
      }
    }
    return merged;
  }

  // ---------------------------------------------------------------------------------------------
  // Check runs and commit statuses

  private async commitOf(record: RepositoryRecord, ref: string, documentation: string): Promise<string> {
    const sha = await this.git(record).resolveCommit(ref);
    if (!sha) throw new ApiError(422, `No commit found for SHA: ${ref}`, documentation);
    return sha;
  }

  async resolveRef(record: RepositoryRecord, ref: string): Promise<string> {
    const sha = await this.git(record).resolveCommit(ref.replace(/^(refs\/)?heads\//, ''));
    if (!sha) throw new ApiError(404, `No commit found for SHA: ${ref}`);
    return sha;
  }

  private suiteFor(record: RepositoryRecord, sha: string): CheckSuiteRecord {
    const fullName = `${record.owner}/${record.name}`;
    let suite = this.state.checkSuites.find((s) => s.repository === fullName && s.headSha === sha);
    if (!suite) {
      const now = this.now();
      const headBranch = Object.entries(record.branches).find(([, tip]) => tip === sha)?.[0] ?? null;
      suite = { id: this.nextId(), repository: fullName, headSha: sha, headBranch, createdAt: now, updatedAt: now, reportedConclusion: null };
      this.state.checkSuites.push(suite);
    }
    return suite;
  }

  async createCheckRun(record: RepositoryRecord, input: Record<string, unknown>, actor: string): Promise<CheckRunRecord> {
    const doc = DOCUMENTATION.createCheckRun;
    if (typeof input.name !== 'string' || !input.name) throw validationFailed(doc, { resource: 'CheckRun', code: 'missing_field', field: 'name' });
    if (typeof input.head_sha !== 'string' || !SHA.test(input.head_sha)) throw validationFailed(doc, { resource: 'CheckRun', code: 'invalid', field: 'head_sha' });
    const sha = await this.commitOf(record, input.head_sha, doc);
    const now = this.now();
    const run: CheckRunRecord = {
      id: this.nextId(),
      repository: `${record.owner}/${record.name}`,
      headSha: sha,
      name: input.name,
      status: 'queued',
      conclusion: null,
      startedAt: givenTime(input.started_at, 'started_at', doc) ?? now,
      completedAt: null,
      detailsUrl: typeof input.details_url === 'string' ? input.details_url : null,
      externalId: typeof input.external_id === 'string' ? input.external_id : null,
      output: { title: null, summary: null, text: null },
      suiteId: this.suiteFor(record, sha).id,
    };
    this.applyCheckRunInput(run, input, doc);
    this.state.checkRuns.push(run);
    const suite = this.state.checkSuites.find((s) => s.id === run.suiteId)!;
    suite.reportedConclusion = null;
    suite.updatedAt = now;
    await this.emit('check_run', { action: 'created', check_run: this.webhookCheckRun(run) }, record, actor);
    if (run.status === 'completed') await this.checkRunCompleted(record, run, actor);
    return run;
  }

  async updateCheckRun(record: RepositoryRecord, run: CheckRunRecord, input: Record<string, unknown>, actor: string): Promise<CheckRunRecord> {
    const wasCompleted = run.status === 'completed';
    this.applyCheckRunInput(run, input, DOCUMENTATION.updateCheckRun);
    if (run.status === 'completed' && !wasCompleted) await this.checkRunCompleted(record, run, actor);
    return run;
  }

  private applyCheckRunInput(run: CheckRunRecord, input: Record<string, unknown>, doc: string): void {
    const statuses: CheckStatus[] = ['queued', 'in_progress', 'completed', 'waiting', 'requested', 'pending'];
    const conclusions: CheckConclusion[] = ['success', 'failure', 'neutral', 'cancelled', 'skipped', 'timed_out', 'action_required', 'stale'];
    if (input.status !== undefined && !statuses.includes(input.status as CheckStatus)) throw validationFailed(doc, { resource: 'CheckRun', code: 'invalid', field: 'status' });
    if (input.conclusion !== undefined && !conclusions.includes(input.conclusion as CheckConclusion)) {
      throw validationFailed(doc, { resource: 'CheckRun', code: 'invalid', field: 'conclusion' });
    }
    if (typeof input.name === 'string' && input.name) run.name = input.name;
    if (typeof input.details_url === 'string') run.detailsUrl = input.details_url;
    if (typeof input.external_id === 'string') run.externalId = input.external_id;
    if (input.output && typeof input.output === 'object') {
      const output = input.output as Record<string, unknown>;
      run.output = {
        title: typeof output.title === 'string' ? output.title : run.output.title,
        summary: typeof output.summary === 'string' ? output.summary : run.output.summary,
        text: typeof output.text === 'string' ? output.text : run.output.text,
      };
    }
    if (input.status !== undefined) run.status = input.status as CheckStatus;
    // GitHub: giving a conclusion completes the run.
    if (input.conclusion !== undefined) {
      run.conclusion = input.conclusion as CheckConclusion;
      run.status = 'completed';
    }
    if (run.status === 'completed' && run.conclusion === null) {
      throw validationFailed(doc, { resource: 'CheckRun', code: 'missing_field', field: 'conclusion' });
    }
    if (run.status === 'completed') run.completedAt = givenTime(input.completed_at, 'completed_at', doc) ?? run.completedAt ?? this.now();
  }

  private async checkRunCompleted(record: RepositoryRecord, run: CheckRunRecord, actor: string): Promise<void> {
    await this.emit('check_run', { action: 'completed', check_run: this.webhookCheckRun(run) }, record, actor);
    const suite = this.state.checkSuites.find((s) => s.id === run.suiteId)!;
    const summary = suiteSummary(this.state, suite);
    suite.updatedAt = this.now();
    if (summary.status === 'completed' && suite.reportedConclusion === null) {
      suite.reportedConclusion = summary.conclusion;
      const headCommit = await this.git(record).commitInfo(suite.headSha);
      await this.emit('check_suite', { action: 'completed', check_suite: renderCheckSuite(this.ctx, this.state, suite, headCommit) }, record, actor);
    }
  }

  /**
   * Starts the configured automatic checks on a PR's head (once per head and name): each is created
   * in progress and completes `delayMs` later, like a CI workflow triggered by the pull request.
   */
  private async startAutoChecks(record: RepositoryRecord, pull: PullRecord): Promise<void> {
    for (const check of this.autoChecks) {
      const exists = this.state.checkRuns.some((r) => r.repository === pull.repository && r.headSha === pull.headSha && r.name === check.name);
      if (exists) continue;
      const run = await this.createCheckRun(record, { name: check.name, head_sha: pull.headSha, status: 'in_progress' }, AUTO_CI);
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        void this.run(async () => {
          const current = this.state.checkRuns.find((r) => r.id === run.id);
          if (current && current.status !== 'completed') await this.updateCheckRun(record, current, { conclusion: check.conclusion ?? 'success' }, AUTO_CI);
        }).catch((error: unknown) => this.options.log('automatic check failed', { check: check.name, error: String(error) }));
      }, check.delayMs ?? 200);
      this.timers.add(timer);
    }
  }

  renderCheckRun(run: CheckRunRecord) {
    return renderCheckRun(this.ctx, this.state, run);
  }

  /** A check run as a `check_run` webhook carries it: its suite named in full (head branch, head SHA, status, conclusion). */
  private webhookCheckRun(run: CheckRunRecord) {
    const suite = this.state.checkSuites.find((s) => s.id === run.suiteId)!;
    return { ...renderCheckRun(this.ctx, this.state, run), check_suite: renderSimpleCheckSuite(this.ctx, this.state, suite) };
  }

  checkRun(record: RepositoryRecord, id: number): CheckRunRecord {
    const run = this.state.checkRuns.find((r) => r.id === id && r.repository === `${record.owner}/${record.name}`);
    if (!run) throw notFound();
    return run;
  }

  /** The check runs of a ref (newest first), filtered as GitHub's `filter`, `check_name` and `status` do. */
  async listCheckRuns(record: RepositoryRecord, ref: string, query: URLSearchParams): Promise<CheckRunRecord[]> {
    const sha = await this.resolveRef(record, ref);
    const fullName = `${record.owner}/${record.name}`;
    let runs =
      query.get('filter') === 'all'
        ? this.state.checkRuns.filter((r) => r.repository === fullName && r.headSha === sha).sort((a, b) => b.id - a.id)
        : latestCheckRuns(this.state, fullName, sha);
    const name = query.get('check_name');
    if (name) runs = runs.filter((r) => r.name === name);
    const status = query.get('status');
    if (status) runs = runs.filter((r) => r.status === status);
    return runs;
  }

  async createStatus(record: RepositoryRecord, shaInput: string, input: Record<string, unknown>, actor: string) {
    const doc = DOCUMENTATION.createStatus;
    const states: CommitState[] = ['error', 'failure', 'pending', 'success'];
    if (!states.includes(input.state as CommitState)) throw validationFailed(doc, { resource: 'Status', code: 'invalid', field: 'state' });
    const sha = await this.commitOf(record, shaInput, doc);
    const now = this.now();
    const status = {
      id: this.nextId(),
      repository: `${record.owner}/${record.name}`,
      sha,
      state: input.state as CommitState,
      context: typeof input.context === 'string' && input.context ? input.context : 'default',
      description: typeof input.description === 'string' ? input.description : null,
      targetUrl: typeof input.target_url === 'string' ? input.target_url : null,
      createdAt: now,
      updatedAt: now,
      creator: actor,
    };
    this.state.statuses.push(status);
    const fullName = `${record.owner}/${record.name}`;
    const commit = await this.git(record).commitInfo(sha);
    await this.emit(
      'status',
      {
        id: status.id,
        sha,
        name: fullName,
        target_url: status.targetUrl,
        avatar_url: `${this.ctx.baseUrl}/avatars/${actor}`,
        context: status.context,
        description: status.description,
        state: status.state,
        commit: renderStatusCommit(this.ctx, fullName, commit),
        branches: Object.entries(record.branches)
          .filter(([, tip]) => tip === sha)
          .map(([name]) => ({ name, commit: { sha, url: `${this.ctx.baseUrl}/repos/${fullName}/commits/${sha}` }, protected: name === record.defaultBranch })),
        created_at: status.createdAt,
        updated_at: status.updatedAt,
      },
      record,
      actor,
    );
    return renderStatus(this.ctx, status);
  }

  async combinedStatus(record: RepositoryRecord, ref: string) {
    const sha = await this.resolveRef(record, ref);
    return renderCombinedStatus(this.ctx, this.state, record, sha, latestStatuses(this.state, `${record.owner}/${record.name}`, sha));
  }

  // ---------------------------------------------------------------------------------------------
  // Reviews (only their webhook: the fake has no required reviews)

  async submitReview(record: RepositoryRecord, pull: PullRecord, input: { state?: string; body?: string; user?: string }): Promise<Record<string, unknown>> {
    const state = (input.state ?? 'APPROVED').toLowerCase();
    if (!['approved', 'changes_requested', 'commented'].includes(state)) throw validationFailed(DOCUMENTATION.root, { resource: 'PullRequestReview', code: 'invalid', field: 'event' });
    const user = input.user ?? 'reviewer';
    const id = this.nextId();
    const pullUrl = `${this.ctx.baseUrl}/repos/${pull.repository}/pulls/${pull.number}`;
    const htmlUrl = `${this.ctx.baseUrl}/${pull.repository}/pull/${pull.number}#pullrequestreview-${id}`;
    const review = {
      id,
      node_id: nodeId('PRR', id),
      user: renderUser(this.ctx, user),
      body: input.body ?? null,
      commit_id: pull.headSha,
      submitted_at: this.now(),
      state,
      html_url: htmlUrl,
      pull_request_url: pullUrl,
      author_association: 'MEMBER',
      _links: { html: { href: htmlUrl }, pull_request: { href: pullUrl } },
    };
    const simple = this.renderPullSimple(pull);
    await this.emit('pull_request_review', { action: 'submitted', review, pull_request: simple }, record, user);
    return review;
  }

  /** GitHub's `push` event, for every branch that moved (a push, a merge, a deletion). */
  private async emitPush(record: RepositoryRecord, branch: string, before: string | null, after: string | null): Promise<void> {
    const bare = this.git(record);
    const fullName = `${record.owner}/${record.name}`;
    const zero = '0'.repeat(40);
    let commits: { sha: string }[] = [];
    if (after) {
      const base = before ?? (branch === record.defaultBranch ? null : (record.branches[record.defaultBranch] ?? null));
      commits = base ? await bare.commitsBetween(base, after) : [{ sha: after }];
    }
    const forced = before !== null && after !== null && !(await bare.isAncestor(before, after));
    const rendered = [];
    // GitHub lists at most 20 commits in a push payload.
    for (const { sha } of commits.slice(-20)) {
      const info = await bare.commitInfo(sha);
      rendered.push({
        ...renderSimpleCommit(info),
        distinct: true,
        url: `${this.ctx.baseUrl}/${fullName}/commit/${sha}`,
        author: { name: info.author.name, email: info.author.email, date: info.author.date },
        committer: { name: info.committer.name, email: info.committer.email, date: info.committer.date },
        ...(await bare.filesChanged(sha)),
      });
    }
    const headCommit = rendered.at(-1) ?? (after ? { ...renderSimpleCommit(await bare.commitInfo(after)), distinct: false, url: `${this.ctx.baseUrl}/${fullName}/commit/${after}` } : null);
    await this.emit(
      'push',
      {
        ref: `refs/heads/${branch}`,
        before: before ?? zero,
        after: after ?? zero,
        created: before === null,
        deleted: after === null,
        forced,
        base_ref: null,
        compare: `${this.ctx.baseUrl}/${fullName}/compare/${(before ?? zero).slice(0, 12)}...${(after ?? zero).slice(0, 12)}`,
        commits: rendered,
        head_commit: headCommit,
        pusher: { name: PUSHER, email: identityOf(PUSHER).email },
      },
      record,
      PUSHER,
      // GitHub's push payload, unlike every other, gives the repository's created_at and pushed_at as Unix seconds.
      { ...this.renderRepository(record), created_at: Math.floor(Date.parse(record.createdAt) / 1000), pushed_at: Math.floor(Date.parse(record.pushedAt) / 1000) },
    );
  }

  // ---------------------------------------------------------------------------------------------
  // Webhooks

  private async emitPull(action: string, pull: PullRecord, actor: string, extra: Record<string, unknown> = {}): Promise<void> {
    const record = this.state.repositories[pull.repository]!;
    await this.emit('pull_request', { action, number: pull.number, ...extra, pull_request: await this.renderPullFull(pull) }, record, actor);
  }

  private async emit(event: string, payload: Record<string, unknown>, record: RepositoryRecord, actor: string, repository: object = this.renderRepository(record)): Promise<void> {
    this.options.webhooks.emit(event, { ...payload, repository, sender: renderUser(this.ctx, actor) });
  }
}
