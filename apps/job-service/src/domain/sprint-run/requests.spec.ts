import {
  cancelSprintRun,
  createSprintRun,
  parseRequest,
  PullRequestChecksFailed,
  PullRequestMergeConflict,
  resumeSprintRun,
  SprintRunViewSchema,
} from '@gantry/contracts';
import type { JobEvent } from '../job/events.js';
import type { Job } from '../job/state.js';
import { validatesAgainstContract } from '../testing/contract-events.js';
import { PRODUCT } from '../testing/job-fixtures.js';
import type { SprintRunCommand } from './commands.js';
import { transitionSprintRun } from './decider.js';
import {
  cancelSprintRunCommand,
  checksFailedCommand,
  createSprintRunCommand,
  mergeConflictCommand,
  resumeSprintRunCommand,
  sprintRunCommandFor,
} from './requests.js';
import { initialSprintRunState, sprintRunExists, type SprintRunState } from './state.js';
import { sprintRunView } from './view.js';

const RUN = 'sprintrun-0d9f1c2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f';
const JOB = 'job-0d9f1c2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f';
const T0 = Date.parse('2026-11-30T07:00:00.000Z');
const at = (s: number) => new Date(T0 + s * 1000).toISOString();
const validate = validatesAgainstContract('jobs');

describe('sprint runs from the wire and from other contexts\' events', () => {
  let state: SprintRunState = initialSprintRunState;
  const step = (command: SprintRunCommand) => {
    const t = transitionSprintRun(state, command);
    t.events.forEach(validate);
    state = t.nextState;
    return t;
  };
  const sprintJob = (over: Partial<Job>) => ({ sprintRunId: RUN, jobId: JOB, taskId: 'T-1', ...over }) as Job;

  it('drives a run through contract-valid PR events: running → merge conflict → PAUSED → resumed → DONE, viewed as the query contract says', () => {
    step(createSprintRunCommand(parseRequest(createSprintRun, createSprintRun.examples.valid[0]), { sprintRunId: RUN, now: at(0), product: PRODUCT }));
    const claimed: JobEvent = { type: 'JobClaimed', data: {} as never };
    step(sprintRunCommandFor(claimed, sprintJob({}), { now: at(1), position: 1 })!);

    const conflict = PullRequestMergeConflict.data.parse(PullRequestMergeConflict.examples.valid[0]);
    const paused = step(mergeConflictCommand(conflict, { sprintRunId: RUN, questionId: 'question-1', now: at(2) }));
    expect(paused.effects[0]).toMatchObject({ type: 'RAISE_QUESTION', conflictingFiles: ['src/app.ts', 'package.json'], prUrl: conflict.prUrl });
    if (!sprintRunExists(state)) throw new Error('no run');
    expect(SprintRunViewSchema.parse(sprintRunView(state)).pause).toMatchObject({ reason: 'MERGE_CONFLICT', questionId: 'question-1' });

    step(resumeSprintRunCommand(parseRequest(resumeSprintRun, { ...resumeSprintRun.examples.valid[0], sprintRunId: RUN, actor: 'user-9' }), { now: at(3) }));
    const done = (taskId: string): JobEvent => ({ type: 'JobFinished', data: { jobStatus: taskId === 'T-1' ? 'DONE' : 'SKIPPED' } as never });
    step(sprintRunCommandFor(done('T-1'), sprintJob({ taskId: 'T-1' }), { now: at(4), position: 4 })!);
    const last = step(sprintRunCommandFor(done('T-2'), sprintJob({ taskId: 'T-2' }), { now: at(5), position: 5 })!);
    expect(last.nextState.status).toBe('DONE');
    expect(last.effects).toEqual([{ type: 'MARK_PR_READY_FOR_REVIEW', sprintRunId: RUN, repository: 'acme/shop', branch: 'sprint/SP-7', prUrl: conflict.prUrl }]);
    expect(SprintRunViewSchema.parse(sprintRunView(state as never))).toMatchObject({ status: 'DONE', doneTaskIds: ['T-1', 'T-2'], pause: null });
  });

  it('red CI from the PR side fails a run and a cancel returns its tasks to TO_DO', () => {
    state = initialSprintRunState;
    step(createSprintRunCommand(parseRequest(createSprintRun, createSprintRun.examples.valid[0]), { sprintRunId: RUN, now: at(0), product: PRODUCT }));
    const checks = PullRequestChecksFailed.data.parse(PullRequestChecksFailed.examples.valid[0]);
    const failed = step(checksFailedCommand(checks, { sprintRunId: RUN, now: at(1) }));
    expect(failed.events[0]).toMatchObject({ type: 'SprintRunFailed', data: { reason: 'CHECKS_FAILED', failedChecks: ['ci/test'] } });
    const cancelled = step(cancelSprintRunCommand(parseRequest(cancelSprintRun, { ...cancelSprintRun.examples.valid[0], sprintRunId: RUN }), { now: at(2) }));
    expect(cancelled.nextState.status).toBe('CANCELLED');
    expect(cancelled.effects).toContainEqual({ type: 'RETURN_TASKS_TO_TODO', sprintRunId: RUN, taskIds: ['T-1', 'T-2'] });
  });

  it('reads each sprint job event for what it means to the run', () => {
    const now = { now: at(9), position: 90 };
    const job = sprintJob({});
    const failedFinish = { type: 'JobFinished', data: { jobStatus: 'FAILED', error: 'test failure: 2 failing' } } as unknown as JobEvent;
    const cancelledFinish = { type: 'JobFinished', data: { jobStatus: 'CANCELLED', error: null } } as unknown as JobEvent;
    const requeued = { type: 'JobLeaseExpired', data: { outcome: 'REQUEUED', error: null } } as unknown as JobEvent;
    const exhausted = { type: 'JobLeaseExpired', data: { outcome: 'FAILED', error: 'max attempts' } } as unknown as JobEvent;
    const logged = { type: 'CommitLogged', data: {} } as unknown as JobEvent;

    expect(sprintRunCommandFor(failedFinish, job, now)).toEqual({ type: 'RecordSprintTaskFailed', data: { sprintRunId: RUN, taskId: 'T-1', jobId: JOB, error: 'test failure: 2 failing', superseded: false, now: at(9) } });
    expect(sprintRunCommandFor(exhausted, job, now)).toMatchObject({ type: 'RecordSprintTaskFailed', data: { error: 'max attempts' } });
    // A job cancelled on its own leaves its task undone: the run fails rather than wait for it for ever.
    expect(sprintRunCommandFor(cancelledFinish, job, now)).toMatchObject({ type: 'RecordSprintTaskFailed', data: { taskId: 'T-1', error: 'its job was cancelled' } });
    const cancelled = { type: 'JobCancelled', data: { reason: 'not now' } } as unknown as JobEvent;
    expect(sprintRunCommandFor(cancelled, job, now)).toMatchObject({ type: 'RecordSprintTaskFailed', data: { taskId: 'T-1', error: 'its job was cancelled: not now' } });
    expect(sprintRunCommandFor(requeued, job, now)).toBeNull();
    expect(sprintRunCommandFor(logged, job, now)).toBeNull();
    const pushed = { type: 'JobPushReported', data: { branch: 'sprint/SP-7', headSha: 'a'.repeat(40) } } as unknown as JobEvent;
    expect(sprintRunCommandFor(pushed, job, now)).toEqual({
      type: 'RecordSprintHeadPushed',
      data: { sprintRunId: RUN, jobId: JOB, branch: 'sprint/SP-7', headSha: 'a'.repeat(40), position: 90, now: at(9) },
    });
    expect(sprintRunCommandFor(failedFinish, sprintJob({ sprintRunId: null }), now)).toBeNull();
  });
});
