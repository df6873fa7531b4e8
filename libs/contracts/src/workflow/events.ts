import { z } from 'zod';
import { defineEvent, eventTypesOf, type EventsOf } from '../registry.js';
import { JobIdSchema, TimestampSchema } from '../jobs/values.js';
import { WorkflowDefinitionSchema, workflowDefinitionExample } from './definition.js';
import {
  AgentProfileIdSchema,
  EntryPathSchema,
  EntryTerminationSchema,
  MarkerOutcomeSchema,
  ParticipantAgentProfileIdSchema,
  ParticipantIdSchema,
  ProcessEpochSchema,
  SessionPermissionModeSchema,
  SkipReasonSchema,
  StepIdSchema,
  TaskIdSchema,
  TaskProductIdSchema,
  VerdictSchema,
  WorkflowIdSchema,
  workflowExampleIds as ids,
} from './values.js';

const at = ids.at;
const ActionKindSchema = z.string().regex(/^[a-z][a-z0-9_]{0,63}$/);

// ---------------------------------------------------------------------------------------------
// Definitions: workflows, agent profiles, task-level participant seats

export const WorkflowDefined = defineEvent({
  context: 'workflow',
  type: 'WorkflowDefined',
  schemaVersion: 1,
  data: z.object({
    workflowId: WorkflowIdSchema,
    /** 1 for the first import, one higher at every later one; a dispatch reads the latest. */
    version: z.number().int().positive(),
    definition: WorkflowDefinitionSchema,
    /** Declared action types the engine does not know: accepted, warned about at import and at dispatch. */
    unknownActionTypes: z.array(z.string()),
    definedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ workflowId: ids.workflowId, version: 1, definition: workflowDefinitionExample, unknownActionTypes: [], definedAt: at }],
    invalid: [
      // version 0 is never written
      { workflowId: ids.workflowId, version: 0, definition: workflowDefinitionExample, unknownActionTypes: [], definedAt: at },
      // the start step must be a step of the workflow
      { workflowId: ids.workflowId, version: 1, definition: { ...workflowDefinitionExample, startStepId: 'nowhere' }, unknownActionTypes: [], definedAt: at },
    ],
  },
});

export const AgentProfileRegistered = defineEvent({
  context: 'workflow',
  type: 'AgentProfileRegistered',
  schemaVersion: 1,
  data: z.object({
    agentProfileId: AgentProfileIdSchema,
    /** What a REVIEW job queued for this profile runs with. */
    model: z.string().min(1).max(200),
    thinkingBudget: z.number().int().min(0),
    registeredAt: TimestampSchema,
  }),
  examples: {
    valid: [{ agentProfileId: ids.agentProfileId, model: 'claude-opus-4-7', thinkingBudget: 12000, registeredAt: at }],
    // a thinking budget is a whole number of tokens
    invalid: [{ agentProfileId: ids.agentProfileId, model: 'claude-opus-4-7', thinkingBudget: 1.5, registeredAt: at }],
  },
});

const seat = {
  participantId: ParticipantIdSchema,
  workflowId: WorkflowIdSchema,
  stepId: StepIdSchema,
  taskId: TaskIdSchema,
};
const seatExample = { participantId: ids.participantId, workflowId: ids.workflowId, stepId: 'review', taskId: ids.taskId };

export const StepParticipantAdded = defineEvent({
  context: 'workflow',
  type: 'StepParticipantAdded',
  schemaVersion: 1,
  data: z.object({
    ...seat,
    role: z.string().min(1).max(100),
    agentProfileId: ParticipantAgentProfileIdSchema,
    decisionRequired: z.boolean(),
    position: z.number().int().min(0),
    addedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      { ...seatExample, role: 'reviewer', agentProfileId: ids.agentProfileId, decisionRequired: true, position: 0, addedAt: at },
      { ...seatExample, participantId: 'seat-unassigned', role: 'reviewer', agentProfileId: '', decisionRequired: false, position: 1, addedAt: at },
    ],
    // a seat has a role
    invalid: [{ ...seatExample, role: '', agentProfileId: ids.agentProfileId, decisionRequired: true, position: 0, addedAt: at }],
  },
});

