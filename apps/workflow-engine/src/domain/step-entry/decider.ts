import { ErrorCode, GantryError } from '@gantry/contracts';
import type { TaskAtStepCommand } from './commands.js';
import type { TaskAtStepEvent } from './events.js';
import { entryRecordOf, evolveTaskAtStep, initialTaskAtStep, isTerminalMarker, type StepEntryRecord, type StepExitRecord, type TaskAtStep } from './state.js';

/*
 * A task at one workflow step: its step-entry records (one per entry that declares marked actions)
 * with a marker per marked position, and the decisions recorded for the pair
 * (docs/workflow-engine.md, "Markers"). Every marker change is an append at the stream version the
 * decision was made on: the compare-and-set. clear_decisions clears and marks done in one event, so
 * a claim still in progress proves the clear never committed.
 */

/** Why a claim was refused: the position is finished, or a claim by another process holds it. */
export const CLAIM_REFUSAL = { terminal: 'marker_terminal', held: 'marker_held', entryTerminal: 'entry_terminal' } as const;

/** The entry's record; `finished` for a terminal one the state no longer keeps. */
function entryOf(state: TaskAtStep, data: { taskId: string; stepId: string; entrySeq: number }): StepEntryRecord | 'finished' {
  const entry = entryRecordOf(state, data.entrySeq);
  if (!entry) throw new GantryError(ErrorCode.NOT_FOUND, `task ${data.taskId} has no step-entry record ${data.entrySeq} at step ${data.stepId}`, { entrySeq: data.entrySeq });
  return entry;
}

/** A marker change under a claim, on an entry that ended: no claim holds there any more. */
function claimOfFinishedEntry(entrySeq: number, position: number): GantryError {
  return new GantryError(ErrorCode.ALREADY_CLAIMED, `entry ${entrySeq} is terminal; position ${position} is not claimed by this process`, { reason: CLAIM_REFUSAL.held, holder: null, state: 'terminal' });
}

/** The exit's record; `finished` for one whose actions ran (the state no longer keeps it). */
function exitOf(state: TaskAtStep, data: { taskId: string; stepId: string; entrySeq: number }): StepExitRecord | 'finished' {
  const exit = state.exits[data.entrySeq] ?? (data.entrySeq <= state.lastExitSeq ? 'finished' : null);
  if (!exit) throw new GantryError(ErrorCode.NOT_FOUND, `task ${data.taskId} has no exit of occupancy ${data.entrySeq} at step ${data.stepId}`, { entrySeq: data.entrySeq });
  return exit;
}

function requireOwnClaim(entry: StepEntryRecord, position: number, epoch: string): void {
  const marker = entry.markers[position];
  if (marker?.state === 'in_progress' && marker.epoch === epoch) return;
  throw new GantryError(ErrorCode.ALREADY_CLAIMED, `position ${position} of entry ${entry.entrySeq} is not claimed by this process`, {
    reason: CLAIM_REFUSAL.held,
    holder: marker?.epoch ?? null,
    state: marker?.state ?? 'absent',
  });
}

