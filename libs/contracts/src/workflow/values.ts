import { z } from 'zod';
import { isSubjectToken } from '../subjects.js';

/*
 * The identifiers and small values of the workflow context. Ids end up in stream ids and subject
 * tokens, so each is one token of letters, digits, `_` and `-` (no dots, no blanks).
 */

/** A workflow's id: lower-case, as in `office-default`. */
export const WorkflowIdSchema = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'a workflow id is lower-case letters, digits, _ and -');
export type WorkflowId = z.infer<typeof WorkflowIdSchema>;

/** A step's id, unique within its workflow: lower-case, as in `review`. */
export const StepIdSchema = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'a step id is lower-case letters, digits, _ and -');
export type StepId = z.infer<typeof StepIdSchema>;

/** A task's id (the board's card): letters, digits, _ and -, as in `T-533`. */
export const TaskIdSchema = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/, 'a task id is letters, digits, _ and -');
export type TaskId = z.infer<typeof TaskIdSchema>;

/** A participant seat's id. */
export const ParticipantIdSchema = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/, 'a participant id is letters, digits, _ and -');

/**
 * The product a task belongs to; its jobs carry it, and it scopes the idempotency keys of the runs
 * the engine queues (`<productId>/on_enter:<digest>`), so it uses the key scope's characters only.
 */
export const TaskProductIdSchema = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$/, 'a product id is letters, digits, _ and -');

/** An agent profile's id, as the job service takes it (no whitespace). */
export const AgentProfileIdSchema = z.string().min(1).max(200).regex(/^[^\s]+$/, 'an agent profile id has no whitespace');

/**
 * The id a profile is registered under, which names its stream, and so the subject its events are
 * published on: one NATS subject token (no ".", "*", ">" or control characters either). Older
 * events and seats keep the wider `AgentProfileIdSchema`.
 */
export const NewAgentProfileIdSchema = AgentProfileIdSchema.refine(isSubjectToken, 'an agent profile id has no ".", "*", ">" or control characters');

/**
 * A participant's agent profile. The empty string is a seat nobody has been assigned to yet: a
 * fan-out reports it as a failure for that participant rather than guessing a profile.
 */
export const ParticipantAgentProfileIdSchema = z.union([z.literal(''), AgentProfileIdSchema]);

/** A process epoch: a fresh random id per workflow-engine process start (never reused). */
export const ProcessEpochSchema = z.uuid();

export const VerdictSchema = z.enum(['approve', 'reject']);
export type Verdict = z.infer<typeof VerdictSchema>;

/**
 * How a task arrived at a step. Turn complete, manual move (and the sprint run's return to the
 * first step), WIP promotion (from where the task waited, or in place), workflow switch, the generic
 * task update and task start. Every one of them is a step entry dispatched by the one dispatcher.
 */
export const EntryPathSchema = z.enum([
  'turn_complete',
  'manual_move',
  'return_to_todo',
  'wip_promotion',
  'wip_promotion_in_place',
  'switch_workflow',
  'task_update',
  'task_start',
]);
export type EntryPath = z.infer<typeof EntryPathSchema>;

/** The states a per-action marker ends in. `absent` and `in_progress(epoch)` are not terminal. */
export const MarkerOutcomeSchema = z.enum(['done', 'skipped', 'failed']);
export type MarkerOutcome = z.infer<typeof MarkerOutcomeSchema>;

/** Why a marker was skipped: a closed list (docs/workflow-engine.md, "Markers"). */
export const SkipReasonSchema = z.enum([
  'unrecognised',
  'malformed',
  'no_executor',
  'declaration_changed',
  'step_left',
  'superseded',
  'unresolvable',
]);
export type SkipReason = z.infer<typeof SkipReasonSchema>;

/** Why a step entry became terminal. */
export const EntryTerminationSchema = z.enum([
  'completed',
  'declaration_changed',
  'step_left',
  'superseded',
  'unresolvable',
  'clear_decisions_failed',
]);
export type EntryTermination = z.infer<typeof EntryTerminationSchema>;

/** The permission modes a task's agent session can be put in (plan mode is `plan`). */
export const SessionPermissionModeSchema = z.enum(['acceptEdits', 'bypassPermissions', 'default', 'plan']);
export type SessionPermissionMode = z.infer<typeof SessionPermissionModeSchema>;

/** Shared example values, so the examples read as one story: task T-533 on the Office Default board. */
export const workflowExampleIds = {
  workflowId: 'office-default',
  taskId: 'T-533',
  productId: 'product-42',
  participantId: 'seat-reviewer-1',
  agentProfileId: 'profile-reviewer',
  epoch: '6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b',
  otherEpoch: '0a1b2c3d-4e5f-4a6b-8c7d-8e9f0a1b2c3d',
  jobId: 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f',
  at: '2026-11-30T08:00:00.000Z',
} as const;
