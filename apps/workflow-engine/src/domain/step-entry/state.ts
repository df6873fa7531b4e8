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
 * on_exit actions: held by one process at a time (the opener first) until its actions ran.
 */
export interface StepExitRecord {
  entrySeq: number;
  holder: string;
}

/**
 * What the rules of the pair need, and no more (docs/workflow-engine.md, "What the pair's state
 * keeps"): a task that loops through the step (review, rework, review …) keeps a state of the same
 * size however often it came back. What is dropped stays in the log; list_step_entries folds the
 * records it shows from there (`stepEntryRecordsOf`).
 */
export interface TaskAtStep {
  /** The entries not yet terminal, and the latest one whatever its state: its markers decide which decisions count. */
  entries: Record<number, StepEntryRecord>;
  /** The highest entrySeq a record was opened for: a lower one not in `entries` is terminal. */
  lastEntrySeq: number;
  /** The exits not yet finished, by the entrySeq of the occupancy left. */
  exits: Record<number, StepExitRecord>;
  /** The highest entrySeq an exit was opened for: a lower one not in `exits` is finished. */
  lastExitSeq: number;
  /**
   * The decisions recorded since the last clear that a guard can still count, in the order
   * recorded: every one of the latest entry that has any, and of earlier entries each seat's latest
   * and the latest by a person (a later one of the same kind outweighs the others).
   */
  decisions: Decision[];
}

export const initialTaskAtStep: TaskAtStep = { entries: {}, lastEntrySeq: 0, exits: {}, lastExitSeq: 0, decisions: [] };

/** The entry's record; `finished` for one terminal and no longer kept (its events are in the log). */
export function entryRecordOf(state: TaskAtStep, entrySeq: number): StepEntryRecord | 'finished' | null {
  return state.entries[entrySeq] ?? (entrySeq <= state.lastEntrySeq ? 'finished' : null);
}

export const isTerminalMarker = (m: Marker | undefined): boolean => m !== undefined && m.state !== 'in_progress';

/**
 * The decisions a guard counts while the task is in entry `entrySeq` (docs/workflow-engine.md,
 * "Decisions and quorum"), its clears taken in declared order: none while one has not run yet — what
 * is on the pair then is what it removes (AC-F3). A clear that ended without clearing (failed,
 * skipped) removed nothing and no later one runs after it (a failed clear stops the entry): the
 * round is then what the clears before it left, or, with none done, the entry's own decisions.
 */
export function decisionsOfEntry(state: TaskAtStep, entrySeq: number): Decision[] {
  const entry = state.entries[entrySeq];
  const clears = (entry?.markedPositions ?? []).filter((p) => p.kind === 'clear_decisions').sort((a, b) => a.position - b.position);
  let cleared = clears.length === 0;
  for (const { position } of clears) {
    const marker = entry!.markers[position];
    if (marker?.state === 'done') cleared = true;
    else if (!isTerminalMarker(marker)) return [];
    else break;
  }
  return cleared ? state.decisions : state.decisions.filter((d) => d.entrySeq === entrySeq);
}

type EntryEvent = Extract<TaskAtStepEvent, { type: 'StepEntryOpened' | 'OnEnterActionClaimed' | 'OnEnterActionFinished' | 'DecisionsCleared' | 'StepEntryTerminated' }>;

/** One step-entry record's fold: its opening, its markers, its end. */
export function evolveEntryRecord(record: StepEntryRecord | undefined, event: EntryEvent): StepEntryRecord | undefined {
  switch (event.type) {
    case 'StepEntryOpened': {
      const d = event.data;
      return { entrySeq: d.entrySeq, declarationDigest: d.declarationDigest, entryPath: d.entryPath, markedPositions: d.markedPositions, openedByEpoch: d.openedByEpoch, openedAt: d.openedAt, markers: {}, termination: null };
    }
    case 'StepEntryTerminated':
      return record && { ...record, termination: event.data.reason };
    case 'OnEnterActionClaimed': {
      const d = event.data;
      return withMarker(record, { position: d.position, kind: d.kind, state: 'in_progress', epoch: d.epoch, skipReason: null, failure: null, runs: [] });
    }
    case 'OnEnterActionFinished': {
      const d = event.data;
      return withMarker(record, { position: d.position, kind: d.kind, state: d.outcome, epoch: d.epoch, skipReason: d.skipReason, failure: d.failure, runs: d.runs });
    }
    case 'DecisionsCleared': {
      const d = event.data;
      return withMarker(record, { position: d.position, kind: d.kind, state: 'done', epoch: d.epoch, skipReason: null, failure: null, runs: [] });
    }
  }
}