export const StepParticipantRemoved = defineEvent({
  context: 'workflow',
  type: 'StepParticipantRemoved',
  schemaVersion: 1,
  data: z.object({ ...seat, removedAt: TimestampSchema }),
  examples: {
    valid: [{ ...seatExample, removedAt: at }],
    // a participant id is one token
    invalid: [{ ...seatExample, participantId: 'seat reviewer', removedAt: at }],
  },
});

// ---------------------------------------------------------------------------------------------
// Tasks: creation, placement, WIP admission (the step entry), deletion

export const TaskCreated = defineEvent({
  context: 'workflow',
  type: 'TaskCreated',
  schemaVersion: 1,
  data: z.object({
    taskId: TaskIdSchema,
    productId: TaskProductIdSchema,
    title: z.string().min(1).max(500),
    workflowId: WorkflowIdSchema,
    /** Where the task was created. Creation is not a step entry: nothing is dispatched, no record opened. */
    stepId: StepIdSchema,
    /** false: the step was full and the task is parked there (a TaskQueuedForStep follows). */
    admitted: z.boolean(),
    /** The task's own agent: the target `primary` of queue_run, and auto_start_agent's default. */
    primaryAgentProfileId: AgentProfileIdSchema.nullable(),
    /** The agent session the task's first job starts. */
    sessionId: z.uuid(),
    createdAt: TimestampSchema,
  }),
  examples: {
    valid: [
      {
        taskId: ids.taskId, productId: ids.productId, title: 'Add the cart migration', workflowId: ids.workflowId, stepId: 'work', admitted: true,
        primaryAgentProfileId: null, sessionId: '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182', createdAt: at,
      },
    ],
    // a title says what the task is
    invalid: [
      {
        taskId: ids.taskId, productId: ids.productId, title: '', workflowId: ids.workflowId, stepId: 'work', admitted: true,
        primaryAgentProfileId: null, sessionId: '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182', createdAt: at,
      },
    ],
  },
});

const WaitingAtSchema = z.object({
  workflowId: WorkflowIdSchema,
  stepId: StepIdSchema,
  /** true: the task keeps occupying that step while it waits; false: it is parked there, occupying nothing. */
  admitted: z.boolean(),
});

export const TaskQueuedForStep = defineEvent({
  context: 'workflow',
  type: 'TaskQueuedForStep',
  schemaVersion: 1,
  data: z.object({
    taskId: TaskIdSchema,
    workflowId: WorkflowIdSchema,
    /** The full step the task waits for. */
    stepId: StepIdSchema,
    waitingAt: WaitingAtSchema,
    /** The entry path that asked for the step; the later promotion is a WIP promotion. */
    requestedBy: EntryPathSchema.or(z.literal('task_created')),
    queuedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      { taskId: ids.taskId, workflowId: ids.workflowId, stepId: 'review', waitingAt: { workflowId: ids.workflowId, stepId: 'work', admitted: true }, requestedBy: 'turn_complete', queuedAt: at },
      { taskId: ids.taskId, workflowId: ids.workflowId, stepId: 'work', waitingAt: { workflowId: ids.workflowId, stepId: 'work', admitted: false }, requestedBy: 'task_created', queuedAt: at },
    ],
    // a task waits somewhere
    invalid: [{ taskId: ids.taskId, workflowId: ids.workflowId, stepId: 'review', requestedBy: 'manual_move', queuedAt: at }],
  },
});

