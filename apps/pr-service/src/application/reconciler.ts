import { Controller, Inject, Injectable, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type pg from 'pg';
import { ErrorCode, GantryError, isGantryError, type EventEnvelope, type PullRequestEffectFailureCode, type PullRequestFailureCode } from '@gantry/contracts';
import { EventStore, type CommandMetadata } from '@gantry/eventstore';
import { crashHereIfAsked, DurableConsumer, holdHereIfAsked, Sweep } from '@gantry/service-runtime';
import {
  baseBranchOf,
  CONFLICT_LOOKUPS,
  forHead,
  baseWentBack,
  HEAD_BACK_CONFIRM_MS,
  headWentBack,
  SHOWN_BACK_READ_GAP_MS,
  isSettled,
  olderThanBaseChange,
  nextConflictLookupAt,
  pendingEffects,
  readHeldBack,
  strategies,
  type GitHubObservation,
  type PullRequestCommand,
  type PullRequestEffect,
  type PullRequestState,
} from '../domain/index.js';
import { GITHUB_PULL_REQUESTS, CONFLICTING_FILES, PR_SERVICE_CONFIG } from './tokens.js';
import { DraftsNotSupported, type GitHubPullRequests, type PullRequestOnGitHub } from './github.js';
import { GitHubRateLimitHold } from './github-rate-limit.js';
import { KeyedRuns } from './keyed-runs.js';
import { PullRequestLog } from './pull-request-log.js';
import type { PrServiceConfig } from '../infrastructure/pr-service-config.js';
import type { ConflictingFiles } from '../infrastructure/git/conflicting-files.js';
import { PullRequestLocks, type UnderLock } from '../infrastructure/persistence/pull-request-locks.js';

export const EFFECTS_CONSUMER = 'pr-service-effects';

const FAILURE_CODES = new Set<string>(['CHECKS_FAILED', 'MERGE_CONFLICT', 'GH_AUTH_ERROR', 'AUTO_MERGE_NOT_ALLOWED', 'UNKNOWN']);
const EFFECT_FAILURE_CODES = new Set<string>([...FAILURE_CODES, 'GH_RATE_LIMITED']);
const MAX_ROUNDS = 12;
/** How many pull requests' retry and mergeability counts are remembered (see PullRequestReconciler). */
export const REMEMBERED_COUNTS = 10_000;
export { CONFLICT_LOOKUPS };

/**
 * The effect processor of pull requests (docs/pr-service.md). A PR is worked on when something may
 * have changed it — one of its events (a durable consumer of the service's own stream), a webhook, a
 * resync, a restart — one run at a time per PR (in this process, and across replicas by an advisory
 * lock). A run reads GitHub first (PR-12, PR-13), records what it saw, then carries out the effects
 * the state asks for one by one, reading again after each: a crash anywhere leaves a state whose
 * effects are asked again and a GitHub that is read before they are.
 */
@Injectable()
export class PullRequestReconciler implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly runs: KeyedRuns;
  /**
   * Per pull request, the failed runs and the reads that found mergeability unknown since its last
   * success: they set the next wait. A count is left behind when its PR settles before it is cleared
   * (merged while GitHub was still computing), so every PR ever tracked would keep one: the last
   * 10,000 are remembered, far more than run at once; a count forgotten starts its wait short again.
   */
  private readonly attempts = new LRUCache<string, number>({ max: REMEMBERED_COUNTS });
  private readonly unknownMergeability = new LRUCache<string, number>({ max: REMEMBERED_COUNTS });
  /** Per pull request, the runs in a row that found its lock held by another replica: they set the next wait. */
  private readonly lockedElsewhere = new LRUCache<string, number>({ max: REMEMBERED_COUNTS });
  /** Every open pull request looked at again now and then, whatever was missed (a webhook lost, a crash). */
  private readonly resync: Sweep;

  constructor(
    @Inject(PullRequestLog) private readonly prs: PullRequestLog,
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(GITHUB_PULL_REQUESTS) private readonly github: GitHubPullRequests,
    @Inject(CONFLICTING_FILES) private readonly conflicts: ConflictingFiles,
    @Inject(PR_SERVICE_CONFIG) private readonly config: PrServiceConfig,
    @Inject(GitHubRateLimitHold) private readonly rateLimit: GitHubRateLimitHold,
    @Inject(PullRequestLocks) private readonly locks: PullRequestLocks,
    @InjectPinoLogger('pull-requests') private readonly log: PinoLogger,
  ) {
    this.runs = new KeyedRuns(config.reconcileConcurrency, (id) => this.reconcile(id), (id, error) => this.retryLater(id, error));
    this.resync = new Sweep({ name: 'pull-request-resync', everyMs: config.resyncIntervalMs, run: async () => (await this.prs.unsettled()).forEach((id) => this.ask(id)), log: this.log });
  }

  ask(pullRequestId: string, delayMs = 0): void {
    this.runs.ask(pullRequestId, delayMs);
  }

  async onApplicationBootstrap(): Promise<void> {
    // A restart: whatever was asked of GitHub and not recorded is asked again, after a read.
    for (const id of await this.prs.unsettled()) this.ask(id);
    this.resync.start();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.resync.stop();
    await this.runs.stop();
  }

  private async reconcile(pullRequestId: string): Promise<void> {
    // GitHub's rate limit used up: the PR waits for its reset outside any run — no connection, no run slot held. The
    // reset is kept in the database (and in the log of the PR that met it), so every replica and a restart wait for it too.
    const waitMs = await this.rateLimitWaitMs(pullRequestId);
    if (waitMs > 0) return this.ask(pullRequestId, waitMs);
    const outcome = await this.locks.whileHeld(
      pullRequestId,
      async (underLock) => {
        await this.rounds(pullRequestId, underLock);
        this.attempts.delete(pullRequestId);
      },
      (error) => this.log.warn({ pullRequestId, error: error instanceof Error ? error.message : String(error) }, 'the pull request\'s advisory unlock failed; its connection is closed, which frees the lock'),
    );
    if (outcome === 'ran') {
      this.lockedElsewhere.delete(pullRequestId);
      return;
    }
    // Another replica works on it now. Its run may have read GitHub before the news that asked for this one, so the PR is
    // looked at again — after waits that grow, bounded, with jitter: replicas waiting on one PR do not ask in step.
    const n = (this.lockedElsewhere.get(pullRequestId) ?? 0) + 1;
    this.lockedElsewhere.set(pullRequestId, n);
    this.ask(pullRequestId, lockedElsewhereWaitMs(n));
  }

  private async rounds(pullRequestId: string, underLock: UnderLock): Promise<void> {
    for (let round = 0; round < MAX_ROUNDS; round++) {
      let state = await this.prs.load(pullRequestId);
      // A PR closed without merge is read when asked (a webhook about it): someone may have reopened it.
      const closed = state.outcome?.kind === 'CLOSED' && state.pr !== null;
      if (!state.flow || (isSettled(state) && !closed)) return;
      let seen: PullRequestOnGitHub | null = null;
      if (state.pr) {
        seen = await this.guarded(state, underLock, 'READ_PULL_REQUEST', () => this.github.read(state.repository, state.pr!.number));
        const { observation, unnamed } = await this.observe(state, seen, underLock);
        // A read that may come from a replica of GitHub behind another is no ground for an effect: the PR is read again.
        if (readHeldBack(state, observation)) return;
        state = (await this.record(this.command(state, { type: 'RecordObservation', data: { observation } }), underLock)).state;
        if (unnamed) await this.conflictUnnamed(state, seen, unnamed, underLock);
        if (isSettled(state)) return;
        state = await this.methodAllowedAgain(state, underLock);
        this.followMergeability(pullRequestId, seen);
      }
      const effect = pendingEffects(state)[0];
      if (!effect) return;
      if ((await this.carryOut(effect, state, seen, underLock)) === 'read-later') return this.ask(pullRequestId, 1000);
    }
    this.ask(pullRequestId, 1000);
  }

  /** How long the PR still waits for the reset of GitHub's rate limit a run (of any PR, on any replica) or its own last run ran into (0: not waiting). */
  private async rateLimitWaitMs(pullRequestId: string): Promise<number> {
    const now = Date.parse(this.prs.now());
    const held = await this.rateLimit.waitMs(now);
    if (held > 0) return held;
    const retryAt = (await this.prs.load(pullRequestId)).lastFailure?.retryAt;
    return retryAt ? Math.max(0, Date.parse(retryAt) - now) : 0;
  }

  /**
   * PR-15, PR-18: a read showing the PR back at a head the branch had before (once GitHub showed the current one), or at
   * the base it was on before the recorded change, is followed only once GitHub has shown it for HEAD_BACK_CONFIRM_MS
   * (one read may come from a replica of GitHub behind another): the read carries since when it has been shown, and the
   * PR is read again when that time is up. A read older than the recorded base change says nothing: the PR is read again
   * a second later, when a replica that has caught up shows what is new.
   */
  private async sinceShownBack(state: PullRequestState, observation: GitHubObservation, underLock: UnderLock): Promise<void> {
    const id = state.pullRequestId;
    if (olderThanBaseChange(state, observation)) {
      this.ask(id, 1000);
      return;
    }
    const head = headWentBack(state, observation) ? observation.headSha : '';
    const base = baseWentBack(state, observation) ? observation.baseBranch : '';
    // Kept in the database, not in this process: the run holds the PR's advisory lock, so the reads of every replica
    // come here one after the other, and a read showing something else — on any replica — starts the wait again. Most
    // reads show nothing back and find no row (learnt as the run took the lock): they send nothing. Each write of the row
    // is made only while the run's session holds the lock, in the same statement (`underLock.held`): a run that lost it
    // would end or start the wait of a read made by the run that holds it now.
    if (!head && !base) {
      if (underLock.shownBackRow) {
        const { rows } = await this.store.pool.query<{ held: boolean }>(
          `WITH held AS (SELECT ${underLock.held} AS held),
                gone AS (DELETE FROM pull_request_shown_back WHERE pull_request_id = $1 AND (SELECT held FROM held))
           SELECT held FROM held`,
          [id],
        );
        if (rows[0]?.held !== true) throw lockLost(underLock, id, 'RecordShownBack');
      }
      underLock.shownBackRow = false;
      return;
    }
    // The times are the database's, whichever replica reads: the replicas' clocks may differ by more than the 2 s, and a
    // replica ahead of the one that read first would take the earlier head as shown for long enough at once. The wait goes
    // on only from a read of the same thing at most SHOWN_BACK_READ_GAP_MS before this one: after a longer gap with no
    // reads (the service down, its runs held up) GitHub may have shown anything meanwhile.
    const { rows } = await this.store.pool.query<{ shown_ms: string }>(
      `INSERT INTO pull_request_shown_back AS b (pull_request_id, shown, since, last_read) SELECT $1, $2, now()::text, now()::text WHERE ${underLock.held}
       ON CONFLICT (pull_request_id) DO UPDATE SET
         shown = EXCLUDED.shown,
         since = CASE WHEN b.shown = EXCLUDED.shown AND b.last_read IS NOT NULL
                       AND now() - b.last_read::timestamptz <= make_interval(secs => $3::double precision / 1000)
                  THEN b.since ELSE EXCLUDED.since END,
         last_read = EXCLUDED.last_read
       RETURNING 1000 * extract(epoch FROM now() - since::timestamptz) AS shown_ms`,
      [id, `${head} ${base}`, SHOWN_BACK_READ_GAP_MS],
    );
    if (rows.length === 0) throw lockLost(underLock, id, 'RecordShownBack');
    underLock.shownBackRow = true;
    // How long it has been shown, by the database's clock, as a time of this replica's (the read's `observedAt`).
    const shownMs = Math.max(0, Number(rows[0]!.shown_ms));
    observation.shownSince = new Date(Date.parse(observation.observedAt) - shownMs).toISOString();
    const waitMs = HEAD_BACK_CONFIRM_MS - shownMs;
    if (waitMs > 0) this.ask(id, waitMs);
  }

  /** PR-11: while GitHub computes mergeability, read again later (1 s, doubling to 30 s). */
  private followMergeability(pullRequestId: string, seen: PullRequestOnGitHub): void {
    if (seen.state !== 'open' || seen.mergeable !== null) {
      this.unknownMergeability.delete(pullRequestId);
      return;
    }
    const n = (this.unknownMergeability.get(pullRequestId) ?? 0) + 1;
    this.unknownMergeability.set(pullRequestId, n);
    this.ask(pullRequestId, Math.min(30_000, 500 * 2 ** n));
  }

  /**
   * What GitHub shows, as a read to record. PR-10: the files of a conflict not yet recorded come from git; when
   * git cannot name them (a failed fetch, or a clean merge while GitHub still says dirty) the read is recorded
   * without the conflict — its checks, draft and head still count — and `unnamed` says why.
   */
  private async observe(state: PullRequestState, pr: PullRequestOnGitHub, underLock: UnderLock): Promise<{ observation: GitHubObservation; unnamed: string | null }> {
    const observation: GitHubObservation = {
      prNumber: pr.number,
      prUrl: pr.url,
      nodeId: pr.nodeId,
      state: pr.state,
      merged: pr.merged,
      mergeCommitSha: pr.mergeCommitSha,
      draft: pr.draft,
      headSha: pr.headSha,
      baseBranch: pr.baseBranch,
      mergeable: pr.mergeable,
      mergeableState: pr.mergeableState,
      autoMergeEnabled: pr.autoMergeEnabled,
      updatedAt: pr.updatedAt,
      checks: [],
      conflictingFiles: null,
      observedAt: this.prs.now(),
    };
    await this.sinceShownBack(state, observation, underLock);
    // A read the PR does not follow (yet) asks neither for checks nor for git's look-up of a conflict.
    if (readHeldBack(state, observation)) return { observation, unnamed: null };
    if (pr.state === 'open') observation.checks = await this.guarded(state, underLock, 'READ_PULL_REQUEST', () => this.github.checks(state.repository, pr.headSha));
    let unnamed: string | null = null;
    // PR-18: a conflict and the look-ups of its files were against the base recorded; on another base, they are over.
    const sameBase = baseBranchOf(state) === pr.baseBranch;
    const known = sameBase && forHead(state, state.conflict)?.headSha === pr.headSha;
    if (pr.state === 'open' && pr.mergeable === false && pr.mergeableState === 'dirty' && !known) {
      // PR-10: the look-ups that failed for this head are in the PR's log: at most CONFLICT_LOOKUPS, across restarts.
      const dueAt = sameBase ? nextConflictLookupAt(state, pr.headSha) : 0;
      const now = Date.parse(this.prs.now());
      if (dueAt !== null && now >= dueAt) {
        try {
          observation.conflictingFiles = await this.filesInConflict(state, pr);
        } catch (error) {
          unnamed = error instanceof Error ? error.message : String(error);
        }
      } else if (dueAt !== null) {
        this.ask(state.pullRequestId, dueAt - now);
      }
    }
    return { observation, unnamed };
  }

  /**
   * PR-10: git could not name the files of the conflict GitHub shows on this head. The failed look-up is recorded (counted
   * per head in the PR's log) and the PR read again later (1, 2, 4, 8 s); the last of CONFLICT_LOOKUPS also records the
   * conflict as the PR's last failure (MERGE_CONFLICT, naming the head and git's answer), to be seen in get_pull_request:
   * a conflict is recorded — and a sprint run paused — only with its files.
   */
  private async conflictUnnamed(state: PullRequestState, seen: PullRequestOnGitHub, error: string, underLock: UnderLock): Promise<void> {
    const id = state.pullRequestId;
    const { state: after } = await this.record(this.command(state, { type: 'RecordConflictFilesUnknown', data: { headSha: seen.headSha, message: error } }), underLock);
    const attempt = after.conflictLookups?.headSha === seen.headSha ? after.conflictLookups.failures : null;
    if (attempt === null) return;
    if (attempt < CONFLICT_LOOKUPS) {
      const retryInMs = 1000 * 2 ** (attempt - 1);
      this.log.warn({ pullRequestId: id, headSha: seen.headSha, attempt, retryInMs, error }, 'GitHub reports a conflict whose files git could not work out; looking again later');
      this.ask(id, retryInMs);
      return;
    }
    this.log.error({ pullRequestId: id, headSha: seen.headSha, error }, 'the files of a conflict could not be worked out; the conflict is recorded as the pull request\'s last failure');
  }

  private async filesInConflict(state: PullRequestState, pr: PullRequestOnGitHub): Promise<string[]> {
    const { rows } = await this.store.pool.query<{ clone_url: string }>(`SELECT clone_url FROM products WHERE product_id = $1`, [state.flow!.productId]);
    const cloneUrl = rows[0]?.clone_url;
    if (!cloneUrl) throw new GantryError(ErrorCode.PRECONDITION_FAILED, `no clone URL known for product ${state.flow!.productId}`);
    const files = await this.conflicts.between(cloneUrl, pr.baseBranch, pr.headBranch);
    if (files.length === 0) {
      // GitHub said dirty, git merges cleanly: the fetch saw a newer base or head. The next read decides.
      throw new GantryError(ErrorCode.PRECONDITION_FAILED, `GitHub reports ${state.repository}#${pr.number} conflicting, but its branches merge cleanly now`);
    }
    return files;
  }

  /** One effect, after the read that preceded it; GitHub's answer is recorded, and a crash before that is recovered by the next read. */
  private async carryOut(effect: PullRequestEffect, state: PullRequestState, seen: PullRequestOnGitHub | null, underLock: UnderLock): Promise<void | 'read-later'> {
    const id = state.pullRequestId;
    const beforeChange = () => lockStillHeld(this.store.pool, underLock, id, effect.type);
    const record = (command: PullRequestCommand) => this.record(command, underLock);
    switch (effect.type) {
      case 'OPEN_PULL_REQUEST': {
        const found = await this.guarded(state, underLock, effect.type, () => this.github.findOpen(effect.repository, effect.branch, effect.baseBranch));
        if (found && found.baseBranch !== effect.baseBranch) {
          // A person pointed it at another base (before it was recorded): adopted as it is, never opened again on
          // the product's base. Reads, conflicts and merges go by the base GitHub shows.
          this.log.warn({ pullRequestId: id, repository: effect.repository, branch: effect.branch, prNumber: found.number, baseBranch: found.baseBranch, productBaseBranch: effect.baseBranch }, 'the open pull request of the branch has another base than the product\'s; adopted on its base');
        }
        // PR-2: a repository without drafts opens the PR ready. Learnt from GitHub's refusal, on this PR or on
        // another of the repository; recorded first, so the next round asks for a ready PR.
        const noDrafts = async (why: string) => {
          this.log.warn({ pullRequestId: id, repository: effect.repository, branch: effect.branch, why }, 'the repository has no draft pull requests; the PR opens ready');
          await record(this.command(state, { type: 'RecordDraftsNotSupported', data: { message: why } }));
        };
        if (!found && effect.draft && (await this.prs.draftsRefusedIn(effect.repository))) return noDrafts('GitHub refused a draft to another pull request of the repository');
        const purpose =
          strategies[state.flow!.strategy].whenScopeDone === 'MARK_READY_FOR_REVIEW'
            ? effect.draft ? 'a draft until its sprint run is done' : 'its sprint run is not done yet (the repository has no drafts); never merged by Gantry'
            : 'merged once its story is done and its checks are green';
        let opened;
        try {
          if (!found) await beforeChange();
          opened = found
            ? { pr: found, adopted: true }
            : await this.guarded(state, underLock, effect.type, () =>
                this.github.open({
                  repository: effect.repository,
                  branch: effect.branch,
                  baseBranch: effect.baseBranch,
                  title: effect.title,
                  body: `Opened by Gantry for \`${effect.branch}\`: ${purpose}.`,
                  draft: effect.draft,
                }),
              );
        } catch (error) {
          if (error instanceof DraftsNotSupported) return noDrafts(error.githubMessage);
          throw error;
        }
        crashHereIfAsked('github:open_pull_request');
        const p = opened.pr;
        this.log.info({ pullRequestId: id, repository: effect.repository, branch: effect.branch, prNumber: p.number, adopted: opened.adopted, draft: p.draft }, 'pull request opened');
        await record(this.command(state, { type: 'RecordOpened', data: { prNumber: p.number, prUrl: p.url, nodeId: p.nodeId, draft: p.draft, headSha: p.headSha, adopted: opened.adopted, baseBranch: p.baseBranch } }));
        return;
      }
      case 'MARK_READY_FOR_REVIEW': {
        if (!seen || seen.draft) await beforeChange();
        const { alreadyReady } = seen && !seen.draft ? { alreadyReady: true } : await this.guarded(state, underLock, effect.type, () => this.github.markReadyForReview(effect.nodeId));
        crashHereIfAsked('github:mark_ready_for_review');
        await record(this.command(state, { type: 'RecordReadyForReview', data: { headSha: seen?.headSha ?? state.headSha!, alreadyReady } }));
        return;
      }
      case 'ENABLE_AUTO_MERGE': {
        if (seen?.autoMergeEnabled && seen.headSha === effect.expectedHeadSha) {
          await record(this.command(state, { type: 'RecordAutoMergeEnabled', data: { headSha: effect.expectedHeadSha } }));
          return;
        }
        await beforeChange();
        const answer = await this.guarded(state, underLock, effect.type, () => this.github.enableAutoMerge(effect.nodeId, effect.expectedHeadSha, effect.mergeMethod));
        crashHereIfAsked('github:enable_auto_merge');
        if (answer.outcome === 'ENABLED') await record(this.command(state, { type: 'RecordAutoMergeEnabled', data: { headSha: effect.expectedHeadSha } }));
        if (answer.outcome === 'REFUSED') {
          await record(this.command(state, { type: 'RecordAutoMergeRefused', data: { headSha: effect.expectedHeadSha, reason: answer.reason, message: answer.message } }));
        }
        if (answer.outcome === 'HEAD_MOVED') {
          // GitHub's head is not the one the merge was decided for: a refused merge of that head, as a merge's 409 is
          // (PR-14). The next read records a new head, which waits for its own checks (PR-7); a read showing a head the
          // branch had before (force-pushed back) says nothing about it (PR-15) and decides nothing — the call is not
          // sent again and again.
          this.log.info({ pullRequestId: id, headSha: effect.expectedHeadSha, github: answer.message }, 'GitHub shows another head than the one auto-merge was asked for; reading again');
          await record(this.command(state, { type: 'RecordMergeFailed', data: { headSha: effect.expectedHeadSha, code: 'UNKNOWN', message: answer.message, mergeableState: null } }));
          return 'read-later';
        }
        // ALREADY_ENABLED: this call sent again after the first one's answer was lost (or someone enabled it):
        // no failure — the next read shows it on, and it is recorded from there, for the head GitHub shows (PR-13).
        // DRAFT: a person converted it to a draft since the read before (PR-17): the next read records the draft.
        if (answer.outcome === 'METHOD_NOT_ALLOWED') await this.methodNotAllowed(state, underLock, effect.type, effect.expectedHeadSha, answer.message, seen);
        if (answer.outcome === 'CONFLICT') {
          // The PR conflicts with its base ("dirty status"), as a direct merge's 405 "not mergeable" says: a refused merge
          // of this head (PR-14), decided again only once GitHub shows the PR differently or the head moves. The
          // conflict itself is recorded by the reads (PR-10: with its files, or as the PR's last failure).
          this.log.warn({ pullRequestId: id, headSha: effect.expectedHeadSha, github: answer.message }, 'GitHub refused auto-merge: the pull request conflicts with its base');
          await record(
            this.command(state, {
              type: 'RecordMergeFailed',
              data: { headSha: effect.expectedHeadSha, code: 'MERGE_CONFLICT', message: `GitHub will not enable auto-merge: ${answer.message}`, mergeableState: seen?.mergeableState ?? null },
            }),
          );
        }
        if (answer.outcome === 'DRAFT') this.log.info({ pullRequestId: id, headSha: effect.expectedHeadSha, github: answer.message }, 'the pull request is a draft now; reading again');
        if (answer.outcome === 'ALREADY_ENABLED') this.log.info({ pullRequestId: id, headSha: effect.expectedHeadSha, github: answer.message }, 'auto-merge is on already; reading again');
        return;
      }
      case 'DISABLE_AUTO_MERGE': {
        if (seen?.autoMergeEnabled !== false) {
          await beforeChange();
          const answer = await this.guarded(state, underLock, effect.type, () => this.github.disableAutoMerge(effect.nodeId));
          if (answer.outcome === 'NOT_ENABLED') {
            // This call sent again after the first one's answer was lost (or merged or closed since): no
            // failure — the next read shows it off (recorded from there, with no call) or the PR settled.
            this.log.info({ pullRequestId: id, enabledFor: effect.enabledFor, github: answer.message }, 'auto-merge is off already; reading again');
            return;
          }
        }
        await record(this.command(state, { type: 'RecordAutoMergeDisabled', data: { headSha: effect.enabledFor } }));
        return;
      }
      case 'MERGE': {
        await holdHereIfAsked('github:merge');
        await beforeChange();
        let answer;
        try {
          answer = await this.github.merge(effect.repository, effect.prNumber, effect.sha, effect.mergeMethod);
        } catch (error) {
          if (isGantryError(error) && error.details?.status === 405 && FAILURE_CODES.has(error.code)) {
            // GitHub says 405 "not mergeable" to a PR that is no longer open — and this merge may be Octokit's
            // retry of one whose answer was lost after GitHub merged. Read first: a merged (or closed) PR is
            // recorded by the next round's read, not as a refusal of its head.
            const after = await this.guarded(state, underLock, 'READ_PULL_REQUEST', () => this.github.read(effect.repository, effect.prNumber));
            if (after.state !== 'open') {
              this.log.info({ pullRequestId: id, headSha: effect.sha, merged: after.merged }, 'GitHub refused the merge of a pull request no longer open; reading it again');
              return;
            }
            // PR-17: a person converted it to a draft since the read before the merge (GitHub's 405 "Pull Request is
            // still a draft"): no refusal of its head — the next round's read records the draft, which withdraws the merge.
            if (after.draft) {
              this.log.info({ pullRequestId: id, headSha: effect.sha }, 'GitHub refused the merge of a pull request made a draft; reading it again');
              return;
            }
            // PR-14: GitHub will not merge this head (405); recorded, and tried again only once GitHub's view changes.
            this.log.warn({ pullRequestId: id, headSha: effect.sha, code: error.code, error: error.message }, 'GitHub refused the merge');
            await record(
              this.command(state, { type: 'RecordMergeFailed', data: { headSha: effect.sha, code: error.code as PullRequestFailureCode, message: error.message, mergeableState: seen?.mergeableState ?? null } }),
            );
            return;
          }
          throw await this.failed(state, underLock, effect.type, error);
        }
        crashHereIfAsked('github:merge');
        if (answer.outcome === 'METHOD_NOT_ALLOWED') return this.methodNotAllowed(state, underLock, effect.type, effect.sha, answer.message, seen);
        if (answer.outcome === 'MERGED') {
          this.log.info({ pullRequestId: id, prNumber: effect.prNumber, headSha: effect.sha, mergeCommitSha: answer.mergeCommitSha }, 'pull request merged');
          await record(this.command(state, { type: 'RecordMerged', data: { headSha: effect.sha, mergeCommitSha: answer.mergeCommitSha } }));
        } else {
          // A branch moved under the merge (PR-14). The head (409 "Head branch was modified"): the next read
          // records the new head, which waits for its own checks (PR-7). The base (405 "Base branch was
          // modified"): the head is the same and GitHub may well show the PR as before, so the refusal is
          // recorded without the mergeable_state it was made under — the next read, a second from now,
          // tries the same head again (GitHub checks it against `sha`).
          this.log.info({ pullRequestId: id, headSha: effect.sha, github: answer.message }, 'a branch moved under the merge; reading again');
          await record(this.command(state, { type: 'RecordMergeFailed', data: { headSha: effect.sha, code: 'UNKNOWN', message: answer.message, mergeableState: null } }));
          return 'read-later';
        }
        return;
      }
      default:
        return assertNever(effect);
    }
  }

  /**
   * The repository does not allow the product's merge method (auto-merge's "Merge method squash is not allowed on
   * this repository", a merge's 405 "Squash merges are not allowed on this repository."): a setting only a person
   * can change, so sending the call again changes nothing. It is the PR's last failure (get_pull_request shows
   * it) and a refused merge of the head (PR-14): tried again once GitHub shows the PR differently or the head moves.
   */
  private async methodNotAllowed(state: PullRequestState, underLock: UnderLock, effect: 'ENABLE_AUTO_MERGE' | 'MERGE', headSha: string, message: string, seen: PullRequestOnGitHub | null): Promise<void> {
    const id = state.pullRequestId;
    const record = (command: PullRequestCommand) => this.record(command, underLock);
    this.log.error({ pullRequestId: id, headSha, mergeMethod: state.flow?.mergeMethod, github: message }, 'the repository does not allow the merge method; a person must allow it or change the product\'s merge method');
    await record(this.command(state, { type: 'RecordEffectFailed', data: { effect, code: 'UNKNOWN', message: `the repository does not allow the ${state.flow?.mergeMethod ?? ''} merge method: ${message}` } }));
    await record(
      this.command(state, { type: 'RecordMergeFailed', data: { headSha, code: 'UNKNOWN', message, mergeableState: seen?.mergeableState ?? null, refusedMergeMethod: state.flow?.mergeMethod } }),
    );
  }

  /**
   * The head's merge stands refused for the repository's merge method: GitHub shows the PR no differently once a person
   * allows the method, and sends no webhook about a repository's merge settings, so they are read at every look at the
   * PR (a webhook, the resync, a restart) while the refusal stands. Allowed now, the merge is decided again (PR-14).
   */
  private async methodAllowedAgain(state: PullRequestState, underLock: UnderLock): Promise<PullRequestState> {
    const refused = forHead(state, state.mergeFailure)?.refusedMergeMethod;
    if (!refused) return state;
    const allowed = await this.guarded(state, underLock, 'READ_PULL_REQUEST', () => this.github.allowedMergeMethods(state.repository));
    if (!allowed.includes(refused)) return state;
    this.log.info({ pullRequestId: state.pullRequestId, headSha: state.headSha, mergeMethod: refused }, 'the repository allows the merge method now; the merge is decided again');
    const command = this.command(state, { type: 'RecordMergeMethodAllowed', data: { headSha: state.mergeFailure!.headSha, mergeMethod: refused } });
    return (await this.record(command, underLock)).state;
  }

  /** A GitHub call whose typed failure is recorded on the PR before it is thrown (and the run retried later). */
  private async guarded<T>(state: PullRequestState, underLock: UnderLock, effect: PullRequestEffect['type'] | 'READ_PULL_REQUEST', call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      throw await this.failed(state, underLock, effect, error);
    }
  }

  private async failed(state: PullRequestState, underLock: UnderLock, effect: PullRequestEffect['type'] | 'READ_PULL_REQUEST', error: unknown): Promise<unknown> {
    const { retryAt } = rateLimitRetry(error);
    if (retryAt) {
      await this.rateLimit
        .holdUntil(retryAt)
        .catch((holdError: unknown) => this.log.warn({ pullRequestId: state.pullRequestId, retryAt, error: String(holdError) }, 'could not keep the rate limit\'s reset for the other replicas'));
    }
    if (isGantryError(error) && EFFECT_FAILURE_CODES.has(error.code)) {
      try {
        await this.record(
          this.command(state, { type: 'RecordEffectFailed', data: { effect, code: error.code as PullRequestEffectFailureCode, message: error.message, ...rateLimitRetry(error) } }),
          underLock,
        );
      } catch (recordError) {
        // The lock lost meanwhile is what ends the run (retryLater says so); the failure is another run's to record.
        if (recordError instanceof PullRequestLockLost) return recordError;
        this.log.warn({ pullRequestId: state.pullRequestId, error: String(recordError) }, 'could not record an effect failure');
      }
    }
    return error;
  }

  /**
   * A run that failed is tried again with a growing wait (GH_AUTH_ERROR waits longest: a person must act); one that ran
   * into GitHub's rate limit at its reset (a second after it, as GitHub asks), however long that is — no sooner would do.
   * A run that lost the PR's lock before a change on GitHub waits as a failed run does.
   */
  private retryLater(pullRequestId: string, error: unknown): void {
    if (error instanceof PullRequestLockLost) {
      // Another replica may be working on the PR now; this one looks at it again as after a failed run, reading first.
      const delayMs = this.nextAttemptWaitMs(pullRequestId, error);
      this.log.warn({ pullRequestId, before: error.before, error: error.cause.message, retryInMs: delayMs }, 'the pull request\'s lock was lost; the run ends before it changes or records anything more, and the pull request is worked on again later');
      this.ask(pullRequestId, delayMs);
      return;
    }
    const { retryAt } = rateLimitRetry(error);
    if (retryAt) {
      const delayMs = Math.max(0, Date.parse(retryAt) - Date.parse(this.prs.now()));
      this.log.warn({ pullRequestId, code: isGantryError(error) ? error.code : null, error: (error as Error).message, retryAt, retryInMs: delayMs }, 'GitHub\'s rate limit is used up; the pull request is worked on again at its reset');
      this.ask(pullRequestId, delayMs);
      return;
    }
    const delayMs = this.nextAttemptWaitMs(pullRequestId, error);
    this.log.warn({
      pullRequestId,
      code: isGantryError(error) ? error.code : null,
      error: error instanceof Error ? error.message : String(error),
      attempt: this.attempts.get(pullRequestId),
      retryInMs: delayMs,
    }, 'pull request run failed; trying again later');
    this.ask(pullRequestId, delayMs);
  }

  /** Counts a failed run of the PR and answers the wait before the next: growing, longest for GH_AUTH_ERROR (a person must act). */
  private nextAttemptWaitMs(pullRequestId: string, error: unknown): number {
    const n = (this.attempts.get(pullRequestId) ?? 0) + 1;
    this.attempts.set(pullRequestId, n);
    const cap = isGantryError(error) && error.code === ErrorCode.GH_AUTH_ERROR ? 300_000 : 60_000;
    return Math.min(cap, 500 * 2 ** Math.min(n, 10));
  }

  /**
   * A fact the run learnt, recorded only while the run still holds the PR's lock. A run that lost it (its connection
   * gone, or not yet noticed as gone) may have read GitHub before another replica's run, which holds the lock now, read
   * and recorded it: its record would come after that newer one, or beside it (a stale read recorded last, a decision
   * made twice). The check is in the record's transaction, after its append and before its commit
   * (PullRequestLog.record): held there, no other run had the lock when the append took its place in the stream, so a
   * later run's record of the PR — on any replica — can only come after it, since an append at the same place waits
   * for this commit and then decides again on top of it. A record that appends nothing needs no check.
   */
  private record(command: PullRequestCommand, underLock: UnderLock): Promise<{ state: PullRequestState }> {
    const id = command.data.pullRequestId;
    return this.prs.record(command, this.metadata(id), (sql) => lockStillHeld(sql, underLock, id, command.type));
  }

  private command<C extends PullRequestCommand>(state: PullRequestState, c: { type: C['type']; data: Omit<C['data'], 'pullRequestId' | 'repository' | 'branch' | 'now'> }): PullRequestCommand {
    return {
      type: c.type,
      data: { ...c.data, pullRequestId: state.pullRequestId, repository: state.repository, branch: state.branch, now: this.prs.now() },
    } as PullRequestCommand;
  }

  private metadata(pullRequestId: string): CommandMetadata {
    return { correlationId: pullRequestId, causationId: null, actor: 'pr-service' };
  }
}

