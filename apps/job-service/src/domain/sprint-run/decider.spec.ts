import { deriveWorktreeKey, ErrorCode } from '@gantry/contracts';
import { DeciderSpecification } from '@gantry/eventstore/testing';
import { validatesAgainstContract } from '../testing/contract-events.js';
import { PRODUCT } from '../testing/job-fixtures.js';
import type { ProductResolution } from '../product/view.js';
import type { SprintRunCommand } from './commands.js';
import { filesKeptOnPause, MAX_PAUSE_FILES_BYTES, resumeInstructionsFor, sprintRunDecider, transitionSprintRun } from './decider.js';
import { nextSprintJob, sprintJobIdempotencyKey, sprintRunEffects } from './effects.js';
import type { SprintRunEvent } from './events.js';
import { initialSprintRunState, type SprintRun, type SprintRunState } from './state.js';

const given = DeciderSpecification.for(sprintRunDecider, { validate: validatesAgainstContract('jobs') });

const RUN = 'sprintrun-5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d';
const JOB1 = 'job-00000000-0000-4000-8000-000000000001';
const JOB2 = 'job-00000000-0000-4000-8000-000000000002';
const PR = 'https://github.com/acme/shop/pull/102';
const HEAD1 = '1'.repeat(40);
const HEAD2 = '2'.repeat(40);
/** A head no job of the run reported: a person's push, or a job's whose report the run has not handled yet. */
const PERSONS_HEAD = 'f'.repeat(40);
const T0 = Date.parse('2026-11-30T07:00:00.000Z');
const at = (s: number) => new Date(T0 + s * 1000).toISOString();

