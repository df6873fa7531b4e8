import { deriveWorktreeKey, ErrorCode } from '@gantry/contracts';
import { DeciderSpecification } from '@gantry/eventstore/testing';
import { validatesAgainstContract } from '../testing/contract-events.js';
import {
  at,
  BASE,
  claimed,
  commitLogged,
  doneFacts,
  enqueued,
  fencedCommands,
  enqueueCommandFor,
  HASH,
  HEAD,
  implementationLogged,
  JOB,
  LEASE_MS,
  leaseExpired,
  OTHER_BASE,
  OTHER_RUNNER,
  PRODUCT,
  pushReported,
  RUNNER,
  started,
  testResultLogged,
} from '../testing/job-fixtures.js';
import type { JobCommand } from './commands.js';
import { jobDecider } from './decider.js';
import { isTerminalJobEvent, type JobEvent } from './events.js';
import type { Job } from './state.js';

const given = DeciderSpecification.for(jobDecider, { validate: validatesAgainstContract('jobs') });

const lease = (token: number, runnerId = RUNNER) => ({ jobId: JOB, runnerId, leaseToken: token });
const claim = (atS: number, over: Partial<Extract<JobCommand, { type: 'ClaimJob' }>['data']> = {}): JobCommand => ({
  type: 'ClaimJob',
  data: { jobId: JOB, runnerId: RUNNER, kinds: ['TASK_IMPLEMENTATION'], baseSha: BASE, leaseDurationMs: LEASE_MS, now: at(atS), ...over },
});
const finish = (token: number, atS: number, facts = doneFacts): JobCommand => ({ type: 'FinishJob', data: { ...lease(token), now: at(atS), facts } });
const finished = (token: number, atS: number, over: Partial<Extract<JobEvent, { type: 'JobFinished' }>['data']> = {}): JobEvent => ({
  type: 'JobFinished',
  data: {
    ...lease(token),
    jobStatus: 'DONE',
    taskStatus: 'DONE',
    error: null,
    facts: doneFacts,
    baseSha: BASE,
    headSha: HEAD,
    pushedAt: at(50),
    finishedAt: at(atS),
    ...over,
  },
});

/** Claimed by RUNNER at 10 s under token 1, started at 11 s. */
const running = (): JobEvent[] => [enqueued(), claimed(1, 1, 10), started(1, 11)];
/** Running, with a start entry, a commit, a real push at 50 s and a passing test result. */
const readyToFinish = (): JobEvent[] => [
  ...running(),
  implementationLogged(1, 12),
  commitLogged(1, 40),
  pushReported(1, 50, true),
  testResultLogged(1, 60),
];