export const TaskAdmittedToStep = defineEvent({
  context: 'workflow',
  type: 'TaskAdmittedToStep',
  schemaVersion: 1,
  data: z.object({
    taskId: TaskIdSchema,
    workflowId: WorkflowIdSchema,
    /** The landing step: where the task now occupies a seat. */
    stepId: StepIdSchema,
    /** Allocated at admission: one higher than any earlier entry of this task into this step. */
    entrySeq: z.number().int().positive(),
    /** The digest of the step's on_enter declaration (position, type) as read for this admission. */
    declarationDigest: z.string().regex(/^[0-9a-f]{64}$/),
    entryPath: EntryPathSchema,
    /** The step the caller asked for; differs from stepId when the target was full and the task landed where it waits. */
    requestedStepId: StepIdSchema,
    /** Where the task was before: occupying a step, parked at one, or nowhere (a new task). */
    from: WaitingAtSchema.nullable(),
    /** A step-entry record was opened with this admission: the step declares actions under markers. */
    stepEntryRecorded: z.boolean(),
    admittedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      {
        taskId: ids.taskId, workflowId: ids.workflowId, stepId: 'review', entrySeq: 2, declarationDigest: 'c'.repeat(64), entryPath: 'turn_complete',
        requestedStepId: 'review', from: { workflowId: ids.workflowId, stepId: 'work', admitted: true }, stepEntryRecorded: true, admittedAt: at,
      },
      {
        taskId: ids.taskId, workflowId: ids.workflowId, stepId: 'work', entrySeq: 1, declarationDigest: 'd'.repeat(64), entryPath: 'wip_promotion_in_place',
        requestedStepId: 'work', from: { workflowId: ids.workflowId, stepId: 'work', admitted: false }, stepEntryRecorded: false, admittedAt: at,
      },
    ],
    invalid: [
      // entry sequences start at 1
      {
        taskId: ids.taskId, workflowId: ids.workflowId, stepId: 'review', entrySeq: 0, declarationDigest: 'c'.repeat(64), entryPath: 'manual_move',
        requestedStepId: 'review', from: null, stepEntryRecorded: true, admittedAt: at,
      },
    ],
  },
});

export const TaskUpdated = defineEvent({
  context: 'workflow',
  type: 'TaskUpdated',
  schemaVersion: 1,
  data: z.object({ taskId: TaskIdSchema, title: z.string().min(1).max(500), updatedAt: TimestampSchema }),
  examples: {
    valid: [{ taskId: ids.taskId, title: 'Add the cart migration (v2)', updatedAt: at }],
    invalid: [{ taskId: ids.taskId, title: '', updatedAt: at }],
  },
});

export const TaskDeleted = defineEvent({
  context: 'workflow',
  type: 'TaskDeleted',
  schemaVersion: 1,
  data: z.object({ taskId: TaskIdSchema, deletedAt: TimestampSchema }),
  examples: {
    valid: [{ taskId: ids.taskId, deletedAt: at }],
    invalid: [{ taskId: 'T.533', deletedAt: at }],
  },
});

// ---------------------------------------------------------------------------------------------
// The task's agent session: what session-owned actions record (no markers)

/** Which declared action, of which trigger of which step occupancy, caused a session change. */
const SessionCauseSchema = z.object({
  workflowId: WorkflowIdSchema,
  stepId: StepIdSchema,
  trigger: z.enum(['on_enter', 'on_turn_start', 'on_turn_complete', 'on_exit']),
  /** The entry; 0 for the occupancy the task was created into. */
  entrySeq: z.number().int().min(0),
  position: z.number().int().min(0),
  /** How the task entered the step (on_enter); null for the other triggers. */
  entryPath: EntryPathSchema.nullable(),
});
const cause = { workflowId: ids.workflowId, stepId: 'work', trigger: 'on_enter' as const, entrySeq: 3, position: 0, entryPath: 'manual_move' as const };

export const AgentContextReset = defineEvent({
  context: 'workflow',
  type: 'AgentContextReset',
  schemaVersion: 1,
  data: z.object({ taskId: TaskIdSchema, sessionId: z.uuid(), cause: SessionCauseSchema, resetAt: TimestampSchema }),
  examples: {
    valid: [{ taskId: ids.taskId, sessionId: '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182', cause, resetAt: at }],
    // the next job's fresh session needs an id the agent CLI accepts
    invalid: [{ taskId: ids.taskId, sessionId: 'session-1', cause, resetAt: at }],
  },
});

export const SessionSettingsSchema = z.object({
  model: z.string().min(1).nullable(),
  thinkingBudget: z.number().int().min(0).nullable(),
  permissionMode: SessionPermissionModeSchema.nullable(),
  allowedTools: z.array(z.string().min(1)).nullable(),
});
export type SessionSettings = z.infer<typeof SessionSettingsSchema>;

