import { Controller, Inject } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import {
  addStepParticipant,
  ErrorCode,
  GantryError,
  getWorkflow,
  importWorkflow,
  registerAgentProfile,
  removeStepParticipant,
  scrubStrings,
  type ReplyOf,
  type RequestOf,
  type WorkflowDefinition,
} from '@gantry/contracts';
import { decideWithin, EventStore, handleWithDecider, storableValue, type UnitOfWork } from '@gantry/eventstore';
import type { CommandContext } from '@gantry/messaging';
import { CommandHandler } from '@gantry/service-runtime';
import { agentProfileDecider, decisionsOfEntry, participantDecider, quorumSeatsOf, stepOf, taskExists, transitionOnDecision, WORKFLOW_TEMPLATES, workflowDecider, type Task } from '../domain/index.js';
import { latestWorkflow, lockQuorum, stepSeats, workflowAndSeats } from '../infrastructure/persistence/read-models.js';
import { loadTask, loadTaskAtStep, streamIds } from '../infrastructure/persistence/streams.js';
import { idempotencyFor, metadataOf } from './command-context.js';
import { EntryFlow } from './entry-flow.js';
import { Placements, type PlacementOutcome } from './placements.js';
import { TestHooks } from './test-hooks.js';
import { parseWorkflowYaml } from './workflow-yaml.js';

