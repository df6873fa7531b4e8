import { Inject, Injectable } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { ErrorCode, GantryError, type PlacementReply } from '@gantry/contracts';
import { EventStore, type CommandMetadata, type IdempotencyOptions } from '@gantry/eventstore';
import { nextStepId, stepOf, taskExists } from '../domain/index.js';
import { latestWorkflow, tasksWaitingFor } from '../infrastructure/persistence/read-models.js';
import { loadTask, streamIds } from '../infrastructure/persistence/streams.js';
import { OnEnterDispatcher } from './dispatch/on-enter-dispatcher.js';
import { Placements, type PlacementOutcome, type PlacementRequest, type StepRef } from './placements.js';
import { LONGEST_SCAN_PAUSE_MS, RepeatingScan } from './recovery/repeating-scan.js';
import { TestHooks } from './test-hooks.js';
import { StepExits } from './triggers/step-exits.js';

/**
 * A placement and what follows its commit (docs/workflow-engine.md, "Entry paths"): the left step's
 * on_exit (recorded with the move), the on_enter dispatch of the entry it made (in the background: the command answers
 * once the move committed), and the promotion of a waiting task into each seat it freed. A command
 * repeated under its key changes nothing and dispatches the entry it made again, markers only —
 * unless another live process opened that entry: its own dispatch walks it — runs its exit
 * again if that is still open, and offers the seats it freed again. A promotion that fails after the
 * command's commit (a waiting task's stream kept busy) does not change the command's answer — it was
 * written — and the step is offered again after a pause, while this process lives (RepeatingScan).
 */
@Injectable()
export class EntryFlow {
  private readonly unoffered = new Map<string, StepRef & { correlationId: string }>();
  private readonly offerAgain: RepeatingScan;

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Placements) private readonly placements: Placements,
    @Inject(OnEnterDispatcher) private readonly dispatcher: OnEnterDispatcher,
    @Inject(StepExits) private readonly exits: StepExits,
    @Inject(TestHooks) private readonly hooks: TestHooks,
    @InjectPinoLogger('promotions') private readonly log: PinoLogger,
  ) {
    this.offerAgain = new RepeatingScan(
      () => this.offerUnoffered(),
      () => this.unoffered.size > 0,
      { firstMs: 1_000, maxMs: LONGEST_SCAN_PAUSE_MS },
      (delayMs) => this.log.info({ steps: this.unoffered.size, delayMs }, 'the freed seats not offered yet are offered again after a pause'),
    );
  }

  async place(request: PlacementRequest, options: { metadata: CommandMetadata; idempotency?: IdempotencyOptions }): Promise<PlacementReply> {
    // The task's stream is read with BEGIN (the placement's first read), not in a round trip of its own.
    const executed = await this.store.execute<PlacementOutcome>({ ...options, streams: [streamIds.task(request.taskId)] }, (uow) => this.placements.placeWithin(uow, request));
    if (request.entryPath === 'turn_complete') await this.hooks.loseConnectionOnce('turn-move-committed-database-lost-once', request.taskId, this.store.pool);
    await this.afterCommit(executed.result, { replayed: executed.replayed, correlationId: options.metadata.correlationId });
    return executed.result.reply;
  }

  /** The work after a placement's commit; a repeated command dispatches its entry again (markers only) and offers its freed seats again. */
  async afterCommit(outcome: PlacementOutcome, options: { replayed: boolean; correlationId: string }): Promise<void> {
    const left = outcome.left?.exitRecorded ? { taskId: outcome.reply.taskId, ...outcome.left } : null;
    // The exit the move recorded (on a repeat, if it is still open: left to its holder while that process lives).
    if (left) await this.exits.run(left, options.correlationId);
    for (const entry of outcome.admissions) {
      if (options.replayed) this.dispatcher.schedule(entry, 'resume', { repeated: true });
      else this.dispatcher.schedule(entry, 'live');
    }
    for (const step of outcome.freed) await this.offer(step, options.correlationId);
  }

  /**
   * Offers a step's free seats to its waiting tasks after the command that freed them committed. A
   * promotion that fails does not fail that command (it was written): it is logged, and the step is
   * offered again after a pause; one still not offered when the process stops is at the next start
   * (the recovery scan offers every awaited step).
   */
  async offer(step: StepRef, correlationId: string): Promise<void> {
    try {
      await this.promote(step, correlationId);
    } catch (error) {
      this.log.warn({ workflowId: step.workflowId, stepId: step.stepId, correlationId, error: error instanceof Error ? error.message : String(error) }, 'a freed seat could not be offered now; it is offered again after a pause');
      this.unoffered.set(`${step.workflowId}~${step.stepId}`, { ...step, correlationId });
      this.offerAgain.request();
    }
  }

  /** No step is offered again any more; an offer under way ends first. */
  stop(): Promise<void> {
    return this.offerAgain.stop();
  }

  private async offerUnoffered(): Promise<void> {
    for (const [key, { correlationId, ...step }] of [...this.unoffered]) {
      this.unoffered.delete(key);
      await this.offer(step, correlationId);
    }
  }

  /**
   * Seats came free at a step: the longest-waiting tasks that can take them do, one after the other
   * (each promotion its own transaction), until one waiting for the step does not get it — the step
   * is full again. More than one seat frees at once when a workflow's limit is raised. A waiting task
   * the placement no longer finds (deleted, or its workflow lost the step since it was listed) is
   * passed over for the next: the command that freed the seat committed, and answers as it did.
   * Offering a step whose seats are taken changes nothing, so a repeat may offer it again.
   */
  async promote(step: StepRef, correlationId: string): Promise<void> {
    const workflow = await latestWorkflow(this.store.pool, step.workflowId);
    if (!workflow || !stepOf(workflow.definition, step.stepId)) return;
    const fed = nextStepId(workflow.definition, step.stepId);
    for (const taskId of await tasksWaitingFor(this.store.pool, step.workflowId, step.stepId, fed)) {
      const task = await loadTask(this.store, taskId);
      if (!taskExists(task) || task.placement.queuedForStepId === null) continue;
      const forced = this.hooks.promotionAnswer(taskId);
      if (forced) throw forced;
      let executed;
      try {
        executed = await this.store.execute<PlacementOutcome>({ metadata: { correlationId, actor: 'workflow-engine' }, streams: [streamIds.task(taskId)] }, (uow) =>
          this.placements.placeWithin(uow, { taskId, workflowId: step.workflowId, stepId: task.placement.queuedForStepId, entryPath: 'wip_promotion' }),
        );
      } catch (error) {
        if (!(error instanceof GantryError) || error.code !== ErrorCode.NOT_FOUND) throw error;
        this.log.warn({ taskId, workflowId: step.workflowId, stepId: step.stepId, error: error.message }, 'a waiting task could not be promoted; the next one is offered the seat');
        continue;
      }
      await this.afterCommit(executed.result, { replayed: false, correlationId });
      const landed = executed.result.admissions[0];
      const landedHere = landed !== undefined && landed.workflowId === step.workflowId && landed.stepId === step.stepId;
      if (!landedHere && task.placement.queuedForStepId === step.stepId) return;
    }
  }
}