export const SessionConfigured = defineEvent({
  context: 'workflow',
  type: 'SessionConfigured',
  schemaVersion: 1,
  data: z.object({ taskId: TaskIdSchema, settings: SessionSettingsSchema, cause: SessionCauseSchema, configuredAt: TimestampSchema }),
  examples: {
    valid: [{ taskId: ids.taskId, settings: { model: 'claude-opus-4-7', thinkingBudget: null, permissionMode: null, allowedTools: null }, cause, configuredAt: at }],
    // an unknown permission mode
    invalid: [{ taskId: ids.taskId, settings: { model: null, thinkingBudget: null, permissionMode: 'yolo', allowedTools: null }, cause, configuredAt: at }],
  },
});

export const SessionModeSet = defineEvent({
  context: 'workflow',
  type: 'SessionModeSet',
  schemaVersion: 1,
  data: z.object({ taskId: TaskIdSchema, mode: SessionPermissionModeSchema, cause: SessionCauseSchema, setAt: TimestampSchema }),
  examples: {
    valid: [{ taskId: ids.taskId, mode: 'plan', cause, setAt: at }],
    invalid: [{ taskId: ids.taskId, mode: 'PLAN', cause, setAt: at }],
  },
});

export const PlanModeChanged = defineEvent({
  context: 'workflow',
  type: 'PlanModeChanged',
  schemaVersion: 1,
  data: z.object({ taskId: TaskIdSchema, enabled: z.boolean(), cause: SessionCauseSchema, changedAt: TimestampSchema }),
  examples: {
    valid: [{ taskId: ids.taskId, enabled: true, cause, changedAt: at }],
    invalid: [{ taskId: ids.taskId, enabled: 'yes', cause, changedAt: at }],
  },
});

export const AgentAutoStarted = defineEvent({
  context: 'workflow',
  type: 'AgentAutoStarted',
  schemaVersion: 1,
  data: z.object({
    taskId: TaskIdSchema,
    jobId: JobIdSchema,
    agentProfileId: AgentProfileIdSchema.nullable(),
    cause: SessionCauseSchema,
    startedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ taskId: ids.taskId, jobId: ids.jobId, agentProfileId: null, cause, startedAt: at }],
    invalid: [{ taskId: ids.taskId, jobId: 'job-1', agentProfileId: null, cause, startedAt: at }],
  },
});

export const AgentSessionStarted = defineEvent({
  context: 'workflow',
  type: 'AgentSessionStarted',
  schemaVersion: 1,
  data: z.object({
    taskId: TaskIdSchema,
    sessionId: z.uuid(),
    /** The job whose start opened the session: later jobs of the task resume it. */
    jobId: JobIdSchema,
    startedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ taskId: ids.taskId, sessionId: '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182', jobId: ids.jobId, startedAt: at }],
    invalid: [{ taskId: ids.taskId, sessionId: '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182', startedAt: at }],
  },
});

// ---------------------------------------------------------------------------------------------
// The (task, step) pair: step-entry records with their per-action markers, and decisions

const pair = {
  taskId: TaskIdSchema,
  workflowId: WorkflowIdSchema,
  stepId: StepIdSchema,
};
const pairExample = { taskId: ids.taskId, workflowId: ids.workflowId, stepId: 'review' };

const MarkedPositionSchema = z.object({ position: z.number().int().min(0), kind: ActionKindSchema });

export const StepEntryOpened = defineEvent({
  context: 'workflow',
  type: 'StepEntryOpened',
  schemaVersion: 1,
  data: z.object({
    ...pair,
    entrySeq: z.number().int().positive(),
    declarationDigest: z.string().regex(/^[0-9a-f]{64}$/),
    entryPath: EntryPathSchema,
    /** The positions that hold markers (every declared action that is not session-owned), at allocation. */
    markedPositions: z.array(MarkedPositionSchema).min(1),
    /** The process that admitted the task, and so dispatches the entry first. */
    openedByEpoch: ProcessEpochSchema,
    openedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      {
        ...pairExample, entrySeq: 2, declarationDigest: 'c'.repeat(64), entryPath: 'turn_complete',
        markedPositions: [{ position: 0, kind: 'clear_decisions' }, { position: 1, kind: 'queue_run_for_each_participant' }],
        openedByEpoch: ids.epoch, openedAt: at,
      },
    ],
    // a step with nothing under markers opens no record
    invalid: [{ ...pairExample, entrySeq: 2, declarationDigest: 'c'.repeat(64), entryPath: 'turn_complete', markedPositions: [], openedByEpoch: ids.epoch, openedAt: at }],
  },
});

