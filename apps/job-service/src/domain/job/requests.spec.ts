import {
  cancelJob,
  claimJob,
  enqueueJob,
  finishJob,
  JobViewSchema,
  logCommit,
  logImplementation,
  logTestResult,
  parseRequest,
  renewJobLease,
  reportPush,
  rollbackClaim,
  startJob,
} from '@gantry/contracts';
import { routeEnqueue } from '../run-queue/run-queue.js';
import { validatesAgainstContract } from '../testing/contract-events.js';
import { PRODUCT } from '../testing/job-fixtures.js';
import type { JobCommand } from './commands.js';
import { jobDecider } from './decider.js';
import type { JobEvent } from './events.js';
import {
  cancelJobCommand,
  claimJobCommand,
  coalesceIntoJobCommand,
  enqueueJobCommand,
  enqueueRequestHash,
  finishJobCommand,
  logCommitCommand,
  logImplementationCommand,
  logTestResultCommand,
  renewJobLeaseCommand,
  reportPushCommand,
  rollbackClaimCommand,
  runQueueRequest,
  startJobCommand,
} from './requests.js';
import { DEFAULT_LEASE_DURATION_MS, DEFAULT_MAX_ATTEMPTS } from './lease-policy.js';
import { jobExists, type JobState } from './state.js';
import { jobView, runQueueEntry } from './view.js';

const JOB = 'job-0d9f1c2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f';
const RUNNER = 'runner-host1-01';
const BASE = '3f2c9a1b7d4e5f60718293a4b5c6d7e8f9012345';
const HEAD = '9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807';
const T0 = Date.parse('2026-11-30T06:00:00.000Z');
const at = (s: number) => new Date(T0 + s * 1000).toISOString();
const validate = validatesAgainstContract('jobs');

/** Decide and evolve, checking each event against its contract, the way the wiring will. */
function run(state: JobState, command: JobCommand): { state: JobState; events: JobEvent[] } {
  const events = jobDecider.decide(command, state);
  events.forEach(validate);
  return { state: events.reduce(jobDecider.evolve, state), events };
}

