import type { ActionFailure, EntryPath, EntryTermination, QueuedRun, SkipReason, Verdict } from '@gantry/contracts';
import type { MarkedPosition } from '../definitions/declaration.js';
import type { TaskAtStepEvent } from './events.js';

export type MarkerState = 'in_progress' | 'done' | 'skipped' | 'failed';

/** A per-action marker; a position with no marker is `absent` (never attempted for this entry). */
export interface Marker {
  position: number;
  kind: string;
  state: MarkerState;
  /** in_progress: the claiming process; terminal: the process that finished it (null if it was never claimed). */
  epoch: string | null;
  skipReason: SkipReason | null;
  failure: ActionFailure | null;
  runs: QueuedRun[];
}

export interface StepEntryRecord {
  entrySeq: number;
  declarationDigest: string;
  entryPath: EntryPath;
  markedPositions: MarkedPosition[];
  openedByEpoch: string;
  openedAt: string;
  markers: Record<number, Marker>;
  termination: EntryTermination | null;
}

export interface Decision {
  decisionId: string;
  entrySeq: number;
  participantId: string | null;
  verdict: Verdict;
  comment: string | null;
  decidedBy: { kind: 'person'; actor: string } | { kind: 'review_job'; jobId: string };
  recordedAt: string;
}

/**
 * The task's leaving of one occupancy of the step, recorded with the move when the step declares
 * on_exit actions: held by one process at a time (the opener first), finished once they ran.
 */
export interface StepExitRecord {
  entrySeq: number;
  holder: string;
  finished: 'done' | 'failed' | 'unresolvable' | null;
}

export interface TaskAtStep {
  entries: Record<number, StepEntryRecord>;
  /** The exits of the step's occupancies, by the entrySeq of the occupancy left. */
  exits: Record<number, StepExitRecord>;
  /** Every decision recorded since the last clear, in the order recorded. */
  decisions: Decision[];
  /** Every decision id ever recorded here (a repeat of one records nothing). */
  decisionIds: string[];
}

export const initialTaskAtStep: TaskAtStep = { entries: {}, exits: {}, decisions: [], decisionIds: [] };

export const isTerminalMarker = (m: Marker | undefined): boolean => m !== undefined && m.state !== 'in_progress';

/**
 * The decisions a guard counts while the task is in entry `entrySeq` (docs/workflow-engine.md,
 * "Decisions and quorum"): none while a clear_decisions the entry declares has not run yet — what
 * is on the pair then belongs to the previous round, and the clear removes it (AC-F3). A clear that
 * ended without clearing (failed, skipped) never removes them: the round is then the entry's own
 * decisions.
 */
export function decisionsOfEntry(state: TaskAtStep, entrySeq: number): Decision[] {
  const entry = state.entries[entrySeq];
  const clears = entry?.markedPositions.filter((p) => p.kind === 'clear_decisions').map((p) => entry.markers[p.position]) ?? [];
  if (clears.length === 0 || clears.some((m) => m?.state === 'done')) return state.decisions;
  if (clears.some((m) => !isTerminalMarker(m))) return [];
  return state.decisions.filter((d) => d.entrySeq === entrySeq);
}

function withMarker(state: TaskAtStep, entrySeq: number, marker: Marker): TaskAtStep {
  const entry = state.entries[entrySeq];
  if (!entry) return state;
  return { ...state, entries: { ...state.entries, [entrySeq]: { ...entry, markers: { ...entry.markers, [marker.position]: marker } } } };
}

export function evolveTaskAtStep(state: TaskAtStep, event: TaskAtStepEvent): TaskAtStep {
  switch (event.type) {
    case 'StepEntryOpened': {
      const d = event.data;
      const record: StepEntryRecord = {
        entrySeq: d.entrySeq,
        declarationDigest: d.declarationDigest,
        entryPath: d.entryPath,
        markedPositions: d.markedPositions,
        openedByEpoch: d.openedByEpoch,
        openedAt: d.openedAt,
        markers: {},
        termination: null,
      };
      return { ...state, entries: { ...state.entries, [d.entrySeq]: record } };
    }
    case 'OnEnterActionClaimed': {
      const d = event.data;
      return withMarker(state, d.entrySeq, { position: d.position, kind: d.kind, state: 'in_progress', epoch: d.epoch, skipReason: null, failure: null, runs: [] });
    }
    case 'OnEnterActionFinished': {
      const d = event.data;
      return withMarker(state, d.entrySeq, { position: d.position, kind: d.kind, state: d.outcome, epoch: d.epoch, skipReason: d.skipReason, failure: d.failure, runs: d.runs });
    }
    case 'DecisionsCleared': {
      const d = event.data;
      const cleared = withMarker(state, d.entrySeq, { position: d.position, kind: d.kind, state: 'done', epoch: d.epoch, skipReason: null, failure: null, runs: [] });
      const removed = new Set(d.clearedDecisionIds);
      return { ...cleared, decisions: cleared.decisions.filter((x) => !removed.has(x.decisionId)) };
    }
    case 'StepEntryTerminated': {
      const d = event.data;
      const entry = state.entries[d.entrySeq];
      if (!entry) return state;
      return { ...state, entries: { ...state.entries, [d.entrySeq]: { ...entry, termination: d.reason } } };
    }
    case 'DecisionRecorded': {
      const d = event.data;
      const decision: Decision = {
        decisionId: d.decisionId,
        entrySeq: d.entrySeq,
        participantId: d.participantId,
        verdict: d.verdict,
        comment: d.comment,
        decidedBy: d.decidedBy,
        recordedAt: d.recordedAt,
      };
      return { ...state, decisions: [...state.decisions, decision], decisionIds: [...state.decisionIds, d.decisionId] };
    }
    case 'StepExitOpened': {
      const d = event.data;
      return { ...state, exits: { ...state.exits, [d.entrySeq]: { entrySeq: d.entrySeq, holder: d.openedByEpoch, finished: null } } };
    }
    case 'StepExitClaimed':
    case 'StepExitFinished': {
      const d = event.data;
      const exit = state.exits[d.entrySeq];
      if (!exit) return state;
      const changed = event.type === 'StepExitClaimed' ? { holder: event.data.epoch } : { finished: event.data.outcome };
      return { ...state, exits: { ...state.exits, [d.entrySeq]: { ...exit, ...changed } } };
    }
    default:
      return assertNever(event);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled event ${JSON.stringify(value)}`);
}
