import { Inject, Injectable } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { isEngineActionType, isSessionActionType, isTransitionActionType, type StepDefinition, type TriggerName } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { decisionsOfEntry, guardHolds, quorumSeatsOf, transitionTarget, type Task, type TransitionTarget } from '../../domain/index.js';
import { type StoredWorkflow, stepSeats } from '../../infrastructure/persistence/read-models.js';
import { loadTaskAtStep } from '../../infrastructure/persistence/streams.js';
import { notDoneNow, type ActionRun, type Trigger } from '../dispatch/action-run.js';
import { EngineActions } from '../dispatch/engine-actions.js';
import { SessionActions } from '../dispatch/session-actions.js';

const TRIGGER_OF: Record<Exclude<TriggerName, 'onEnter'>, Trigger> = { onTurnStart: 'on_turn_start', onTurnComplete: 'on_turn_complete', onExit: 'on_exit' };

export interface TriggerOccasion {
  task: Task;
  workflow: StoredWorkflow;
  step: StepDefinition;
  /** The occupancy the trigger fires for. */
  entrySeq: number;
  /** The event that fired it; the runs it queues are keyed by it. */
  cause: string;
  correlationId: string;
}

/** A trigger's action could not be done now (nothing written); the trigger may be run again. */
export class TriggerInterrupted extends Error {
  constructor(readonly actionType: string, readonly position: number, override readonly cause: Error) {
    super(`${actionType} at position ${position} could not be done now: ${cause.message}`);
    this.name = 'TriggerInterrupted';
  }
}

/**
 * on_turn_start, on_turn_complete and on_exit (docs/workflow-engine.md, "Triggers other than
 * on_enter"): the actions in declared order, stopping at the first failure (AC-C5); the first
 * transition whose guard holds is returned for the caller to carry out, and ends the trigger. An
 * action that did not fail but could not be done now — its append met the task's stream kept busy
 * past its patience (VERSION_CONFLICT: nothing written, send again), the job service did not take
 * its run (RunQueueUnavailable), or the engine's database could not be reached — is no failure: it is thrown as a TriggerInterrupted, for the caller
 * to run the trigger again (the job's event handed back); what ran before it is keyed by the firing
 * event, so running it again does it once.
 */
@Injectable()
export class TurnTriggers {

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(EngineActions) private readonly engine: EngineActions,
    @Inject(SessionActions) private readonly session: SessionActions,
    @InjectPinoLogger('triggers') private readonly log: PinoLogger,
  ) {}

  async run(trigger: Exclude<TriggerName, 'onEnter'>, occasion: TriggerOccasion): Promise<TransitionTarget | null> {
    return (await this.walk(trigger, occasion)).target;
  }

  /** The trigger's actions, and how the walk ended: a transition to carry out, or stopped at a failing action (`failed`). */
  async walk(trigger: Exclude<TriggerName, 'onEnter'>, occasion: TriggerOccasion): Promise<{ target: TransitionTarget | null; failed: boolean }> {
    const { task, workflow, step } = occasion;
    const where = { taskId: task.taskId, workflowId: workflow.workflowId, stepId: step.id, trigger: TRIGGER_OF[trigger] };
    for (const [position, action] of step[trigger].entries()) {
      if (isTransitionActionType(action.type)) {
        if (action.guard !== null) {
          const seats = await stepSeats(this.store.pool, workflow.workflowId, step.id, task.taskId);
          const pair = await loadTaskAtStep(this.store, task.taskId, workflow.workflowId, step.id);
          if (!guardHolds(action.guard, quorumSeatsOf(seats), decisionsOfEntry(pair, occasion.entrySeq))) continue;
        }
        const target = transitionTarget(action, workflow.definition, step.id);
        if (target) return { target, failed: false };
        continue;
      }
      const run: ActionRun = {
        trigger: TRIGGER_OF[trigger],
        task,
        workflow,
        step,
        position,
        action,
        entrySeq: occasion.entrySeq,
        entryPath: null,
        cause: occasion.cause,
        correlationId: occasion.correlationId,
      };
      try {
        if (isSessionActionType(action.type)) await this.session.execute(run);
        else if (isEngineActionType(action.type) && this.engine.wired) {
          const result = await this.engine.execute(run);
          if (result.outcome === 'failed') throw new Error(result.failure.cause);
        } else {
          this.log.warn({ ...where, actionType: action.type, position, reason: isEngineActionType(action.type) ? 'no_executor' : 'unrecognised' }, 'trigger action not executed');
        }
      } catch (error) {
        if (notDoneNow(error)) throw new TriggerInterrupted(action.type, position, error as Error);
        this.log.error({ rule: 'AC-C5', ...where, actionType: action.type, position, cause: error instanceof Error ? error.message : String(error) }, 'trigger stopped at a failing action');
        return { target: null, failed: true };
      }
    }
    return { target: null, failed: false };
  }
}
