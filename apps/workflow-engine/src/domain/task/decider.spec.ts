import { ErrorCode, type EntryPath } from '@gantry/contracts';
import { DeciderSpecification } from '@gantry/eventstore/testing';
import { validatesAgainstContract } from '@gantry/testing';
import { action, at, NEW_SESSION, seats, SESSION } from '../testing/fixtures.js';
import type { Placing, StepSeats, TaskCommand } from './commands.js';
import { taskDecider } from './decider.js';
import type { TaskEvent } from './events.js';
import { RESETS_REMEMBERED, type Task } from './state.js';

const given = DeciderSpecification.for(taskDecider, { validate: validatesAgainstContract('workflow') });
const W = 'office-default';
const fanOut = [action('clear_decisions'), action('queue_run_for_each_participant', { role: 'reviewer' })];

const created = (stepId = 'work', admitted = true): TaskEvent => ({
  type: 'TaskCreated',
  data: { taskId: 'T-1', productId: 'product-42', title: 'Cart migration', workflowId: W, stepId, admitted, primaryAgentProfileId: null, sessionId: SESSION, createdAt: at(0) },
});
const place = (target: StepSeats, entryPath: EntryPath = 'manual_move', feeder: StepSeats | null = null, workflowId = W, s = 10): TaskCommand => ({
  type: 'PlaceTask',
  data: { taskId: 'T-1', placing: { workflowId, target, feeder, entryPath } satisfies Placing, now: at(s) },
});
const admitted = (stepId: string, entrySeq: number, over: Partial<Extract<TaskEvent, { type: 'TaskAdmittedToStep' }>['data']> = {}, onEnter = fanOut): TaskEvent => ({
  type: 'TaskAdmittedToStep',
  data: {
    taskId: 'T-1', workflowId: W, stepId, entrySeq, declarationDigest: seats(stepId, { onEnter }).declaration.digest, entryPath: 'manual_move',
    requestedStepId: stepId, from: { workflowId: W, stepId: 'work', admitted: true }, stepEntryRecorded: onEnter.some((a) => a.type === 'clear_decisions' || a.type.startsWith('queue_run')),
    admittedAt: at(10), ...over,
  },
});
const queued = (stepId: string, waitingAt: { stepId: string; admitted: boolean }, requestedBy: EntryPath | 'task_created' = 'manual_move', queuedAt = at(10)): TaskEvent => ({
  type: 'TaskQueuedForStep',
  data: { taskId: 'T-1', workflowId: W, stepId, waitingAt: { workflowId: W, ...waitingAt }, requestedBy, queuedAt },
});