const markerKey = { ...pair, entrySeq: z.number().int().positive(), position: z.number().int().min(0), kind: ActionKindSchema };
const markerExample = { ...pairExample, entrySeq: 2, position: 1, kind: 'queue_run_for_each_participant' };

export const OnEnterActionClaimed = defineEvent({
  context: 'workflow',
  type: 'OnEnterActionClaimed',
  schemaVersion: 1,
  data: z.object({
    ...markerKey,
    /** in_progress(epoch): the process now executing the action. */
    epoch: ProcessEpochSchema,
    /** The epoch whose claim this re-claims: its process was gone (its epoch lock could be taken). */
    takenOverFrom: ProcessEpochSchema.nullable(),
    claimedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      { ...markerExample, epoch: ids.epoch, takenOverFrom: null, claimedAt: at },
      { ...markerExample, epoch: ids.epoch, takenOverFrom: ids.otherEpoch, claimedAt: at },
    ],
    // an epoch is a random id, never a process id
    invalid: [{ ...markerExample, epoch: '4242', takenOverFrom: null, claimedAt: at }],
  },
});

/** One run a fan-out (or queue_run, run_code_review) queued: which seat, which profile, which job. */
export const QueuedRunSchema = z.object({
  participantId: ParticipantIdSchema.nullable(),
  agentProfileId: AgentProfileIdSchema,
  jobId: JobIdSchema,
  /** created, or deduplicated by the run queue's 24 h window (a replay of this very action). */
  outcome: z.enum(['created', 'deduplicated', 'coalesced']),
});
export type QueuedRun = z.infer<typeof QueuedRunSchema>;

/** A failed action's cause; a fan-out's carries the counts and the first failure in enumeration order. */
export const ActionFailureSchema = z.object({
  cause: z.string().min(1).max(2000),
  attempted: z.number().int().min(0).nullable(),
  failed: z.number().int().min(0).nullable(),
});

export const OnEnterActionFinished = defineEvent({
  context: 'workflow',
  type: 'OnEnterActionFinished',
  schemaVersion: 1,
  data: z
    .object({
      ...markerKey,
      outcome: MarkerOutcomeSchema,
      skipReason: SkipReasonSchema.nullable(),
      failure: ActionFailureSchema.nullable(),
      runs: z.array(QueuedRunSchema),
      /** The claim this finishes; null when the marker went from absent straight to skipped. */
      epoch: ProcessEpochSchema.nullable(),
      finishedAt: TimestampSchema,
    })
    .refine(
      (d) => (d.outcome === 'skipped') === (d.skipReason !== null) && (d.outcome === 'failed') === (d.failure !== null),
      'skipped carries a skip reason and failed a failure, nothing else carries either',
    ),
  examples: {
    valid: [
      {
        ...markerExample, outcome: 'done', skipReason: null, failure: null, epoch: ids.epoch, finishedAt: at,
        runs: [{ participantId: ids.participantId, agentProfileId: ids.agentProfileId, jobId: ids.jobId, outcome: 'created' }],
      },
      {
        ...markerExample, outcome: 'failed', skipReason: null, epoch: ids.epoch, finishedAt: at, runs: [],
        failure: { cause: 'participant seat-2 has no agent profile', attempted: 3, failed: 2 },
      },
      { ...markerExample, position: 2, kind: 'send_slack_message', outcome: 'skipped', skipReason: 'unrecognised', failure: null, runs: [], epoch: null, finishedAt: at },
    ],
    // skipped says why
    invalid: [{ ...markerExample, outcome: 'skipped', skipReason: null, failure: null, runs: [], epoch: null, finishedAt: at }],
  },
});

export const DecisionsCleared = defineEvent({
  context: 'workflow',
  type: 'DecisionsCleared',
  schemaVersion: 1,
  data: z.object({
    ...markerKey,
    /** The decisions the clear removed: every one recorded for the pair before it (none is a no-op clear). */
    clearedDecisionIds: z.array(z.string().min(1)),
    /** The claim this clear completes: the clear is the marker's `done`. */
    epoch: ProcessEpochSchema,
    clearedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...markerExample, position: 0, kind: 'clear_decisions', clearedDecisionIds: ['decision-1'], epoch: ids.epoch, clearedAt: at }],
    invalid: [{ ...markerExample, position: 0, kind: 'clear_decisions', clearedDecisionIds: 'decision-1', epoch: ids.epoch, clearedAt: at }],
  },
});

