import type { ActionFailure, EntryPath, EntryTermination, MarkerOutcome, QueuedRun, SkipReason, Verdict } from '@gantry/contracts';
import type { MarkedPosition } from '../definitions/declaration.js';

/** Which (task, workflow step) pair a command is about. */
export interface Pair {
  taskId: string;
  workflowId: string;
  stepId: string;
}

export type TaskAtStepCommand =
  | {
      type: 'OpenStepEntry';
      data: Pair & { entrySeq: number; declarationDigest: string; entryPath: EntryPath; markedPositions: MarkedPosition[]; epoch: string; now: string };
    }
  | {
      /**
       * absent → in_progress(epoch); or in_progress(staleEpoch) → in_progress(epoch) when the caller
       * found staleEpoch's process gone (its epoch lock could be taken).
       */
      type: 'ClaimAction';
      data: Pair & { entrySeq: number; position: number; kind: string; epoch: string; staleEpoch: string | null; now: string };
    }
  /** clear_decisions: the clear and its done marker in one event, under the caller's claim. */
  | { type: 'ClearDecisions'; data: Pair & { entrySeq: number; position: number; epoch: string; now: string } }
  | {
      type: 'FinishAction';
      data: Pair & {
        entrySeq: number;
        position: number;
        outcome: MarkerOutcome;
        skipReason: SkipReason | null;
        failure: ActionFailure | null;
        runs: QueuedRun[];
        epoch: string;
        now: string;
      };
    }
  | {
      /** Ends an entry without running what is left: each listed position not yet terminal is marked skipped(reason). */
      type: 'TerminateEntry';
      data: Pair & { entrySeq: number; reason: EntryTermination; skip: { positions: MarkedPosition[]; reason: SkipReason } | null; staleEpochs: string[]; now: string };
    }
  /** Sets the terminal flag once every marked position of the declaration as read now is terminal. */
  | { type: 'CompleteEntry'; data: Pair & { entrySeq: number; marked: MarkedPosition[]; now: string } }
  /** The move out of the step's occupancy `entrySeq` records its exit (the step declares on_exit actions). */
  | { type: 'OpenStepExit'; data: Pair & { entrySeq: number; epoch: string; now: string } }
  /** The exit taken over from `staleEpoch`, its holder's process found gone (or this process's own, left by a run that stopped). */
  | { type: 'ClaimStepExit'; data: Pair & { entrySeq: number; epoch: string; staleEpoch: string; now: string } }
  /** The exit's actions ran to their end, under the caller's hold. */
  | { type: 'FinishStepExit'; data: Pair & { entrySeq: number; outcome: 'done' | 'failed' | 'unresolvable'; epoch: string; now: string } }
  | {
      type: 'RecordDecision';
      data: Pair & {
        entrySeq: number;
        decisionId: string;
        participantId: string | null;
        verdict: Verdict;
        comment: string | null;
        decidedBy: { kind: 'person'; actor: string } | { kind: 'review_job'; jobId: string };
        now: string;
      };
    };
