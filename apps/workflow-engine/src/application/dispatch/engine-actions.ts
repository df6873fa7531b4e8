import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import { canonicalHash, GantryError, type QueuedRun } from '@gantry/contracts';
import { EventStore, handleWithDecider } from '@gantry/eventstore';
import {
  canonicalRunConfig,
  codeReviewRunKey,
  configDigest,
  entryRunKey,
  fanOutSeats,
  participantDecider,
  resolveQueueRunTarget,
  triggerRunKey,
  type Seat,
} from '../../domain/index.js';
import { RunQueue, RunQueueUnavailable } from '../../infrastructure/job-service/run-queue.js';
import { agentProfiles, entryRunOf, queuedRunByKey, recordQueuedRunJob, rememberQueuedRun, stepSeats } from '../../infrastructure/persistence/read-models.js';
import { streamIds } from '../../infrastructure/persistence/streams.js';
import { ENGINE_SETTINGS, type EngineSettings } from '../engine-settings.js';
import { TestHooks } from '../test-hooks.js';
import type { ActionResult, ActionRun } from './action-run.js';
import { fields } from './action-run.js';
import { DispatchDiagnostics } from './diagnostics.js';

/*
 * The engine-owned actions other than clear_decisions (which the dispatcher runs as one event with
 * its marker): queue_run_for_each_participant, queue_run, run_code_review, ensure_participant_seat
 * (docs/workflow-engine.md, "Actions", "Runs"). Every run is a REVIEW job queued in the job service
 * with a key naming that run and the coalescing exclusion.
 */