/**
 * A run whose PR lock was lost (its connection gone, and the lock with its session) before a change on GitHub or a
 * record of its own: another replica may have taken the lock since, and two runs would act on the PR at once.
 */
export class PullRequestLockLost extends Error {
  constructor(
    readonly pullRequestId: string,
    /** What the run was about to do: an effect on GitHub, or the command of a record. */
    readonly before: PullRequestEffect['type'] | PullRequestCommand['type'] | 'RecordShownBack',
    override readonly cause: Error,
  ) {
    super(`the lock of pull request ${pullRequestId} was lost before ${before}: ${cause.message}`);
    this.name = 'PullRequestLockLost';
  }
}

/**
 * Called right before each call that changes the PR on GitHub (reads need no lock to be harmless), and in the transaction
 * of each record of the run after its append (`sql`: that transaction's connection). A loss the lock's connection has
 * reported ends the run with no round trip; else PostgreSQL's lock table says whether the run's session still holds the
 * lock — a connection lost without a word yet (a session ended while its socket has not closed here) is lost too.
 */
async function lockStillHeld(sql: pg.Pool | pg.PoolClient, underLock: UnderLock, pullRequestId: string, before: PullRequestLockLost['before']): Promise<void> {
  if (underLock.lost) throw lockLost(underLock, pullRequestId, before);
  // Text with no parameters: in a record's transaction it goes in one message with the writes waiting for it.
  const { rows } = await sql.query<{ held: boolean }>(`SELECT ${underLock.held} AS held`);
  if (rows[0]?.held !== true) throw lockLost(underLock, pullRequestId, before);
}

