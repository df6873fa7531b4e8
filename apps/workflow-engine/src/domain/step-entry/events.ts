/** The events of a task at a step (its step-entry records with their markers, and its decisions): the contracts'. */
export { taskAtStepEventTypes, type TaskAtStepEvent } from '@gantry/contracts';
