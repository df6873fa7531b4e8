/** The sprint run's events as the decider emits them: the contracts'. */
export type { SprintRunEvent, SprintRunEventType } from '@gantry/contracts';
