import { ErrorCode } from '@gantry/contracts';
import { DeciderSpecification } from '@gantry/eventstore/testing';
import { validatesAgainstContract } from '@gantry/testing';
import { at, EPOCH, OTHER_EPOCH } from '../testing/fixtures.js';
import { taskAtStepDecider } from './decider.js';
import { decisionsOfEntry } from './state.js';
import type { TaskAtStepEvent } from './events.js';

const given = DeciderSpecification.for(taskAtStepDecider, { validate: validatesAgainstContract('workflow') });
const pair = { taskId: 'T-1', workflowId: 'office-default', stepId: 'review' };
const marked = [{ position: 0, kind: 'clear_decisions' }, { position: 1, kind: 'queue_run_for_each_participant' }];

const opened = (entrySeq = 1): TaskAtStepEvent => ({
  type: 'StepEntryOpened',
  data: { ...pair, entrySeq, declarationDigest: 'c'.repeat(64), entryPath: 'manual_move', markedPositions: marked, openedByEpoch: EPOCH, openedAt: at(0) },
});
const claimed = (position: number, epoch = EPOCH, takenOverFrom: string | null = null, entrySeq = 1): TaskAtStepEvent => ({
  type: 'OnEnterActionClaimed',
  data: { ...pair, entrySeq, position, kind: marked[position]!.kind, epoch, takenOverFrom, claimedAt: at(1) },
});
const decided = (decisionId: string, verdict: 'approve' | 'reject' = 'approve'): TaskAtStepEvent => ({
  type: 'DecisionRecorded',
  data: { ...pair, entrySeq: 1, decisionId, participantId: 'seat-a', verdict, comment: null, decidedBy: { kind: 'person', actor: 'user-1' }, recordedAt: at(2) },
});
const claim = (position: number, epoch = EPOCH, staleEpoch: string | null = null, entrySeq = 1) => ({
  type: 'ClaimAction' as const,
  data: { ...pair, entrySeq, position, kind: marked[position]!.kind, epoch, staleEpoch, now: at(1) },
});
const finished = (position: number, epoch = EPOCH): TaskAtStepEvent => ({
  type: 'OnEnterActionFinished',
  data: { ...pair, entrySeq: 1, position, kind: marked[position]!.kind, outcome: 'done', skipReason: null, failure: null, runs: [], epoch, finishedAt: at(3) },
});
const cleared = (ids: string[]): TaskAtStepEvent => ({
  type: 'DecisionsCleared',
  data: { ...pair, entrySeq: 1, position: 0, kind: 'clear_decisions', clearedDecisionIds: ids, epoch: EPOCH, clearedAt: at(3) },
});

