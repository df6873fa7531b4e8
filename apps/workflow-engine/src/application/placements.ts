import { Inject, Injectable } from '@nestjs/common';
import { ErrorCode, GantryError, type EntryPath, type PlacementReply, type WorkflowDefinition } from '@gantry/contracts';
import { decideWithin, EventStore, foldStream, type UnitOfWork } from '@gantry/eventstore';
import {
  feederOf,
  occupancyOf,
  stepDeclaration,
  stepOf,
  taskAtStepDecider,
  taskDecider,
  taskExists,
  type StepSeats,
  type Task,
  type TaskEvent,
} from '../domain/index.js';
import { ProcessEpoch } from '../infrastructure/liveness/process-epoch.js';
import { latestWorkflow, seatsUnderLock, type StoredWorkflow } from '../infrastructure/persistence/read-models.js';
import { streamIds } from '../infrastructure/persistence/streams.js';
import { DispatchDiagnostics } from './dispatch/diagnostics.js';
import type { EntryToDispatch } from './dispatch/on-enter-dispatcher.js';
import { TestHooks } from './test-hooks.js';

export interface PlacementRequest {
  taskId: string;
  /** null: the task's own workflow. */
  workflowId: string | null;
  /** null: the workflow's start step. */
  stepId: string | null;
  entryPath: EntryPath;
  /**
   * The step occupancy the move is the transition of (a turn's): refused when the task has left it
   * since, so a turn that finished after the task moved on does not pull it back.
   */
  from?: { workflowId: string; stepId: string; entrySeq: number };
}

export interface StepRef {
  workflowId: string;
  stepId: string;
}

/** What a placement did, for the work after its commit (exit actions, dispatch, promotions). JSON, so a receipt can hold it. */
export interface PlacementOutcome {
  reply: PlacementReply;
  /** The entries to dispatch: at most one per placement. */
  admissions: EntryToDispatch[];
  /**
   * The step the task stopped occupying, with the occupancy it left; `exitRecorded`: the step declares
   * on_exit actions and the move recorded their exit (absent in an answer stored before exits were).
   */
  left: (StepRef & { entrySeq: number; exitRecorded?: boolean }) | null;
  /** Steps where a seat came free. */
  freed: StepRef[];
  /**
   * The epoch of the process that made the move (absent in an answer stored before it was kept): a
   * process that lost a move's answer tells its own move under the key from another's (UnansweredMoves).
   */
  movedBy?: string;
}

export function placementReplyOf(task: Task, admitted: Extract<TaskEvent, { type: 'TaskAdmittedToStep' }>['data'] | null): PlacementReply {
  const p = task.placement;
  return {
    taskId: task.taskId,
    placement: { workflowId: p.workflowId, stepId: p.stepId, admitted: p.admitted, queuedForStepId: p.queuedForStepId, queuedSince: p.queuedSince },
    entry: admitted
      ? { workflowId: admitted.workflowId, stepId: admitted.stepId, entrySeq: admitted.entrySeq, entryPath: admitted.entryPath, stepEntryRecorded: admitted.stepEntryRecorded }
      : null,
  };
}

/**
 * Puts a task at a step inside the caller's transaction (docs/workflow-engine.md, "Tasks and WIP
 * admission", "Step entries"): the admission locks of the steps involved, the seats counted under
 * them, the task decider's verdict, and — in the same append — the step-entry record of an entry
 * whose step declares marked actions. If that record cannot be written, nothing of the move lands.
 */