@Injectable()
export class EngineActions {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(RunQueue) private readonly runs: RunQueue,
    @Inject(DispatchDiagnostics) private readonly diagnostics: DispatchDiagnostics,
    @Inject(TestHooks) private readonly hooks: TestHooks,
    @Inject(ENGINE_SETTINGS) private readonly settings: EngineSettings,
  ) {}

  /** An installation without the office actions has no executor for them (AC-A6(b), AC-D2). */
  get wired(): boolean {
    return this.settings.officeActions;
  }

  async execute(run: ActionRun): Promise<ActionResult> {
    if (this.hooks.fails(`action:${run.action.type}`) && run.action.type !== 'run_code_review') {
      throw new Error(`${run.action.type} failed (forced by a test)`);
    }
    switch (run.action.type) {
      case 'queue_run_for_each_participant':
        return this.fanOut(run);
      case 'queue_run':
        return this.queueRun(run);
      case 'run_code_review':
        return this.codeReview(run);
      case 'ensure_participant_seat':
        return this.ensureSeat(run);
      default:
        throw new Error(`no executor for ${run.action.type}`);
    }
  }

  /** AC-A4, A5, C1, E1–E3, F2, G1, H1–H3, H5, H9. */
  private async fanOut(run: ActionRun): Promise<ActionResult> {
    const config = run.action.config;
    const role = typeof config.role === 'string' ? config.role : '';
    const where = fields(run);
    if (role === '') {
      this.diagnostics.fanOutWithoutRole(where);
      return { outcome: 'skipped', reason: 'malformed' };
    }
    // AC-F2: the seat set as read once, in one query, now.
    const seats = fanOutSeats(await stepSeats(this.store.pool, run.workflow.workflowId, run.step.id, run.task.taskId), role);
    if (seats.length === 0) {
      this.diagnostics.fanOutMatchedNobody({ ...where, stepName: run.step.name, role });
      return { outcome: 'done', runs: [] };
    }
    const profiles = await agentProfiles(this.store.pool, seats.map((s) => s.agentProfileId).filter((id) => id !== ''));
    const canonical = canonicalRunConfig('queue_run_for_each_participant', config);
    const digest = configDigest(canonical);
    const queued: QueuedRun[] = [];
    let suppressed = 0;
    const failures: string[] = [];
    for (const seat of seats) {
      const failed = (cause: string) => {
        failures.push(cause);
        this.diagnostics.fanOutParticipantFailed({ ...where, entrySeq: run.entrySeq, participantId: seat.participantId, agentProfileId: seat.agentProfileId, cause });
      };
      if (seat.agentProfileId === '') {
        failed(`participant ${seat.participantId} has no agent profile`);
        continue;
      }
      const profile = profiles.get(seat.agentProfileId);
      if (!profile) {
        failed(`agent profile ${seat.agentProfileId} is not registered`);
        continue;
      }
      try {
        const reply = await this.queueReview(run, seat, profile, canonical.reason, canonical.payload, this.keyFor(run, seat.agentProfileId, digest));
        queued.push(reply);
        if (reply.outcome === 'deduplicated') suppressed++;
      } catch (error) {
        if (!(error instanceof GantryError)) throw error;
        failed(`${error.code}: ${error.message}`);
      }
      await this.hooks.reached(`run:${run.position}:${queued.length + failures.length}`, `${run.task.taskId}@${run.step.id}#${run.entrySeq}`);
    }
    this.diagnostics.fanOutFinished({ ...where, entrySeq: run.entrySeq, role, matching: seats.length, enqueued: queued.length, suppressed, failed: failures.length });
    if (failures.length === 0) return { outcome: 'done', runs: queued };
    return { outcome: 'failed', failure: { cause: failures[0]!, attempted: seats.length, failed: failures.length }, runs: queued };
  }

  /** AC-A7: one run for the resolved target; a target that does not resolve is a failure. */
  private async queueRun(run: ActionRun): Promise<ActionResult> {
    const config = run.action.config;
    const seats: Seat[] = await stepSeats(this.store.pool, run.workflow.workflowId, run.step.id, run.task.taskId);
    const target = resolveQueueRunTarget(String(config.target), {
      primaryAgentProfileId: run.task.primaryAgentProfileId,
      ceoAgentProfileId: run.workflow.definition.ceoAgentProfileId,
      seats,
    });
    if (!target.ok) return { outcome: 'failed', failure: { cause: target.cause, attempted: null, failed: null }, runs: [] };
    const profile = (await agentProfiles(this.store.pool, [target.agentProfileId])).get(target.agentProfileId);
    if (!profile) return { outcome: 'failed', failure: { cause: `agent profile ${target.agentProfileId} is not registered`, attempted: null, failed: null }, runs: [] };
    const canonical = canonicalRunConfig('queue_run', config);
    const key = this.keyFor(run, target.agentProfileId, configDigest(canonical));
    const prompt = typeof config.prompt === 'string' ? config.prompt : undefined;
    try {
      const queued = await this.queueReview(run, { participantId: target.participantId, agentProfileId: target.agentProfileId }, profile, canonical.reason, canonical.payload, key, prompt);
      return { outcome: 'done', runs: [queued] };
    } catch (error) {
      if (!(error instanceof GantryError)) throw error;
      return { outcome: 'failed', failure: { cause: `${error.code}: ${error.message}`, attempted: null, failed: null }, runs: [] };
    }
  }

  /**
   * AC-A8: a review pass is a REVIEW job carrying the task, the step and `trigger: workflow_step`.
   * On on_enter its key carries a fresh attempt id, so it is not suppressed on a recovery (at least
   * once across a crash: its marker keeps it from running twice otherwise); on another trigger, which
   * holds no marker, it is keyed by the event that fired the trigger like every trigger run, so that
   * event handled again queues no second pass. A launch that fails is logged and does not fail the action.
   */
  private async codeReview(run: ActionRun): Promise<ActionResult> {
    const config = run.action.config;
    const profileId = (typeof config.agent_profile_id === 'string' ? config.agent_profile_id : null) ?? run.step.agentProfileId ?? run.task.primaryAgentProfileId;
    const reason = typeof config.reason === 'string' ? config.reason : 'code_review';
    try {
      if (this.hooks.fails('action:run_code_review')) throw new Error('the code review could not be started (forced by a test)');
      if (!profileId) throw new Error('no agent profile for the code review (none configured, none on the step, no primary one)');
      const profile = (await agentProfiles(this.store.pool, [profileId])).get(profileId);
      if (!profile) throw new Error(`agent profile ${profileId} is not registered`);
      const attemptId = run.trigger === 'on_enter' ? randomUUID() : `${run.trigger}:${run.cause}`;
      const key = codeReviewRunKey({ productId: run.task.productId, taskId: run.task.taskId, workflowId: run.workflow.workflowId, stepId: run.step.id, entrySeq: run.entrySeq, position: run.position, attemptId });
      const payload = { trigger: 'workflow_step', workflowStepId: run.step.id, taskId: run.task.taskId };
      const queued = await this.queueReview(run, { participantId: null, agentProfileId: profileId }, profile, reason, payload, key, `Review the code of task ${run.task.taskId}.`);
      return { outcome: 'done', runs: [queued] };
    } catch (error) {
      if (error instanceof RunQueueUnavailable) throw error;
      this.diagnostics.actionFailed({ ...fields(run), actionType: 'run_code_review', cause: `the review pass could not be started: ${(error as Error).message}`, position: run.position, trigger: run.trigger });
      return { outcome: 'done', runs: [] };
    }
  }

  /**
   * Adds the task-level seat unless one with that role and profile is there already. Its id is the
   * entry's and the position's: a resumed dispatch of the entry adds the same seat (a repeat changes
   * nothing), and a later entry adds a new one when the earlier seat was removed since (a removed
   * participant id cannot be seated again). An append that met the stream kept busy past its
   * patience (VERSION_CONFLICT: nothing written) is no failure: it goes to the dispatcher as it came.
   */
  private async ensureSeat(run: ActionRun): Promise<ActionResult> {
    const config = run.action.config as { role: string; agent_profile_id: string; decision_required: boolean };
    const seats = await stepSeats(this.store.pool, run.workflow.workflowId, run.step.id, run.task.taskId);
    if (seats.some((s) => s.role === config.role && s.agentProfileId === config.agent_profile_id)) return { outcome: 'done', runs: [] };
    const busy = this.hooks.seatAnswer(run.task.taskId);
    if (busy) throw busy;
    const participantId = `seat-${canonicalHash([run.task.taskId, run.workflow.workflowId, run.step.id, run.trigger, run.cause, run.entrySeq, run.position, config.role, config.agent_profile_id]).slice(0, 24)}`;
    await handleWithDecider(this.store, {
      decider: participantDecider,
      streamId: streamIds.participant(participantId),
      command: {
        type: 'AddStepParticipant',
        data: {
          participantId,
          workflowId: run.workflow.workflowId,
          stepId: run.step.id,
          taskId: run.task.taskId,
          role: config.role,
          agentProfileId: config.agent_profile_id,
          decisionRequired: config.decision_required,
          position: seats.length,
          now: this.store.clock().toISOString(),
        },
      },
      metadata: { correlationId: run.correlationId, actor: 'workflow-engine' },
      reply: () => undefined,
    });
    return { outcome: 'done', runs: [] };
  }

  private keyFor(run: ActionRun, agentProfileId: string, digest: string): string {
    if (run.trigger === 'on_enter') {
      return entryRunKey({ productId: run.task.productId, taskId: run.task.taskId, workflowId: run.workflow.workflowId, stepId: run.step.id, entrySeq: run.entrySeq, position: run.position, agentProfileId, configDigest: digest });
    }
    return triggerRunKey({ productId: run.task.productId, taskId: run.task.taskId, trigger: run.trigger, cause: run.cause, position: run.position, agentProfileId, configDigest: digest });
  }

  private async queueReview(
    run: ActionRun,
    seat: Pick<Seat, 'agentProfileId'> & { participantId: string | null },
    profile: { agentProfileId: string; model: string; thinkingBudget: number },
    reason: string,
    payload: Record<string, unknown> | null,
    idempotencyKey: string,
    prompt?: string,
  ): Promise<QueuedRun> {
    // An entry cut short (a crash, an outage) resumes with the declaration as it is then: a config
    // re-imported meanwhile gives this position's run another key. The run queued before for the same
    // entry, position and profile is this one, under its first key (docs/workflow-engine.md, "Runs").
    // Not a code review's: it runs again across a crash by design (AC-A8).
    if (run.trigger === 'on_enter' && run.action.type !== 'run_code_review') {
      const where = { taskId: run.task.taskId, workflowId: run.workflow.workflowId, stepId: run.step.id, entrySeq: run.entrySeq, position: run.position, actionType: run.action.type };
      const earlier = await entryRunOf(this.store.pool, { ...where, agentProfileId: seat.agentProfileId, keyScope: idempotencyKey.slice(0, idempotencyKey.lastIndexOf(':') + 1) });
      if (earlier) idempotencyKey = earlier.idempotencyKey;
    }
    await rememberQueuedRun(this.store.pool, {
      idempotencyKey,
      taskId: run.task.taskId,
      workflowId: run.workflow.workflowId,
      stepId: run.step.id,
      entrySeq: run.entrySeq,
      position: run.position,
      actionType: run.action.type,
      participantId: seat.participantId,
      agentProfileId: seat.agentProfileId,
    });
    // The job service answers a repeat of the key for 24 hours only, and an entry resumes whenever the
    // next start or takeover comes (docs/workflow-engine.md, "Runs"): a run whose job is already known
    // here (from the reply or its JobEnqueued) is that job, not a new one.
    const known = (await queuedRunByKey(this.store.pool, idempotencyKey))?.jobId;
    if (known) return { participantId: seat.participantId, agentProfileId: seat.agentProfileId, jobId: known, outcome: 'deduplicated' };
    const reply = await this.runs.enqueue(
      {
        kind: 'REVIEW',
        productId: run.task.productId,
        taskId: run.task.taskId,
        prompt: prompt ?? `Review task ${run.task.taskId} (${run.task.title}) at step ${run.step.name}. Record your decision with the record_decision tool: approve or reject, with a comment.`,
        ...(payload !== null ? { payload } : {}),
        agentProfile: { id: profile.agentProfileId, model: profile.model, thinkingBudget: profile.thinkingBudget },
        reason,
        idempotencyKey,
        excludeFromCoalescing: true,
        actor: 'workflow-engine',
      },
      run.correlationId,
    );
    await this.hooks.reached(`enqueued:${run.position}`, `${run.task.taskId}@${run.step.id}#${run.entrySeq}`);
    await recordQueuedRunJob(this.store.pool, idempotencyKey, reply.jobId);
    return { participantId: seat.participantId, agentProfileId: seat.agentProfileId, jobId: reply.jobId, outcome: reply.outcome };
  }
}