function withMarker(record: StepEntryRecord | undefined, marker: Marker): StepEntryRecord | undefined {
  return record && { ...record, markers: { ...record.markers, [marker.position]: marker } };
}

const isEntryEvent = (event: TaskAtStepEvent): event is EntryEvent =>
  event.type === 'StepEntryOpened' || event.type === 'OnEnterActionClaimed' || event.type === 'OnEnterActionFinished' || event.type === 'DecisionsCleared' || event.type === 'StepEntryTerminated';

/** The records of the entries `entrySeqs`, folded from the pair's events (the state keeps only the open ones and the latest). */
export function stepEntryRecordsOf(events: readonly TaskAtStepEvent[], entrySeqs: ReadonlySet<number>): Map<number, StepEntryRecord> {
  const records = new Map<number, StepEntryRecord>();
  for (const event of events) {
    if (!isEntryEvent(event) || !entrySeqs.has(event.data.entrySeq)) continue;
    const record = evolveEntryRecord(records.get(event.data.entrySeq), event);
    if (record) records.set(record.entrySeq, record);
  }
  return records;
}

/** The entries kept: every one not yet terminal, and the latest. */
function keptEntries(entries: Record<number, StepEntryRecord>, lastEntrySeq: number): Record<number, StepEntryRecord> {
  const kept: Record<number, StepEntryRecord> = {};
  for (const record of Object.values(entries)) if (record.termination === null || record.entrySeq === lastEntrySeq) kept[record.entrySeq] = record;
  return kept;
}

/**
 * The decisions with `added` recorded: an earlier entry's decision goes once a later one outweighs
 * it for every count — its seat decided again, and it is no person's latest. Decisions come in
 * entry order (each is recorded for the task's current entry), so the latest entry's are all kept.
 */
function withDecision(decisions: readonly Decision[], added: Decision): Decision[] {
  const all = [...decisions, added];
  return all.filter((d, i) => {
    if (d.entrySeq === added.entrySeq) return true;
    const later = all.slice(i + 1);
    const seatDecidedAgain = d.participantId === null || later.some((x) => x.participantId === d.participantId);
    const personDecidedAgain = d.decidedBy.kind !== 'person' || later.some((x) => x.decidedBy.kind === 'person');
    return !(seatDecidedAgain && personDecidedAgain);
  });
}

export function evolveTaskAtStep(state: TaskAtStep, event: TaskAtStepEvent): TaskAtStep {
  switch (event.type) {
    case 'StepEntryOpened':
    case 'OnEnterActionClaimed':
    case 'OnEnterActionFinished':
    case 'DecisionsCleared':
    case 'StepEntryTerminated': {
      const d = event.data;
      const record = evolveEntryRecord(state.entries[d.entrySeq], event);
      if (!record) return state;
      const lastEntrySeq = Math.max(state.lastEntrySeq, record.entrySeq);
      const entries = keptEntries({ ...state.entries, [record.entrySeq]: record }, lastEntrySeq);
      if (event.type !== 'DecisionsCleared') return { ...state, entries, lastEntrySeq };
      const removed = new Set(event.data.clearedDecisionIds);
      return { ...state, entries, lastEntrySeq, decisions: state.decisions.filter((x) => !removed.has(x.decisionId)) };
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
      return { ...state, decisions: withDecision(state.decisions, decision) };
    }
    case 'StepExitOpened': {
      const d = event.data;
      return { ...state, exits: { ...state.exits, [d.entrySeq]: { entrySeq: d.entrySeq, holder: d.openedByEpoch } }, lastExitSeq: Math.max(state.lastExitSeq, d.entrySeq) };
    }
    case 'StepExitClaimed': {
      const d = event.data;
      const exit = state.exits[d.entrySeq];
      if (!exit) return state;
      return { ...state, exits: { ...state.exits, [d.entrySeq]: { ...exit, holder: d.epoch } } };
    }
    case 'StepExitFinished': {
      const { [event.data.entrySeq]: _finished, ...open } = state.exits;
      return { ...state, exits: open };
    }
    default:
      return assertNever(event);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled event ${JSON.stringify(value)}`);
}
