import type {
  DecisionRecordedData,
  DecisionsClearedData,
  OnEnterActionClaimedData,
  OnEnterActionFinishedData,
  StepEntryOpenedData,
  StepEntryTerminatedData,
} from '@gantry/contracts';

/** The events of a task at a step: its step-entry records with their markers, and its decisions. */
export type TaskAtStepEvent =
  | { type: 'StepEntryOpened'; data: StepEntryOpenedData }
  | { type: 'OnEnterActionClaimed'; data: OnEnterActionClaimedData }
  | { type: 'OnEnterActionFinished'; data: OnEnterActionFinishedData }
  | { type: 'DecisionsCleared'; data: DecisionsClearedData }
  | { type: 'StepEntryTerminated'; data: StepEntryTerminatedData }
  | { type: 'DecisionRecorded'; data: DecisionRecordedData };

export const taskAtStepEventTypes: readonly TaskAtStepEvent['type'][] = [
  'StepEntryOpened',
  'OnEnterActionClaimed',
  'OnEnterActionFinished',
  'DecisionsCleared',
  'StepEntryTerminated',
  'DecisionRecorded',
];