/** Workflows (YAML or a template), agent profiles and task-level seats (docs/workflow-engine.md, "Definitions"). */
@Controller()
export class DefinitionCommands {

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(EntryFlow) private readonly flow: EntryFlow,
    @Inject(Placements) private readonly placements: Placements,
    @Inject(TestHooks) private readonly hooks: TestHooks,
    @InjectPinoLogger('definitions') private readonly log: PinoLogger,
  ) {}

  private now(): string {
    return this.store.clock().toISOString();
  }

  /** A refused definition (INVALID_COMMAND with its zod issues) writes nothing; a new version may free seats (a higher WIP limit). */
  @CommandHandler(importWorkflow)
  async importWorkflow(request: RequestOf<typeof importWorkflow>, context?: CommandContext): Promise<ReplyOf<typeof importWorkflow>> {
    const parsed = parseWorkflowYaml(request.yaml ?? WORKFLOW_TEMPLATES[request.template!]);
    const { unknownActions } = parsed;
    // Decided on as the log keeps it (a NUL, in a key too, as U+FFFD; a credential masked), so the
    // same YAML imported again is the same definition, and a key PostgreSQL refuses fails nothing.
    const definition = scrubStrings(storableValue(parsed.definition) as WorkflowDefinition, this.store.scrub);
    const metadata = metadataOf(request, context);
    const executed = await handleWithDecider(this.store, {
      decider: workflowDecider,
      streamId: streamIds.workflow(request.workflowId),
      command: { type: 'DefineWorkflow', data: { workflowId: request.workflowId, definition, unknownActionTypes: [...new Set(unknownActions.map((a) => a.type))], now: this.now() } },
      metadata,
      idempotency: idempotencyFor('import_workflow', request),
      reply: (d) => ({ version: d.after.status === 'DEFINED' ? d.after.version : 0, changed: d.decided.length > 0 }),
    });
    const warnings = unknownActions.map((a) => ({ ...a, message: `action type ${a.type} is not one the engine knows: it will be skipped and warned about at dispatch` }));
    for (const w of warnings) this.log.warn({ rule: 'AC-A6', workflowId: request.workflowId, stepId: w.stepId, trigger: w.trigger, position: w.position, actionType: w.type }, 'workflow declares an action type the engine does not know');
    for (const { rule, approvals, declaredSeats, ...at } of parsed.quorumShortfalls) {
      warnings.push({
        ...at,
        message: `step ${at.stepId}: ${rule} asks for ${approvals} approvals and the step declares ${declaredSeats} decision-required seats: it holds only once seats are added per task (add_step_participant)`,
      });
    }
    if (executed.result.changed && !executed.replayed) {
      for (const step of definition.steps) await this.flow.offer({ workflowId: request.workflowId, stepId: step.id }, metadata.correlationId);
    }
    return { workflowId: request.workflowId, version: executed.result.version, warnings };
  }

  @CommandHandler(getWorkflow)
  async getWorkflow(request: RequestOf<typeof getWorkflow>): Promise<ReplyOf<typeof getWorkflow>> {
    const workflow = await latestWorkflow(this.store.pool, request.workflowId);
    if (!workflow) throw new GantryError(ErrorCode.NOT_FOUND, `workflow ${request.workflowId} does not exist`);
    return workflow;
  }

  @CommandHandler(registerAgentProfile)
  async registerAgentProfile(request: RequestOf<typeof registerAgentProfile>, context?: CommandContext): Promise<ReplyOf<typeof registerAgentProfile>> {
    await handleWithDecider(this.store, {
      decider: agentProfileDecider,
      streamId: streamIds.agentProfile(request.agentProfileId),
      command: { type: 'RegisterAgentProfile', data: { agentProfileId: request.agentProfileId, model: request.model, thinkingBudget: request.thinkingBudget, now: this.now() } },
      metadata: metadataOf(request, context),
      idempotency: idempotencyFor('register_agent_profile', request),
      reply: () => undefined,
    });
    return { agentProfileId: request.agentProfileId };
  }

  @CommandHandler(addStepParticipant)
  async addStepParticipant(request: RequestOf<typeof addStepParticipant>, context?: CommandContext): Promise<ReplyOf<typeof addStepParticipant>> {
    await this.store.execute({ metadata: metadataOf(request, context), idempotency: idempotencyFor('add_step_participant', request) }, async (uow) => {
      const workflow = await latestWorkflow(uow.sql, request.workflowId);
      if (!workflow || !stepOf(workflow.definition, request.stepId)) {
        throw new GantryError(ErrorCode.NOT_FOUND, `workflow ${request.workflowId} has no step ${request.stepId}`, { workflowId: request.workflowId, stepId: request.stepId });
      }
      if (!taskExists(await loadTask(this.store, request.taskId, uow.sql))) throw new GantryError(ErrorCode.NOT_FOUND, `task ${request.taskId} does not exist`);
      const seats = await stepSeats(uow.sql, request.workflowId, request.stepId, request.taskId);
      if (seats.some((s) => s.taskId === null && s.participantId === request.participantId)) {
        throw new GantryError(ErrorCode.INVALID_COMMAND, `participant id ${request.participantId} is a seat the workflow declares at step ${request.stepId}`);
      }
      const { idempotencyKey: _k, correlationId: _c, causationId: _s, actor: _a, ...seat } = request;
      await decideWithin(uow, participantDecider, streamIds.participant(request.participantId), { type: 'AddStepParticipant', data: { ...seat, now: this.now() } });
    });
    return { participantId: request.participantId };
  }

  /**
   * A quorum is over the step's current seats: a removal re-evaluates the step's guarded transitions
   * at once, in its transaction, as a recorded decision does (docs/workflow-engine.md, "Decisions and quorum").
   */
  @CommandHandler(removeStepParticipant)
  async removeStepParticipant(request: RequestOf<typeof removeStepParticipant>, context?: CommandContext): Promise<ReplyOf<typeof removeStepParticipant>> {
    const metadata = metadataOf(request, context);
    const executed = await this.store.execute<PlacementOutcome | null>({ metadata, idempotency: idempotencyFor('remove_step_participant', request) }, async (uow) => {
      const removal = await decideWithin(uow, participantDecider, streamIds.participant(request.participantId), {
        type: 'RemoveStepParticipant',
        data: { participantId: request.participantId, now: this.now() },
      });
      if (removal.decided.length === 0 || removal.before.status !== 'SEATED') return null;
      return this.quorumAfterRemoval(uow, removal.before.seat);
    });
    if (executed.result) await this.flow.afterCommit(executed.result, { replayed: executed.replayed, correlationId: metadata.correlationId });
    return { participantId: request.participantId };
  }

  private async quorumAfterRemoval(uow: UnitOfWork, removed: { participantId: string; workflowId: string; stepId: string; taskId: string }): Promise<PlacementOutcome | null> {
    const { participantId, workflowId, stepId, taskId } = removed;
    await lockQuorum(uow.sql, this.store.schema, taskId);
    const task = await loadTask(this.store, taskId, uow.sql);
    if (!taskExists(task) || !task.placement.admitted || task.placement.workflowId !== workflowId || task.placement.stepId !== stepId) return null;
    const read = await workflowAndSeats(uow.sql, workflowId, stepId, taskId);
    const workflow = read.workflow;
    const step = workflow ? stepOf(workflow.definition, stepId) : null;
    if (!workflow || !step) return null;
    const seats = read.seats.filter((s) => !(s.taskId !== null && s.participantId === participantId));
    const pair = await loadTaskAtStep(this.store, taskId, workflowId, stepId, uow.sql);
    const entrySeq = (task as Task).currentEntry?.entrySeq ?? 0;
    const target = transitionOnDecision(step.onTurnComplete, workflow.definition, stepId, quorumSeatsOf(seats), decisionsOfEntry(pair, entrySeq));
    await this.hooks.reached('quorum', `${taskId}@${stepId}#${entrySeq}`);
    if (!target) return null;
    try {
      // From the occupancy whose quorum this is: a task moved on meanwhile is not pulled back.
      const { moved, refused } = await this.placements.placeUnlessMissing(uow, {
        taskId,
        workflowId: target.workflowId,
        stepId: target.stepId,
        entryPath: target.entryPath,
        from: { workflowId, stepId, entrySeq },
      });
      if (refused) this.log.warn({ taskId, stepId, participantId, target, code: refused.code, error: refused.message }, 'the transition the removal of a seat called for was refused');
      return moved;
    } catch (error) {
      // The task left the step after it was read above: the seat is removed, that occupancy's quorum moves nothing.
      if (error instanceof GantryError && error.code === ErrorCode.PRECONDITION_FAILED && error.details?.from !== undefined) return null;
      throw error;
    }
  }
}
