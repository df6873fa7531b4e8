import { getPullRequest, MAX_PR_CHECK_NAME_CHARS, MAX_PR_DETAILS_URL_CHARS, MAX_PR_LIST_BYTES, MAX_PR_MESSAGE_CHARS } from '@gantry/contracts';
import { DeciderSpecification } from '@gantry/eventstore/testing';
import { validatesAgainstContract } from '@gantry/testing';
import { pullRequestDecider } from './decider.js';
import { pendingEffects } from './effects.js';
import type { PullRequestCommand } from './commands.js';
import type { PullRequestEvent } from './events.js';
import { CONFLICT_LOOKUPS, nextConflictLookupAt, phaseOf } from './phase.js';
import { evolvePullRequest, initialPullRequestState, type PullRequestState } from './state.js';
import { pullRequestView } from './view.js';
import { at, BRANCH, check, event, H1, H2, H3, JOB2, NODE, PR_ID, REPO, RUN, RUN2, when } from './testing/story.js';

const given = DeciderSpecification.for(pullRequestDecider, { validate: validatesAgainstContract('prs') });
const stateOf = (events: PullRequestEvent[]): PullRequestState => events.reduce(evolvePullRequest, initialPullRequestState);
/** The events a command decides on a history, each checked against its contract. */
const decided = (history: PullRequestEvent[], command: PullRequestCommand): PullRequestEvent[] => {
  const events = pullRequestDecider.decide(command, stateOf(history));
  events.forEach(validatesAgainstContract('prs'));
  return events;
};

const green = [check('ci/test', 'SUCCESS')];
const red = [check('ci/test', 'FAILURE')];

/** A STORY PR with tasks T-1 and T-2, open on H1. */
const openStory = [event.queued(0, 'T-1'), event.started(1), event.opened(2)];
/** …and both tasks done. */
const storyDone = [...openStory, event.done(3, 'T-1'), event.queued(4, 'T-2'), event.done(5, 'T-2')];