describe('a task at a step: step-entry records, markers and decisions', () => {
  it('opens a record once per entry_seq (the allocation cannot be repeated)', () => {
    given([]).when({ type: 'OpenStepEntry', data: { ...pair, entrySeq: 1, declarationDigest: 'c'.repeat(64), entryPath: 'manual_move', markedPositions: marked, epoch: EPOCH, now: at(0) } }).then([opened()]);
    given([opened()]).when({ type: 'OpenStepEntry', data: { ...pair, entrySeq: 1, declarationDigest: 'c'.repeat(64), entryPath: 'manual_move', markedPositions: marked, epoch: EPOCH, now: at(0) } }).thenThrows(ErrorCode.INVALID_TRANSITION, /already allocated/);
  });

  describe('claim: the compare-and-set that alone suppresses a second execution', () => {
    it('absent → in_progress(epoch)', () => {
      given([opened()]).when(claim(0)).then([claimed(0)]);
    });

    it('a claim held by another process is refused (the caller abandons the entry)', () => {
      given([opened(), claimed(0, OTHER_EPOCH)]).when(claim(0)).thenThrows(ErrorCode.ALREADY_CLAIMED, new RegExp(OTHER_EPOCH));
      // held by this very process (another dispatch of the same entry in it): refused too
      given([opened(), claimed(0)]).when(claim(0)).thenThrows(ErrorCode.ALREADY_CLAIMED);
    });

    it('a claim of a process found gone is taken over: in_progress(old) → in_progress(new)', () => {
      given([opened(), claimed(0, OTHER_EPOCH)]).when(claim(0, EPOCH, OTHER_EPOCH)).then([claimed(0, EPOCH, OTHER_EPOCH)]);
    });

    it('a finished position cannot be claimed again', () => {
      given([opened(), claimed(0), cleared([])]).when(claim(0)).thenThrows(ErrorCode.INVALID_TRANSITION, /already done/);
    });

    it('two distinct entries hold independent markers', () => {
      given([opened(1), claimed(0), opened(2)]).when(claim(0, EPOCH, null, 2)).then([claimed(0, EPOCH, null, 2)]);
    });
  });

  describe('clear_decisions: the clear and its done marker are one event', () => {
    it('clears every decision recorded before it; a decision recorded after it survives', () => {
      const state = given([opened(), decided('d1'), decided('d2', 'reject'), claimed(0)]).when({ type: 'ClearDecisions', data: { ...pair, entrySeq: 1, position: 0, epoch: EPOCH, now: at(3) } }).then([cleared(['d1', 'd2'])]);
      expect(state.decisions).toEqual([]);
      const after = [opened(), decided('d1'), claimed(0), cleared(['d1']), decided('d3')].reduce(taskAtStepDecider.evolve, taskAtStepDecider.initialState);
      expect(after.decisions.map((d) => d.decisionId)).toEqual(['d3']);
      expect(after.entries[1]!.markers[0]!.state).toBe('done');
    });

    it('with no decisions it is a successful no-op that still marks done (AC-E4)', () => {
      given([opened(), claimed(0)]).when({ type: 'ClearDecisions', data: { ...pair, entrySeq: 1, position: 0, epoch: EPOCH, now: at(3) } }).then([cleared([])]);
    });

    it('only under the caller\'s own claim', () => {
      given([opened()]).when({ type: 'ClearDecisions', data: { ...pair, entrySeq: 1, position: 0, epoch: EPOCH, now: at(3) } }).thenThrows(ErrorCode.ALREADY_CLAIMED);
    });
  });

  it('a finish needs the caller\'s claim', () => {
    const finish = (epoch: string) => ({ type: 'FinishAction' as const, data: { ...pair, entrySeq: 1, position: 1, outcome: 'done' as const, skipReason: null, failure: null, runs: [], epoch, now: at(3) } });
    given([opened(), claimed(1)]).when(finish(EPOCH)).then([finished(1)]);
    given([opened(), claimed(1, OTHER_EPOCH)]).when(finish(EPOCH)).thenThrows(ErrorCode.ALREADY_CLAIMED);
  });

  describe('the terminal flag', () => {
    it('is set once every marked position of the declaration as read now is terminal', () => {
      const complete = { type: 'CompleteEntry' as const, data: { ...pair, entrySeq: 1, marked, now: at(4) } };
      given([opened(), claimed(0), cleared([])]).when(complete).thenNothingHappened();
      given([opened(), claimed(0), cleared([]), claimed(1), finished(1)]).when(complete).then([{ type: 'StepEntryTerminated', data: { ...pair, entrySeq: 1, reason: 'completed', terminatedAt: at(4) } }]);
      // a declaration that shrank: the flag looks at what is declared now
      given([opened(), claimed(0), cleared([])]).when({ type: 'CompleteEntry', data: { ...pair, entrySeq: 1, marked: [marked[0]!], now: at(4) } }).then([
        { type: 'StepEntryTerminated', data: { ...pair, entrySeq: 1, reason: 'completed', terminatedAt: at(4) } },
      ]);
    });

    it('terminating marks what is left skipped(reason), re-taking claims only of processes found gone', () => {
      const terminate = (staleEpochs: string[]) => ({
        type: 'TerminateEntry' as const,
        data: { ...pair, entrySeq: 1, reason: 'step_left' as const, skip: { positions: marked, reason: 'step_left' as const }, staleEpochs, now: at(5) },
      });
      given([opened(), claimed(0, OTHER_EPOCH)]).when(terminate([OTHER_EPOCH])).then([
        { type: 'OnEnterActionFinished', data: { ...pair, entrySeq: 1, position: 0, kind: 'clear_decisions', outcome: 'skipped', skipReason: 'step_left', failure: null, runs: [], epoch: OTHER_EPOCH, finishedAt: at(5) } },
        { type: 'OnEnterActionFinished', data: { ...pair, entrySeq: 1, position: 1, kind: 'queue_run_for_each_participant', outcome: 'skipped', skipReason: 'step_left', failure: null, runs: [], epoch: null, finishedAt: at(5) } },
        { type: 'StepEntryTerminated', data: { ...pair, entrySeq: 1, reason: 'step_left', terminatedAt: at(5) } },
      ]);
      given([opened(), claimed(0, OTHER_EPOCH)]).when(terminate([])).thenThrows(ErrorCode.ALREADY_CLAIMED);
      given([opened(), { type: 'StepEntryTerminated', data: { ...pair, entrySeq: 1, reason: 'superseded', terminatedAt: at(4) } }]).when(terminate([])).thenNothingHappened();
    });
  });

  describe('the exit of an occupancy (on_exit after a move)', () => {
    const exitOpened: TaskAtStepEvent = { type: 'StepExitOpened', data: { ...pair, entrySeq: 2, openedByEpoch: EPOCH, openedAt: at(0) } };
    const exitFinished = (epoch = EPOCH): TaskAtStepEvent => ({ type: 'StepExitFinished', data: { ...pair, entrySeq: 2, outcome: 'done', epoch, finishedAt: at(4) } });
    const finish = (epoch = EPOCH) => ({ type: 'FinishStepExit' as const, data: { ...pair, entrySeq: 2, outcome: 'done' as const, epoch, now: at(4) } });
    const takeOver = (staleEpoch: string) => ({ type: 'ClaimStepExit' as const, data: { ...pair, entrySeq: 2, epoch: OTHER_EPOCH, staleEpoch, now: at(3) } });

    it('is recorded once per occupancy, held by the process that moved the task, and finished once by its holder', () => {
      given([]).when({ type: 'OpenStepExit', data: { ...pair, entrySeq: 2, epoch: EPOCH, now: at(0) } }).then([exitOpened]);
      given([exitOpened]).when({ type: 'OpenStepExit', data: { ...pair, entrySeq: 2, epoch: EPOCH, now: at(0) } }).thenNothingHappened();
      given([exitOpened]).when(finish()).then([exitFinished()]);
      given([exitOpened, exitFinished()]).when(finish()).thenNothingHappened();
      given([exitOpened]).when(finish(OTHER_EPOCH)).thenThrows(ErrorCode.ALREADY_CLAIMED);
    });

    it('is taken over only from the process found gone; then only the new holder finishes it', () => {
      const taken: TaskAtStepEvent = { type: 'StepExitClaimed', data: { ...pair, entrySeq: 2, epoch: OTHER_EPOCH, takenOverFrom: EPOCH, claimedAt: at(3) } };
      given([exitOpened]).when(takeOver(EPOCH)).then([taken]);
      given([exitOpened, taken]).when(takeOver(EPOCH)).thenNothingHappened();
      given([exitOpened, taken]).when(finish()).thenThrows(ErrorCode.ALREADY_CLAIMED);
      given([exitOpened, taken]).when(finish(OTHER_EPOCH)).then([exitFinished(OTHER_EPOCH)]);
      given([exitOpened, exitFinished()]).when(takeOver(EPOCH)).thenThrows(ErrorCode.INVALID_TRANSITION);
    });
  });

  it('records a decision once per decision id', () => {
    const record = { type: 'RecordDecision' as const, data: { ...pair, entrySeq: 1, decisionId: 'd1', participantId: 'seat-a', verdict: 'approve' as const, comment: null, decidedBy: { kind: 'person' as const, actor: 'user-1' }, now: at(2) } };
    given([]).when(record).then([decided('d1')]);
    given([decided('d1')]).when(record).thenNothingHappened();
  });

  describe('a task that loops through the step (review → rework → review …)', () => {
    const round = (n: number): TaskAtStepEvent[] => [
      opened(n),
      claimed(0, EPOCH, null, n),
      { type: 'DecisionsCleared', data: { ...pair, entrySeq: n, position: 0, kind: 'clear_decisions', clearedDecisionIds: [], epoch: EPOCH, clearedAt: at(3) } },
      { type: 'DecisionRecorded', data: { ...pair, entrySeq: n, decisionId: `d${n}-a`, participantId: 'seat-a', verdict: 'approve', comment: null, decidedBy: { kind: 'review_job', jobId: jobOf(n) }, recordedAt: at(4) } },
      { type: 'DecisionRecorded', data: { ...pair, entrySeq: n, decisionId: `d${n}-p`, participantId: null, verdict: 'reject', comment: 'rework', decidedBy: { kind: 'person', actor: 'user-1' }, recordedAt: at(5) } },
      claimed(1, EPOCH, null, n),
      { type: 'OnEnterActionFinished', data: { ...pair, entrySeq: n, position: 1, kind: marked[1]!.kind, outcome: 'done', skipReason: null, failure: null, runs: [], epoch: EPOCH, finishedAt: at(6) } },
      { type: 'StepEntryTerminated', data: { ...pair, entrySeq: n, reason: 'completed', terminatedAt: at(6) } },
      { type: 'StepExitOpened', data: { ...pair, entrySeq: n, openedByEpoch: EPOCH, openedAt: at(7) } },
      { type: 'StepExitFinished', data: { ...pair, entrySeq: n, outcome: 'done', epoch: EPOCH, finishedAt: at(8) } },
    ];
    const jobOf = (n: number) => `job-00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
    const after = (rounds: number) => Array.from({ length: rounds }, (_, i) => round(i + 1)).flat().reduce(taskAtStepDecider.evolve, taskAtStepDecider.initialState);

    it('keeps a state of one size however often it came back: the latest entry, no finished exit, the decisions a guard can still count', () => {
      const state = after(200);
      expect(Object.keys(state.entries)).toEqual(['200']);
      expect(state.exits).toEqual({});
      expect(state.decisions.map((d) => d.decisionId)).toEqual(['d200-a', 'd200-p']);
      expect(JSON.stringify(after(200)).length).toBe(JSON.stringify(after(101)).length);
    });

    it('still knows what it dropped: a finished entry or exit is not opened, claimed or finished again', () => {
      const history = Array.from({ length: 3 }, (_, i) => round(i + 1)).flat();
      given(history).when({ type: 'OpenStepEntry', data: { ...pair, entrySeq: 1, declarationDigest: 'c'.repeat(64), entryPath: 'manual_move', markedPositions: marked, epoch: EPOCH, now: at(9) } }).thenThrows(ErrorCode.INVALID_TRANSITION, /already allocated/);
      given(history).when(claim(0, EPOCH, null, 1)).thenThrows(ErrorCode.INVALID_TRANSITION, /terminal/);
      given(history).when({ type: 'FinishAction', data: { ...pair, entrySeq: 1, position: 1, outcome: 'done', skipReason: null, failure: null, runs: [], epoch: EPOCH, now: at(9) } }).thenThrows(ErrorCode.ALREADY_CLAIMED);
      given(history).when({ type: 'TerminateEntry', data: { ...pair, entrySeq: 1, reason: 'superseded', skip: { positions: marked, reason: 'superseded' }, staleEpochs: [], now: at(9) } }).thenNothingHappened();
      given(history).when({ type: 'OpenStepExit', data: { ...pair, entrySeq: 1, epoch: EPOCH, now: at(9) } }).thenNothingHappened();
      given(history).when({ type: 'FinishStepExit', data: { ...pair, entrySeq: 1, outcome: 'done', epoch: EPOCH, now: at(9) } }).thenNothingHappened();
      given(history).when({ type: 'ClaimStepExit', data: { ...pair, entrySeq: 1, epoch: OTHER_EPOCH, staleEpoch: EPOCH, now: at(9) } }).thenThrows(ErrorCode.INVALID_TRANSITION);
    });

    it('without a clear, a seat\'s latest decision and a person\'s latest still count from earlier entries; an outweighed one goes', () => {
      const decide = (n: number, id: string, participantId: string | null, verdict: 'approve' | 'reject', kind: 'person' | 'review_job'): TaskAtStepEvent => ({
        type: 'DecisionRecorded',
        data: { ...pair, entrySeq: n, decisionId: id, participantId, verdict, comment: null, decidedBy: kind === 'person' ? { kind, actor: 'user-1' } : { kind, jobId: jobOf(id.length) }, recordedAt: at(n) },
      });
      const state = [decide(1, 'a1', 'seat-a', 'reject', 'review_job'), decide(1, 'p1', null, 'approve', 'person'), decide(1, 'b1', 'seat-b', 'approve', 'person'), decide(2, 'a2', 'seat-a', 'approve', 'review_job')].reduce(
        taskAtStepDecider.evolve,
        taskAtStepDecider.initialState,
      );
      // a1 is outweighed by a2 (same seat, no person's decision); b1 is seat-b's latest and the latest by a person; p1 neither
      expect(decisionsOfEntry(state, 2).map((d) => d.decisionId)).toEqual(['b1', 'a2']);
    });
  });

  describe('which decisions count while an entry declares clear_decisions twice (AC-H4, AC-F3)', () => {
    const twice = [{ position: 0, kind: 'clear_decisions' }, { position: 1, kind: 'clear_decisions' }];
    const openedTwice: TaskAtStepEvent = { type: 'StepEntryOpened', data: { ...pair, entrySeq: 2, declarationDigest: 'c'.repeat(64), entryPath: 'manual_move', markedPositions: twice, openedByEpoch: EPOCH, openedAt: at(0) } };
    const claimedAt = (position: number): TaskAtStepEvent => ({ type: 'OnEnterActionClaimed', data: { ...pair, entrySeq: 2, position, kind: 'clear_decisions', epoch: EPOCH, takenOverFrom: null, claimedAt: at(1) } });
    const decision = (id: string, entrySeq: number): TaskAtStepEvent => ({
      type: 'DecisionRecorded',
      data: { ...pair, entrySeq, decisionId: id, participantId: 'seat-a', verdict: 'approve', comment: null, decidedBy: { kind: 'person', actor: 'user-1' }, recordedAt: at(2) },
    });
    const fold = (events: TaskAtStepEvent[]) => events.reduce(taskAtStepDecider.evolve, taskAtStepDecider.initialState);

    it('none while the second has not run yet: the decisions recorded between the two are what it removes', () => {
      const state = fold([decision('d1', 1), openedTwice, claimedAt(0), { type: 'DecisionsCleared', data: { ...pair, entrySeq: 2, position: 0, kind: 'clear_decisions', clearedDecisionIds: ['d1'], epoch: EPOCH, clearedAt: at(3) } }, decision('d2', 2)]);
      expect(decisionsOfEntry(state, 2)).toEqual([]);
    });

    it('the entry\'s own when the first failed (the entry stops there and the second never runs), not none for ever', () => {
      const failedFirst: TaskAtStepEvent = {
        type: 'OnEnterActionFinished',
        data: { ...pair, entrySeq: 2, position: 0, kind: 'clear_decisions', outcome: 'failed', skipReason: null, failure: { cause: 'boom', attempted: null, failed: null }, runs: [], epoch: EPOCH, finishedAt: at(3) },
      };
      const state = fold([decision('d1', 1), openedTwice, claimedAt(0), failedFirst, decision('d2', 2)]);
      expect(decisionsOfEntry(state, 2).map((d) => d.decisionId)).toEqual(['d2']);
    });
  });
});