export const StepEntryTerminated = defineEvent({
  context: 'workflow',
  type: 'StepEntryTerminated',
  schemaVersion: 1,
  data: z.object({
    ...pair,
    entrySeq: z.number().int().positive(),
    reason: EntryTerminationSchema,
    terminatedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...pairExample, entrySeq: 2, reason: 'completed', terminatedAt: at }],
    invalid: [{ ...pairExample, entrySeq: 2, reason: 'finished', terminatedAt: at }],
  },
});

/**
 * The task left the step occupancy `entrySeq` (0: the one it was created into) of a step that declares
 * on_exit actions: appended with the move, so the exit's actions are done after the move's commit even
 * when they could not be done then (a service away, the process gone). The opener runs them first.
 */
export const StepExitOpened = defineEvent({
  context: 'workflow',
  type: 'StepExitOpened',
  schemaVersion: 1,
  data: z.object({
    ...pair,
    entrySeq: z.number().int().min(0),
    openedByEpoch: ProcessEpochSchema,
    openedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...pairExample, entrySeq: 2, openedByEpoch: ids.epoch, openedAt: at }],
    invalid: [{ ...pairExample, entrySeq: -1, openedByEpoch: ids.epoch, openedAt: at }],
  },
});

/** A process other than the exit's holder takes the exit over: its holder's process was gone. */
export const StepExitClaimed = defineEvent({
  context: 'workflow',
  type: 'StepExitClaimed',
  schemaVersion: 1,
  data: z.object({
    ...pair,
    entrySeq: z.number().int().min(0),
    epoch: ProcessEpochSchema,
    takenOverFrom: ProcessEpochSchema,
    claimedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...pairExample, entrySeq: 2, epoch: ids.epoch, takenOverFrom: ids.otherEpoch, claimedAt: at }],
    invalid: [{ ...pairExample, entrySeq: 2, epoch: ids.epoch, takenOverFrom: null, claimedAt: at }],
  },
});

/**
 * The exit's actions ran to their end: `done`, or `failed` (stopped at a failing action, AC-C5), or
 * `unresolvable` (the step or workflow is gone: nothing ran).
 */
export const StepExitFinished = defineEvent({
  context: 'workflow',
  type: 'StepExitFinished',
  schemaVersion: 1,
  data: z.object({
    ...pair,
    entrySeq: z.number().int().min(0),
    outcome: z.enum(['done', 'failed', 'unresolvable']),
    epoch: ProcessEpochSchema,
    finishedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...pairExample, entrySeq: 2, outcome: 'done', epoch: ids.epoch, finishedAt: at }],
    invalid: [{ ...pairExample, entrySeq: 2, outcome: 'skipped', epoch: ids.epoch, finishedAt: at }],
  },
});

const DecidedBySchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('person'), actor: z.string().min(1).max(200) }),
  z.object({ kind: z.literal('review_job'), jobId: JobIdSchema }),
]);

export const DecisionRecorded = defineEvent({
  context: 'workflow',
  type: 'DecisionRecorded',
  schemaVersion: 1,
  data: z.object({
    ...pair,
    /** The entry during which the decision was made; 0 for the occupancy the task was created into. */
    entrySeq: z.number().int().min(0),
    decisionId: z.string().min(1).max(200),
    /** The seat the decision counts for in a quorum; null for a person deciding without a seat. */
    participantId: ParticipantIdSchema.nullable(),
    verdict: VerdictSchema,
    comment: z.string().max(20_000).nullable(),
    decidedBy: DecidedBySchema,
    recordedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      { ...pairExample, entrySeq: 2, decisionId: 'decision-1', participantId: ids.participantId, verdict: 'approve', comment: 'looks right', decidedBy: { kind: 'review_job', jobId: ids.jobId }, recordedAt: at },
      { ...pairExample, entrySeq: 2, decisionId: 'decision-2', participantId: null, verdict: 'reject', comment: null, decidedBy: { kind: 'person', actor: 'user-17' }, recordedAt: at },
    ],
    // approve or reject, nothing in between
    invalid: [{ ...pairExample, entrySeq: 2, decisionId: 'd', participantId: null, verdict: 'maybe', comment: null, decidedBy: { kind: 'person', actor: 'u' }, recordedAt: at }],
  },
});