/** The run's lock is lost: as its connection reported it, or as PostgreSQL's lock table shows it before the connection says so. */
function lockLost(underLock: UnderLock, pullRequestId: string, before: PullRequestLockLost['before']): PullRequestLockLost {
  return new PullRequestLockLost(pullRequestId, before, underLock.lost ?? new Error('its session no longer holds the lock'));
}

/** The longest wait before a PR whose lock another replica holds is looked at again. */
export const LOCKED_ELSEWHERE_MAX_WAIT_MS = 5000;

/**
 * The wait after the `n`th run in a row (from 1) that found the PR's lock held elsewhere: 500 ms doubling, up to
 * LOCKED_ELSEWHERE_MAX_WAIT_MS, of which a random half ("equal jitter": never less than half the step, so the waits
 * still grow).
 */
export function lockedElsewhereWaitMs(n: number, random: () => number = Math.random): number {
  const step = Math.min(LOCKED_ELSEWHERE_MAX_WAIT_MS, 500 * 2 ** Math.min(Math.max(n, 1) - 1, 10));
  return Math.round(step / 2 + random() * (step / 2));
}

/** The failure's rate-limit reset (GitHub's `x-ratelimit-reset`, plus the second GitHub asks for), as the time the PR is worked on again. */
function rateLimitRetry(error: unknown): { retryAt?: string } {
  const resetAt = isGantryError(error) ? error.details?.rateLimitResetAt : undefined;
  return typeof resetAt === 'string' ? { retryAt: new Date(Date.parse(resetAt) + 1000).toISOString() } : {};
}

function assertNever(value: never): never {
  throw new Error(`unhandled pull request effect ${JSON.stringify(value)}`);
}

/** Each event of a PR may ask for an effect: the consumer asks for a run on that PR (the run records). */
@Controller()
export class PullRequestEffectsConsumer {
  constructor(@Inject(PullRequestReconciler) private readonly reconciler: PullRequestReconciler) {}

  @DurableConsumer({ name: EFFECTS_CONSUMER, source: 'prs' })
  async onPullRequestEvent(event: EventEnvelope): Promise<void> {
    this.reconciler.ask(event.streamId);
  }
}