const created: SprintRunEvent = {
  type: 'SprintRunCreated',
  data: { sprintRunId: RUN, sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1', 'T-2'], branch: 'sprint/SP-7', prUrl: PR, createdAt: at(0), repository: 'acme/shop' },
};
const startedEvt: SprintRunEvent = { type: 'SprintRunStarted', data: { sprintRunId: RUN, jobId: JOB1, startedAt: at(5) } };
const taskDone = (taskId: string, s: number): SprintRunEvent => ({ type: 'SprintRunTaskCompleted', data: { sprintRunId: RUN, taskId, jobId: JOB1, completedAt: at(s) } });
const pausedEvt: SprintRunEvent = {
  type: 'SprintRunPaused',
  data: {
    sprintRunId: RUN,
    reason: 'MERGE_CONFLICT',
    prUrl: PR,
    conflictingFiles: ['src/app.ts'],
    questionId: 'question-17',
    resumeInstructions: resumeInstructionsFor({ sprintRunId: RUN, branch: 'sprint/SP-7', prUrl: PR, conflictingFiles: ['src/app.ts'] }),
    pausedAt: at(20),
    headSha: HEAD1,
  },
};
const completedEvt = (s: number): SprintRunEvent => ({ type: 'SprintRunCompleted', data: { sprintRunId: RUN, branch: 'sprint/SP-7', prUrl: PR, completedAt: at(s) } });
const cancelledEvt: SprintRunEvent = { type: 'SprintRunCancelled', data: { sprintRunId: RUN, reason: null, actor: null, tasksBackToTodo: ['T-1', 'T-2'], cancelledAt: at(9) } };
const checksFailedEvt: SprintRunEvent = {
  type: 'SprintRunFailed',
  data: { sprintRunId: RUN, reason: 'CHECKS_FAILED', taskId: null, jobId: null, prUrl: PR, failedChecks: ['ci/test'], error: `checks failed on ${PR}: ci/test`, failedAt: at(30), headSha: HEAD1 },
};
const headPushed = (headSha: string, position: number, s: number, jobId = JOB1): SprintRunEvent => ({
  type: 'SprintRunHeadPushed',
  data: { sprintRunId: RUN, jobId, headSha, position, recordedAt: at(s) },
});

const running = [created, startedEvt];

const cmd = {
  create: (product: ProductResolution | null = PRODUCT): SprintRunCommand => ({
    type: 'CreateSprintRun',
    data: { sprintRunId: RUN, sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1', 'T-2'], branch: 'sprint/SP-7', prUrl: PR, taskPayloads: {}, configOverrides: { product: null, sprint: null }, product, now: at(0) },
  }),
  claimed: (s: number, jobId = JOB1): SprintRunCommand => ({ type: 'RecordSprintJobClaimed', data: { sprintRunId: RUN, jobId, now: at(s) } }),
  taskDone: (taskId: string, s: number): SprintRunCommand => ({ type: 'RecordSprintTaskDone', data: { sprintRunId: RUN, taskId, jobId: JOB1, now: at(s) } }),
  taskFailed: (taskId: string, s: number, superseded = false): SprintRunCommand => ({
    type: 'RecordSprintTaskFailed',
    data: { sprintRunId: RUN, taskId, jobId: JOB1, error: 'test failure: 2 failing', superseded, now: at(s) },
  }),
  conflict: (s: number, files = ['src/app.ts'], headSha = HEAD1, leftOut = 0): SprintRunCommand => ({
    type: 'RecordMergeConflict',
    data: { sprintRunId: RUN, prUrl: PR, conflictingFiles: files, conflictingFilesLeftOut: leftOut, headSha, questionId: 'question-17', resumeInstructions: null, now: at(s) },
  }),
  checksFailed: (s: number, headSha = HEAD1): SprintRunCommand => ({ type: 'RecordChecksFailed', data: { sprintRunId: RUN, prUrl: PR, failedChecks: ['ci/test'], headSha, now: at(s) } }),
  pushed: (headSha: string, position: number, s: number, branch = 'sprint/SP-7'): SprintRunCommand => ({
    type: 'RecordSprintHeadPushed',
    data: { sprintRunId: RUN, jobId: JOB1, branch, headSha, position, now: at(s) },
  }),
  resume: (s: number): SprintRunCommand => ({ type: 'ResumeSprintRun', data: { sprintRunId: RUN, actor: 'user-9', note: 'resolved', now: at(s) } }),
  cancel: (s: number): SprintRunCommand => ({ type: 'CancelSprintRun', data: { sprintRunId: RUN, reason: 'scope changed', actor: 'user-9', now: at(s) } }),
};

function stateOf(events: SprintRunEvent[]): SprintRunState {
  return events.reduce(sprintRunDecider.evolve, initialSprintRunState);
}

describe('sprint run decider', () => {
  it('a sprint run is created QUEUED with its tasks in order', () => {
    given([]).when(cmd.create()).then([created]);
  });

  it('a sprint run with no tasks is refused', () => {
    given([]).when({ type: 'CreateSprintRun', data: { ...(cmd.create().data as object), taskIds: [] } as never }).thenThrows(ErrorCode.PRECONDITION_FAILED);
  });

  it('a sprint run of a product nobody registered is refused with UNKNOWN_PRODUCT', () => {
    given([]).when(cmd.create(null)).thenThrows(ErrorCode.UNKNOWN_PRODUCT, /product-42/);
  });

  it("a sprint run on a branch in the rescue folder of a key of its product's repository is refused INVALID_COMMAND, naming it", () => {
    const branch = `gantry/rescue/${deriveWorktreeKey(PRODUCT.cloneUrl, 'sprint/SP-7')}`;
    given([]).when({ ...cmd.create(), data: { ...(cmd.create().data as object), branch } } as SprintRunCommand).thenThrows(ErrorCode.INVALID_COMMAND, /branch gantry\/rescue\/shop-sprint-sp-7-[0-9a-f]{12} is in the rescue folder/);
  });

  it("the product's and the sprint's configuration overrides are kept with the run and handed to every job of it, at creation and at a resume", () => {
    const configOverrides = { product: { model: 'claude-opus-4-7' }, sprint: { thinkingBudget: 20000 } };
    const create = cmd.create();
    const withOverrides = { ...created, data: { ...created.data, configOverrides } } as SprintRunEvent;
    given([]).when({ ...create, data: { ...create.data, configOverrides } } as SprintRunCommand).then([withOverrides]);
    expect(sprintRunEffects(withOverrides, initialSprintRunState)).toMatchObject([{ type: 'ENQUEUE_NEXT_SPRINT_JOB', configOverrides }]);
    const resumed: SprintRunEvent = {
      type: 'SprintRunResumed',
      data: { sprintRunId: RUN, from: 'PAUSED', resumeSeq: 1, remainingTaskIds: ['T-2'], actor: null, note: null, resumedAt: at(60) },
    };
    expect(sprintRunEffects(resumed, stateOf([withOverrides, startedEvt, taskDone('T-1', 10), pausedEvt]))).toMatchObject([{ configOverrides, jobs: [{ taskId: 'T-2' }] }]);
    // A run created before overrides were kept gives its jobs none.
    expect(sprintRunEffects(resumed, stateOf([created, startedEvt, taskDone('T-1', 10), pausedEvt]))).toMatchObject([{ configOverrides: { product: null, sprint: null } }]);
  });

  it('each task\'s payload is kept with the run and handed to its job, at creation and at a resume', () => {
    const payloads = { 'T-2': { standIn: { behaviour: 'commit' } } };
    const create = cmd.create();
    const withPayloads = { ...created, data: { ...created.data, taskPayloads: payloads } } as SprintRunEvent;
    given([]).when({ ...create, data: { ...create.data, taskPayloads: payloads } } as SprintRunCommand).then([withPayloads]);
    expect(sprintRunEffects(withPayloads, initialSprintRunState)).toMatchObject([
      { type: 'ENQUEUE_NEXT_SPRINT_JOB', jobs: [{ taskId: 'T-1' }, { taskId: 'T-2', payload: payloads['T-2'] }] },
    ]);
    expect((sprintRunEffects(withPayloads, initialSprintRunState)[0] as { jobs: object[] }).jobs[0]).not.toHaveProperty('payload');
    const resumed: SprintRunEvent = {
      type: 'SprintRunResumed',
      data: { sprintRunId: RUN, from: 'PAUSED', resumeSeq: 1, remainingTaskIds: ['T-2'], actor: null, note: null, resumedAt: at(60) },
    };
    expect(sprintRunEffects(resumed, stateOf([withPayloads, startedEvt, taskDone('T-1', 10), pausedEvt]))).toMatchObject([{ jobs: [{ taskId: 'T-2', payload: payloads['T-2'] }] }]);
  });

  it('a sprint run that exists cannot be created again', () => {
    given([created]).when(cmd.create()).thenThrows(ErrorCode.INVALID_TRANSITION);
  });

  it('a command for a sprint run that does not exist is not found', () => {
    given([]).when(cmd.resume(1)).thenThrows(ErrorCode.NOT_FOUND);
  });

  it('the first job claimed starts the run; later claims change nothing', () => {
    given([created]).when(cmd.claimed(5)).then([startedEvt]);
    given(running).when(cmd.claimed(50, JOB2)).then([]);
  });

  it('the last task done completes a RUNNING run', () => {
    given([...running, taskDone('T-1', 10)]).when(cmd.taskDone('T-2', 15)).then([taskDone('T-2', 15), completedEvt(15)]);
  });

  it("a task's finish handled before its job's claim starts the run, and its last task completes it; the claim, handled later, changes nothing", () => {
    const startedByTask: SprintRunEvent = { type: 'SprintRunStarted', data: { sprintRunId: RUN, jobId: JOB1, startedAt: at(10) } };
    given([created]).when(cmd.taskDone('T-1', 10)).then([startedByTask, taskDone('T-1', 10)]);
    given([created, startedByTask, taskDone('T-1', 10)]).when(cmd.taskDone('T-2', 15)).then([taskDone('T-2', 15), completedEvt(15)]);
    const done = stateOf([created, startedByTask, taskDone('T-1', 10), taskDone('T-2', 15), completedEvt(15)]);
    expect(done.status).toBe('DONE');
    expect(sprintRunDecider.decide(cmd.claimed(20), done)).toEqual([]);
  });

  it('a task reported done twice is recorded once', () => {
    given([...running, taskDone('T-1', 10)]).when(cmd.taskDone('T-1', 11)).then([]);
  });

  it('a task that is not part of the sprint run is refused', () => {
    given(running).when(cmd.taskDone('T-99', 10)).thenThrows(ErrorCode.PRECONDITION_FAILED, /T-99/);
  });

  describe('merge conflict pauses, with its context', () => {
    it('a merge conflict pauses a RUNNING run with PR url, files, question id and resume instructions', () => {
      const state = given(running).when(cmd.conflict(20)).then([pausedEvt]) as SprintRun;
      expect(state.status).toBe('PAUSED');
      expect(state.pause).toEqual({
        reason: 'MERGE_CONFLICT',
        prUrl: PR,
        conflictingFiles: ['src/app.ts'],
        questionId: 'question-17',
        resumeInstructions: expect.stringContaining('src/app.ts'),
        pausedAt: at(20),
      });
      expect(state.pause?.resumeInstructions).toContain(RUN);
    });

    it('a second conflict report while paused raises nothing new', () => {
      given([...running, pausedEvt]).when(cmd.conflict(25)).then([]);
    });

    it('a merge conflict before any job ran is refused: only a RUNNING run pauses', () => {
      given([created]).when(cmd.conflict(3)).thenThrows(ErrorCode.INVALID_TRANSITION, /QUEUED/);
    });

    it('a merge conflict without files is refused', () => {
      given(running).when(cmd.conflict(20, [])).thenThrows(ErrorCode.PRECONDITION_FAILED, /conflicting files/);
    });

    it('a pause keeps the first conflicting files up to MAX_PAUSE_FILES_BYTES as JSON and names twenty, counting the rest', () => {
      const files = Array.from({ length: 5000 }, (_, i) => `src/file-${String(i).padStart(5, '0')}.ts`);
      const [paused] = sprintRunDecider.decide(cmd.conflict(20, files), stateOf(running));
      if (paused?.type !== 'SprintRunPaused') throw new Error('not paused');
      const kept = paused.data.conflictingFiles;
      expect(kept).toEqual(files.slice(0, kept.length));
      expect(Buffer.byteLength(JSON.stringify(kept))).toBeLessThanOrEqual(MAX_PAUSE_FILES_BYTES);
      expect(Buffer.byteLength(JSON.stringify(files.slice(0, kept.length + 1)))).toBeGreaterThan(MAX_PAUSE_FILES_BYTES);
      expect(paused.data.resumeInstructions).toContain(`${files[19]} and 4980 more files (the pull request lists them all)`);
      expect(paused.data.resumeInstructions).not.toContain(files[20]);
      // the files the pr-service's event left out are counted too
      const [cut] = sprintRunDecider.decide(cmd.conflict(20, files.slice(0, 100), HEAD1, 29_900), stateOf(running));
      if (cut?.type !== 'SprintRunPaused') throw new Error('not paused');
      expect(cut.data.resumeInstructions).toContain(`${files[19]} and ${80 + 29_900} more files (the pull request lists them all)`);
      // one file is kept however long its path
      expect(filesKeptOnPause(['x'.repeat(MAX_PAUSE_FILES_BYTES)])).toHaveLength(1);
    });
  });

  describe('failure: red CI and failed tasks fail, never pause', () => {
    it('failed checks fail a RUNNING run', () => {
      given(running).when(cmd.checksFailed(30)).then([checksFailedEvt]);
    });

    it('failed checks the pr-service\'s event left out are counted in the failure', () => {
      const [failed] = sprintRunDecider.decide(
        { type: 'RecordChecksFailed', data: { sprintRunId: RUN, prUrl: PR, failedChecks: ['ci/a'], failedChecksLeftOut: 7, headSha: HEAD1, now: at(30) } },
        stateOf(running),
      );
      expect(failed).toMatchObject({ type: 'SprintRunFailed', data: { failedChecks: ['ci/a'], error: `checks failed on ${PR}: ci/a and 7 more checks` } });
    });

    it('failed checks fail a PAUSED run too', () => {
      const state = given([...running, pausedEvt]).when(cmd.checksFailed(30)).then([checksFailedEvt]) as SprintRun;
      expect(state).toMatchObject({ status: 'FAILED', pause: null });
    });

    it('a failed task fails the run, naming the task and its error', () => {
      given(running).when(cmd.taskFailed('T-2', 40)).then([
        {
          type: 'SprintRunFailed',
          data: { sprintRunId: RUN, reason: 'TASK_FAILED', taskId: 'T-2', jobId: JOB1, prUrl: null, failedChecks: [], error: 'task T-2 failed: test failure: 2 failing', failedAt: at(40) },
        },
      ]);
    });

    it('the failure of a task done already (by another of its jobs) changes nothing', () => {
      given([...running, taskDone('T-1', 10)]).when(cmd.taskFailed('T-1', 40)).then([]);
    });

    it('a failure after the run already failed changes nothing', () => {
      given([...running, checksFailedEvt]).when(cmd.taskFailed('T-2', 40)).then([]);
    });

    it('the failure of a job a resume superseded with a newer job of its task leaves the resumed run RUNNING; the newer job\'s failure fails it', () => {
      const resumed: SprintRunEvent = {
        type: 'SprintRunResumed',
        data: { sprintRunId: RUN, from: 'FAILED', resumeSeq: 1, remainingTaskIds: ['T-1', 'T-2'], actor: 'user-9', note: 'resolved', resumedAt: at(60) },
      };
      given([...running, checksFailedEvt, resumed]).when(cmd.taskFailed('T-2', 70, true)).then([]);
      expect(sprintRunDecider.decide(cmd.taskFailed('T-2', 80), stateOf([...running, checksFailedEvt, resumed]))).toMatchObject([
        { type: 'SprintRunFailed', data: { reason: 'TASK_FAILED', taskId: 'T-2', failedAt: at(80) } },
      ]);
    });
  });

  describe('pull-request facts about a head the run has moved on from are passed over (docs/jobs.md, SR-1)', () => {
    const resumedEvt: SprintRunEvent = {
      type: 'SprintRunResumed',
      data: { sprintRunId: RUN, from: 'PAUSED', resumeSeq: 1, remainingTaskIds: ['T-1', 'T-2'], actor: 'user-9', note: 'resolved', resumedAt: at(60) },
    };
    const pausedOn = (headSha: string | undefined): SprintRunEvent => {
      const { headSha: _h, ...data } = pausedEvt.data as { headSha?: string };
      return { type: 'SprintRunPaused', data: headSha === undefined ? data : { ...data, headSha } } as SprintRunEvent;
    };

    it("a push to the run's branch is kept once, at its first report; a push elsewhere and one after the run settled are not", () => {
      given(running).when(cmd.pushed(HEAD1, 10, 8)).then([headPushed(HEAD1, 10, 8)]);
      given([...running, headPushed(HEAD1, 10, 8)]).when(cmd.pushed(HEAD1, 30, 9)).then([]);
      given(running).when(cmd.pushed(HEAD1, 10, 8, 'sprint/other')).then([]);
      given([created, cancelledEvt]).when(cmd.pushed(HEAD1, 10, 8)).then([]);
      // The run's first push may be learnt of before the claim that starts it: it is kept, the run stays QUEUED.
      expect(given([created]).when(cmd.pushed(HEAD1, 10, 8)).then([headPushed(HEAD1, 10, 8)]).status).toBe('QUEUED');
    });

    it("a conflict and red checks about a head the run's jobs pushed over change nothing; about the newest head they act", () => {
      const twoPushes = [...running, headPushed(HEAD1, 10, 8), headPushed(HEAD2, 20, 12)];
      given(twoPushes).when(cmd.conflict(20, ['src/app.ts'], HEAD1)).then([]);
      given(twoPushes).when(cmd.checksFailed(30, HEAD1)).then([]);
      given(twoPushes).when(cmd.conflict(20, ['src/app.ts'], HEAD2)).then([{ ...pausedEvt, data: { ...pausedEvt.data, headSha: HEAD2 } } as SprintRunEvent]);
      given(twoPushes).when(cmd.checksFailed(30, HEAD2)).then([{ ...checksFailedEvt, data: { ...checksFailedEvt.data, headSha: HEAD2 } } as SprintRunEvent]);
    });

    it('the newest head is the one reported last in the log, in whatever order the run learnt of the reports', () => {
      const learntLate = [...running, headPushed(HEAD2, 20, 8), headPushed(HEAD1, 10, 12)];
      given(learntLate).when(cmd.conflict(20, ['src/app.ts'], HEAD1)).then([]);
      expect(stateOf(learntLate)).toMatchObject({ status: 'RUNNING' });
      expect((given(learntLate).when(cmd.conflict(20, ['src/app.ts'], HEAD2)).then([{ ...pausedEvt, data: { ...pausedEvt.data, headSha: HEAD2 } } as SprintRunEvent]) as SprintRun).status).toBe('PAUSED');
    });

    it('a head no job of the run reported acts: it may be the branch as it is now', () => {
      given([...running, headPushed(HEAD1, 10, 8)]).when(cmd.checksFailed(30, PERSONS_HEAD)).then([
        { ...checksFailedEvt, data: { ...checksFailedEvt.data, headSha: PERSONS_HEAD } } as SprintRunEvent,
      ]);
      given(running).when(cmd.conflict(20, ['src/app.ts'], PERSONS_HEAD)).then([{ ...pausedEvt, data: { ...pausedEvt.data, headSha: PERSONS_HEAD } } as SprintRunEvent]);
    });

    it('a resume answers the heads of what paused or failed the run: facts about them after it change nothing, a newer head acts', () => {
      const resumedFromConflict = [...running, headPushed(HEAD1, 10, 8), pausedOn(HEAD1), resumedEvt];
      given(resumedFromConflict).when(cmd.conflict(70, ['src/app.ts'], HEAD1)).then([]);
      given(resumedFromConflict).when(cmd.checksFailed(70, HEAD1)).then([]);
      given(resumedFromConflict).when(cmd.checksFailed(70, PERSONS_HEAD)).then([
        { ...checksFailedEvt, data: { ...checksFailedEvt.data, headSha: PERSONS_HEAD, failedAt: at(70) } } as SprintRunEvent,
      ]);
      // Paused on a head no job reported, failed by red checks on it while paused, resumed: both answered.
      const failedWhilePaused = { ...checksFailedEvt, data: { ...checksFailedEvt.data, headSha: PERSONS_HEAD } } as SprintRunEvent;
      const resumedFromFailure = [...running, pausedOn(HEAD1), failedWhilePaused, { ...resumedEvt, data: { ...resumedEvt.data, from: 'FAILED' } } as SprintRunEvent];
      given(resumedFromFailure).when(cmd.conflict(70, ['src/app.ts'], HEAD1)).then([]);
      given(resumedFromFailure).when(cmd.checksFailed(70, PERSONS_HEAD)).then([]);
      // A resume answers only what stopped the run: red checks on its newest head that it never saw act.
      const resumedFromTaskFailure = [...running, headPushed(HEAD1, 10, 8), { ...checksFailedEvt, data: { ...checksFailedEvt.data, reason: 'TASK_FAILED', taskId: 'T-1', jobId: JOB1, prUrl: null, failedChecks: [], headSha: undefined } } as SprintRunEvent, resumedEvt];
      expect(sprintRunDecider.decide(cmd.checksFailed(70, HEAD1), stateOf(resumedFromTaskFailure))).toMatchObject([{ type: 'SprintRunFailed', data: { reason: 'CHECKS_FAILED', headSha: HEAD1 } }]);
    });

    it('events from before the run kept heads fold, and then a fact about any head acts as it did', () => {
      const before = [...running, pausedOn(undefined), resumedEvt];
      expect(stateOf(before)).toMatchObject({ status: 'RUNNING', answeredHeads: [] });
      given(before).when(cmd.conflict(70, ['src/app.ts'], HEAD1)).then([{ ...pausedEvt, data: { ...pausedEvt.data, pausedAt: at(70) } } as SprintRunEvent]);
      // A state stored before (a view row) has none of the lists.
      const { pushedHeads: _p, factHeads: _f, answeredHeads: _a, ...stored } = stateOf(running) as SprintRun;
      expect(sprintRunDecider.decide(cmd.checksFailed(30, HEAD2), stored)).toMatchObject([{ type: 'SprintRunFailed', data: { headSha: HEAD2 } }]);
      expect(sprintRunDecider.evolve(stored, headPushed(HEAD1, 10, 8))).toMatchObject({ pushedHeads: [{ headSha: HEAD1, position: 10 }] });
    });
  });

  describe('resume', () => {
    it('a PAUSED run resumes to RUNNING with the tasks that remain', () => {
      given([...running, taskDone('T-1', 10), pausedEvt]).when(cmd.resume(60)).then([
        { type: 'SprintRunResumed', data: { sprintRunId: RUN, from: 'PAUSED', resumeSeq: 1, remainingTaskIds: ['T-2'], actor: 'user-9', note: 'resolved', resumedAt: at(60) } },
      ]);
    });

    it('a FAILED run can be resumed too', () => {
      given([...running, checksFailedEvt]).when(cmd.resume(60)).then([
        { type: 'SprintRunResumed', data: { sprintRunId: RUN, from: 'FAILED', resumeSeq: 1, remainingTaskIds: ['T-1', 'T-2'], actor: 'user-9', note: 'resolved', resumedAt: at(60) } },
      ]);
    });

    it('a resume when every task finished during the pause completes the run', () => {
      const resumed: SprintRunEvent = {
        type: 'SprintRunResumed',
        data: { sprintRunId: RUN, from: 'PAUSED', resumeSeq: 1, remainingTaskIds: [], actor: 'user-9', note: 'resolved', resumedAt: at(60) },
      };
      given([...running, taskDone('T-1', 10), pausedEvt, taskDone('T-2', 30)]).when(cmd.resume(60)).then([resumed, completedEvt(60)]);
    });

    it('a task finished while paused does not complete the run before the resume', () => {
      given([...running, taskDone('T-1', 10), pausedEvt]).when(cmd.taskDone('T-2', 30)).then([taskDone('T-2', 30)]);
    });

    it('a DONE run cannot be resumed', () => {
      given([...running, taskDone('T-1', 10), taskDone('T-2', 15), completedEvt(15)]).when(cmd.resume(60)).thenThrows(ErrorCode.INVALID_TRANSITION, /DONE: there is nothing to resume/);
    });

    it('a RUNNING run cannot be resumed', () => {
      given(running).when(cmd.resume(60)).thenThrows(ErrorCode.INVALID_TRANSITION, /only a PAUSED or FAILED/);
    });

    it('a CANCELLED run cannot be resumed', () => {
      given([created, cancelledEvt]).when(cmd.resume(60)).thenThrows(ErrorCode.INVALID_TRANSITION);
    });
  });

  describe('cancel', () => {
    it('a RUNNING run is cancelled and the tasks not done go back to TO_DO', () => {
      given([...running, taskDone('T-1', 10)]).when(cmd.cancel(20)).then([
        { type: 'SprintRunCancelled', data: { sprintRunId: RUN, reason: 'scope changed', actor: 'user-9', tasksBackToTodo: ['T-2'], cancelledAt: at(20) } },
      ]);
    });

    it('a PAUSED run can be cancelled', () => {
      expect((given([...running, pausedEvt]).when(cmd.cancel(30)).then([
        { type: 'SprintRunCancelled', data: { sprintRunId: RUN, reason: 'scope changed', actor: 'user-9', tasksBackToTodo: ['T-1', 'T-2'], cancelledAt: at(30) } },
      ]) as SprintRun).pause).toBeNull();
    });

    it('a DONE run cannot be cancelled, nor a cancelled one again', () => {
      given([...running, taskDone('T-1', 10), taskDone('T-2', 15), completedEvt(15)]).when(cmd.cancel(60)).thenThrows(ErrorCode.INVALID_TRANSITION, /DONE/);
      given([created, cancelledEvt]).when(cmd.cancel(60)).thenThrows(ErrorCode.INVALID_TRANSITION, /CANCELLED/);
    });

    it('late facts never reopen a settled run', () => {
      for (const late of [cmd.claimed(70, JOB2), cmd.taskDone('T-2', 70), cmd.taskFailed('T-2', 70), cmd.conflict(70), cmd.checksFailed(70)]) {
        given([created, cancelledEvt]).when(late).then([]);
      }
    });
  });

  describe('the state machine with its effects', () => {
    it('walks running → merge conflict → PAUSED → resumed → tasks done → DONE, asking for each effect on the way', () => {
      /** The request for the run's next job among `tasks`, each keyed under its resume. */
      const enqueueNext = (tasks: [string, number][]) => ({
        type: 'ENQUEUE_NEXT_SPRINT_JOB',
        sprintRunId: RUN,
        sprintId: 'SP-7',
        productId: 'product-42',
        branch: 'sprint/SP-7',
        configOverrides: { product: null, sprint: null },
        jobs: tasks.map(([taskId, resumeSeq]) => ({ taskId, idempotencyKey: sprintJobIdempotencyKey(RUN, resumeSeq, taskId) })),
      });
      let state = stateOf([]);
      const step = (command: SprintRunCommand) => {
        const t = transitionSprintRun(state, command);
        state = t.nextState;
        return t;
      };

      expect(step(cmd.create()).effects).toEqual([enqueueNext([['T-1', 0], ['T-2', 0]])]);
      expect(step(cmd.claimed(5)).nextState.status).toBe('RUNNING');
      // T-1 done: T-2's turn.
      expect(step(cmd.taskDone('T-1', 10)).effects).toEqual([enqueueNext([['T-2', 0]])]);

      const pause = step(cmd.conflict(20));
      expect(pause.nextState.status).toBe('PAUSED');
      expect(pause.effects).toEqual([
        { type: 'RAISE_QUESTION', sprintRunId: RUN, questionId: 'question-17', prUrl: PR, conflictingFiles: ['src/app.ts'], resumeInstructions: (pausedEvt.data as { resumeInstructions: string }).resumeInstructions },
      ]);

      const resume = step(cmd.resume(60));
      expect(resume.nextState.status).toBe('RUNNING');
      expect(resume.effects).toEqual([enqueueNext([['T-2', 1]])]);
      expect(sprintJobIdempotencyKey(RUN, 1, 'T-2')).not.toBe(sprintJobIdempotencyKey(RUN, 0, 'T-2'));

      const done = step(cmd.taskDone('T-2', 90));
      expect(done.nextState.status).toBe('DONE');
      expect(done.effects).toEqual([{ type: 'MARK_PR_READY_FOR_REVIEW', sprintRunId: RUN, repository: 'acme/shop', branch: 'sprint/SP-7', prUrl: PR }]);
    });

    it("the tasks are queued one after the other, in the run's order: the next only once no job of an open task is queued or running", () => {
      const [enqueue] = sprintRunEffects(created, initialSprintRunState);
      if (enqueue?.type !== 'ENQUEUE_NEXT_SPRINT_JOB') throw new Error('no enqueue at creation');
      expect(nextSprintJob(enqueue, { doneTaskIds: [] }, [])).toMatchObject({ taskId: 'T-1' });
      // T-1's job queued or running: T-2 waits for it, whichever request comes (a redelivery, a resume's).
      expect(nextSprintJob(enqueue, { doneTaskIds: [] }, ['T-1'])).toBeNull();
      expect(nextSprintJob(enqueue, { doneTaskIds: ['T-1'] }, [])).toMatchObject({ taskId: 'T-2' });
      // A job left for a task done already (queued again by a resume that had not heard of its DONE) holds nothing back.
      expect(nextSprintJob(enqueue, { doneTaskIds: ['T-1'] }, ['T-1'])).toMatchObject({ taskId: 'T-2' });
      expect(nextSprintJob(enqueue, { doneTaskIds: ['T-1', 'T-2'] }, [])).toBeNull();
      // The last task done asks for nothing more.
      expect(sprintRunEffects(taskDone('T-2', 20), stateOf([...running, taskDone('T-1', 10)]))).toEqual([]);
    });

    it('a cancel asks to stop the run\'s jobs and to put the open tasks back to TO_DO', () => {
      const t = transitionSprintRun(stateOf([...running, taskDone('T-1', 10)]), cmd.cancel(20));
      expect(t.nextState.status).toBe('CANCELLED');
      expect(t.effects).toEqual([
        { type: 'CANCEL_SPRINT_JOBS', sprintRunId: RUN, reason: 'scope changed' },
        { type: 'RETURN_TASKS_TO_TODO', sprintRunId: RUN, taskIds: ['T-2'] },
      ]);
    });

    it('failed checks ask to stop the run\'s jobs and raise no question', () => {
      const t = transitionSprintRun(stateOf(running), cmd.checksFailed(30));
      expect(t.nextState.status).toBe('FAILED');
      expect(t.effects).toEqual([{ type: 'CANCEL_SPRINT_JOBS', sprintRunId: RUN, reason: `checks failed on ${PR}: ci/test` }]);
    });

    it('a refused transition leaves the state as it was', () => {
      const before = stateOf([...running, taskDone('T-1', 10), taskDone('T-2', 15), completedEvt(15)]);
      expect(() => transitionSprintRun(before, cmd.resume(60))).toThrow(/nothing to resume/);
      expect(before.status).toBe('DONE');
    });
  });
});