describe('the pull request machine', () => {
  describe('PR-2: the first push opens the PR', () => {
    it('the first push starts the flow with the product\'s rules and asks GitHub for a PR', () => {
      const state = given([event.queued(0, 'T-1')]).when(when.pushed(1, H1)).then([event.started(1)]);
      expect(phaseOf(state)).toBe('branch_pushed');
      expect(pendingEffects(state)).toEqual([
        { type: 'OPEN_PULL_REQUEST', repository: REPO, branch: BRANCH, baseBranch: 'main', title: 'Story ST-1', draft: false, headSha: H1 },
      ]);
    });

    it('a SPRINT PR opens as a draft', () => {
      const state = given([]).when(when.pushed(1, H1, { strategy: 'SPRINT' })).then([event.started(1, H1, { strategy: 'SPRINT' })]);
      expect(pendingEffects(state)).toMatchObject([{ type: 'OPEN_PULL_REQUEST', draft: true }]);
    });

    it('the same head reported again changes nothing; a later push moves the head', () => {
      given([event.started(1)]).when(when.pushed(5, H1)).then([]);
      given([event.started(1)]).when(when.pushed(5, H2)).then([event.moved(5, H2, H1, 'PUSH')]);
    });

    it('an opened (or adopted) PR is recorded once; nothing more is asked to open it', () => {
      const state = given([event.queued(0, 'T-1'), event.started(1)]).when(when.opened(2, H1, false, true)).then([event.opened(2, false, H1, true)]);
      expect(pendingEffects(state)).toEqual([]);
      expect(phaseOf(state)).toBe('waiting_for_scope_done');
      given([event.started(1), event.opened(2)]).when(when.opened(3)).then([]);
    });

    it('a PR adopted on another base than the product\'s records that base, and is answered on it; one recorded before the base was kept is on the product\'s', () => {
      const adopted = { ...event.opened(2, false, H1, true), data: { ...event.opened(2, false, H1, true).data, baseBranch: 'develop' } } as PullRequestEvent;
      const state = given([event.queued(0, 'T-1'), event.started(1)])
        .when({ ...when.opened(2, H1, false, true), data: { ...when.opened(2, H1, false, true).data, baseBranch: 'develop' } } as PullRequestCommand)
        .then([adopted]);
      expect(pullRequestView(state).baseBranch).toBe('develop');
      expect(pullRequestView(stateOf([event.queued(0, 'T-1'), event.started(1), event.opened(2, false, H1, true)])).baseBranch).toBe('main');
    });

    it('a pushed PR with no scope recorded is just opened', () => {
      expect(phaseOf(stateOf([event.started(1), event.opened(2)]))).toBe('pr_opened');
    });
  });

  describe('STORY (PR-3, PR-4, PR-5, PR-6)', () => {
    it('no merge after the first task: the story has a second one', () => {
      const state = given([...openStory]).when(when.done(3, 'T-1')).then([event.done(3, 'T-1')]);
      given([...openStory, event.done(3, 'T-1')]).when(when.observed(4, { checks: green })).then([event.passed(4)]);
      expect(phaseOf(state)).toBe('waiting_for_scope_done');
    });

    it('no merge after a middle task either, even with green checks', () => {
      const three = ['T-1', 'T-2', 'T-3'];
      const history = [event.queued(0, 'T-1', three), event.started(1), event.opened(2), event.passed(3), event.done(4, 'T-1')];
      const state = given(history).when(when.done(5, 'T-2')).then([event.done(5, 'T-2')]);
      expect(phaseOf(state)).toBe('waiting_for_scope_done');
      expect(pendingEffects(state)).toEqual([]);
    });

    it('after the last task, green checks on the head: auto-merge is requested for that head', () => {
      const state = given([...storyDone]).when(when.observed(6, { checks: green })).then([event.passed(6), event.mergeRequested(6, 'AUTO_MERGE')]);
      expect(phaseOf(state)).toBe('auto_merge_enabled');
      expect(pendingEffects(state)).toEqual([{ type: 'ENABLE_AUTO_MERGE', repository: REPO, prNumber: 7, nodeId: NODE, expectedHeadSha: H1, mergeMethod: 'SQUASH' }]);
    });

    it('the last task done when the head was already seen green: the merge is requested then', () => {
      const history = [...openStory, event.done(3, 'T-1'), event.queued(4, 'T-2'), event.passed(5)];
      given(history).when(when.done(6, 'T-2')).then([event.done(6, 'T-2'), event.mergeRequested(6, 'AUTO_MERGE')]);
    });

    it('never with no checks reported: a repository without checks is not green', () => {
      const state = given([...storyDone]).when(when.observed(6, { checks: [] })).then([]);
      given(storyDone.map((e) => (e.type === 'PullRequestFlowStarted' ? event.started(1, H1, { requiredChecks: [] }) : e)))
        .when(when.observed(6, { checks: [] }))
        .then([]);
      expect(phaseOf(state)).toBe('waiting_for_checks');
    });

    it('a required check not reported yet, or still running, is not green', () => {
      given([...storyDone]).when(when.observed(6, { checks: [check('lint', 'SUCCESS')] })).then([]);
      given([...storyDone]).when(when.observed(6, { checks: [check('ci/test', 'PENDING')] })).then([]);
    });

    it('statuses count like check runs (the combined status alone would miss the check runs)', () => {
      given([...storyDone]).when(when.observed(6, { checks: [check('ci/test', 'SUCCESS', 'status')] })).then([event.passed(6), event.mergeRequested(6, 'AUTO_MERGE')]);
    });

    it('GitHub says the PR is already clean (or unstable): it is merged directly, with the same head as sha', () => {
      const requested = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE')];
      for (const reason of ['CLEAN', 'UNSTABLE'] as const) {
        const state = given(requested).when(when.autoMergeRefused(7, reason)).then([event.autoMergeRefused(7, reason), event.mergeRequested(7, 'DIRECT')]);
        expect(pendingEffects(state)).toEqual([{ type: 'MERGE', repository: REPO, prNumber: 7, sha: H1, mergeMethod: 'SQUASH' }]);
      }
    });

    it('a repository that does not allow auto-merge: merged directly, and later heads go straight to a direct merge', () => {
      const requested = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE')];
      given(requested).when(when.autoMergeRefused(7, 'NOT_ALLOWED')).then([event.autoMergeRefused(7, 'NOT_ALLOWED'), event.mergeRequested(7, 'DIRECT')]);
      const later = [...requested, event.autoMergeRefused(7, 'NOT_ALLOWED'), event.mergeRequested(7, 'DIRECT'), event.moved(8, H2, H1, 'GITHUB')];
      given(later).when(when.observed(9, { headSha: H2, checks: green })).then([event.passed(9, H2), event.mergeRequested(9, 'DIRECT', H2)]);
    });

    it('auto-merge enabled: nothing more is asked; GitHub merging it settles the PR', () => {
      const enabled = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeEnabled(7)];
      expect(pendingEffects(stateOf(enabled))).toEqual([]);
      const state = given(enabled).when(when.observed(20, { merged: true, state: 'closed', mergeCommitSha: 'a'.repeat(40) })).then([event.merged(20)]);
      expect(phaseOf(state)).toBe('merged');
      expect(pendingEffects(state)).toEqual([]);
    });

    it('a merge is decided once per head', () => {
      given([...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE')]).when(when.observed(7, { checks: green })).then([]);
    });
  });

  describe('PR-16: auto-merge turned off on GitHub by someone', () => {
    const enabled = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeEnabled(7)];
    const held = [...enabled, event.autoMergeDisabledOnGitHub(8)];

    it('seen off for the head Gantry enabled it for: the merge is held — nothing enabled again, nothing merged directly', () => {
      const state = given(enabled).when(when.observed(8, { checks: green, autoMergeEnabled: false })).then([event.autoMergeDisabledOnGitHub(8)]);
      expect(phaseOf(state)).toBe('merge_held');
      expect(pendingEffects(state)).toEqual([]);
      // GitHub's own checks pass, the PR is clean: still nothing decided.
      given(held).when(when.observed(9, { checks: green, mergeableState: 'clean' })).then([]);
    });

    it('held for the PR: a new head seen green is not merged either', () => {
      const moved = [...held, event.moved(9, H2, H1, 'PUSH')];
      expect(pendingEffects(stateOf(moved))).toEqual([]);
      const state = given(moved).when(when.observed(10, { headSha: H2, checks: green })).then([event.passed(10, H2)]);
      expect(phaseOf(state)).toBe('merge_held');
      expect(pendingEffects(state)).toEqual([]);
    });

    it('seen on again (someone enabled it): recorded for the head GitHub shows, and carried on from there', () => {
      const state = given(held).when(when.observed(9, { checks: green, autoMergeEnabled: true })).then([event.autoMergeEnabled(9), event.mergeRequested(9, 'AUTO_MERGE')]);
      expect(phaseOf(state)).toBe('auto_merge_enabled');
      expect(pendingEffects(state)).toEqual([]);
      // Merged by a person instead: merged.
      given(held).when(when.observed(10, { merged: true, state: 'closed', mergeCommitSha: 'a'.repeat(40) })).then([event.merged(10)]);
    });

    it('not a hold: Gantry turned it off (red checks), it was only asked (its answer never recorded), or the head moved with it', () => {
      given([...enabled, event.failed(8)]).when(when.observed(9, { checks: red, autoMergeEnabled: false })).then([]);
      given([...enabled]).when(when.observed(9, { checks: red, autoMergeEnabled: false })).then([event.failed(9)]);
      given([...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE')]).when(when.observed(7, { checks: green, autoMergeEnabled: false })).then([]);
      // A push by someone without write access turns it off on GitHub: a new head, which waits for its own checks (PR-7).
      const state = given(enabled).when(when.observed(9, { headSha: H2, checks: [], autoMergeEnabled: false })).then([event.moved(9, H2, H1, 'GITHUB')]);
      expect(phaseOf(state)).toBe('waiting_for_checks');
    });

    it('a new cycle (the branch pushed after the PR was merged or closed) is not held', () => {
      const state = stateOf([...held, event.closed(9), event.started(10, H2)]);
      expect(state.mergeHeldSince).toBeNull();
    });
  });

  describe('PR-17: a STORY PR a person converted to a draft', () => {
    const drafted = [...openStory, event.draftChanged(3, true)];

    it('seen a draft before its merge was decided: no merge once the story is done and its head green; the phase says why', () => {
      const state = given(openStory).when(when.observed(3, { draft: true, mergeableState: 'draft' })).then([event.draftChanged(3, true)]);
      expect(pullRequestView(state)).toMatchObject({ draft: true, phase: 'waiting_for_scope_done' });
      const done = [...drafted, event.done(4, 'T-1'), event.queued(5, 'T-2'), event.done(6, 'T-2')];
      const green = given(done).when(when.observed(7, { draft: true, checks: [check('ci/test', 'SUCCESS')], mergeableState: 'draft' })).then([event.passed(7)]);
      expect(phaseOf(green)).toBe('held_as_draft');
      expect(pendingEffects(green)).toEqual([]);
      // Read again and again (a webhook twice, the resync): nothing new.
      given([...done, event.passed(7)]).when(when.observed(8, { draft: true, checks: [check('ci/test', 'SUCCESS')], mergeableState: 'draft' })).then([]);
    });

    it('marked ready for review: the merge is decided again for the head GitHub shows, checks as usual', () => {
      const held = [...storyDone, event.draftChanged(6, true), event.passed(7)];
      const state = given(held).when(when.observed(8, { checks: [check('ci/test', 'SUCCESS')] })).then([event.draftChanged(8, false), event.mergeRequested(8, 'AUTO_MERGE')]);
      expect(phaseOf(state)).toBe('auto_merge_enabled');
      expect(pendingEffects(state)).toMatchObject([{ type: 'ENABLE_AUTO_MERGE', expectedHeadSha: H1 }]);
      // Ready on a head pushed while it was a draft: that head waits for its own checks.
      const moved = given(held).when(when.observed(9, { headSha: H2, checks: [] })).then([event.moved(9, H2, H1, 'GITHUB'), event.draftChanged(9, false, H2)]);
      expect(phaseOf(moved)).toBe('waiting_for_checks');
    });

    it('converted after the merge was decided, before GitHub was asked (or its answer recorded): the decision is withdrawn, nothing is asked of GitHub', () => {
      for (const decided of [
        [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE')],
        [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeRefused(7, 'CLEAN'), event.mergeRequested(7, 'DIRECT')],
      ]) {
        const state = given(decided).when(when.observed(8, { draft: true, checks: [check('ci/test', 'SUCCESS')], mergeableState: 'draft' })).then([event.draftChanged(8, true)]);
        expect(pullRequestView(state)).toMatchObject({ phase: 'held_as_draft', mergeDecision: null });
        expect(pendingEffects(state)).toEqual([]);
      }
    });

    it('converted with auto-merge on (GitHub turns it off): PR-16 holds the merge, and still does once it is ready again', () => {
      const enabled = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeEnabled(7)];
      const state = given(enabled)
        .when(when.observed(8, { draft: true, checks: [check('ci/test', 'SUCCESS')], autoMergeEnabled: false }))
        .then([event.autoMergeDisabledOnGitHub(8), event.draftChanged(8, true)]);
      expect(phaseOf(state)).toBe('merge_held');
      const ready = given([...enabled, event.autoMergeDisabledOnGitHub(8), event.draftChanged(8, true)])
        .when(when.observed(9, { checks: [check('ci/test', 'SUCCESS')] }))
        .then([event.draftChanged(9, false)]);
      expect(phaseOf(ready)).toBe('merge_held');
      expect(pendingEffects(ready)).toEqual([]);
    });

    it('a SPRINT PR is a draft by design (PR-8): its draft is not recorded this way', () => {
      const sprint = [event.started(1, H1, { strategy: 'SPRINT', requiredChecks: [] }), event.opened(2, true)];
      given(sprint).when(when.observed(3, { draft: false })).then([]);
      given([...sprint, event.sprintDone(4), event.ready(5)]).when(when.observed(6, { draft: true })).then([]);
    });
  });

  describe('PR-7: the head moves between the decision and the merge', () => {
    const direct = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeRefused(7, 'CLEAN'), event.mergeRequested(7, 'DIRECT')];

    it('GitHub shows a new head (the merge answered 409): the decision is void and the new head waits for its own checks', () => {
      const state = given(direct).when(when.observed(8, { headSha: H2, checks: [] })).then([event.moved(8, H2, H1, 'GITHUB')]);
      expect(phaseOf(state)).toBe('waiting_for_checks');
      expect(pendingEffects(state)).toEqual([]);
    });

    it('the old head\'s green is not the new head\'s: only checks seen green on H2 merge H2', () => {
      const moved = [...direct, event.moved(8, H2, H1, 'GITHUB')];
      given(moved).when(when.observed(9, { headSha: H2, checks: [check('ci/test', 'PENDING')] })).then([]);
      given(moved).when(when.observed(10, { headSha: H2, checks: green })).then([event.passed(10, H2), event.mergeRequested(10, 'AUTO_MERGE', H2)]);
    });

    it('auto-merge enabled for a head that moved is disabled before anything else', () => {
      const enabled = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeEnabled(7), event.moved(8, H2, H1, 'PUSH')];
      expect(pendingEffects(stateOf(enabled))).toEqual([{ type: 'DISABLE_AUTO_MERGE', repository: REPO, prNumber: 7, nodeId: NODE, enabledFor: H1 }]);
      const state = given(enabled).when(when.autoMergeDisabled(9, H1)).then([event.autoMergeDisabled(9, H1)]);
      expect(pendingEffects(state)).toEqual([]);
    });

    it('auto-merge asked for a head that moved before its answer was recorded (a crash, a lost reply): disabled if GitHub shows it on', () => {
      // GitHub may have enabled it (with expectedHeadOid H1) without the pr-service hearing so; it stays on across the push.
      const asked = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE')];
      for (const source of ['PUSH', 'GITHUB'] as const) {
        const moved = stateOf([...asked, event.moved(8, H2, H1, source)]);
        expect(pendingEffects(moved)).toEqual([{ type: 'DISABLE_AUTO_MERGE', repository: REPO, prNumber: 7, nodeId: NODE, enabledFor: H1 }]);
        const state = given([...asked, event.moved(8, H2, H1, source)]).when(when.autoMergeDisabled(9, H1)).then([event.autoMergeDisabled(9, H1)]);
        expect(pendingEffects(state)).toEqual([]);
      }
      // Refused (it would merge at once): nothing was enabled, nothing to disable.
      const refused = stateOf([...asked, event.autoMergeRefused(7, 'CLEAN'), event.mergeRequested(7, 'DIRECT'), event.moved(8, H2, H1, 'GITHUB')]);
      expect(pendingEffects(refused)).toEqual([]);
    });

    it('PR-15: a read showing a head the branch had before the current one is GitHub not having caught up with a push', () => {
      // T-3 pushed H3 and is done; GitHub still shows H2, whose checks were green: nothing is merged.
      const history = [
        event.queued(0, 'T-1', ['T-1', 'T-2']), event.started(1), event.opened(2), event.done(3, 'T-1'),
        event.moved(4, H2, H1, 'PUSH'), event.passed(5, H2), event.moved(6, H3, H2, 'PUSH'), event.done(7, 'T-2'),
      ];
      given(history).when(when.observed(8, { headSha: H2, checks: green })).then([]);
      given(history).when(when.observed(9, { headSha: H3, checks: green })).then([event.passed(9, H3), event.mergeRequested(9, 'AUTO_MERGE', H3)]);
    });

    it('PR-15: a push reported late — of a head the branch already had, or before GitHub showed a later head — moves nothing', () => {
      const later = [...storyDone, event.moved(6, H2, H1, 'PUSH'), event.moved(8, H3, H2, 'GITHUB')];
      given(later).when(when.pushed(9, H2)).then([]);
      given(later).when(when.pushed(9, 'a'.repeat(40), {}, 7)).then([]);
      given(later).when(when.pushed(10, 'b'.repeat(40), {}, 9)).then([event.moved(10, 'b'.repeat(40), H3, 'PUSH')]);
    });

    it('PR-15: a push reported behind a later push (handed back, redelivered after it) moves nothing: the job service\'s log orders the reports', () => {
      // T-1's job pushed H1 (its report at position 10 of the job service's log), T-2's job pushed H2 on top (position 20),
      // and H2's report was handled first.
      const history = [
        event.queued(0, 'T-1'), event.started(1, H2, {}, 20), event.opened(2, false, H2), event.done(3, 'T-1'), event.queued(4, 'T-2'), event.done(5, 'T-2'),
      ];
      given(history).when(when.pushed(6, H1, {}, 0, 10)).then([]);
      // GitHub shows H2, the branch's real head: its green checks merge it.
      given(history).when(when.observed(7, { headSha: H2, checks: green })).then([event.passed(7, H2), event.mergeRequested(7, 'AUTO_MERGE', H2)]);
      // A report later in the log moves the head, and carries its position on.
      const moved = [...history, event.moved(8, H3, H2, 'PUSH', 30)];
      given(history).when(when.pushed(8, H3, {}, 8, 30)).then([event.moved(8, H3, H2, 'PUSH', 30)]);
      given(moved).when(when.pushed(9, 'a'.repeat(40), {}, 0, 25)).then([]);
      // Settled: an older report starts no new cycle either; a later one does.
      const merged = [...moved, event.merged(10, H3)];
      given(merged).when(when.pushed(11, 'a'.repeat(40), {}, 0, 25)).then([]);
      given(merged).when(when.pushed(12, 'b'.repeat(40), {}, 12, 40)).then([event.started(12, 'b'.repeat(40), {}, 40)]);
      // A report whose position is not known is taken as before.
      given(history).when(when.pushed(13, H3)).then([event.moved(13, H3, H2, 'PUSH')]);
    });

    it('PR-15: a push report lower in the job service\'s log yet reported after the latest one comes from a log started again (its database reset): it counts', () => {
      // H2 reported at position 5000 at 00:01; the job service's database is reset, and its positions start again from 1.
      const history = [
        event.queued(0, 'T-1'), event.started(1, H2, {}, 5000), event.opened(2, false, H2), event.done(3, 'T-1'), event.queued(4, 'T-2'), event.done(5, 'T-2'),
      ];
      // A later push, reported at 00:10 at position 7 of the new log, moves the head; the positions of the new log count from there.
      const moved = given(history).when(when.pushed(10, H3, {}, 10, 7)).then([event.moved(10, H3, H2, 'PUSH', 7)]);
      expect(moved.pushPosition).toBe(7);
      given([...history, event.moved(10, H3, H2, 'PUSH', 7)]).when(when.pushed(11, 'a'.repeat(40), {}, 11, 9)).then([event.moved(11, 'a'.repeat(40), H3, 'PUSH', 9)]);
      // Once the PR merged, a branch pushed again after the reset gets its new PR.
      const merged = [...history, event.merged(8, H2)];
      given(merged).when(when.pushed(12, 'b'.repeat(40), {}, 12, 3)).then([event.started(12, 'b'.repeat(40), {}, 3)]);
      // An old report handed back and delivered late is still late: lower in the log, and reported before.
      given(history).when(when.pushed(13, H1, {}, 0, 4000)).then([]);
      given(merged).when(when.pushed(13, H1, {}, 0, 4000)).then([]);
    });

    it('PR-15: a branch force-pushed back to an earlier head after GitHub showed the later one is followed, and that earlier head is never merged', () => {
      // GitHub showed H2 green and the merge of H2 was decided; the branch went back to H1 (force-pushed) before the merge,
      // which GitHub refused (409). GitHub showed H2, so a read showing H1 is no lag: the PR follows H1, whose checks count —
      // but H1 predates the last task's push, so no merge is decided for it, however green, and none is sent at every read.
      const refused = [...storyDone, event.moved(6, H2, H1, 'PUSH'), event.passed(7, H2), event.mergeRequested(7, 'DIRECT', H2), event.mergeFailed(8, H2, null)];
      // (Shown for 2 s, reads in between showing it too: one read alone may be a replica of GitHub behind another.)
      const back = given(refused)
        .when(when.observed(9, { headSha: H1, checks: green, mergeableState: 'clean', shownSince: at(7) }))
        .then([event.moved(9, H1, H2, 'GITHUB'), event.passed(9, H1)]);
      expect(pendingEffects(back)).toEqual([]);
      const followed = [...refused, event.moved(9, H1, H2, 'GITHUB'), event.passed(9, H1)];
      given(followed).when(when.observed(10, { headSha: H1, checks: green, mergeableState: 'clean' })).then([]);
      given(followed).when(when.observed(10, { headSha: H1, checks: red, mergeableState: 'unstable' })).then([event.failed(10, H1)]);
      // GitHub showing H2 again (pushed again, or it was GitHub lagging after all): followed, and the merge of H2 decided again.
      given(followed)
        .when(when.observed(11, { headSha: H2, checks: green, mergeableState: 'clean', shownSince: at(9) }))
        .then([event.moved(11, H2, H1, 'GITHUB'), event.passed(11, H2), event.mergeRequested(11, 'AUTO_MERGE', H2)]);
      // Before GitHub showed H2 (only pushed), a read showing H1 is GitHub not having caught up: nothing.
      given([...storyDone, event.moved(6, H2, H1, 'PUSH')]).when(when.observed(9, { headSha: H1, checks: green, mergeableState: 'clean' })).then([]);
    });

    it('PR-15: one read showing an earlier head after GitHub showed the later one is not followed (a replica of GitHub behind another may answer it); the same head shown again 2 s later is', () => {
      // GitHub showed H2 green with auto-merge enabled for it, and H1 was red: following one stale read back to H1 would
      // disable H2's auto-merge on GitHub and report H1's red checks (failing the job that pushed H1).
      const shown = [...storyDone, event.moved(6, H2, H1, 'PUSH'), event.passed(7, H2), event.mergeRequested(7, 'AUTO_MERGE', H2)];
      given(shown).when(when.observed(9, { headSha: H1, checks: red, mergeableState: 'unstable' })).then([]);
      given(shown).when(when.observed(9, { headSha: H1, checks: red, mergeableState: 'unstable', shownSince: at(8) })).then([]);
      given(shown)
        .when(when.observed(10, { headSha: H1, checks: red, mergeableState: 'unstable', shownSince: at(8) }))
        .then([event.moved(10, H1, H2, 'GITHUB'), event.failed(10, H1)]);
    });

    it('a read older than the head we know of says nothing about it', () => {
      const pushed = [...storyDone, event.moved(10, H3, H1, 'PUSH')];
      given(pushed).when(when.observed(9, { headSha: H1, checks: green })).then([]);
    });
  });

  describe('PR-9: red checks', () => {
    it('red checks on the head are reported once, with the failed checks; no merge', () => {
      const state = given([...storyDone]).when(when.observed(6, { checks: red })).then([event.failed(6)]);
      expect(phaseOf(state)).toBe('checks_failed');
      expect(pendingEffects(state)).toEqual([]);
      given([...storyDone, event.failed(6)]).when(when.observed(7, { checks: red })).then([]);
    });

    it('more checks, or longer names, than one message carries: the first are kept, each name cut, the rest counted', () => {
      // Without required checks, every reported check counts (PR-4).
      const storyDone = [event.queued(0, 'T-1'), event.started(1, H1, { requiredChecks: [] }), event.opened(2), event.done(3, 'T-1')];
      const long = `ci/${'matrix-'.repeat(150_000)}`;
      const many = Array.from({ length: 5000 }, (_, i) => check(`ci/shard-${String(i).padStart(4, '0')}-${'x'.repeat(40)}`, 'FAILURE'));
      const [failed] = decided(storyDone, when.observed(6, { checks: [check(long, 'FAILURE'), ...many] }));
      if (failed?.type !== 'PullRequestChecksFailed') throw new Error('no red recorded');
      expect(failed.data.failedChecks[0]!.name).toBe(`${long.slice(0, MAX_PR_CHECK_NAME_CHARS)}…`);
      expect(Buffer.byteLength(JSON.stringify(failed.data.failedChecks))).toBeLessThanOrEqual(MAX_PR_LIST_BYTES);
      expect(failed.data.failedChecks.length + failed.data.failedChecksLeftOut).toBe(5001);
      expect(failed.data.failedChecksLeftOut).toBeGreaterThan(0);

      const [passed] = decided(storyDone, when.observed(6, { checks: many.map((c) => ({ ...c, state: 'SUCCESS' as const })) }));
      if (passed?.type !== 'PullRequestChecksPassed') throw new Error('no green recorded');
      expect(Buffer.byteLength(JSON.stringify(passed.data.checks))).toBeLessThanOrEqual(MAX_PR_LIST_BYTES);
      expect(passed.data.checks.length + passed.data.checksLeftOut).toBe(5000);
      expect(pullRequestView(stateOf([...storyDone, passed])).checks).toMatchObject({ verdict: 'GREEN', names: passed.data.checks, namesLeftOut: passed.data.checksLeftOut });
    });

    it('a details URL that is too long, or no URL, is not kept', () => {
      const withUrl = (detailsUrl: string) => ({ ...check('ci/test', 'FAILURE'), detailsUrl });
      const [tooLong] = decided(storyDone, when.observed(6, { checks: [withUrl(`https://ci.example/${'a'.repeat(MAX_PR_DETAILS_URL_CHARS)}`)] }));
      const [notUrl] = decided(storyDone, when.observed(6, { checks: [withUrl('see the CI')] }));
      const [kept] = decided(storyDone, when.observed(6, { checks: [withUrl('https://ci.example/runs/1')] }));
      const urlOf = (e: PullRequestEvent | undefined) => (e?.type === 'PullRequestChecksFailed' ? e.data.failedChecks[0]!.detailsUrl : undefined);
      expect([urlOf(tooLong), urlOf(notUrl), urlOf(kept)]).toEqual([null, null, 'https://ci.example/runs/1']);
    });

    it('a reopened task (its job failed on red checks) takes the scope back; a fixed head waits for its own checks', () => {
      const failed = [...storyDone, event.failed(6)];
      const reopened: PullRequestEvent = {
        type: 'PullRequestScopeTaskReopened',
        data: { ...event.done(0, 'T-2').data, reason: 'checks failed on its head: ci/test', reopenedAt: '2026-11-30T08:00:07.000Z' } as never,
      };
      delete (reopened.data as { doneAt?: string }).doneAt;
      const state = given(failed).when(when.reopened(7, 'T-2')).then([reopened]);
      expect(phaseOf(state)).toBe('checks_failed');
      const fixed = [...failed, reopened, event.queued(8, 'T-2', ['T-1', 'T-2'], JOB2), event.moved(9, H2, H1, 'PUSH'), event.done(10, 'T-2', JOB2)];
      expect(phaseOf(stateOf(fixed))).toBe('waiting_for_checks');
      given(fixed).when(when.observed(11, { headSha: H2, checks: green })).then([event.passed(11, H2), event.mergeRequested(11, 'AUTO_MERGE', H2)]);
    });

    it('red after green on the same head (a re-run, a new check run) voids the merge decided for it: no direct merge', () => {
      const direct = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeRefused(7, 'CLEAN'), event.mergeRequested(7, 'DIRECT')];
      expect(pendingEffects(stateOf(direct))).toEqual([{ type: 'MERGE', repository: REPO, prNumber: 7, sha: H1, mergeMethod: 'SQUASH' }]);
      const state = given(direct).when(when.observed(8, { checks: red })).then([event.failed(8)]);
      expect(phaseOf(state)).toBe('checks_failed');
      expect(pendingEffects(state)).toEqual([]);
      // Green again (the check re-run): the merge is decided again, for the same head.
      given([...direct, event.failed(8)]).when(when.observed(9, { checks: green })).then([event.passed(9), event.mergeRequested(9, 'DIRECT')]);
    });

    it('red after green with auto-merge on for the head: auto-merge is disabled (GitHub would still merge a PR whose failing check it does not require)', () => {
      const enabled = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeEnabled(7)];
      const asked = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE')];
      for (const history of [enabled, asked]) {
        const state = given(history).when(when.observed(8, { checks: red })).then([event.failed(8)]);
        expect(pendingEffects(state)).toEqual([{ type: 'DISABLE_AUTO_MERGE', repository: REPO, prNumber: 7, nodeId: NODE, enabledFor: H1 }]);
        const disabled = given([...history, event.failed(8)]).when(when.autoMergeDisabled(9, H1)).then([event.autoMergeDisabled(9, H1)]);
        expect(pendingEffects(disabled)).toEqual([]);
        // Green again: auto-merge is asked for once more.
        const again = given([...history, event.failed(8), event.autoMergeDisabled(9, H1)]).when(when.observed(10, { checks: green })).then([event.passed(10), event.mergeRequested(10, 'AUTO_MERGE')]);
        expect(pendingEffects(again)).toEqual([{ type: 'ENABLE_AUTO_MERGE', repository: REPO, prNumber: 7, nodeId: NODE, expectedHeadSha: H1, mergeMethod: 'SQUASH' }]);
      }
    });

    it('green, then a check of the same head re-run (pending again): its latest run counts — no merge until it is green again', () => {
      const pending = [check('ci/test', 'PENDING')];
      /** The events the commands decide one after the other, each on the state the previous ones left. */
      const after = (history: PullRequestEvent[], ...commands: PullRequestCommand[]) =>
        commands.reduce((events, command) => [...events, ...decided(events, command)], history);
      // Seen green before the story was done; re-run, the last task done while it runs: nothing is merged.
      const seenGreen = [...openStory, event.done(3, 'T-1'), event.queued(4, 'T-2'), event.passed(5)];
      expect(decided(seenGreen, when.observed(6, { checks: pending }))).toEqual([event.checksPending(6)]);
      const rerun = after(seenGreen, when.observed(6, { checks: pending }), when.done(7, 'T-2'));
      expect(rerun.filter((e) => e.type === 'PullRequestMergeRequested')).toEqual([]);
      expect(phaseOf(stateOf(rerun))).toBe('waiting_for_checks');
      expect(pendingEffects(stateOf(rerun))).toEqual([]);
      // Green again: the merge is decided for the head.
      expect(decided(rerun, when.observed(8, { checks: green }))).toEqual([event.passed(8), event.mergeRequested(8, 'AUTO_MERGE')]);
      // A direct merge decided on the green and not carried out yet (GitHub's answer lost) is withdrawn by the re-run.
      const direct = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeRefused(7, 'CLEAN'), event.mergeRequested(7, 'DIRECT')];
      const directRerun = after(direct, when.observed(8, { checks: pending }));
      expect(pendingEffects(stateOf(directRerun))).toEqual([]);
      expect(decided(directRerun, when.observed(9, { checks: green }))).toEqual([event.passed(9), event.mergeRequested(9, 'DIRECT')]);
    });

    it('a re-run that turns the same head green lifts the failure', () => {
      given([...storyDone, event.failed(6)]).when(when.observed(7, { checks: green })).then([event.passed(7), event.mergeRequested(7, 'AUTO_MERGE')]);
    });
  });

  describe('PR-10 / PR-11: conflicts and mergeability', () => {
    it('files git cannot name: each failed look-up is counted for its head in the log; the last of the bound leaves the conflict as the last failure, and no more are recorded', () => {
      const unknown = (n: number) => Array.from({ length: n }, (_, i) => event.conflictFilesUnknown(6 + i, i + 1));
      given([...openStory]).when(when.conflictFilesUnknown(6)).then([event.conflictFilesUnknown(6, 1)]);
      const last = given([...openStory, ...unknown(CONFLICT_LOOKUPS - 1)]).when(when.conflictFilesUnknown(20)).then([
        event.conflictFilesUnknown(20, CONFLICT_LOOKUPS),
        {
          type: 'PullRequestEffectFailed',
          data: {
            pullRequestId: PR_ID, repository: REPO, branch: BRANCH, effect: 'READ_PULL_REQUEST', code: 'MERGE_CONFLICT', failedAt: at(20),
            message: `GitHub reports ${REPO}#7 conflicting on ${H1}, and git could not work out the files in conflict (${CONFLICT_LOOKUPS} tries, not tried again for this head): git fetch failed (exit 128): repository not found`,
          },
        },
      ]);
      expect(nextConflictLookupAt(last, H1)).toBeNull();
      given([...openStory, ...unknown(CONFLICT_LOOKUPS)]).when(when.conflictFilesUnknown(21)).then([]);
      // The next look-up waits 1, 2, 4, 8 s after the last failure; a new head starts its own count.
      expect(nextConflictLookupAt(stateOf([...openStory, ...unknown(3)]), H1)).toBe(Date.parse(at(8)) + 4000);
      expect(nextConflictLookupAt(stateOf([...openStory, ...unknown(CONFLICT_LOOKUPS)]), H2)).toBe(0);
      given([...openStory, ...unknown(CONFLICT_LOOKUPS), event.moved(30, H2, H1, 'PUSH')]).when(when.conflictFilesUnknown(31, H2)).then([event.conflictFilesUnknown(31, 1, H2)]);
      // A look-up about a head that is not the PR's any more is not counted.
      given([...openStory, event.moved(30, H2, H1, 'PUSH')]).when(when.conflictFilesUnknown(31, H1)).then([]);
    });

    it('a conflicting PR is reported once per head, with its files, and is paused', () => {
      const state = given([...storyDone]).when(when.observed(6, { mergeable: false, mergeableState: 'dirty', conflictingFiles: ['src/app.ts'], checks: green })).then([
        event.passed(6),
        event.conflict(6),
      ]);
      expect(phaseOf(state)).toBe('merge_conflict_paused');
      expect(pendingEffects(state)).toEqual([]);
      given([...storyDone, event.conflict(6)]).when(when.observed(7, { mergeable: false, mergeableState: 'dirty', conflictingFiles: ['src/app.ts'] })).then([]);
    });

    it('mergeable null is no verdict: no conflict, and what else the read shows still counts', () => {
      given([...storyDone]).when(when.observed(6, { mergeable: null, mergeableState: 'unknown' })).then([]);
    });

    it('a conflict in more files than one message carries keeps the first, as many as fit MAX_PR_LIST_BYTES, and counts the rest', () => {
      const files = Array.from({ length: 30_000 }, (_, i) => `gen/generated-module-${String(i).padStart(6, '0')}.ts`);
      const [conflict] = decided(storyDone, when.observed(6, { mergeable: false, mergeableState: 'dirty', conflictingFiles: files }));
      if (conflict?.type !== 'PullRequestMergeConflict') throw new Error('no conflict recorded');
      const kept = conflict.data.conflictingFiles;
      expect(kept).toEqual(files.slice(0, kept.length));
      expect(Buffer.byteLength(JSON.stringify(kept))).toBeLessThanOrEqual(MAX_PR_LIST_BYTES);
      expect(Buffer.byteLength(JSON.stringify(files.slice(0, kept.length + 1)))).toBeGreaterThan(MAX_PR_LIST_BYTES);
      expect(conflict.data.conflictingFilesLeftOut).toBe(files.length - kept.length);
      expect(pullRequestView(stateOf([...storyDone, conflict])).conflict).toEqual({ headSha: H1, conflictingFiles: kept, conflictingFilesLeftOut: files.length - kept.length });
    });

    it('a conflict GitHub no longer shows on the same head (the base changed again) is cleared: the PR is merged once its head is green', () => {
      const conflicted = [...storyDone, event.passed(6), event.conflict(7)];
      expect(phaseOf(stateOf(conflicted))).toBe('merge_conflict_paused');
      // Still computing, or still conflicting: no change.
      given(conflicted).when(when.observed(8, { checks: green, mergeable: null, mergeableState: 'unknown' })).then([]);
      given(conflicted).when(when.observed(8, { checks: green, mergeable: false, mergeableState: 'dirty', conflictingFiles: ['src/app.ts'] })).then([]);
      // Mergeable again on the same head: the conflict is over, and the merge is decided for that head.
      const state = given(conflicted).when(when.observed(9, { checks: green, mergeable: true, mergeableState: 'blocked' })).then([event.conflictCleared(9), event.mergeRequested(9, 'AUTO_MERGE')]);
      expect(phaseOf(state)).toBe('auto_merge_enabled');
      expect(pullRequestView(state).conflict).toBeNull();
      // Conflicting again later on that head: reported again.
      given([...conflicted, event.conflictCleared(9)]).when(when.observed(10, { checks: green, mergeable: false, mergeableState: 'dirty', conflictingFiles: ['src/app.ts'] }))
        .then([event.conflict(10)]);
    });

    it('a conflict whose files git could not name, shown mergeable again on the same head, is cleared: the look-ups start again for that head if it conflicts again', () => {
      const unknown = Array.from({ length: CONFLICT_LOOKUPS }, (_, i) => event.conflictFilesUnknown(6 + i, i + 1));
      const stuck = [...openStory, ...unknown, ...decided([...openStory, ...unknown.slice(0, -1)], when.conflictFilesUnknown(10)).slice(1)];
      expect(nextConflictLookupAt(stateOf(stuck), H1)).toBeNull();
      expect(stateOf(stuck).lastFailure).toMatchObject({ effect: 'READ_PULL_REQUEST', code: 'MERGE_CONFLICT' });
      // Still conflicting: nothing new.
      given(stuck).when(when.observed(12, { mergeable: false, mergeableState: 'dirty' })).then([]);
      // GitHub shows the same head clean (the base changed again): the conflict is over, and so is its last failure.
      const cleared = given(stuck).when(when.observed(13, { mergeable: true, mergeableState: 'clean' })).then([event.conflictCleared(13)]);
      expect(cleared.lastFailure).toBeNull();
      expect(nextConflictLookupAt(cleared, H1)).toBe(0);
      // Dirty again later on that head: git is asked again, its look-ups counted from one.
      given([...stuck, event.conflictCleared(13)]).when(when.conflictFilesUnknown(14)).then([event.conflictFilesUnknown(14, 1)]);
      // A clean read with no look-up counted for the head clears nothing.
      given([...stuck, event.conflictCleared(13)]).when(when.observed(15, { mergeable: true, mergeableState: 'clean' })).then([]);
    });

    it('the conflict is resolved by a new head', () => {
      const state = given([...storyDone, event.conflict(6)]).when(when.observed(9, { headSha: H2 })).then([event.moved(9, H2, H1, 'GITHUB')]);
      expect(phaseOf(state)).toBe('waiting_for_checks');
    });
  });

  describe('PR-18: a base a person changed on GitHub', () => {
    it('is recorded once, by the first read that shows it, and get_pull_request answers it', () => {
      const state = given([...openStory]).when(when.observed(6, { baseBranch: 'develop' })).then([event.baseChanged(6, 'develop')]);
      expect(pullRequestView(state).baseBranch).toBe('develop');
      given([...openStory, event.baseChanged(6, 'develop')]).when(when.observed(7, { baseBranch: 'develop' })).then([]);
      given([...openStory, event.baseChanged(6, 'develop')]).when(when.observed(8, { baseBranch: 'release' })).then([event.baseChanged(8, 'release', 'develop')]);
      // Back on the product's base is a change too (GitHub's updated_at unknown: once shown for 2 s, below).
      given([...openStory, event.baseChanged(6, 'develop')]).when(when.observed(9, { shownSince: at(7) })).then([event.baseChanged(9, 'main', 'develop')]);
    });

    describe('and a read from a replica of GitHub behind the change', () => {
      const changed = [...storyDone, event.conflict(6), event.baseChanged(8, 'develop', 'main', H1, at(7))];
      const stale = { baseBranch: 'main', mergeable: false, mergeableState: 'dirty', conflictingFiles: ['src/app.ts'], checks: green };

      it('records nothing when it is older than the change (GitHub\'s updated_at): no change back, no conflict with the previous base again', () => {
        given(changed).when(when.observed(9, { ...stale, updatedAt: at(5) })).then([]);
        // Older than the change, it says nothing at all, whatever base it shows.
        given(changed).when(when.observed(9, { baseBranch: 'develop', checks: green, updatedAt: at(5) })).then([]);
        given(changed).when(when.observed(9, { baseBranch: 'develop', checks: green, updatedAt: at(7) })).then([event.passed(9), event.mergeRequested(9, 'AUTO_MERGE')]);
      });

      it('follows a person moving the base back at once when GitHub\'s updated_at is later than the change', () => {
        given(changed)
          .when(when.observed(9, { baseBranch: 'main', mergeable: null, mergeableState: 'unknown', updatedAt: at(9) }))
          .then([event.baseChanged(9, 'main', 'develop', H1, at(9))]);
      });

      it('follows the previous base shown in the same second as the change (or without updated_at) only once shown for 2 s', () => {
        const sameSecond = { baseBranch: 'main', mergeable: null, mergeableState: 'unknown', updatedAt: at(7) };
        given(changed).when(when.observed(9, sameSecond)).then([]);
        given(changed).when(when.observed(10, { ...sameSecond, shownSince: at(9) })).then([]);
        given(changed).when(when.observed(11, { ...sameSecond, shownSince: at(9) })).then([event.baseChanged(11, 'main', 'develop', H1, at(7))]);
        const unknown = [...storyDone, event.baseChanged(8, 'develop')];
        given(unknown).when(when.observed(9, { baseBranch: 'main', updatedAt: at(9) })).then([]);
        given(unknown).when(when.observed(11, { baseBranch: 'main', updatedAt: at(9), shownSince: at(9) })).then([event.baseChanged(11, 'main', 'develop', H1, at(9))]);
      });

      it('a third base is no replica behind: followed at once', () => {
        given(changed).when(when.observed(9, { baseBranch: 'release', mergeable: null, mergeableState: 'unknown', updatedAt: at(7) })).then([event.baseChanged(9, 'release', 'develop', H1, at(7))]);
      });
    });

    it('ends a conflict with the previous base: the same head conflicting with the new one is recorded again, with its files', () => {
      const paused = [...storyDone, event.conflict(6)];
      const state = given(paused).when(when.observed(7, { baseBranch: 'develop', mergeable: null, mergeableState: 'unknown', checks: green })).then([
        event.baseChanged(7, 'develop'),
        event.passed(7),
        event.mergeRequested(7, 'AUTO_MERGE'),
      ]);
      expect(pullRequestView(state).conflict).toBeNull();
      given(paused)
        .when(when.observed(7, { baseBranch: 'develop', mergeable: false, mergeableState: 'dirty', conflictingFiles: ['src/other.ts'] }))
        .then([event.baseChanged(7, 'develop'), { ...event.conflict(7, H1, ['src/other.ts']), data: { ...event.conflict(7, H1, ['src/other.ts']).data, baseBranch: 'develop' } } as PullRequestEvent]);
    });

    it('ends the look-ups of a conflict\'s files with the previous base, and an unnamed conflict left as the last failure', () => {
      const unknown = Array.from({ length: CONFLICT_LOOKUPS }, (_, i) => event.conflictFilesUnknown(6 + i, i + 1));
      const failure: PullRequestEvent = {
        type: 'PullRequestEffectFailed',
        data: { pullRequestId: PR_ID, repository: REPO, branch: BRANCH, effect: 'READ_PULL_REQUEST', code: 'MERGE_CONFLICT', message: 'conflict not named', failedAt: at(10) },
      };
      const state = stateOf([...openStory, ...unknown, failure, event.baseChanged(20, 'develop')]);
      expect(nextConflictLookupAt(state, H1)).toBe(0);
      expect(state.lastFailure).toBeNull();
    });

    it('a merge GitHub refused on the previous base is decided again; one refused for the merge method is not; the green checks of the head stay', () => {
      const refused = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeRefused(7, 'CLEAN'), event.mergeRequested(7, 'DIRECT'), event.mergeFailed(8)];
      given(refused).when(when.observed(9, { baseBranch: 'develop', checks: green, mergeableState: 'blocked' })).then([event.baseChanged(9, 'develop'), event.mergeRequested(9, 'DIRECT')]);
      const methodRefused = { ...event.mergeFailed(8, H1, 'clean'), data: { ...event.mergeFailed(8, H1, 'clean').data, refusedMergeMethod: 'SQUASH' } } as PullRequestEvent;
      given([...refused.slice(0, -1), methodRefused]).when(when.observed(9, { baseBranch: 'develop', checks: green, mergeableState: 'clean' })).then([event.baseChanged(9, 'develop')]);
    });

    it('keeps a merge decided and auto-merge enabled for the head: GitHub keeps auto-merge across a base change by someone with write access', () => {
      const enabled = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeEnabled(7)];
      const state = given(enabled).when(when.observed(8, { baseBranch: 'develop', checks: green, autoMergeEnabled: true })).then([event.baseChanged(8, 'develop')]);
      expect(phaseOf(state)).toBe('auto_merge_enabled');
      // Turned off by GitHub (changed by someone without write access): held, as any auto-merge turned off on GitHub (PR-16).
      given(enabled).when(when.observed(8, { baseBranch: 'develop', checks: green, autoMergeEnabled: false })).then([event.baseChanged(8, 'develop'), event.autoMergeDisabledOnGitHub(8)]);
    });
  });

  describe('PR-14: a refused merge', () => {
    const failed = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeRefused(7, 'CLEAN'), event.mergeRequested(7, 'DIRECT'), event.mergeFailed(8)];

    it('is not tried again for the same head while GitHub shows the PR the same way', () => {
      given(failed).when(when.observed(9, { checks: green, mergeableState: 'blocked' })).then([]);
    });

    it('is tried again once GitHub\'s view changed (a review approved it)', () => {
      given(failed).when(when.observed(10, { checks: green, mergeableState: 'clean' })).then([event.mergeRequested(10, 'DIRECT')]);
    });

    it('refused for the merge method the repository does not allow: decided again once the repository allows it, not before, and only for that method', () => {
      const methodRefused: PullRequestEvent = {
        type: 'PullRequestMergeFailed',
        data: {
          pullRequestId: PR_ID, repository: REPO, branch: BRANCH, headSha: H1, code: 'UNKNOWN', message: 'Squash merges are not allowed on this repository.',
          mergeableState: 'clean', refusedMergeMethod: 'SQUASH', failedAt: at(8),
        },
      };
      const refused = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeRefused(7, 'CLEAN'), event.mergeRequested(7, 'DIRECT'), methodRefused];
      given(refused).when(when.observed(9, { checks: green, mergeableState: 'clean' })).then([]);
      given(refused).when(when.methodAllowed(10, 'REBASE')).then([]);
      const allowed: PullRequestEvent = { type: 'PullRequestMergeMethodAllowed', data: { pullRequestId: PR_ID, repository: REPO, branch: BRANCH, headSha: H1, mergeMethod: 'SQUASH', allowedAt: at(10) } };
      const methodFailure: PullRequestEvent = {
        type: 'PullRequestEffectFailed',
        data: { pullRequestId: PR_ID, repository: REPO, branch: BRANCH, effect: 'MERGE', code: 'UNKNOWN', message: 'the repository does not allow the SQUASH merge method', failedAt: at(8) },
      };
      const again = given([...refused, methodFailure]).when(when.methodAllowed(10, 'SQUASH')).then([allowed, event.mergeRequested(10, 'DIRECT')]);
      expect(again.lastFailure).toBeNull();
      // Another refusal (a review required) is not lifted by the repository's settings; nor is a refusal of an older head.
      given(failed).when(when.methodAllowed(10, 'SQUASH')).then([]);
      given([...refused, event.moved(9, H2, H1, 'PUSH')]).when(when.methodAllowed(10, 'SQUASH', H1)).then([]);
    });
  });

  describe('SPRINT (PR-8)', () => {
    const sprint = [event.started(1, H1, { strategy: 'SPRINT', requiredChecks: [] }), event.opened(2, true)];

    it('stays a draft while the sprint run is not DONE, green checks or not; never merged', () => {
      const state = given(sprint).when(when.observed(3, { draft: true, checks: [check('ci', 'SUCCESS')] })).then([event.passed(3, H1, ['ci'])]);
      expect(phaseOf(state)).toBe('draft_opened');
      expect(pendingEffects(state)).toEqual([]);
    });

    it('the sprint run DONE asks for ready for review, and that is all', () => {
      const state = given(sprint).when(when.sprintDone(4)).then([event.sprintDone(4)]);
      expect(pendingEffects(state)).toEqual([{ type: 'MARK_READY_FOR_REVIEW', repository: REPO, prNumber: 7, nodeId: NODE }]);
      const ready = given([...sprint, event.sprintDone(4)]).when(when.ready(5)).then([event.ready(5)]);
      expect(phaseOf(ready)).toBe('ready_for_review');
      expect(pendingEffects(ready)).toEqual([]);
      given([...sprint, event.sprintDone(4), event.ready(5)]).when(when.observed(6, { checks: [check('ci', 'SUCCESS')] })).then([event.passed(6, H1, ['ci'])]);
    });

    it('a sprint run DONE before the branch was ever pushed: the PR opens as a draft and is made ready at once', () => {
      const state = stateOf([event.sprintDone(0), event.started(1, H1, { strategy: 'SPRINT' }), event.opened(2, true)]);
      expect(pendingEffects(state)).toMatchObject([{ type: 'MARK_READY_FOR_REVIEW' }]);
    });

    it('a later sprint run on the branch of a settled sprint PR: its new PR stays a draft until that run is DONE', () => {
      const rules = { strategy: 'SPRINT' as const, requiredChecks: [] };
      // Run 1 is DONE, its PR made ready and merged by a person; run 2's job pushes the same branch again.
      const first = [event.sprintDone(0), event.started(1, H1, rules, 10, RUN), event.opened(2, true), event.ready(3), event.merged(4)];
      given(first).when(when.pushed(5, H2, rules, 5, 20, RUN2)).then([event.started(5, H2, rules, 20, RUN2)]);
      const second = [...first, event.started(5, H2, rules, 20, RUN2), event.opened(6, true, H2)];
      expect(phaseOf(stateOf(second))).toBe('draft_opened');
      expect(pendingEffects(stateOf(second))).toEqual([]);
      // Run 1's DONE again changes nothing; run 2's makes the new PR ready.
      given(second).when(when.sprintDone(7, RUN)).then([]);
      const done = given(second).when(when.sprintDone(7, RUN2)).then([event.sprintDone(7, RUN2)]);
      expect(pendingEffects(done)).toEqual([{ type: 'MARK_READY_FOR_REVIEW', repository: REPO, prNumber: 7, nodeId: NODE }]);
      // Run 2 DONE handled before its push (the push handed back): the new cycle starts done, and its PR is made ready at once.
      const early = given(first).when(when.sprintDone(5, RUN2)).then([event.sprintDone(5, RUN2)]);
      expect(phaseOf(early)).toBe('merged');
      const reopened = stateOf([...first, event.sprintDone(5, RUN2), event.started(6, H2, rules, 20, RUN2), event.opened(7, true, H2)]);
      expect(pendingEffects(reopened)).toMatchObject([{ type: 'MARK_READY_FOR_REVIEW' }]);
      // Run 1 failed with its PR still open and run 2 took the branch over: run 2's DONE makes that PR ready.
      const takenOver = [event.started(1, H1, rules, 10, RUN), event.opened(2, true), event.moved(3, H2, H1, 'PUSH', 20)];
      const ready = given(takenOver).when(when.sprintDone(4, RUN2)).then([event.sprintDone(4, RUN2)]);
      expect(pendingEffects(ready)).toEqual([{ type: 'MARK_READY_FOR_REVIEW', repository: REPO, prNumber: 7, nodeId: NODE }]);
    });

    it('a PR already ready (someone, or an earlier attempt, marked it) is a success', () => {
      given([...sprint, event.sprintDone(4)]).when(when.observed(5, { draft: false })).then([event.ready(5, true)]);
      given([...sprint, event.sprintDone(4)]).when(when.ready(5, true)).then([event.ready(5, true)]);
    });

    it('a repository without drafts: the PR opens ready instead, once and for every later PR of the branch; made ready is a success, never merged', () => {
      const started = event.started(1, H1, { strategy: 'SPRINT', requiredChecks: [] });
      const refused = given([started]).when(when.draftsNotSupported(2)).then([event.draftsNotSupported(2)]);
      expect(pendingEffects(refused)).toMatchObject([{ type: 'OPEN_PULL_REQUEST', draft: false }]);
      given([started, event.draftsNotSupported(2)]).when(when.draftsNotSupported(3)).then([]);

      const open = [started, event.draftsNotSupported(2), event.opened(3, false), event.queued(4, 'T-1')];
      const waiting = given(open).when(when.observed(5, { draft: false, checks: [check('ci', 'SUCCESS')] })).then([event.passed(5, H1, ['ci'])]);
      expect(phaseOf(waiting)).toBe('draft_opened');
      expect(pendingEffects(waiting)).toEqual([]);
      // The sprint run DONE: GitHub shows it ready already, which is the success of the step (no merge, ever).
      const done = given([...open, event.sprintDone(6)]).when(when.observed(7, { draft: false, checks: [check('ci', 'SUCCESS')] })).then([
        event.ready(7, true),
        event.passed(7, H1, ['ci']),
      ]);
      expect(phaseOf(done)).toBe('ready_for_review');
      expect(pendingEffects(done)).toEqual([]);

      // The next PR of the branch (the last one merged by a human) opens ready straight away.
      const next = stateOf([...open, event.sprintDone(6), event.ready(7, true), event.merged(8), event.started(9, H2, { strategy: 'SPRINT', requiredChecks: [] })]);
      expect(pendingEffects(next)).toMatchObject([{ type: 'OPEN_PULL_REQUEST', draft: false, headSha: H2 }]);
    });

    it('red checks on a sprint PR are reported: the sprint fails, it is not paused', () => {
      const state = given(sprint).when(when.observed(3, { draft: true, checks: [check('ci', 'FAILURE')] })).then([
        { ...event.failed(3), data: { ...(event.failed(3).data as object), failedChecks: [{ name: 'ci', conclusion: 'failure', detailsUrl: null }] } } as PullRequestEvent,
      ]);
      expect(phaseOf(state)).toBe('checks_failed');
    });
  });

  describe('how large its events and answers may be', () => {
    it('GitHub\'s words longer than an event keeps are cut to MAX_PR_MESSAGE_CHARS, never splitting a surrogate pair', () => {
      const long = `${'x'.repeat(MAX_PR_MESSAGE_CHARS - 1)}😀${'y'.repeat(5000)}`;
      const requested = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE')];
      const d = (command: PullRequestCommand, history = requested) => decided(history, command)[0]!.data as { message?: string; reason?: string };
      for (const command of [
        { ...when.autoMergeRefused(7, 'CLEAN'), data: { ...when.autoMergeRefused(7, 'CLEAN').data, message: long } },
        { ...when.mergeFailed(7), data: { ...when.mergeFailed(7).data, message: long } },
        when.effectFailed(7, long),
        { ...when.draftsNotSupported(7), data: { ...when.draftsNotSupported(7).data, message: long } },
      ] as PullRequestCommand[]) {
        expect(d(command).message).toBe('x'.repeat(MAX_PR_MESSAGE_CHARS - 1));
      }
      expect(d({ ...when.reopened(7, 'T-1'), data: { ...when.reopened(7, 'T-1').data, reason: long } } as PullRequestCommand).reason).toHaveLength(MAX_PR_MESSAGE_CHARS - 1);
      // The same long failure again is the same failure: recorded once.
      given([...requested, decided(requested, when.effectFailed(7, long))[0]!]).when(when.effectFailed(8, long)).then([]);
    });

    it('get_pull_request keeps the first tasks of a scope of thousands (as many as fit MAX_PR_LIST_BYTES) and counts the rest', () => {
      const ids = Array.from({ length: 20_000 }, (_, i) => `TASK-${String(i).padStart(5, '0')}-${'t'.repeat(180)}`);
      const open = stateOf([event.started(0, H1, { strategy: 'SPRINT' }), event.opened(0, true)]);
      const view = pullRequestView({ ...open, scope: { ...open.scope, items: ids.map((id) => ({ id, done: false })) } });
      const kept = view.scope.tasks;
      expect(kept.length).toBeGreaterThan(0);
      expect(kept.map((t) => t.taskId)).toEqual(ids.slice(0, kept.length));
      expect(view.scope.tasksLeftOut).toBe(ids.length - kept.length);
      expect(Buffer.byteLength(JSON.stringify(kept))).toBeLessThanOrEqual(MAX_PR_LIST_BYTES);
      // The whole answer fits one NATS message (max_payload, 1 MiB) and is what the contract answers.
      expect(Buffer.byteLength(JSON.stringify(view))).toBeLessThan(1024 * 1024);
      expect(getPullRequest.reply.parse(view)).toEqual(view);
    });
  });

  describe('facts already known, and a settled PR', () => {
    it('a task done twice, a sprint run done twice, the same effect failure twice: recorded once', () => {
      given([...openStory, event.done(3, 'T-1')]).when(when.done(4, 'T-1')).then([]);
      given([event.sprintDone(1)]).when(when.sprintDone(2)).then([]);
      given([event.started(1), event.effectFailed(2)]).when(when.effectFailed(3)).then([]);
      given([event.started(1), event.effectFailed(2)]).when(when.effectFailed(3, 'Resource not accessible by integration')).then([event.effectFailed(3, 'Resource not accessible by integration')]);
    });

    it('a task queued again after it was done (a rework) is pending again', () => {
      const state = given([...storyDone]).when(when.queued(6, 'T-2', ['T-1', 'T-2'], JOB2)).then([event.queued(6, 'T-2', ['T-1', 'T-2'], JOB2)]);
      expect(phaseOf(state)).toBe('waiting_for_scope_done');
      given([...openStory]).when(when.queued(3, 'T-1')).then([]);
    });

    it('a merged PR takes no more effects; a push after it starts a new cycle with a new PR', () => {
      const done = [...storyDone, event.merged(9)];
      given(done).when(when.observed(10, { checks: green })).then([]);
      given(done).when(when.pushed(10, H1)).then([]);
      const state = given(done).when(when.pushed(11, H2)).then([event.started(11, H2)]);
      expect(phaseOf(state)).toBe('branch_pushed');
      expect(pendingEffects(state)).toMatchObject([{ type: 'OPEN_PULL_REQUEST', headSha: H2 }]);
    });

    it('a push of a head the branch had before its PR was merged or closed, reported late, starts no new cycle (PR-15)', () => {
      // H1 pushed, then H2; the PR merged on H2. H1's report comes again (handed back, redelivered behind later events):
      // GitHub has nothing new to open a PR for, and a new cycle would ask it to open one for ever.
      const merged = [...storyDone, event.moved(6, H2, H1, 'PUSH'), event.merged(9, H2)];
      given(merged).when(when.pushed(10, H1, {}, 5)).then([]);
      given(merged).when(when.pushed(10, H2)).then([]);
      // Closed without merge on H2: a late H1 does not reopen the branch's work as a new PR either.
      const closed = [...openStory, event.moved(4, H2, H1, 'PUSH'), event.closed(5)];
      given(closed).when(when.pushed(6, H1, {}, 3)).then([]);
      // A head the branch never had is new work: a new cycle.
      given(merged).when(when.pushed(11, H3)).then([event.started(11, H3)]);
      given(closed).when(when.pushed(7, H3)).then([event.started(7, H3)]);
    });

    it('a PR closed without merge is closed', () => {
      expect(phaseOf(given([...openStory]).when(when.observed(5, { state: 'closed' })).then([event.closed(5)]))).toBe('closed');
    });

    it('a closed PR someone reopened is carried on: merged once its story is done and its head green', () => {
      const closed = [...storyDone, event.passed(6), event.mergeRequested(6, 'AUTO_MERGE'), event.autoMergeEnabled(7), event.closed(8)];
      expect(pendingEffects(stateOf(closed))).toEqual([]);
      given(closed).when(when.observed(9, { state: 'closed', checks: green })).then([]);
      // Closing cleared the auto-merge on GitHub: the merge is decided again, for the head it has now.
      const state = given(closed).when(when.observed(10, { checks: green })).then([event.reopened(10), event.mergeRequested(10, 'AUTO_MERGE')]);
      expect(phaseOf(state)).toBe('auto_merge_enabled');
      expect(pendingEffects(state)).toEqual([{ type: 'ENABLE_AUTO_MERGE', repository: REPO, prNumber: 7, nodeId: NODE, expectedHeadSha: H1, mergeMethod: 'SQUASH' }]);
      // Reopened on a head pushed while it was closed: that head waits for its own checks.
      const moved = given(closed).when(when.observed(11, { headSha: H2, checks: [] })).then([event.reopened(11, H2), event.moved(11, H2, H1, 'GITHUB')]);
      expect(phaseOf(moved)).toBe('waiting_for_checks');
      expect(pendingEffects(moved)).toEqual([]);
      // A merged PR is never reopened; another PR number is not this one.
      given([...storyDone, event.merged(9)]).when(when.observed(10, { checks: green })).then([]);
      given(closed).when(when.observed(12, { prNumber: 8, checks: green })).then([]);
    });
  });
});