describe('job decider', () => {
  describe('enqueue', () => {
    it('a new job is enqueued with everything the request said and where its product lands work', () => {
      given([]).when(enqueueCommandFor(enqueued())).then([enqueued()]);
      const story = enqueued({ storyTaskIds: ['T-532', 'T-533'], branch: 'story/ST-1208' });
      given([]).when(enqueueCommandFor(story)).then([story]);
    });

    it('a job id that exists already is refused', () => {
      given([enqueued()]).when(enqueueCommandFor(enqueued())).thenThrows(ErrorCode.INVALID_TRANSITION, /already exists/);
    });

    it('a REVIEW job without an agent profile is refused: it would have no model', () => {
      given([]).when(enqueueCommandFor(enqueued({ kind: 'REVIEW' }))).thenThrows(ErrorCode.PRECONDITION_FAILED, /agent profile/);
    });

    it('a job of a product nobody registered is refused with UNKNOWN_PRODUCT', () => {
      given([]).when(enqueueCommandFor(enqueued(), null)).thenThrows(ErrorCode.UNKNOWN_PRODUCT, /product-42 is not registered/);
    });

    it("a job on a branch in the rescue folder of a key of its product's repository is refused INVALID_COMMAND, naming it; another repository's key is not", () => {
      const folder = `gantry/rescue/${deriveWorktreeKey(PRODUCT.cloneUrl, 'main')}`;
      given([]).when(enqueueCommandFor(enqueued({ branch: `${folder}/20261130T060102345Z` }))).thenThrows(ErrorCode.INVALID_COMMAND, /branch gantry\/rescue\/shop-main-[0-9a-f]{12}\/20261130T060102345Z is in the rescue folder/);
      const elsewhere = enqueued({ branch: `gantry/rescue/${deriveWorktreeKey('https://github.com/acme/other.git', 'main')}` });
      given([]).when(enqueueCommandFor(elsewhere)).then([elsewhere]);
    });
  });

  describe('coalescing', () => {
    const coalesce = (atS: number): JobCommand => ({
      type: 'CoalesceIntoJob',
      data: { jobId: JOB, payload: { comment: 'also the README' }, prompt: null, branch: null, idempotencyKey: 'product-42/enqueue:c2', requestHash: HASH, now: at(atS) },
    });

    it("a coalesced request naming a branch in the rescue folder of a key of the job's repository is refused INVALID_COMMAND", () => {
      const named = coalesce(3);
      const branch = `gantry/rescue/${deriveWorktreeKey(PRODUCT.cloneUrl, 'main')}`;
      given([enqueued()]).when({ ...named, data: { ...named.data, branch } } as JobCommand).thenThrows(ErrorCode.INVALID_COMMAND, /is in the rescue folder of worktree key/);
    });

    it('a queued job takes a coalesced request and keeps both payloads', () => {
      const state = given([enqueued()]).when(coalesce(3)).then([
        {
          type: 'JobCoalesced',
          data: { jobId: JOB, payload: { comment: 'also the README' }, prompt: null, idempotencyKey: 'product-42/enqueue:c2', requestHash: HASH, coalescedAt: at(3) },
        },
      ]) as Job;
      expect(state.payloads).toEqual([{ plan: 'add the migration' }, { comment: 'also the README' }]);
      expect(state.idempotencyKeys.map((k) => k.key)).toEqual(['product-42/enqueue:T-533', 'product-42/enqueue:c2']);
    });

    it('a claimed job takes no coalesced request', () => {
      given([enqueued(), claimed(1, 1, 1)]).when(coalesce(3)).thenThrows(ErrorCode.INVALID_TRANSITION, /CLAIMED/);
    });

    it('a job excluded from coalescing takes no coalesced request', () => {
      given([enqueued({ excludeFromCoalescing: true })]).when(coalesce(3)).thenThrows(ErrorCode.PRECONDITION_FAILED, /excluded/);
    });
  });

  describe('claim', () => {
    it('the first claim grants lease token 1 for attempt 1 with the resolved configuration, the base ref and the base sha', () => {
      given([enqueued()]).when(claim(10)).then([claimed(1, 1, 10)]);
    });

    it('records the configuration cascade and the effort: product → sprint → job over the kind defaults', () => {
      const history = [enqueued({ configOverrides: { product: { model: 'claude-opus-4-7' }, sprint: { thinkingBudget: 20000 }, job: { maxTurns: 50 } } })];
      const state = given(history).when(claim(10)).then([
        claimed(1, 1, 10, {
          agentConfig: { ...(claimed(1, 1, 10).data as { agentConfig: Job['agentConfig'] }).agentConfig!, model: 'claude-opus-4-7', thinkingBudget: 20000, maxTurns: 50 },
          effort: 'xhigh',
        }),
      ]) as Job;
      expect(state.agentConfig?.model).toBe('claude-opus-4-7');
    });

    it('a REVIEW claim takes model and budget from the agent profile and records the profile id', () => {
      const profile = { id: 'profile-reviewer', model: 'claude-opus-4-7', thinkingBudget: 30000 };
      const state = given([enqueued({ kind: 'REVIEW', agentProfile: profile, taskId: 'T-533' })])
        .when(claim(10, { kinds: ['REVIEW'] }))
        .then([
          claimed(1, 1, 10, {
            agentConfig: {
              model: 'claude-opus-4-7',
              thinkingBudget: 30000,
              permissionMode: 'acceptEdits',
              allowedTools: [
                'Read', 'Glob', 'Grep', 'Bash',
                'mcp__gantry__log_implementation', 'mcp__gantry__log_commit', 'mcp__gantry__log_test_result',
                // a reviewer records its decision through the runner (docs/workflow-engine.md, AC-R1)
                'mcp__gantry__record_decision',
                // every gantry tool is recorded: the list on the job is the one the command line gets
                'mcp__gantry__update_job_status', 'mcp__gantry__ask_question',
              ],
              maxTurns: 60,
            },
            effort: 'max',
            agentProfileId: 'profile-reviewer',
          }),
        ]) as Job;
      expect(state.status).toBe('CLAIMED');
    });

    it('a second claim of a claimed job is refused as already claimed, naming the holder', () => {
      given([enqueued(), claimed(1, 1, 10)]).when(claim(11, { runnerId: OTHER_RUNNER })).thenThrows(ErrorCode.ALREADY_CLAIMED, /runner-a/);
    });

    it('the holder claiming again is refused too: one lease per job', () => {
      given([enqueued(), claimed(1, 1, 10)]).when(claim(11)).thenThrows(ErrorCode.ALREADY_CLAIMED);
    });

    it('a claim of a running job is refused as already claimed', () => {
      given(running()).when(claim(20, { runnerId: OTHER_RUNNER })).thenThrows(ErrorCode.ALREADY_CLAIMED);
    });

    it('a lapsed lease is still a lease until the expiry sweep records it', () => {
      given([enqueued(), claimed(1, 1, 10)]).when(claim(10 + LEASE_MS / 1000 + 5, { runnerId: OTHER_RUNNER })).thenThrows(ErrorCode.ALREADY_CLAIMED);
    });

    it('a claim of a cancelled job is refused', () => {
      given([enqueued(), { type: 'JobCancelled', data: { jobId: JOB, previousStatus: 'QUEUED', revokedLeaseToken: null, reason: null, taskStatus: 'TO_DO', cancelledAt: at(5) } }])
        .when(claim(10))
        .thenThrows(ErrorCode.INVALID_TRANSITION, /CANCELLED/);
    });

    it('a claim of a finished job is refused', () => {
      given([...readyToFinish(), finished(1, 70)]).when(claim(80)).thenThrows(ErrorCode.INVALID_TRANSITION, /DONE/);
    });

    it('a claim of a job that does not exist is refused as not found', () => {
      given([]).when(claim(1)).thenThrows(ErrorCode.NOT_FOUND);
    });

    it('a runner that does not run the job kind cannot claim it', () => {
      given([enqueued()]).when(claim(10, { kinds: ['REVIEW'] })).thenThrows(ErrorCode.PRECONDITION_FAILED, /TASK_IMPLEMENTATION/);
    });

    it('each grant after a requeue carries a token one higher and the next attempt', () => {
      given([enqueued(), claimed(1, 1, 10), leaseExpired(1, 1, 190)])
        .when(claim(200, { runnerId: OTHER_RUNNER }))
        .then([claimed(2, 2, 200, { runnerId: OTHER_RUNNER })]);
    });
  });

  describe('fencing', () => {
    /** Token 1 expired and the job was claimed again under token 2 and started. */
    const reclaimed = (): JobEvent[] => [enqueued(), claimed(1, 1, 10), leaseExpired(1, 1, 190), claimed(2, 2, 200, { runnerId: OTHER_RUNNER }), started(2, 201)];

    it.each(fencedCommands(1, 210).map((c) => [c.type, c] as const))('%s under an older token is STALE_FENCE and emits nothing', (_type, command) => {
      given(reclaimed()).when(command).thenThrows(ErrorCode.STALE_FENCE, /stale/);
    });

    it.each(fencedCommands(7, 20).map((c) => [c.type, c] as const))('%s under a token never granted is STALE_FENCE', (_type, command) => {
      given(running()).when(command).thenThrows(ErrorCode.STALE_FENCE, /never granted/);
    });

    it.each(fencedCommands(1, 20, OTHER_RUNNER).map((c) => [c.type, c] as const))('%s by a runner that does not hold the lease is STALE_FENCE', (_type, command) => {
      given(running()).when(command).thenThrows(ErrorCode.STALE_FENCE, /held by runner runner-a/);
    });

    it.each(fencedCommands(1, 10 + LEASE_MS / 1000).map((c) => [c.type, c] as const))('%s at or after the lease expiry is STALE_FENCE', (_type, command) => {
      given(running()).when(command).thenThrows(ErrorCode.STALE_FENCE, /expired at/);
    });

    it.each(fencedCommands(1, 195).map((c) => [c.type, c] as const))('%s after the lease expired and the job was requeued is STALE_FENCE', (_type, command) => {
      given([enqueued(), claimed(1, 1, 10), leaseExpired(1, 1, 190)]).when(command).thenThrows(ErrorCode.STALE_FENCE, /expired/);
    });

    it.each(fencedCommands(1, 30).map((c) => [c.type, c] as const))('%s after the job was cancelled is STALE_FENCE: the cancel revoked the lease', (_type, command) => {
      const cancelled: JobEvent = { type: 'JobCancelled', data: { jobId: JOB, previousStatus: 'RUNNING', revokedLeaseToken: 1, reason: null, taskStatus: 'TO_DO', cancelledAt: at(25) } };
      given([...running(), cancelled]).when(command).thenThrows(ErrorCode.STALE_FENCE, /revoked/);
    });

    it.each(fencedCommands(1, 80).map((c) => [c.type, c] as const))('%s after the job finished is refused as a transition, not a stale fence', (_type, command) => {
      given([...readyToFinish(), finished(1, 70)]).when(command).thenThrows(ErrorCode.INVALID_TRANSITION, /already finished as DONE/);
    });

    it('a command under a job that does not exist is not found', () => {
      given([]).when(fencedCommands(1, 1)[0]!).thenThrows(ErrorCode.NOT_FOUND);
    });
  });

  describe('renew', () => {
    it('renewing moves the expiry to now + the lease duration', () => {
      given(running())
        .when({ type: 'RenewJobLease', data: { ...lease(1), leaseDurationMs: LEASE_MS, now: at(70) } })
        .then([{ type: 'JobLeaseRenewed', data: { ...lease(1), leaseExpiresAt: at(70 + LEASE_MS / 1000), renewedAt: at(70) } }]);
    });

    it('a renewed lease is obeyed past its original expiry', () => {
      const renewed: JobEvent = { type: 'JobLeaseRenewed', data: { ...lease(1), leaseExpiresAt: at(250), renewedAt: at(70) } };
      given([...running(), renewed])
        .when({ type: 'LogTestResult', data: { ...lease(1), status: 'PASSED', summary: 'ok', now: at(200) } })
        .then([{ type: 'TestResultLogged', data: { ...lease(1), status: 'PASSED', summary: 'ok', loggedAt: at(200) } }]);
    });
  });

  describe('start', () => {
    it('a claimed job starts with the base sha recorded at claim', () => {
      given([enqueued(), claimed(1, 1, 10)])
        .when({ type: 'StartJob', data: { ...lease(1), baseSha: null, branch: 'feat/story-1208', adoptPushOf: null, now: at(11) } })
        .then([started(1, 11)]);
    });

    it('a claim without a base sha takes it from the start', () => {
      const state = given([enqueued(), claimed(1, 1, 10, { baseSha: null })])
        .when({ type: 'StartJob', data: { ...lease(1), baseSha: BASE, branch: 'feat/story-1208', adoptPushOf: null, now: at(11) } })
        .then([started(1, 11)]) as Job;
      expect(state.baseSha).toBe(BASE);
    });

    it('a start from another base than the claim recorded is refused', () => {
      given([enqueued(), claimed(1, 1, 10)])
        .when({ type: 'StartJob', data: { ...lease(1), baseSha: OTHER_BASE, branch: null, adoptPushOf: null, now: at(11) } })
        .thenThrows(ErrorCode.PRECONDITION_FAILED, /base/);
    });

    it('a second start is refused', () => {
      given(running()).when({ type: 'StartJob', data: { ...lease(1), baseSha: null, branch: null, adoptPushOf: null, now: at(12) } }).thenThrows(ErrorCode.INVALID_TRANSITION, /already started/);
    });
  });

  describe('the story log', () => {
    it('an implementation-log entry records task, branch and plan', () => {
      given(running())
        .when({ type: 'LogImplementation', data: { ...lease(1), taskId: 'T-533', branch: 'feat/story-1208', plan: 'add the migration', summary: 'Start T-533', alreadyPresent: null, now: at(12) } })
        .then([implementationLogged(1, 12)]);
    });

    it('a commit-log entry records hash, message and summary', () => {
      given(running())
        .when({ type: 'LogCommit', data: { ...lease(1), commitSha: HEAD, message: 'feat: migration', summary: '1 file', now: at(40) } })
        .then([commitLogged(1, 40)]);
    });

    it('the pre-check may log what it found right after the claim, before the start', () => {
      given([enqueued(), claimed(1, 1, 10)])
        .when({
          type: 'LogImplementation',
          data: { ...lease(1), taskId: null, branch: null, plan: null, summary: 'Work already on main from 3f2c9a1', alreadyPresent: { extent: 'FULL', commitSha: BASE }, now: at(11) },
        })
        .then([
          {
            type: 'ImplementationLogged',
            data: { ...lease(1), taskId: 'T-533', branch: null, plan: null, summary: 'Work already on main from 3f2c9a1', alreadyPresent: { extent: 'FULL', commitSha: BASE }, loggedAt: at(11) },
          },
        ]);
    });
  });

  describe('report push', () => {
    const push = (pushed: boolean): JobCommand => ({ type: 'ReportPush', data: { ...lease(1), branch: 'feat/story-1208', headSha: HEAD, pushed, facts: null, now: at(50) } });

    it('a real push records head sha and pushed_at', () => {
      given(running()).when(push(true)).then([pushReported(1, 50, true)]);
    });

    it('a push that pushed nothing records the head sha and no pushed_at', () => {
      given(running()).when(push(false)).then([pushReported(1, 50, false)]);
    });

    it('a later report that pushed nothing keeps the earlier real push time', () => {
      const state = given([...running(), pushReported(1, 50, true)]).when({ ...push(false), data: { ...push(false).data, now: at(55) } } as JobCommand).then([pushReported(1, 55, false)]) as Job;
      expect(state.pushedAt).toBe(at(50));
    });

    it('a push before the start is refused', () => {
      given([enqueued(), claimed(1, 1, 10)]).when(push(true)).thenThrows(ErrorCode.INVALID_TRANSITION, /not started/);
    });
  });

  describe('finish', () => {
    it('a finish with a new commit, logged and pushed, is DONE with head sha and pushed_at', () => {
      given(readyToFinish()).when(finish(1, 70)).then([finished(1, 70)]);
    });

    it('a finish before the start is refused', () => {
      given([enqueued(), claimed(1, 1, 10), implementationLogged(1, 11), testResultLogged(1, 12)])
        .when(finish(1, 20))
        .thenThrows(ErrorCode.INVALID_TRANSITION, /has not started/);
    });

    it('a finish without an implementation-log and a test-result entry is refused, naming both', () => {
      given(running()).when(finish(1, 70, { ...doneFacts, verifyResult: 'EMPTY', newCommit: false, netDiff: { filesChanged: 0, insertions: 0, deletions: 0 }, workAlreadyOnTarget: true }))
        .thenThrows(ErrorCode.PRECONDITION_FAILED, /story log is missing an implementation-log entry .* and a test-result entry/);
    });

    it('a finish without a test-result entry is refused, naming only that', () => {
      given([...running(), implementationLogged(1, 12), commitLogged(1, 40)])
        .when(finish(1, 70))
        .thenThrows(ErrorCode.PRECONDITION_FAILED, /missing a test-result entry \(log_test_result/);
    });

    it('a DONE without a commit-log entry for its new commit is refused', () => {
      given([...running(), implementationLogged(1, 12), testResultLogged(1, 60)])
        .when(finish(1, 70))
        .thenThrows(ErrorCode.PRECONDITION_FAILED, /commit-log entry/);
    });

    it('a DONE on a new commit with no push reported under the claim is refused; a failure is not', () => {
      const unpushed = [...running(), implementationLogged(1, 12), commitLogged(1, 40), testResultLogged(1, 60)];
      given(unpushed).when(finish(1, 70, { ...doneFacts, headSha: HEAD })).thenThrows(ErrorCode.PRECONDITION_FAILED, /no push of it was reported under claim 1/);
      const facts = { ...doneFacts, failure: { kind: 'PUSH' as const, message: 'rejected: non-fast-forward' } };
      given(unpushed).when(finish(1, 70, facts)).then([finished(1, 70, { jobStatus: 'FAILED', taskStatus: 'IN_PROGRESS', error: 'push failure: rejected: non-fast-forward', facts, headSha: null, pushedAt: null })]);
    });

    it('a DONE whose verified head is not the pushed head is refused', () => {
      given(readyToFinish()).when(finish(1, 70, { ...doneFacts, headSha: OTHER_BASE })).thenThrows(ErrorCode.PRECONDITION_FAILED, new RegExp(`verify looked at ${OTHER_BASE}, but the head pushed under claim 1 is ${HEAD}`));
    });

    it('work already on the target finishes SKIPPED with the task DONE and no pushed_at', () => {
      const facts = { ...doneFacts, verifyResult: 'EMPTY' as const, newCommit: false, netDiff: { filesChanged: 0, insertions: 0, deletions: 0 }, workAlreadyOnTarget: true };
      given([...running(), implementationLogged(1, 12), testResultLogged(1, 60)])
        .when(finish(1, 70, facts))
        .then([finished(1, 70, { jobStatus: 'SKIPPED', taskStatus: 'DONE', facts, headSha: null, pushedAt: null })]);
    });

    it('a test failure finishes FAILED with its text and the task IN_PROGRESS', () => {
      const facts = { ...doneFacts, failure: { kind: 'TEST' as const, message: '2 failing' } };
      given(readyToFinish()).when(finish(1, 70, facts)).then([finished(1, 70, { jobStatus: 'FAILED', taskStatus: 'IN_PROGRESS', error: 'test failure: 2 failing', facts })]);
    });

    it('a job whose kind moves no task finishes with no task status', () => {
      const facts = { ...doneFacts, verifyResult: 'NOT_APPLICABLE' as const, newCommit: false, netDiff: { filesChanged: 0, insertions: 0, deletions: 0 } };
      const profile = { id: 'profile-reviewer', model: 'claude-opus-4-7', thinkingBudget: 12000 };
      const history = [enqueued({ kind: 'REVIEW', agentProfile: profile }), claimed(1, 1, 10, { agentProfileId: profile.id }), started(1, 11), implementationLogged(1, 12), testResultLogged(1, 60)];
      given(history).when(finish(1, 70, facts)).then([finished(1, 70, { taskStatus: null, facts, headSha: null, pushedAt: null })]);
    });

    it('a code-writing job cannot claim verification does not apply to it', () => {
      given(readyToFinish()).when(finish(1, 70, { ...doneFacts, verifyResult: 'NOT_APPLICABLE' })).thenThrows(ErrorCode.PRECONDITION_FAILED, /NOT_APPLICABLE/);
    });

    it('a runner cannot end a job CANCELLED on its own word: a finish saying cancelled under a live claim nobody cancelled is refused', () => {
      const facts = { ...doneFacts, cancelled: true };
      given(running()).when(finish(1, 30, facts)).thenThrows(ErrorCode.PRECONDITION_FAILED, /no cancel was requested/);
      given(readyToFinish()).when(finish(1, 70, facts)).thenThrows(ErrorCode.PRECONDITION_FAILED, /no cancel was requested/);
    });
  });

  describe('rollback', () => {
    const rollback = (token: number, atS: number): JobCommand => ({
      type: 'RollbackClaim',
      data: { ...lease(token), reason: 'agent exited with code 1', exitCode: 1, cause: 'JOB', now: at(atS) },
    });

    it('a rolled-back claim returns the job to the queue as the next attempt', () => {
      const state = given(running())
        .when(rollback(1, 30))
        .then([
          {
            type: 'JobClaimRolledBack',
            data: {
              ...lease(1),
              attempt: 1,
              outcome: 'REQUEUED',
              nextAttempt: 2,
              error: null,
              reason: 'agent exited with code 1',
              exitCode: 1,
              cause: 'JOB',
              offerNotBefore: null,
              rolledBackAt: at(30),
            },
          },
        ]) as Job;
      expect(state).toMatchObject({ status: 'QUEUED', attempt: 2, lease: null, lastLeaseToken: 1 });
    });

    it('a rollback of the last allowed attempt fails the job with a sentence saying so', () => {
      given([enqueued({ maxAttempts: 1 }), claimed(1, 1, 10), started(1, 11)])
        .when(rollback(1, 30))
        .then([
          {
            type: 'JobClaimRolledBack',
            data: {
              ...lease(1),
              attempt: 1,
              outcome: 'FAILED',
              nextAttempt: null,
              error: 'the claim of attempt 1 was rolled back (agent exited with code 1), and 1 attempt is the maximum: the job failed',
              reason: 'agent exited with code 1',
              exitCode: 1,
              cause: 'JOB',
              offerNotBefore: null,
              rolledBackAt: at(30),
            },
          },
        ]);
    });
  });

  describe('a lease resumed at a job service start (docs/jobs.md, "A job service outage")', () => {
    const resume = (token: number, atS: number): JobCommand => ({ type: 'ResumeJobLease', data: { jobId: JOB, leaseToken: token, now: at(atS) } });
    const expiry = 10 + LEASE_MS / 1000;

    it('a lease whose expiry passed while no job service ran runs as long again from the start, and the runner is obeyed under it', () => {
      const resumed = { type: 'JobLeaseRenewed' as const, data: { ...lease(1), leaseExpiresAt: at(expiry + 60 + LEASE_MS / 1000), renewedAt: at(expiry + 60), resumedAtStart: true as const } };
      const state = given(running()).when(resume(1, expiry + 60)).then([resumed]) as Job;
      expect(state.lease).toMatchObject({ token: 1, expiresAt: at(expiry + 60 + LEASE_MS / 1000) });
      given([...running(), resumed])
        .when({ type: 'LogImplementation', data: { ...lease(1), taskId: null, branch: null, plan: null, summary: 'during the outage', alreadyPresent: null, now: at(expiry + 61) } })
        .then([expect.objectContaining({ type: 'ImplementationLogged' })]);
      given([...running(), resumed]).when({ type: 'ExpireJobLease', data: { jobId: JOB, leaseToken: 1, now: at(expiry + 61) } }).thenThrows(ErrorCode.PRECONDITION_FAILED, /runs until/);
    });

    it('resumes for as long as the last grant ran: a renewal for 60 s resumes for 60 s', () => {
      const renewed: JobEvent = { type: 'JobLeaseRenewed', data: { ...lease(1), leaseExpiresAt: at(130), renewedAt: at(70) } };
      given([...running(), renewed])
        .when(resume(1, 500))
        .then([{ type: 'JobLeaseRenewed', data: { ...lease(1), leaseExpiresAt: at(560), renewedAt: at(500), resumedAtStart: true } }]);
    });

    it('resumed after the job service lost NATS, the renewal says so (and not that it was at a start)', () => {
      given(running())
        .when({ type: 'ResumeJobLease', data: { jobId: JOB, leaseToken: 1, now: at(expiry + 60), after: 'bus_loss' } })
        .then([{ type: 'JobLeaseRenewed', data: { ...lease(1), leaseExpiresAt: at(expiry + 60 + LEASE_MS / 1000), renewedAt: at(expiry + 60), resumedAfterBusLoss: true } }]);
    });

    it('a lease that ran out before the last sweep a job service made is not resumed: it ran out while one served, the sweep expires it', () => {
      const resumeAfterSweep = (sweptAtS: number, after?: 'bus_loss'): JobCommand => ({
        type: 'ResumeJobLease',
        data: { jobId: JOB, leaseToken: 1, now: at(expiry + 60), lastSweptAt: at(sweptAtS), ...(after ? { after } : {}) },
      });
      given(running()).when(resumeAfterSweep(expiry + 1)).thenNothingHappened();
      given(running()).when(resumeAfterSweep(expiry)).thenNothingHappened();
      given(running()).when(resumeAfterSweep(expiry + 30, 'bus_loss')).thenNothingHappened();
      // still live at the last sweep: the outage began before it ran out, so it is resumed
      given(running())
        .when(resumeAfterSweep(expiry - 1))
        .then([{ type: 'JobLeaseRenewed', data: { ...lease(1), leaseExpiresAt: at(expiry + 60 + LEASE_MS / 1000), renewedAt: at(expiry + 60), resumedAtStart: true } }]);
    });

    it('a last sweep stamped later than this replica\'s now (clocks differ) resumes only a lease still live now', () => {
      given(running())
        .when({ type: 'ResumeJobLease', data: { jobId: JOB, leaseToken: 1, now: at(expiry - 1), lastSweptAt: at(expiry + 60) } })
        .then([{ type: 'JobLeaseRenewed', data: { ...lease(1), leaseExpiresAt: at(expiry - 1 + LEASE_MS / 1000), renewedAt: at(expiry - 1), resumedAtStart: true } }]);
    });

    it('a lease that already runs longer than that is left alone', () => {
      given(running()).when(resume(1, 5)).thenNothingHappened();
    });

    it('an ended lease, or one that is no longer the current grant, is not resumed', () => {
      given([...running(), leaseExpired(1, 1, expiry)]).when(resume(1, expiry + 60)).thenNothingHappened();
      given([...running(), leaseExpired(1, 1, expiry), claimed(2, 2, expiry + 5, { runnerId: OTHER_RUNNER })]).when(resume(1, expiry + 60)).thenNothingHappened();
    });
  });

  describe('lease expiry', () => {
    const expire = (token: number, atS: number): JobCommand => ({ type: 'ExpireJobLease', data: { jobId: JOB, leaseToken: token, now: at(atS) } });
    const expiry = 10 + LEASE_MS / 1000;

    it('a lease that has not reached its expiry is not expired', () => {
      given(running()).when(expire(1, expiry - 1)).thenThrows(ErrorCode.PRECONDITION_FAILED, /runs until/);
    });

    it('a lease at its expiry returns the job to the queue as attempt + 1', () => {
      const state = given(running())
        .when(expire(1, expiry))
        .then([
          {
            type: 'JobLeaseExpired',
            data: { ...lease(1), attempt: 1, outcome: 'REQUEUED', nextAttempt: 2, error: null, leaseExpiresAt: at(expiry), expiredAt: at(expiry), started: true },
          },
        ]) as Job;
      expect(state).toMatchObject({ status: 'QUEUED', attempt: 2, lease: null });
    });

    it('an expiry says whether its claim was started: one never started left no agent behind', () => {
      given([enqueued(), claimed(1, 1, 10)])
        .when(expire(1, expiry))
        .then([
          {
            type: 'JobLeaseExpired',
            data: { ...lease(1), attempt: 1, outcome: 'REQUEUED', nextAttempt: 2, error: null, leaseExpiresAt: at(expiry), expiredAt: at(expiry), started: false },
          },
        ]);
    });

    it('a lease expires exactly once: a second expiry of the same grant is refused', () => {
      given([...running(), leaseExpired(1, 1, expiry)]).when(expire(1, expiry + 5)).thenThrows(ErrorCode.INVALID_TRANSITION, /already ended/);
    });

    it('a renewed lease does not expire at its old expiry', () => {
      const renewed: JobEvent = { type: 'JobLeaseRenewed', data: { ...lease(1), leaseExpiresAt: at(expiry + 60), renewedAt: at(expiry - 10) } };
      given([...running(), renewed]).when(expire(1, expiry + 1)).thenThrows(ErrorCode.PRECONDITION_FAILED);
    });

    it('an expiry aimed at an older grant does not touch the current one', () => {
      given([...running(), leaseExpired(1, 1, expiry), claimed(2, 2, expiry + 5, { runnerId: OTHER_RUNNER })])
        .when(expire(1, expiry + 500))
        .thenThrows(ErrorCode.STALE_FENCE);
    });

    it('the expiry of the last allowed attempt fails the job with a clear error', () => {
      const history = [enqueued({ maxAttempts: 2 }), claimed(1, 1, 10), leaseExpired(1, 1, expiry), claimed(2, 2, 300), started(2, 301)];
      const state = given(history)
        .when(expire(2, 300 + LEASE_MS / 1000))
        .then([
          {
            type: 'JobLeaseExpired',
            data: {
              ...lease(2),
              attempt: 2,
              outcome: 'FAILED',
              nextAttempt: null,
              error: `the lease of attempt 2 expired at ${at(300 + LEASE_MS / 1000)}, and 2 attempts is the maximum: the job failed`,
              leaseExpiresAt: at(300 + LEASE_MS / 1000),
              expiredAt: at(300 + LEASE_MS / 1000),
              started: true,
            },
          },
        ]) as Job;
      expect(state).toMatchObject({ status: 'FAILED', taskStatus: 'IN_PROGRESS' });
    });

    it('a job failed by expiry can no longer be claimed', () => {
      const failedByExpiry: JobEvent = {
        type: 'JobLeaseExpired',
        data: { ...lease(1), attempt: 1, outcome: 'FAILED', nextAttempt: null, error: 'max', leaseExpiresAt: at(expiry), expiredAt: at(expiry) },
      };
      given([enqueued({ maxAttempts: 1 }), claimed(1, 1, 10), failedByExpiry]).when(claim(expiry + 1)).thenThrows(ErrorCode.INVALID_TRANSITION, /FAILED/);
    });
  });

  describe('red checks on the pushed head (PR-9)', () => {
    const PR = 'https://github.com/acme/shop/pull/7';
    const done = (): JobEvent[] => [...readyToFinish(), finished(1, 70)];
    const checksFailed = (headSha: string): JobCommand => ({ type: 'RecordChecksFailed', data: { jobId: JOB, headSha, prUrl: PR, failedChecks: ['ci/test'], now: at(90) } });

    it('a DONE job whose pushed head failed its checks is FAILED after all, its task back IN_PROGRESS', () => {
      const state = given(done()).when(checksFailed(HEAD)).then([
        {
          type: 'JobChecksFailed',
          data: { jobId: JOB, headSha: HEAD, prUrl: PR, failedChecks: ['ci/test'], error: `checks failed on ${PR}: ci/test`, taskStatus: 'IN_PROGRESS', failedAt: at(90) },
        },
      ]) as Job;
      expect(state).toMatchObject({ status: 'FAILED', taskStatus: 'IN_PROGRESS', error: `checks failed on ${PR}: ci/test` });
    });

    it('failed checks the pr-service\'s event left out are counted in the error', () => {
      given(done())
        .when({ type: 'RecordChecksFailed', data: { jobId: JOB, headSha: HEAD, prUrl: PR, failedChecks: ['ci/a', 'ci/b'], failedChecksLeftOut: 3, now: at(90) } })
        .then([
          {
            type: 'JobChecksFailed',
            data: {
              jobId: JOB, headSha: HEAD, prUrl: PR, failedChecks: ['ci/a', 'ci/b'], error: `checks failed on ${PR}: ci/a, ci/b and 3 more checks`, taskStatus: 'IN_PROGRESS', failedAt: at(90),
            },
          },
        ]);
    });

    it('red checks on another head, or on a job that is not DONE, change nothing', () => {
      given(done()).when(checksFailed(BASE)).then([]);
      given(readyToFinish()).when(checksFailed(HEAD)).then([]);
    });
  });

  describe('cancel', () => {
    const cancel = (atS: number): JobCommand => ({ type: 'CancelJob', data: { jobId: JOB, reason: 'not needed', now: at(atS) } });

    it('a queued job is cancelled with its task back to TO_DO', () => {
      given([enqueued()]).when(cancel(5)).then([
        { type: 'JobCancelled', data: { jobId: JOB, previousStatus: 'QUEUED', revokedLeaseToken: null, reason: 'not needed', taskStatus: 'TO_DO', cancelledAt: at(5) } },
      ]);
    });

    it('a running job is cancelled and its lease revoked', () => {
      given(running()).when(cancel(30)).then([
        { type: 'JobCancelled', data: { jobId: JOB, previousStatus: 'RUNNING', revokedLeaseToken: 1, reason: 'not needed', taskStatus: 'TO_DO', cancelledAt: at(30) } },
      ]);
    });

    it('a job that moves no task is cancelled without a task status', () => {
      given([enqueued({ kind: 'PLAN_CHAT', taskId: null })]).when(cancel(5)).then([
        { type: 'JobCancelled', data: { jobId: JOB, previousStatus: 'QUEUED', revokedLeaseToken: null, reason: 'not needed', taskStatus: null, cancelledAt: at(5) } },
      ]);
    });

    it('a finished job cannot be cancelled', () => {
      given([...readyToFinish(), finished(1, 70)]).when(cancel(80)).thenThrows(ErrorCode.INVALID_TRANSITION, /already DONE/);
    });

    it('a cancelled job cannot be cancelled again', () => {
      given([enqueued(), { type: 'JobCancelled', data: { jobId: JOB, previousStatus: 'QUEUED', revokedLeaseToken: null, reason: null, taskStatus: 'TO_DO', cancelledAt: at(5) } }])
        .when(cancel(6))
        .thenThrows(ErrorCode.INVALID_TRANSITION);
    });

    it('a job that does not exist cannot be cancelled', () => {
      given([]).when(cancel(1)).thenThrows(ErrorCode.NOT_FOUND);
    });
  });

  describe('a failure the runner found is a result, whatever the story log holds', () => {
    it('a timeout finishes FAILED on its first try, although the agent logged nothing', () => {
      const facts = { ...doneFacts, verifyResult: 'EMPTY' as const, newCommit: false, netDiff: { filesChanged: 0, insertions: 0, deletions: 0 }, failure: { kind: 'EXCEPTION' as const, message: 'the agent was killed at its timeout of 2000 ms' } };
      given(running())
        .when(finish(1, 70, facts))
        .then([finished(1, 70, { jobStatus: 'FAILED', taskStatus: 'IN_PROGRESS', error: 'exception: the agent was killed at its timeout of 2000 ms', facts, headSha: null, pushedAt: null })]);
    });

    it('a verify that found nothing finishes FAILED "verify produced no output" without a story log', () => {
      const facts = { ...doneFacts, verifyResult: 'EMPTY' as const, newCommit: false, netDiff: { filesChanged: 0, insertions: 0, deletions: 0 }, headSha: BASE, planCheck: 'NO_EXPECTED_CHANGES' as const };
      const state = given(running())
        .when(finish(1, 70, facts))
        .then([finished(1, 70, { jobStatus: 'FAILED', taskStatus: 'IN_PROGRESS', error: 'verify produced no output', facts, headSha: null, pushedAt: null })]) as Job;
      expect(state.verification).toEqual({ result: 'EMPTY', headSha: BASE, planCheck: 'NO_EXPECTED_CHANGES' });
    });

    it('a DONE still needs its story log', () => {
      given(running()).when(finish(1, 70)).thenThrows(ErrorCode.PRECONDITION_FAILED, /story log is missing/);
    });
  });

  describe("attempts: only the job's own failures spend one", () => {
    const rollback = (token: number, atS: number, cause: 'JOB' | 'RUNNER' | 'DEPENDENCY'): JobCommand => ({
      type: 'RollbackClaim',
      data: { ...lease(token), reason: `${cause} trouble`, exitCode: null, cause, now: at(atS) },
    });
    const freeRollback = (token: number, atS: number, pauseS: number, cause: 'RUNNER' | 'DEPENDENCY' = 'DEPENDENCY'): JobEvent => ({
      type: 'JobClaimRolledBack',
      data: {
        ...lease(token),
        attempt: 1,
        outcome: 'REQUEUED',
        nextAttempt: 1,
        error: null,
        reason: `${cause} trouble`,
        exitCode: null,
        cause,
        offerNotBefore: at(atS + pauseS),
        rolledBackAt: at(atS),
      },
    });

    it('a rollback for an unavailable dependency keeps the attempt and pauses the next offer', () => {
      const state = given(running()).when(rollback(1, 30, 'DEPENDENCY')).then([freeRollback(1, 30, 1)]) as Job;
      expect(state).toMatchObject({ status: 'QUEUED', attempt: 1, lease: null, lastLeaseToken: 1, freeRequeues: 1 });
    });

    it("a rollback for the runner's own trouble (an expired token) keeps the attempt, even on the last one", () => {
      given([enqueued({ maxAttempts: 1 }), claimed(1, 1, 10), started(1, 11)]).when(rollback(1, 30, 'RUNNER')).then([freeRollback(1, 30, 1, 'RUNNER')]);
    });

    it("the pause doubles with each such requeue in a row, and a rollback of the job's own resets it", () => {
      const history = [enqueued(), claimed(1, 1, 10), freeRollback(1, 20, 1), claimed(2, 1, 30), freeRollback(2, 40, 2), claimed(3, 1, 50)];
      given(history).when(rollback(3, 60, 'DEPENDENCY')).then([{ ...freeRollback(3, 60, 4) }]);
      const after = given(history).when(rollback(3, 60, 'JOB')).then([
        {
          type: 'JobClaimRolledBack',
          data: { ...lease(3), attempt: 1, outcome: 'REQUEUED', nextAttempt: 2, error: null, reason: 'JOB trouble', exitCode: null, cause: 'JOB', offerNotBefore: null, rolledBackAt: at(60) },
        },
      ]) as Job;
      expect(after.freeRequeues).toBe(0);
    });

    it('a claim before the pause has passed is refused, naming when the job may be claimed; from then on it is claimed', () => {
      const history = [...running(), freeRollback(1, 30, 2)];
      given(history).when(claim(31.5)).thenThrows(ErrorCode.PRECONDITION_FAILED, new RegExp(`may be claimed from ${at(32)}`));
      given(history).when(claim(32)).then([claimed(2, 1, 32)]);
    });

    it('after twenty free requeues in a row the next rollback spends the attempt after all', () => {
      const history: JobEvent[] = [enqueued({ maxAttempts: 1 })];
      for (let token = 1; token <= 20; token++) history.push(claimed(token, 1, token * 100), freeRollback(token, token * 100 + 10, 1));
      history.push(claimed(21, 1, 3000));
      given(history)
        .when(rollback(21, 3010, 'DEPENDENCY'))
        .then([
          {
            type: 'JobClaimRolledBack',
            data: {
              ...lease(21),
              attempt: 1,
              outcome: 'FAILED',
              nextAttempt: null,
              error: 'the claim of attempt 1 was rolled back (DEPENDENCY trouble), and 1 attempt is the maximum: the job failed',
              reason: 'DEPENDENCY trouble',
              exitCode: null,
              cause: 'DEPENDENCY',
              offerNotBefore: null,
              rolledBackAt: at(3010),
            },
          },
        ]);
    });
  });

  /** Claim 1 of a job with two attempts started, logged its plan, its commit and a passed test result. */
  const workedAndTested = (): JobEvent[] => [
    enqueued({ maxAttempts: 2 }),
    claimed(1, 1, 10),
    started(1, 11),
    implementationLogged(1, 12),
    commitLogged(1, 40),
    testResultLogged(1, 45),
  ];
  const verified = { ...doneFacts, headSha: HEAD, planCheck: 'NO_EXPECTED_CHANGES' as const };

  describe('a verified push is finished by the next attempt, never failed', () => {
    const pushedThenLost = (): JobEvent[] => [...workedAndTested(), pushReported(1, 50, true, verified)];
    const expiry = 10 + LEASE_MS / 1000;
    const expire = (token: number, atS: number): JobCommand => ({ type: 'ExpireJobLease', data: { jobId: JOB, leaseToken: token, now: at(atS) } });

    it('a claim that ends after its verified push requeues the job without spending an attempt, and its head does not linger', () => {
      const state = given(pushedThenLost())
        .when(expire(1, expiry))
        .then([
          {
            type: 'JobLeaseExpired',
            data: { ...lease(1), attempt: 1, outcome: 'REQUEUED', nextAttempt: 1, error: null, leaseExpiresAt: at(expiry), expiredAt: at(expiry), started: true },
          },
        ]) as Job;
      expect(state.verifiedPush).toMatchObject({ leaseToken: 1, headSha: HEAD, pushedAt: at(50), baseSha: BASE, branch: 'feat/story-1208' });
      const reclaimed = given([...pushedThenLost(), { type: 'JobLeaseExpired', data: { ...lease(1), attempt: 1, outcome: 'REQUEUED', nextAttempt: 1, error: null, leaseExpiresAt: at(expiry), expiredAt: at(expiry) } }])
        .when(claim(expiry + 1, { baseSha: null }))
        .then([claimed(2, 1, expiry + 1, { baseSha: null })]) as Job;
      expect(reclaimed).toMatchObject({ headSha: null, pushedAt: null, storyLog: { implementationEntries: 0, commits: [], testResults: [] } });
    });

    it("even the last attempt's claim, ended after its push, requeues instead of failing", () => {
      const history = [...pushedThenLost()];
      history[0] = enqueued({ maxAttempts: 1 });
      given(history)
        .when(expire(1, expiry))
        .then([{ type: 'JobLeaseExpired', data: { ...lease(1), attempt: 1, outcome: 'REQUEUED', nextAttempt: 1, error: null, leaseExpiresAt: at(expiry), expiredAt: at(expiry), started: true } }]);
    });

    it('the next claim adopts the push at its start and finishes DONE with its head, push and story log', () => {
      const requeued: JobEvent = { type: 'JobLeaseExpired', data: { ...lease(1), attempt: 1, outcome: 'REQUEUED', nextAttempt: 1, error: null, leaseExpiresAt: at(expiry), expiredAt: at(expiry) } };
      const history = [...pushedThenLost(), requeued, claimed(2, 1, 300, { runnerId: OTHER_RUNNER, baseSha: null })];
      const adopt: JobCommand = { type: 'StartJob', data: { ...lease(2, OTHER_RUNNER), baseSha: null, branch: null, adoptPushOf: 1, now: at(301) } };
      const adopted: JobEvent = {
        type: 'JobStarted',
        data: { ...lease(2, OTHER_RUNNER), baseSha: BASE, branch: 'feat/story-1208', adoptedPushOf: 1, startedAt: at(301) },
      };
      const state = given(history).when(adopt).then([adopted]) as Job;
      expect(state).toMatchObject({ headSha: HEAD, pushedAt: at(50), baseSha: BASE, storyLog: { implementationEntries: 1, commits: [HEAD], testResults: ['PASSED'] } });
      given([...history, adopted])
        .when({ type: 'FinishJob', data: { ...lease(2, OTHER_RUNNER), facts: verified, now: at(302) } })
        .then([finished(2, 302, { runnerId: OTHER_RUNNER, facts: verified })]);
    });

    it('a start that names a push the job does not have is refused', () => {
      given([enqueued(), claimed(1, 1, 10)])
        .when({ type: 'StartJob', data: { ...lease(1), baseSha: null, branch: null, adoptPushOf: 7, now: at(11) } })
        .thenThrows(ErrorCode.PRECONDITION_FAILED, /no verified push of claim 7/);
    });
  });

  describe('a run whose push was never reported is taken over by the next claim, not redone', () => {
    // claim 1 pushed and died before reporting it; its lease ran out and another runner claimed the job
    const diedAfterPush = (): JobEvent[] => [...workedAndTested(), leaseExpired(1, 1, 200), claimed(2, 2, 300, { runnerId: OTHER_RUNNER, baseSha: null })];

    it('the next claim knows the unfinished run: its base, branch and logged commits', () => {
      const state = given(diedAfterPush().slice(0, -1)).when(claim(300, { runnerId: OTHER_RUNNER, baseSha: null })).then([claimed(2, 2, 300, { runnerId: OTHER_RUNNER, baseSha: null })]) as Job;
      expect(state.unfinishedRun).toEqual({ leaseToken: 1, branch: 'feat/story-1208', baseSha: BASE, storyLog: { implementationEntries: 1, commits: [HEAD], testResults: ['PASSED'] } });
    });

    it('it takes the run over at its start, with its base, branch and story log, and finishes DONE', () => {
      const adopt: JobCommand = { type: 'StartJob', data: { ...lease(2, OTHER_RUNNER), baseSha: null, branch: null, adoptPushOf: null, adoptRunOf: 1, now: at(301) } };
      const adopted: JobEvent = {
        type: 'JobStarted',
        data: { ...lease(2, OTHER_RUNNER), baseSha: BASE, branch: 'feat/story-1208', adoptedRunOf: 1, startedAt: at(301) },
      };
      const state = given(diedAfterPush()).when(adopt).then([adopted]) as Job;
      expect(state).toMatchObject({ status: 'RUNNING', baseSha: BASE, branch: 'feat/story-1208', storyLog: { implementationEntries: 1, commits: [HEAD], testResults: ['PASSED'] } });
      const pushed: JobEvent = { type: 'JobPushReported', data: { ...lease(2, OTHER_RUNNER), branch: 'feat/story-1208', headSha: HEAD, pushedAt: at(302), facts: verified, reportedAt: at(302) } };
      given([...diedAfterPush(), adopted, pushed])
        .when({ type: 'FinishJob', data: { ...lease(2, OTHER_RUNNER), facts: verified, now: at(303) } })
        .then([finished(2, 303, { runnerId: OTHER_RUNNER, facts: verified, pushedAt: at(302) })]);
    });

    it('a start that names a run the job does not have is refused', () => {
      given(diedAfterPush())
        .when({ type: 'StartJob', data: { ...lease(2, OTHER_RUNNER), baseSha: null, branch: null, adoptPushOf: null, adoptRunOf: 7, now: at(301) } })
        .thenThrows(ErrorCode.PRECONDITION_FAILED, /no unfinished run of claim 7/);
    });

    it('a claim that logged no commit, or reported its push, leaves no unfinished run', () => {
      const fold = (events: JobEvent[]) => events.reduce(jobDecider.evolve, jobDecider.initialState) as Job;
      const noCommit = fold([enqueued({ maxAttempts: 2 }), claimed(1, 1, 10), started(1, 11), implementationLogged(1, 12), leaseExpired(1, 1, 200)]);
      expect(noCommit.unfinishedRun ?? null).toBeNull();
      const reported = fold([enqueued({ maxAttempts: 2 }), claimed(1, 1, 10), started(1, 11), commitLogged(1, 40), pushReported(1, 50, true), leaseExpired(1, 1, 200)]);
      expect(reported.unfinishedRun ?? null).toBeNull();
    });
  });

  describe('cancelling a running job', () => {
    const cancelled: JobEvent = { type: 'JobCancelled', data: { jobId: JOB, previousStatus: 'RUNNING', revokedLeaseToken: 1, reason: 'not needed', taskStatus: 'TO_DO', cancelledAt: at(30) } };
    const stopped = { ...doneFacts, cancelled: true };

    it("the revoked claim's runner reports its agent stopped with cancelled: true, once", () => {
      const state = given([...running(), cancelled])
        .when(finish(1, 33, stopped))
        .then([{ type: 'JobRunStopped', data: { ...lease(1), stoppedAt: at(33) } }]) as Job;
      expect(state).toMatchObject({ status: 'CANCELLED', cancelledRun: { runnerId: RUNNER, leaseToken: 1, stoppedAt: at(33) } });
      given([...running(), cancelled, { type: 'JobRunStopped', data: { ...lease(1), stoppedAt: at(33) } }])
        .when(finish(1, 34, stopped))
        .thenThrows(ErrorCode.INVALID_TRANSITION, /already reported stopped/);
    });

    it('anything else under the revoked claim stays refused', () => {
      given([...running(), cancelled]).when(finish(1, 33)).thenThrows(ErrorCode.STALE_FENCE, /revoked/);
      given([...running(), cancelled]).when({ type: 'FinishJob', data: { ...lease(1, OTHER_RUNNER), facts: stopped, now: at(33) } }).thenThrows(ErrorCode.STALE_FENCE);
    });
  });

  it('names the terminal events the worktree service releases on', () => {
    expect(isTerminalJobEvent(finished(1, 70))).toBe(true);
    expect(isTerminalJobEvent(leaseExpired(1, 1, 190))).toBe(false);
    expect(isTerminalJobEvent(started(1, 11))).toBe(false);
  });
});