describe('from wire requests to decider commands', () => {
  const enqueue = parseRequest(enqueueJob, { ...enqueueJob.examples.valid[0], correlationId: 'corr-1' });

  it('an enqueue request becomes an EnqueueJob with nulls for what was left out and the default max attempts', () => {
    const command = enqueueJobCommand(enqueue, { jobId: JOB, now: at(0), product: PRODUCT });
    expect(command.data).toMatchObject({
      jobId: JOB,
      kind: 'TASK_IMPLEMENTATION',
      sprintId: null,
      agentProfile: null,
      reason: null,
      excludeFromCoalescing: false,
      maxAttempts: DEFAULT_MAX_ATTEMPTS,
      configOverrides: { product: null, sprint: null, job: null },
      now: at(0),
    });
  });

  it('a code job that names no branch works on a feature branch derived from it, never on its base ref', () => {
    const { branch: _none, ...withoutBranch } = enqueueJob.examples.valid[0] as Record<string, unknown>;
    const request = parseRequest(enqueueJob, { ...withoutBranch, baseRef: 'main' });
    expect(enqueueJobCommand(request, { jobId: JOB, now: at(0), product: PRODUCT }).data.branch).toBe('gantry/product-42/story-ST-1208');
    const named = parseRequest(enqueueJob, { ...withoutBranch, baseRef: 'main', branch: 'feat/mine' });
    expect(enqueueJobCommand(named, { jobId: JOB, now: at(0), product: PRODUCT }).data.branch).toBe('feat/mine');
    const review = parseRequest(enqueueJob, enqueueJob.examples.valid[1]);
    expect(enqueueJobCommand(review, { jobId: JOB, now: at(0), product: PRODUCT }).data.branch).toBeNull();
  });

  it('the enqueue request hash ignores who called and why, and changes with the intent', () => {
    const again = parseRequest(enqueueJob, { ...enqueueJob.examples.valid[0], correlationId: 'corr-2', actor: 'user-9' });
    const other = parseRequest(enqueueJob, { ...enqueueJob.examples.valid[0], payload: { plan: 'something else' } });
    expect(enqueueRequestHash(again)).toBe(enqueueRequestHash(enqueue));
    expect(enqueueRequestHash(other)).not.toBe(enqueueRequestHash(enqueue));
  });

  it('a retried enqueue with the same key finds the job through its run-queue entry', () => {
    const { state } = run(jobDecider.initialState, enqueueJobCommand(enqueue, { jobId: JOB, now: at(0), product: PRODUCT }));
    if (!jobExists(state)) throw new Error('no job');
    expect(routeEnqueue(runQueueRequest(enqueue, { now: at(30), product: PRODUCT }), [runQueueEntry(state)])).toEqual({ outcome: 'deduplicated', jobId: JOB });
  });

  it('two REVIEW requests for one profile and reason within 5 s end as one job with both payloads', () => {
    const first = parseRequest(enqueueJob, { ...enqueueJob.examples.valid[1], excludeFromCoalescing: false, payload: { n: 1 } });
    const second = parseRequest(enqueueJob, { ...first, idempotencyKey: 'product-42/queue_run:second', payload: { n: 2 } });
    let { state } = run(jobDecider.initialState, enqueueJobCommand(first, { jobId: JOB, now: at(0), product: PRODUCT }));
    if (!jobExists(state)) throw new Error('no job');
    const decision = routeEnqueue(runQueueRequest(second, { now: at(2), product: PRODUCT }), [runQueueEntry(state)]);
    expect(decision).toEqual({ outcome: 'coalesced', jobId: JOB });
    ({ state } = run(state, coalesceIntoJobCommand(second, { jobId: JOB, now: at(2) })));
    if (!jobExists(state)) throw new Error('no job');
    expect(jobView(state).payloads).toEqual([{ n: 1 }, { n: 2 }]);
  });

  it('the whole life of a job, from the contracts\' own examples, ends DONE with a view the query contract accepts', () => {
    const fence = { jobId: JOB, runnerId: RUNNER, leaseToken: 1 };
    let state: JobState = jobDecider.initialState;
    const step = (command: JobCommand) => {
      const result = run(state, command);
      state = result.state;
      return result.events;
    };

    step(enqueueJobCommand(enqueue, { jobId: JOB, now: at(0), product: PRODUCT }));
    const [claimedEvent] = step(claimJobCommand(parseRequest(claimJob, { ...claimJob.examples.valid[0], jobId: JOB, baseSha: BASE }), { jobId: JOB, now: at(1) }));
    expect(claimedEvent).toMatchObject({ type: 'JobClaimed', data: { leaseToken: 1, leaseExpiresAt: new Date(T0 + 1000 + DEFAULT_LEASE_DURATION_MS).toISOString() } });
    step(renewJobLeaseCommand(parseRequest(renewJobLease, { ...renewJobLease.examples.valid[0], ...fence }), { now: at(2) }));
    step(startJobCommand(parseRequest(startJob, { ...startJob.examples.valid[0], ...fence }), { now: at(3) }));
    step(logImplementationCommand(parseRequest(logImplementation, { ...logImplementation.examples.valid[0], ...fence }), { now: at(4) }));
    step(logCommitCommand(parseRequest(logCommit, { ...logCommit.examples.valid[0], ...fence, commitSha: HEAD }), { now: at(5) }));
    step(reportPushCommand(parseRequest(reportPush, { ...reportPush.examples.valid[0], ...fence }), { now: at(6) }));
    step(logTestResultCommand(parseRequest(logTestResult, { ...logTestResult.examples.valid[0], ...fence, status: 'PASSED' }), { now: at(7) }));
    const done = {
      ...fence,
      idempotencyKey: 'product-42/finish:1',
      facts: { ...finishJob.examples.valid[1]!.facts, failure: null },
    };
    const [finishedEvent] = step(finishJobCommand(parseRequest(finishJob, done), { now: at(8) }));
    expect(finishedEvent).toMatchObject({ type: 'JobFinished', data: { jobStatus: 'DONE', taskStatus: 'DONE', headSha: HEAD, pushedAt: at(6), baseSha: BASE } });

    if (!jobExists(state)) throw new Error('no job');
    const view = JobViewSchema.parse(jobView(state));
    expect(view).toMatchObject({
      status: 'DONE',
      lease: null,
      claimedAt: at(1),
      startedAt: at(3),
      finishedAt: at(8),
      storyLog: { implementationEntries: 1, commitEntries: 1, testResultEntries: 1 },
    });
  });

  it('a rollback and a cancel map onto their commands', () => {
    expect(rollbackClaimCommand(parseRequest(rollbackClaim, rollbackClaim.examples.valid[0]), { now: at(1) }).data).toMatchObject({ exitCode: 1, leaseToken: 1 });
    expect(cancelJobCommand(parseRequest(cancelJob, cancelJob.examples.valid[0]), { now: at(1) }).data).toEqual({
      jobId: cancelJob.examples.valid[0]!.jobId,
      reason: 'not needed any more',
      now: at(1),
    });
  });
});