@Injectable()
export class Placements {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(ProcessEpoch) private readonly process: ProcessEpoch,
    @Inject(DispatchDiagnostics) private readonly diagnostics: DispatchDiagnostics,
    @Inject(TestHooks) private readonly hooks: TestHooks,
  ) {}

  /**
   * A transition a quorum called for (a decision recorded, a seat removed): placed like any move, but
   * a target the engine cannot place the task at (a switch_workflow to a workflow or step that does
   * not exist) is refused before the move writes anything, so the change that called for it stands,
   * the task stays, and the refusal is returned for the caller to answer and log — as a turn's
   * refused transition is (docs/workflow-engine.md, "Decisions and quorum").
   */
  async placeUnlessMissing(uow: UnitOfWork, request: PlacementRequest): Promise<{ moved: PlacementOutcome | null; refused: { code: string; message: string } | null }> {
    try {
      return { moved: await this.placeWithin(uow, request), refused: null };
    } catch (error) {
      if (!(error instanceof GantryError) || error.code !== ErrorCode.NOT_FOUND) throw error;
      return { moved: null, refused: { code: error.code, message: error.message } };
    }
  }

  async placeWithin(uow: UnitOfWork, request: PlacementRequest): Promise<PlacementOutcome> {
    const history = await uow.readStream(streamIds.task(request.taskId));
    // Folded as decideWithin folds it below: that fold then starts where this one ended, at the same events.
    const before = foldStream(taskDecider, history);
    if (!taskExists(before)) throw new GantryError(ErrorCode.NOT_FOUND, `task ${request.taskId} does not exist`, { taskId: request.taskId });
    const occupying = request.from ? occupancyOf(before) : null;
    if (request.from && (occupying?.workflowId !== request.from.workflowId || occupying.stepId !== request.from.stepId || occupying.entrySeq !== request.from.entrySeq)) {
      throw new GantryError(ErrorCode.PRECONDITION_FAILED, `task ${request.taskId} left step ${request.from.stepId} (entry ${request.from.entrySeq}) before this transition`, { taskId: request.taskId, from: request.from, now: occupying });
    }
    const workflowId = request.workflowId ?? before.placement.workflowId;
    const workflow = await latestWorkflow(uow.sql, workflowId);
    if (!workflow) throw new GantryError(ErrorCode.NOT_FOUND, `workflow ${workflowId} does not exist`, { workflowId });
    const stepId = request.stepId ?? workflow.definition.startStepId;
    const target = stepOf(workflow.definition, stepId);
    if (!target) throw new GantryError(ErrorCode.NOT_FOUND, `workflow ${workflowId} has no step ${stepId}`, { workflowId, stepId });
    await this.hooks.reached(`placing:${stepId}`, `${request.taskId}@${before.placement.stepId}#${before.currentEntry?.entrySeq ?? 0}`);
    const feederId = feederOf(workflow.definition, stepId);
    const occupied = await seatsUnderLock(uow.sql, this.store.schema, workflowId, feederId ? [stepId, feederId] : [stepId], request.taskId);
    const seatsOf = (id: string): StepSeats => {
      const step = stepOf(workflow.definition, id)!;
      return { stepId: id, wipLimit: step.wipLimit, occupied: occupied.get(id)!, declaration: stepDeclaration(step) };
    };
    // Decided on the task as read above (what `from` was checked against and what `left` and `freed`
    // are computed from), appended at that version: a move that committed since makes this one conflict
    // and be decided again on the task as it then is, never placed from a step it was not checked at.
    uow.knowStream(streamIds.task(request.taskId), history);
    const decision = await decideWithin(uow, taskDecider, streamIds.task(request.taskId), {
      type: 'PlaceTask',
      data: { taskId: request.taskId, placing: { workflowId, target: seatsOf(stepId), feeder: feederId ? seatsOf(feederId) : null, entryPath: request.entryPath }, now: this.now() },
    });
    const admitted = decision.decided.find((e): e is Extract<TaskEvent, { type: 'TaskAdmittedToStep' }> => e.type === 'TaskAdmittedToStep')?.data ?? null;
    if (admitted?.stepEntryRecorded) await this.openStepEntry(uow, admitted, workflow.definition);
    const after = decision.after as Task;
    const was = before.placement;
    const stillThere = after.placement.admitted && after.placement.workflowId === was.workflowId && after.placement.stepId === was.stepId;
    const leftOccupancy = was.admitted && !stillThere;
    const leftEntrySeq = before.currentEntry?.entrySeq ?? 0;
    const exitRecorded = leftOccupancy && (await this.openStepExit(uow, request.taskId, { workflowId: was.workflowId, stepId: was.stepId, entrySeq: leftEntrySeq }, workflow));
    return {
      reply: placementReplyOf(after, admitted),
      admissions: admitted
        ? [{ taskId: admitted.taskId, workflowId: admitted.workflowId, stepId: admitted.stepId, entrySeq: admitted.entrySeq, entryPath: admitted.entryPath }]
        : [],
      left: leftOccupancy ? { workflowId: was.workflowId, stepId: was.stepId, entrySeq: leftEntrySeq, exitRecorded } : null,
      freed: leftOccupancy ? [{ workflowId: was.workflowId, stepId: was.stepId }] : [],
      movedBy: this.process.epoch,
    };
  }

  /**
   * The exit of the occupancy the task leaves, in the move's append, when that step declares on_exit
   * actions: they run after the commit, and what cannot be done then is done later
   * (docs/workflow-engine.md, "Triggers other than on_enter").
   */
  private async openStepExit(uow: UnitOfWork, taskId: string, left: StepRef & { entrySeq: number }, target: StoredWorkflow): Promise<boolean> {
    const workflow = left.workflowId === target.workflowId ? target : await latestWorkflow(uow.sql, left.workflowId);
    const step = workflow ? stepOf(workflow.definition, left.stepId) : null;
    if (!step || step.onExit.length === 0) return false;
    await decideWithin(uow, taskAtStepDecider, streamIds.taskAtStep(taskId, left.workflowId, left.stepId), {
      type: 'OpenStepExit',
      data: { taskId, ...left, epoch: this.process.epoch, now: this.now() },
    });
    return true;
  }

  /** The step-entry record, in the admission's append; a failure here fails the whole move (AC-B7). */
  private async openStepEntry(uow: UnitOfWork, admitted: Extract<TaskEvent, { type: 'TaskAdmittedToStep' }>['data'], definition: WorkflowDefinition): Promise<void> {
    try {
      if (this.hooks.fails(`allocation:${admitted.stepId}`)) throw new Error('the step-entry record could not be written (forced by a test)');
      await decideWithin(uow, taskAtStepDecider, streamIds.taskAtStep(admitted.taskId, admitted.workflowId, admitted.stepId), {
        type: 'OpenStepEntry',
        data: {
          taskId: admitted.taskId,
          workflowId: admitted.workflowId,
          stepId: admitted.stepId,
          entrySeq: admitted.entrySeq,
          declarationDigest: admitted.declarationDigest,
          entryPath: admitted.entryPath,
          markedPositions: stepDeclaration(stepOf(definition, admitted.stepId)!).marked,
          epoch: this.process.epoch,
          now: this.now(),
        },
      });
    } catch (error) {
      if (error instanceof GantryError && error.code === ErrorCode.VERSION_CONFLICT) throw error;
      this.diagnostics.allocationFailed({ taskId: admitted.taskId, stepId: admitted.stepId, workflowId: admitted.workflowId, cause: error instanceof Error ? error.message : String(error) });
      // Not a refusal to store under the command's key: a retry may well succeed.
      throw new Error(`the step entry of task ${admitted.taskId} at step ${admitted.stepId} could not be recorded; the move did not happen`);
    }
  }

  private now(): string {
    return this.store.clock().toISOString();
  }
}