/** Each stream kind's events, as its decider emits them. */
export const workflowDefinitionEventContracts = [WorkflowDefined] as const;
export type WorkflowEvent = EventsOf<typeof workflowDefinitionEventContracts>;
export const agentProfileEventContracts = [AgentProfileRegistered] as const;
export type AgentProfileEvent = EventsOf<typeof agentProfileEventContracts>;
export const participantEventContracts = [StepParticipantAdded, StepParticipantRemoved] as const;
export type ParticipantEvent = EventsOf<typeof participantEventContracts>;
/** A task's stream: its placement, its session. */
export const taskEventContracts = [
  TaskCreated,
  TaskQueuedForStep,
  TaskAdmittedToStep,
  TaskUpdated,
  TaskDeleted,
  AgentContextReset,
  SessionConfigured,
  SessionModeSet,
  PlanModeChanged,
  AgentAutoStarted,
  AgentSessionStarted,
] as const;
export type TaskEvent = EventsOf<typeof taskEventContracts>;
export type TaskEventType = TaskEvent['type'];
export const taskEventTypes = eventTypesOf(taskEventContracts);
/** A task at a step: its step-entry records with their markers, and its decisions. */
export const taskAtStepEventContracts = [
  StepEntryOpened,
  OnEnterActionClaimed,
  OnEnterActionFinished,
  DecisionsCleared,
  StepEntryTerminated,
  DecisionRecorded,
  StepExitOpened,
  StepExitClaimed,
  StepExitFinished,
] as const;
export type TaskAtStepEvent = EventsOf<typeof taskAtStepEventContracts>;
export const taskAtStepEventTypes = eventTypesOf(taskAtStepEventContracts);

export const workflowEventContracts = [
  ...workflowDefinitionEventContracts,
  ...agentProfileEventContracts,
  ...participantEventContracts,
  ...taskEventContracts,
  ...taskAtStepEventContracts,
] as const;

export type WorkflowDefinedData = z.output<typeof WorkflowDefined.data>;
export type AgentProfileRegisteredData = z.output<typeof AgentProfileRegistered.data>;
export type StepParticipantAddedData = z.output<typeof StepParticipantAdded.data>;
export type StepParticipantRemovedData = z.output<typeof StepParticipantRemoved.data>;
export type TaskCreatedData = z.output<typeof TaskCreated.data>;
export type TaskQueuedForStepData = z.output<typeof TaskQueuedForStep.data>;
export type TaskAdmittedToStepData = z.output<typeof TaskAdmittedToStep.data>;
export type TaskUpdatedData = z.output<typeof TaskUpdated.data>;
export type TaskDeletedData = z.output<typeof TaskDeleted.data>;
export type AgentContextResetData = z.output<typeof AgentContextReset.data>;
export type SessionConfiguredData = z.output<typeof SessionConfigured.data>;
export type SessionModeSetData = z.output<typeof SessionModeSet.data>;
export type PlanModeChangedData = z.output<typeof PlanModeChanged.data>;
export type AgentAutoStartedData = z.output<typeof AgentAutoStarted.data>;
export type AgentSessionStartedData = z.output<typeof AgentSessionStarted.data>;
export type StepEntryOpenedData = z.output<typeof StepEntryOpened.data>;
export type OnEnterActionClaimedData = z.output<typeof OnEnterActionClaimed.data>;
export type OnEnterActionFinishedData = z.output<typeof OnEnterActionFinished.data>;
export type DecisionsClearedData = z.output<typeof DecisionsCleared.data>;
export type StepEntryTerminatedData = z.output<typeof StepEntryTerminated.data>;
export type DecisionRecordedData = z.output<typeof DecisionRecorded.data>;
export type StepExitOpenedData = z.output<typeof StepExitOpened.data>;
export type StepExitFinishedData = z.output<typeof StepExitFinished.data>;
export type SessionCause = z.output<typeof SessionCauseSchema>;
export type ActionFailure = z.output<typeof ActionFailureSchema>;
export type WaitingAt = z.output<typeof WaitingAtSchema>;