describe('task decider', () => {
  describe('creation (not a step entry)', () => {
    it('creates the task occupying the step when it has a seat: no entry is allocated', () => {
      given([]).when({ type: 'CreateTask', data: { taskId: 'T-1', productId: 'product-42', title: 'Cart migration', workflowId: W, primaryAgentProfileId: null, sessionId: SESSION, target: seats('work'), now: at(0) } }).then([created()]);
    });

    it('parks the task at a full step: created, then queued there occupying nothing', () => {
      given([])
        .when({ type: 'CreateTask', data: { taskId: 'T-1', productId: 'product-42', title: 'Cart migration', workflowId: W, primaryAgentProfileId: null, sessionId: SESSION, target: seats('work', { limit: 1, occupied: 1 }), now: at(0) } })
        .then([created('work', false), queued('work', { stepId: 'work', admitted: false }, 'task_created', at(0))]);
    });

    it('refuses a second creation of the same id', () => {
      given([created()]).when({ type: 'CreateTask', data: { taskId: 'T-1', productId: 'p', title: 't', workflowId: W, primaryAgentProfileId: null, sessionId: SESSION, target: seats('work'), now: at(1) } }).thenThrows(ErrorCode.INVALID_TRANSITION);
    });
  });

  describe('admission: the step entry is allocated with the admission', () => {
    it('admits to a step with a seat, with entry_seq 1 and the declaration digest of that step', () => {
      given([created()]).when(place(seats('review', { onEnter: fanOut }))).then([admitted('review', 1)]);
    });

    it('a re-entry gets the next entry_seq of that (task, step) pair; other steps count on their own', () => {
      given([created(), admitted('review', 1), admitted('work', 1, { from: { workflowId: W, stepId: 'review', admitted: true } }, [])])
        .when(place(seats('review', { onEnter: fanOut }), 'turn_complete'))
        .then([admitted('review', 2, { entryPath: 'turn_complete' })]);
    });

    it('records no step-entry record for a step whose on_enter holds only session-owned actions', () => {
      const sessionOnly = [action('reset_agent_context'), action('auto_start_agent')];
      const state = given([created()]).when(place(seats('review', { onEnter: sessionOnly }))).then([admitted('review', 1, {}, sessionOnly)]);
      expect((state as { currentEntry: { stepEntryRecorded: boolean } }).currentEntry.stepEntryRecorded).toBe(false);
    });

    it('asking for the step the task occupies changes nothing and is no entry', () => {
      given([created()]).when(place(seats('work'))).thenNothingHappened();
      given([created(), admitted('review', 1)]).when(place(seats('review', { onEnter: fanOut }), 'task_start')).thenNothingHappened();
    });

    it('refuses a task that does not exist (or was deleted)', () => {
      given([]).when(place(seats('review'))).thenThrows(ErrorCode.NOT_FOUND);
      given([created(), { type: 'TaskDeleted', data: { taskId: 'T-1', deletedAt: at(5) } }]).when(place(seats('review'))).thenThrows(ErrorCode.NOT_FOUND);
    });
  });

  describe('WIP: a full step', () => {
    const fullReview = seats('review', { limit: 1, occupied: 1, onEnter: fanOut });

    it('a task occupying a step keeps it while it waits for the full one (no entry)', () => {
      given([created()]).when(place(fullReview, 'turn_complete')).then([queued('review', { stepId: 'work', admitted: true }, 'turn_complete')]);
    });

    it('a task occupying no step lands in the feeder when that has a seat: the entry is the feeder\'s, not the requested target\'s', () => {
      const workSeats = seats('work', { limit: 2, occupied: 1, onEnter: [action('queue_run', { target: 'primary' })] });
      given([created('work', false), queued('work', { stepId: 'work', admitted: false }, 'task_created', at(0)), queued('review', { stepId: 'review', admitted: false }, 'manual_move', at(1))])
        .when(place(fullReview, 'wip_promotion', workSeats))
        .then([
          admitted('work', 1, { entryPath: 'wip_promotion', requestedStepId: 'review', declarationDigest: workSeats.declaration.digest, from: { workflowId: W, stepId: 'review', admitted: false }, stepEntryRecorded: true }),
          queued('review', { stepId: 'work', admitted: true }, 'wip_promotion', at(1)),
        ]);
    });

    it('a task occupying no step is parked at the full target when its feeder is full too (no entry)', () => {
      given([created('work', false), queued('work', { stepId: 'work', admitted: false }, 'task_created', at(0))])
        .when(place(fullReview, 'manual_move', seats('work', { limit: 1, occupied: 1 })))
        .then([queued('review', { stepId: 'review', admitted: false })]);
    });

    it('the promotion of a task parked at its step is admission in place: an entry without a step change', () => {
      const work = seats('work', { onEnter: fanOut });
      given([created('work', false), queued('work', { stepId: 'work', admitted: false }, 'task_created', at(0))])
        .when(place(work, 'wip_promotion'))
        .then([admitted('work', 1, { entryPath: 'wip_promotion_in_place', from: { workflowId: W, stepId: 'work', admitted: false } })]);
    });

    it('the promotion of a task waiting in another step moves it there', () => {
      given([created(), queued('review', { stepId: 'work', admitted: true }, 'turn_complete')])
        .when(place(seats('review', { limit: 1, occupied: 0, onEnter: fanOut }), 'wip_promotion'))
        .then([admitted('review', 1, { entryPath: 'wip_promotion' })]);
    });

    it('a promotion for a step the task no longer waits for is stale and changes nothing', () => {
      given([created()]).when(place(seats('review', { onEnter: fanOut }), 'wip_promotion')).thenNothingHappened();
    });

    it('waiting again for the same full step changes nothing', () => {
      given([created(), queued('review', { stepId: 'work', admitted: true })]).when(place(fullReview)).thenNothingHappened();
    });
  });

  it('switch_workflow admits to the other workflow\'s step; a full one parks the task there rather than keeping the old step', () => {
    const other = 'hotfix';
    const triage = seats('triage', { onEnter: fanOut });
    const state = given([created()]).when(place(triage, 'switch_workflow', null, other)).then([
      { ...admitted('triage', 1, { entryPath: 'switch_workflow' }), data: { ...(admitted('triage', 1, { entryPath: 'switch_workflow' }).data as object), workflowId: other } } as TaskEvent,
    ]);
    expect((state as { placement: unknown }).placement).toEqual({ workflowId: other, stepId: 'triage', admitted: true, queuedForStepId: null, queuedSince: null });
    given([created()])
      .when(place(seats('triage', { limit: 1, occupied: 1 }), 'switch_workflow', null, other))
      .then([{ type: 'TaskQueuedForStep', data: { taskId: 'T-1', workflowId: other, stepId: 'triage', waitingAt: { workflowId: other, stepId: 'triage', admitted: false }, requestedBy: 'switch_workflow', queuedAt: at(10) } }]);
  });

  describe('the agent session', () => {
    const cause = { workflowId: W, stepId: 'work', trigger: 'on_enter' as const, entrySeq: 1, position: 0, entryPath: 'manual_move' as const };

    it('a reset gives the task a fresh session, which the next job starts rather than resumes', () => {
      const state = given([created(), { type: 'AgentSessionStarted', data: { taskId: 'T-1', sessionId: SESSION, jobId: 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f', startedAt: at(5) } }])
        .when({ type: 'ResetAgentContext', data: { taskId: 'T-1', sessionId: NEW_SESSION, cause, now: at(10) } })
        .then([{ type: 'AgentContextReset', data: { taskId: 'T-1', sessionId: NEW_SESSION, cause, resetAt: at(10) } }]);
      expect((state as { session: unknown }).session).toMatchObject({ sessionId: NEW_SESSION, started: false });
    });

    it('the same reset again (its trigger\'s event handled again) changes nothing: the session it made, started since, is resumed', () => {
      const job = 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f';
      const reset = { type: 'AgentContextReset' as const, data: { taskId: 'T-1', sessionId: NEW_SESSION, cause, resetAt: at(10) } };
      const started = { type: 'AgentSessionStarted' as const, data: { taskId: 'T-1', sessionId: NEW_SESSION, jobId: job, startedAt: at(11) } };
      given([created(), reset, started]).when({ type: 'ResetAgentContext', data: { taskId: 'T-1', sessionId: NEW_SESSION, cause, now: at(12) } }).then([]);
    });

    it('an earlier reset again (its trigger\'s event handled again after a later reset) changes nothing: the later session stays the task\'s', () => {
      const LATER = '5a1e2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b';
      const earlier = { type: 'AgentContextReset' as const, data: { taskId: 'T-1', sessionId: NEW_SESSION, cause, resetAt: at(10) } };
      const later = { type: 'AgentContextReset' as const, data: { taskId: 'T-1', sessionId: LATER, cause, resetAt: at(11) } };
      const state = given([created(), earlier, later]).when({ type: 'ResetAgentContext', data: { taskId: 'T-1', sessionId: NEW_SESSION, cause, now: at(12) } }).then([]);
      expect((state as { session: unknown }).session).toMatchObject({ sessionId: LATER });
    });

    it('remembers a bounded number of resets: a task reset thousands of times keeps its state (and its row) small, and still refuses its recent resets again', () => {
      const sessionOf = (n: number) => `${n.toString(16).padStart(8, '0')}-4d5e-4f60-8a7b-9c0d1e2f3a4b`;
      const resets: TaskEvent[] = Array.from({ length: 5000 }, (_, n) => ({ type: 'AgentContextReset', data: { taskId: 'T-1', sessionId: sessionOf(n), cause, resetAt: at(10) } }));
      const state = [created(), ...resets].reduce(taskDecider.evolve, taskDecider.initialState) as Task;
      expect(state.session.sessionId).toBe(sessionOf(4999));
      expect(state.session.resetTo.length).toBeLessThanOrEqual(RESETS_REMEMBERED);
      expect(JSON.stringify(state).length).toBeLessThan(8192);
      for (const n of [4998, 4999 - RESETS_REMEMBERED + 1]) {
        expect(taskDecider.decide({ type: 'ResetAgentContext', data: { taskId: 'T-1', sessionId: sessionOf(n), cause, now: at(12) } }, state)).toEqual([]);
      }
    });

    it('an auto-start handled again (its trigger run again, the same job answered) is recorded once; a later job\'s is recorded', () => {
      const job = 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f';
      const next = 'job-0c4e2a7d-9b1f-4e3a-8d5c-6f7a8b9c0d1e';
      const autoStart = (jobId: string, now: string) => ({ type: 'RecordAutoStart' as const, data: { taskId: 'T-1', jobId, agentProfileId: null, cause, now } });
      const first = { type: 'AgentAutoStarted' as const, data: { taskId: 'T-1', jobId: job, agentProfileId: null, cause, startedAt: at(5) } };
      given([created()]).when(autoStart(job, at(5))).then([first]);
      given([created(), first]).when(autoStart(job, at(6))).thenNothingHappened();
      given([created(), first]).when(autoStart(next, at(7))).then([{ type: 'AgentAutoStarted', data: { taskId: 'T-1', jobId: next, agentProfileId: null, cause, startedAt: at(7) } }]);
    });

    it('the first start of a session is recorded once', () => {
      const job = 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f';
      given([created()]).when({ type: 'MarkSessionStarted', data: { taskId: 'T-1', jobId: job, now: at(5) } }).then([
        { type: 'AgentSessionStarted', data: { taskId: 'T-1', sessionId: SESSION, jobId: job, startedAt: at(5) } },
      ]);
      given([created(), { type: 'AgentSessionStarted', data: { taskId: 'T-1', sessionId: SESSION, jobId: job, startedAt: at(5) } }]).when({ type: 'MarkSessionStarted', data: { taskId: 'T-1', jobId: job, now: at(6) } }).thenNothingHappened();
    });
  });
});
