import { z } from 'zod';
import { JobIdSchema, TimestampSchema } from '../jobs/values.js';
import { WorkflowDefinitionSchema, workflowDefinitionExample } from './definition.js';
import { ActionFailureSchema, QueuedRunSchema, SessionSettingsSchema } from './events.js';
import {
  AgentProfileIdSchema,
  EntryPathSchema,
  EntryTerminationSchema,
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

export const WorkflowViewSchema = z.object({
  workflowId: WorkflowIdSchema,
  version: z.number().int().positive(),
  definition: WorkflowDefinitionSchema,
  unknownActionTypes: z.array(z.string()),
  definedAt: TimestampSchema,
});
export type WorkflowView = z.infer<typeof WorkflowViewSchema>;

export const workflowViewExample: WorkflowView = {
  workflowId: ids.workflowId,
  version: 1,
  definition: workflowDefinitionExample,
  unknownActionTypes: [],
  definedAt: ids.at,
};

/** Where a task is: the step it occupies (admitted) or is parked at, and the full step it waits for. */
export const PlacementSchema = z.object({
  workflowId: WorkflowIdSchema,
  stepId: StepIdSchema,
  admitted: z.boolean(),
  queuedForStepId: StepIdSchema.nullable(),
  queuedSince: TimestampSchema.nullable(),
});
export type Placement = z.infer<typeof PlacementSchema>;

/** A step entry by its identity: (task, workflow, step, entry_seq). */
export const EntryRefSchema = z.object({
  workflowId: WorkflowIdSchema,
  stepId: StepIdSchema,
  entrySeq: z.number().int().positive(),
  entryPath: EntryPathSchema,
  /** A step-entry record exists: the step declares actions under markers. */
  stepEntryRecorded: z.boolean(),
});
export type EntryRef = z.infer<typeof EntryRefSchema>;

/** What a command that places a task answers: where it is now, and the entry it made, if any. */
export const PlacementReplySchema = z.object({
  taskId: TaskIdSchema,
  placement: PlacementSchema,
  /** The step entry this command made; null when it admitted the task nowhere new (queued, or already there). */
  entry: EntryRefSchema.nullable(),
});
export type PlacementReply = z.infer<typeof PlacementReplySchema>;

export const placementReplyExample: PlacementReply = {
  taskId: ids.taskId,
  placement: { workflowId: ids.workflowId, stepId: 'review', admitted: true, queuedForStepId: null, queuedSince: null },
  entry: { workflowId: ids.workflowId, stepId: 'review', entrySeq: 2, entryPath: 'manual_move', stepEntryRecorded: true },
};

export const SessionViewSchema = z.object({
  taskId: TaskIdSchema,
  /** The agent session the task's next job continues, or starts fresh when `started` is false. */
  sessionId: z.uuid(),
  started: z.boolean(),
  settings: SessionSettingsSchema,
  planMode: z.boolean(),
  mode: SessionPermissionModeSchema.nullable(),
  /** What the next job's `--permission-mode` is: plan while plan mode is on, else the session mode, else the configured one. */
  permissionMode: SessionPermissionModeSchema.nullable(),
});
export type SessionView = z.infer<typeof SessionViewSchema>;

export const sessionViewExample: SessionView = {
  taskId: ids.taskId,
  sessionId: '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182',
  started: false,
  settings: { model: null, thinkingBudget: null, permissionMode: null, allowedTools: null },
  planMode: true,
  mode: null,
  permissionMode: 'plan',
};

export const DecisionViewSchema = z.object({
  decisionId: z.string(),
  entrySeq: z.number().int().min(0),
  participantId: ParticipantIdSchema.nullable(),
  verdict: VerdictSchema,
  comment: z.string().nullable(),
  decidedBy: z.discriminatedUnion('kind', [
    z.object({ kind: z.literal('person'), actor: z.string() }),
    z.object({ kind: z.literal('review_job'), jobId: JobIdSchema }),
  ]),
  recordedAt: TimestampSchema,
});
export type DecisionView = z.infer<typeof DecisionViewSchema>;

export const ParticipantViewSchema = z.object({
  participantId: ParticipantIdSchema,
  /** null: declared on the workflow (template level); else the task it was added for. */
  taskId: TaskIdSchema.nullable(),
  role: z.string(),
  agentProfileId: ParticipantAgentProfileIdSchema,
  decisionRequired: z.boolean(),
  position: z.number().int().min(0),
});
export type ParticipantView = z.infer<typeof ParticipantViewSchema>;

export const TaskViewSchema = z.object({
  taskId: TaskIdSchema,
  productId: TaskProductIdSchema,
  title: z.string(),
  primaryAgentProfileId: AgentProfileIdSchema.nullable(),
  placement: PlacementSchema,
  currentEntry: EntryRefSchema.extend({ admittedAt: TimestampSchema }).nullable(),
  /** The seats of the step the task is at (template and task level). */
  participants: z.array(ParticipantViewSchema),
  /** The decisions recorded for the task at its current step (what a quorum counts). */
  decisions: z.array(DecisionViewSchema),
  session: SessionViewSchema,
  createdAt: TimestampSchema,
});
export type TaskView = z.infer<typeof TaskViewSchema>;

export const MarkerStateSchema = z.enum(['absent', 'in_progress', 'done', 'skipped', 'failed']);
export type MarkerState = z.infer<typeof MarkerStateSchema>;

export const MarkerViewSchema = z.object({
  position: z.number().int().min(0),
  kind: z.string(),
  state: MarkerStateSchema,
  epoch: ProcessEpochSchema.nullable(),
  skipReason: SkipReasonSchema.nullable(),
  failure: ActionFailureSchema.nullable(),
  runs: z.array(QueuedRunSchema),
});
export type MarkerView = z.infer<typeof MarkerViewSchema>;

export const StepEntryViewSchema = z.object({
  taskId: TaskIdSchema,
  workflowId: WorkflowIdSchema,
  stepId: StepIdSchema,
  entrySeq: z.number().int().positive(),
  entryPath: EntryPathSchema,
  declarationDigest: z.string(),
  openedByEpoch: ProcessEpochSchema,
  openedAt: TimestampSchema,
  terminal: z.boolean(),
  termination: EntryTerminationSchema.nullable(),
  markers: z.array(MarkerViewSchema),
});
export type StepEntryView = z.infer<typeof StepEntryViewSchema>;
