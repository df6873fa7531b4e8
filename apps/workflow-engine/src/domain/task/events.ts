/** The task's events as its decider emits them: the contracts' (`data` is exactly the contract's event data). */
export { taskEventTypes, type TaskEvent, type TaskEventType } from '@gantry/contracts';
