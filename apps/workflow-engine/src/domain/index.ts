// The pure domain of the workflow engine: definitions, deciders, and the rules of on_enter
// dispatch as plain functions. No NestJS, pg, nats or git here. The rules (AC-…) are defined in
// docs/workflow-engine.md.
//
// Where each rule lives:
//   the Office Default template                          definitions/templates.ts
//   declaration digest, marked positions, feeder step    definitions/declaration.ts
//   WIP admission, step entries (entry_seq + digest),    task/decider.ts               decideTask / placeTask
//     admission in place, feeder landing, session
//   markers (claim / finish / re-claim), clear +         step-entry/decider.ts         decideTaskAtStep
//     done in one event, terminal flag, decisions,
//     the exits of the step's occupancies (on_exit)
//   on_enter order and owners per entry path             dispatch/plan.ts              onEnterPlan (AC-A9, A12, A13, H4, H8)
//     (AC-A2(ii), A6 on switch_workflow)
//   run idempotency keys, canonical config digest        dispatch/run-keys.ts          (AC-B1, H1, H2, H7)
//   fan-out selection, merge, de-duplication, order      dispatch/fan-out.ts           (AC-A4, A5, H3)
//   queue_run targets                                    dispatch/queue-run-target.ts  (AC-A7)
//   quorum guards, requires_approval                     quorum/quorum.ts
//   transition targets; which guarded transition a       quorum/transitions.ts         transitionTarget / transitionOnDecision
//     decision makes hold
//   the startup scan's rules                             recovery/recovery-rules.ts    (AC-B9 a1, a2, b, c, e)
//   workflows, agent profiles, task-level seats          catalog/*.ts
// Specifications: */*.spec.ts, written with DeciderSpecification.for(decider) from @gantry/eventstore/testing.

export { OFFICE_DEFAULT_YAML, WORKFLOW_TEMPLATES } from './definitions/templates.js';
export {
  declarationDigest,
  feederOf,
  markedPositions,
  needsStepEntryRecord,
  nextStepId,
  previousStepId,
  stepDeclaration,
  stepOf,
  type MarkedPosition,
  type StepDeclaration,
} from './definitions/declaration.js';

export type { TaskCommand, Placing, StepSeats } from './task/commands.js';
export { taskEventTypes, type TaskEvent } from './task/events.js';
export {
  effectivePermissionMode,
  evolveTask,
  initialTaskState,
  occupancyOf,
  stepKey,
  taskExists,
  type Task,
  type TaskEntry,
  type TaskPlacement,
  type TaskSession,
  type TaskState,
} from './task/state.js';
export { decideTask, taskDecider } from './task/decider.js';

export type { TaskAtStepCommand, Pair } from './step-entry/commands.js';
export { taskAtStepEventTypes, type TaskAtStepEvent } from './step-entry/events.js';
export {
  decisionsOfEntry,
  entryRecordOf,
  evolveTaskAtStep,
  initialTaskAtStep,
  isTerminalMarker,
  stepEntryRecordsOf,
  type Decision,
  type Marker,
  type StepEntryRecord,
  type StepExitRecord,
  type TaskAtStep,
} from './step-entry/state.js';
export { CLAIM_REFUSAL, decideTaskAtStep, taskAtStepDecider } from './step-entry/decider.js';

export { hoistsSessionActions, onEnterPlan, type PlanItem } from './dispatch/plan.js';
export { autoStartRunKey, canonicalRunConfig, codeReviewRunKey, configDigest, DEFAULT_RUN_REASON, entryRunKey, triggerRunKey, triggerSessionId, type RunConfig } from './dispatch/run-keys.js';
export { fanOutSeats, mergedSeats, type Seat } from './dispatch/fan-out.js';
export { resolveQueueRunTarget, type TargetResolution } from './dispatch/queue-run-target.js';

export { countQuorum, guardHolds, quorumHolds, quorumSeatsOf, type QuorumSeat, type RecordedDecision } from './quorum/quorum.js';
export { recoveryOrder, recoveryVerdict, type RecoveryFacts, type RecoveryVerdict } from './recovery/recovery-rules.js';

export { workflowDecider, type WorkflowEvent, type WorkflowState } from './catalog/workflow.js';
export { agentProfileDecider, type AgentProfileEvent, type AgentProfileState } from './catalog/agent-profile.js';
export { participantDecider, type ParticipantEvent, type ParticipantState } from './catalog/participant.js';
export { transitionOnDecision, transitionTarget, type TransitionTarget } from './quorum/transitions.js';
