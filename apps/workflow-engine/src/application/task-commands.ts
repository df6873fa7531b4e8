import { randomUUID } from 'node:crypto';
import { Controller, Inject } from '@nestjs/common';
import {
  createTask,
  deleteTask,
  ErrorCode,
  GantryError,
  moveTask,
  returnTasksToTodo,
  startTask,
  switchWorkflow,
  TaskIdSchema,
  updateTask,
  type PlacementReply,
  type ReplyOf,
  type RequestOf,
} from '@gantry/contracts';
import { decideWithin, EventStore } from '@gantry/eventstore';
import type { CommandContext } from '@gantry/messaging';
import { CommandHandler } from '@gantry/service-runtime';
import { stepDeclaration, stepOf, taskDecider, taskExists, type Task } from '../domain/index.js';
import { latestWorkflow, seatsUnderLock } from '../infrastructure/persistence/read-models.js';
import { loadTask, streamIds } from '../infrastructure/persistence/streams.js';
import { idempotencyFor, metadataOf } from './command-context.js';
import { EntryFlow } from './entry-flow.js';
import { placementReplyOf, Placements, type PlacementOutcome } from './placements.js';

/** Tasks and the entry paths people and other services take (docs/workflow-engine.md, "Entry paths"). */
@Controller()
export class TaskCommands {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Placements) private readonly placements: Placements,
    @Inject(EntryFlow) private readonly flow: EntryFlow,
  ) {}

  private now(): string {
    return this.store.clock().toISOString();
  }

  /** Creation is not a step entry: the task occupies its step (or is parked at a full one), nothing is dispatched. */
  @CommandHandler(createTask)
  async createTask(request: RequestOf<typeof createTask>, context?: CommandContext): Promise<ReplyOf<typeof createTask>> {
    const executed = await this.store.execute({ metadata: metadataOf(request, context), idempotency: idempotencyFor('create_task', request) }, async (uow) => {
      const workflow = await latestWorkflow(uow.sql, request.workflowId);
      if (!workflow) throw new GantryError(ErrorCode.NOT_FOUND, `workflow ${request.workflowId} does not exist`);
      const stepId = request.stepId ?? workflow.definition.startStepId;
      const step = stepOf(workflow.definition, stepId);
      if (!step) throw new GantryError(ErrorCode.NOT_FOUND, `workflow ${request.workflowId} has no step ${stepId}`);
      const occupied = await seatsUnderLock(uow.sql, this.store.schema, request.workflowId, [stepId], request.taskId);
      const decision = await decideWithin(uow, taskDecider, streamIds.task(request.taskId), {
        type: 'CreateTask',
        data: {
          taskId: request.taskId,
          productId: request.productId,
          title: request.title,
          workflowId: request.workflowId,
          primaryAgentProfileId: request.primaryAgentProfileId ?? null,
          sessionId: randomUUID(),
          target: { stepId, wipLimit: step.wipLimit, occupied: occupied.get(stepId)!, declaration: stepDeclaration(step) },
          now: this.now(),
        },
      });
      return placementReplyOf(decision.after as Task, null);
    });
    return executed.result;
  }

  @CommandHandler(moveTask)
  moveTask(request: RequestOf<typeof moveTask>, context?: CommandContext): Promise<ReplyOf<typeof moveTask>> {
    return this.flow.place(
      { taskId: request.taskId, workflowId: null, stepId: request.toStepId, entryPath: 'manual_move' },
      { metadata: metadataOf(request, context), idempotency: idempotencyFor('move_task', request) },
    );
  }

  /** The generic update: a title, and a step change that is a step entry like any other. */
  @CommandHandler(updateTask)
  async updateTask(request: RequestOf<typeof updateTask>, context?: CommandContext): Promise<ReplyOf<typeof updateTask>> {
    const metadata = metadataOf(request, context);
    const executed = await this.store.execute<PlacementOutcome>({ metadata, idempotency: idempotencyFor('update_task', request) }, async (uow) => {
      if (request.title !== undefined) {
        await decideWithin(uow, taskDecider, streamIds.task(request.taskId), { type: 'UpdateTaskTitle', data: { taskId: request.taskId, title: request.title, now: this.now() } });
      }
      if (request.workflowStepId !== undefined) {
        return this.placements.placeWithin(uow, { taskId: request.taskId, workflowId: null, stepId: request.workflowStepId, entryPath: 'task_update' });
      }
      const task = await loadTask(this.store, request.taskId, uow.sql);
      if (!taskExists(task)) throw new GantryError(ErrorCode.NOT_FOUND, `task ${request.taskId} does not exist`);
      return { reply: placementReplyOf(task, null), admissions: [], left: null, freed: [] };
    });
    await this.flow.afterCommit(executed.result, { replayed: executed.replayed, correlationId: metadata.correlationId });
    return executed.result.reply;
  }

  /** Task start takes the task to its workflow's start step (nothing happens when it is there already). */
  @CommandHandler(startTask)
  startTask(request: RequestOf<typeof startTask>, context?: CommandContext): Promise<ReplyOf<typeof startTask>> {
    return this.flow.place(
      { taskId: request.taskId, workflowId: null, stepId: null, entryPath: 'task_start' },
      { metadata: metadataOf(request, context), idempotency: idempotencyFor('start_task', request) },
    );
  }

  @CommandHandler(switchWorkflow)
  switchWorkflow(request: RequestOf<typeof switchWorkflow>, context?: CommandContext): Promise<ReplyOf<typeof switchWorkflow>> {
    return this.flow.place(
      { taskId: request.taskId, workflowId: request.toWorkflowId, stepId: request.toStepId ?? null, entryPath: 'switch_workflow' },
      { metadata: metadataOf(request, context), idempotency: idempotencyFor('switch_workflow', request) },
    );
  }

  /** The task leaves its step (its seat goes to a waiting task) and its step-entry records go with it. */
  @CommandHandler(deleteTask)
  async deleteTask(request: RequestOf<typeof deleteTask>, context?: CommandContext): Promise<ReplyOf<typeof deleteTask>> {
    const metadata = metadataOf(request, context);
    const executed = await this.store.execute({ metadata, idempotency: idempotencyFor('delete_task', request) }, async (uow) => {
      const decision = await decideWithin(uow, taskDecider, streamIds.task(request.taskId), { type: 'DeleteTask', data: { taskId: request.taskId, now: this.now() } });
      const was = (decision.before as Task).placement;
      return was.admitted ? { workflowId: was.workflowId, stepId: was.stepId } : null;
    });
    // On a repeat too: a step whose seats are taken changes nothing.
    if (executed.result) await this.flow.offer(executed.result, metadata.correlationId);
    return { taskId: request.taskId, deleted: true };
  }

  /** The sprint run's RETURN_TASKS_TO_TODO (AC-T1): each known task back to its workflow's start step. */
  @CommandHandler(returnTasksToTodo)
  async returnTasksToTodo(request: RequestOf<typeof returnTasksToTodo>, context?: CommandContext): Promise<ReplyOf<typeof returnTasksToTodo>> {
    const metadata = metadataOf(request, context);
    // The request as a whole is answered under its key first: which of its tasks are the engine's is
    // kept with the receipt, so the key sent again with other tasks (or another sprint run) is
    // IDEMPOTENCY_CONFLICT before any task moves, and a repeat returns the same tasks (one deleted
    // since is not reported unknown then). Its own scope: a task's key below is this key with more after it.
    const { result: known } = await this.store.execute<string[]>(
      { metadata, idempotency: { ...idempotencyFor('return_tasks_to_todo', request), scope: 'workflow.return_tasks_to_todo.request' } },
      async (uow) => {
        const tasks: string[] = [];
        for (const taskId of request.taskIds) {
          if (TaskIdSchema.safeParse(taskId).success && taskExists(await loadTask(this.store, taskId, uow.sql))) tasks.push(taskId);
        }
        return tasks;
      },
    );
    const returned: PlacementReply[] = [];
    for (const taskId of known) {
      // One placement per task, each under a key of its own derived from the request's.
      const reply = await this.flow.place(
        { taskId, workflowId: null, stepId: null, entryPath: 'return_to_todo' },
        { metadata, idempotency: { scope: 'workflow.return_tasks_to_todo', key: `${request.idempotencyKey}:${taskId}`, request: { taskId, sprintRunId: request.sprintRunId ?? null } } },
      );
      returned.push(reply);
    }
    return { returned, unknownTaskIds: request.taskIds.filter((taskId) => !known.includes(taskId)) };
  }
}