export function decideTaskAtStep(command: TaskAtStepCommand, state: TaskAtStep): TaskAtStepEvent[] {
  const d = command.data;
  const pair = { taskId: d.taskId, workflowId: d.workflowId, stepId: d.stepId };
  switch (command.type) {
    case 'OpenStepEntry': {
      const c = command.data;
      if (entryRecordOf(state, c.entrySeq)) {
        throw new GantryError(ErrorCode.INVALID_TRANSITION, `entry ${c.entrySeq} of task ${c.taskId} at step ${c.stepId} is already allocated`, { entrySeq: c.entrySeq });
      }
      if (c.markedPositions.length === 0) throw new GantryError(ErrorCode.PRECONDITION_FAILED, 'a step with nothing under markers opens no step-entry record');
      return [
        {
          type: 'StepEntryOpened',
          data: { ...pair, entrySeq: c.entrySeq, declarationDigest: c.declarationDigest, entryPath: c.entryPath, markedPositions: c.markedPositions, openedByEpoch: c.epoch, openedAt: c.now },
        },
      ];
    }
    case 'ClaimAction': {
      const c = command.data;
      const entry = entryOf(state, c);
      if (entry === 'finished' || entry.termination !== null) {
        throw new GantryError(ErrorCode.INVALID_TRANSITION, `entry ${c.entrySeq} is terminal`, { reason: CLAIM_REFUSAL.entryTerminal });
      }
      const marker = entry.markers[c.position];
      if (marker === undefined) {
        return [{ type: 'OnEnterActionClaimed', data: { ...pair, entrySeq: c.entrySeq, position: c.position, kind: c.kind, epoch: c.epoch, takenOverFrom: null, claimedAt: c.now } }];
      }
      if (isTerminalMarker(marker)) {
        throw new GantryError(ErrorCode.INVALID_TRANSITION, `position ${c.position} of entry ${c.entrySeq} is already ${marker.state}`, { reason: CLAIM_REFUSAL.terminal, state: marker.state });
      }
      if (marker.epoch !== c.epoch && marker.epoch === c.staleEpoch) {
        return [{ type: 'OnEnterActionClaimed', data: { ...pair, entrySeq: c.entrySeq, position: c.position, kind: c.kind, epoch: c.epoch, takenOverFrom: marker.epoch, claimedAt: c.now } }];
      }
      throw new GantryError(ErrorCode.ALREADY_CLAIMED, `position ${c.position} of entry ${c.entrySeq} is claimed by process ${marker.epoch}`, {
        reason: CLAIM_REFUSAL.held,
        holder: marker.epoch,
      });
    }
    case 'ClearDecisions': {
      const c = command.data;
      const entry = entryOf(state, c);
      if (entry === 'finished') throw claimOfFinishedEntry(c.entrySeq, c.position);
      requireOwnClaim(entry, c.position, c.epoch);
      // The round this clear opens is its own entry's: a later entry's decisions (the task left and came
      // back while this dispatch was under way) are that entry's round, and stay.
      const cleared = state.decisions.filter((x) => x.entrySeq <= c.entrySeq).map((x) => x.decisionId);
      return [
        {
          type: 'DecisionsCleared',
          data: { ...pair, entrySeq: c.entrySeq, position: c.position, kind: 'clear_decisions', clearedDecisionIds: cleared, epoch: c.epoch, clearedAt: c.now },
        },
      ];
    }
    case 'FinishAction': {
      const c = command.data;
      const entry = entryOf(state, c);
      if (entry === 'finished') throw claimOfFinishedEntry(c.entrySeq, c.position);
      requireOwnClaim(entry, c.position, c.epoch);
      const marker = entry.markers[c.position]!;
      return [
        {
          type: 'OnEnterActionFinished',
          data: {
            ...pair,
            entrySeq: c.entrySeq,
            position: c.position,
            kind: marker.kind,
            outcome: c.outcome,
            skipReason: c.outcome === 'skipped' ? c.skipReason : null,
            failure: c.outcome === 'failed' ? c.failure : null,
            runs: c.runs,
            epoch: c.epoch,
            finishedAt: c.now,
          },
        },
      ];
    }
    case 'TerminateEntry': {
      const c = command.data;
      const entry = entryOf(state, c);
      if (entry === 'finished' || entry.termination !== null) return [];
      const skipped: TaskAtStepEvent[] = [];
      for (const { position, kind } of c.skip?.positions ?? []) {
        const marker = entry.markers[position];
        if (isTerminalMarker(marker)) continue;
        if (marker && !c.staleEpochs.includes(marker.epoch!)) {
          throw new GantryError(ErrorCode.ALREADY_CLAIMED, `position ${position} of entry ${c.entrySeq} is claimed by process ${marker.epoch}`, {
            reason: CLAIM_REFUSAL.held,
            holder: marker.epoch,
          });
        }
        skipped.push({
          type: 'OnEnterActionFinished',
          data: {
            ...pair,
            entrySeq: c.entrySeq,
            position,
            kind: marker?.kind ?? kind,
            outcome: 'skipped',
            skipReason: c.skip!.reason,
            failure: null,
            runs: [],
            epoch: marker?.epoch ?? null,
            finishedAt: c.now,
          },
        });
      }
      return [...skipped, { type: 'StepEntryTerminated', data: { ...pair, entrySeq: c.entrySeq, reason: c.reason, terminatedAt: c.now } }];
    }
    case 'CompleteEntry': {
      const c = command.data;
      const entry = entryOf(state, c);
      if (entry === 'finished' || entry.termination !== null) return [];
      if (!c.marked.every(({ position }) => isTerminalMarker(entry.markers[position]))) return [];
      return [{ type: 'StepEntryTerminated', data: { ...pair, entrySeq: c.entrySeq, reason: 'completed', terminatedAt: c.now } }];
    }
    case 'OpenStepExit': {
      const c = command.data;
      if (state.exits[c.entrySeq] || c.entrySeq <= state.lastExitSeq) return [];
      return [{ type: 'StepExitOpened', data: { ...pair, entrySeq: c.entrySeq, openedByEpoch: c.epoch, openedAt: c.now } }];
    }
    case 'ClaimStepExit': {
      const c = command.data;
      const exit = exitOf(state, c);
      if (exit === 'finished') throw new GantryError(ErrorCode.INVALID_TRANSITION, `the exit of entry ${c.entrySeq} is finished`, { reason: CLAIM_REFUSAL.terminal, state: 'finished' });
      if (exit.holder === c.epoch) return [];
      if (exit.holder !== c.staleEpoch) {
        throw new GantryError(ErrorCode.ALREADY_CLAIMED, `the exit of entry ${c.entrySeq} is held by process ${exit.holder}`, { reason: CLAIM_REFUSAL.held, holder: exit.holder });
      }
      return [{ type: 'StepExitClaimed', data: { ...pair, entrySeq: c.entrySeq, epoch: c.epoch, takenOverFrom: exit.holder, claimedAt: c.now } }];
    }
    case 'FinishStepExit': {
      const c = command.data;
      const exit = exitOf(state, c);
      if (exit === 'finished') return [];
      if (exit.holder !== c.epoch) {
        throw new GantryError(ErrorCode.ALREADY_CLAIMED, `the exit of entry ${c.entrySeq} is held by process ${exit.holder}`, { reason: CLAIM_REFUSAL.held, holder: exit.holder });
      }
      return [{ type: 'StepExitFinished', data: { ...pair, entrySeq: c.entrySeq, outcome: c.outcome, epoch: c.epoch, finishedAt: c.now } }];
    }
    case 'RecordDecision': {
      const c = command.data;
      if (state.decisions.some((x) => x.decisionId === c.decisionId)) return [];
      return [
        {
          type: 'DecisionRecorded',
          data: { ...pair, entrySeq: c.entrySeq, decisionId: c.decisionId, participantId: c.participantId, verdict: c.verdict, comment: c.comment, decidedBy: c.decidedBy, recordedAt: c.now },
        },
      ];
    }
    default:
      return assertNever(command);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled command ${JSON.stringify(value)}`);
}

/** Emmett's shape: initialState, decide, evolve. */
export const taskAtStepDecider = {
  initialState: initialTaskAtStep,
  decide: decideTaskAtStep,
  evolve: evolveTaskAtStep,
};
