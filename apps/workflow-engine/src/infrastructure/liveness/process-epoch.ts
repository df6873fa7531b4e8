/** The process epoch and its liveness (docs/workflow-engine.md, AC-L1, AC-L2): shared with the other services. */
export { ProcessEpoch, type EpochLog, type ProcessEpochOptions } from '@gantry/eventstore';
