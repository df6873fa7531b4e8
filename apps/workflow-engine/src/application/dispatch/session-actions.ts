import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { SessionCause, SessionPermissionMode, SessionSettings } from '@gantry/contracts';
import { EventStore, handleWithDecider } from '@gantry/eventstore';
import { autoStartRunKey, taskDecider, triggerSessionId, type TaskCommand } from '../../domain/index.js';
import { RunQueue } from '../../infrastructure/job-service/run-queue.js';
import { agentProfiles, rememberQueuedRun, recordQueuedRunJob } from '../../infrastructure/persistence/read-models.js';
import { streamIds } from '../../infrastructure/persistence/streams.js';
import { TestHooks } from '../test-hooks.js';
import type { ActionRun } from './action-run.js';

/*
 * The session-owned actions (docs/workflow-engine.md, "Actions"): each is recorded on the task's
 * agent session as one event on the task's stream, which the runner reads for the next job's
 * command line. They hold no marker: a recovered dispatch never runs them (AC-B8).
 */
@Injectable()
export class SessionActions {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(RunQueue) private readonly runs: RunQueue,
    @Inject(TestHooks) private readonly hooks: TestHooks,
  ) {}

  async execute(run: ActionRun): Promise<void> {
    const taskId = run.task.taskId;
    await this.hooks.loseConnectionOnce('session-database-lost-once', taskId, this.store.pool);
    const cause: SessionCause = { workflowId: run.workflow.workflowId, stepId: run.step.id, trigger: run.trigger, entrySeq: run.entrySeq, position: run.position, entryPath: run.entryPath };
    const now = this.store.clock().toISOString();
    const config = run.action.config;
    switch (run.action.type) {
      case 'reset_agent_context': {
        // on_enter: once per entry, by the live dispatch only (AC-B8). Another trigger runs again when
        // its event is handled again: the id it draws is that event's, and a repeat changes nothing.
        const sessionId = run.trigger === 'on_enter' ? randomUUID() : triggerSessionId({ taskId, trigger: run.trigger, cause: run.cause, position: run.position });
        return this.record(run, { type: 'ResetAgentContext', data: { taskId, sessionId, cause, now } });
      }
      case 'configure_session': {
        const settings: SessionSettings = {
          model: typeof config.model === 'string' ? config.model : null,
          thinkingBudget: typeof config.thinking_budget === 'number' ? config.thinking_budget : null,
          permissionMode: (config.permission_mode as SessionPermissionMode | undefined) ?? null,
          allowedTools: Array.isArray(config.allowed_tools) ? (config.allowed_tools as string[]) : null,
        };
        return this.record(run, { type: 'ConfigureSession', data: { taskId, settings, cause, now } });
      }
      case 'set_session_mode':
        return this.record(run, { type: 'SetSessionMode', data: { taskId, mode: config.mode as SessionPermissionMode, cause, now } });
      case 'enable_plan_mode':
        return this.record(run, { type: 'ChangePlanMode', data: { taskId, enabled: true, cause, now } });
      case 'disable_plan_mode':
        return this.record(run, { type: 'ChangePlanMode', data: { taskId, enabled: false, cause, now } });
      case 'auto_start_agent':
        return this.autoStart(run, cause);
      default:
        throw new Error(`${run.action.type} is not a session action`);
    }
  }

  /** The step's agent, queued with the step prompt; one job per entry and declaration (a repeated dispatch finds it). */
  private async autoStart(run: ActionRun, cause: SessionCause): Promise<void> {
    const config = run.action.config;
    const profileId = (typeof config.agent_profile_id === 'string' ? config.agent_profile_id : null) ?? run.step.agentProfileId ?? run.task.primaryAgentProfileId;
    const profile = profileId ? ((await agentProfiles(this.store.pool, [profileId])).get(profileId) ?? null) : null;
    const prompt = (typeof config.prompt === 'string' ? config.prompt : null) ?? run.step.prompt ?? `Work on task ${run.task.taskId} (${run.task.title}) at step ${run.step.name}.`;
    const idempotencyKey = autoStartRunKey(
      { productId: run.task.productId, taskId: run.task.taskId, workflowId: run.workflow.workflowId, stepId: run.step.id, entrySeq: cause.entrySeq, position: run.position },
      run.trigger === 'on_enter' ? undefined : { trigger: run.trigger, cause: run.cause },
    );
    await rememberQueuedRun(this.store.pool, {
      idempotencyKey,
      taskId: run.task.taskId,
      workflowId: run.workflow.workflowId,
      stepId: run.step.id,
      entrySeq: run.entrySeq,
      position: run.position,
      actionType: 'auto_start_agent',
      participantId: null,
      agentProfileId: profileId ?? '',
    });
    const reply = await this.runs.enqueue(
      {
        kind: 'TASK_IMPLEMENTATION',
        productId: run.task.productId,
        taskId: run.task.taskId,
        prompt,
        ...(config.payload && typeof config.payload === 'object' ? { payload: config.payload as Record<string, unknown> } : {}),
        ...(profile ? { agentProfile: { id: profile.agentProfileId, model: profile.model, thinkingBudget: profile.thinkingBudget } } : {}),
        reason: 'auto_start_agent',
        idempotencyKey,
        excludeFromCoalescing: true,
        actor: 'workflow-engine',
      },
      run.correlationId,
    );
    await recordQueuedRunJob(this.store.pool, idempotencyKey, reply.jobId);
    await this.record(run, { type: 'RecordAutoStart', data: { taskId: run.task.taskId, jobId: reply.jobId, agentProfileId: profileId, cause, now: this.store.clock().toISOString() } });
  }

  /**
   * One session event, under a receipt keyed by what fired the action (the trigger's event, or the
   * entry) and its position: a trigger run again (its event handled again, an exit resumed) records
   * nothing its earlier run recorded, so a change another trigger made in between stays
   * (docs/workflow-engine.md, "Triggers other than on_enter").
   */
  private async record(run: ActionRun, command: TaskCommand): Promise<void> {
    const forced = this.hooks.sessionAnswer(run.task.taskId, `${run.trigger}:${run.cause}:${run.entrySeq}:${run.position}`);
    if (forced) throw forced;
    await handleWithDecider(this.store, {
      decider: taskDecider,
      streamId: streamIds.task(run.task.taskId),
      command,
      metadata: { correlationId: run.correlationId, actor: 'workflow-engine' },
      // The type is in the key, not the request: a workflow re-imported with another action at the
      // position before the trigger ran again makes that a new action, not a conflicting repeat.
      idempotency: { scope: 'workflow.session_action', key: `${run.task.taskId}/${run.trigger}:${run.cause}#${run.entrySeq}:${run.position}:${command.type}`, request: {} },
      reply: () => undefined,
    });
    await this.hooks.loseConnectionOnce('session-committed-database-lost-once', run.task.taskId, this.store.pool);
  }
}
