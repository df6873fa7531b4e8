import { Inject, Injectable } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { EventStore, handleWithDecider } from '@gantry/eventstore';
import { CLAIM_REFUSAL, stepOf, taskAtStepDecider, taskExists, type TaskAtStepCommand } from '../../domain/index.js';
import { ProcessEpoch } from '../../infrastructure/liveness/process-epoch.js';
import { latestWorkflow } from '../../infrastructure/persistence/read-models.js';
import { loadTask, loadTaskAtStep, streamIds } from '../../infrastructure/persistence/streams.js';
import { notDoneNow } from '../dispatch/action-run.js';
import { RepeatingScan } from '../recovery/repeating-scan.js';
import { TestHooks } from '../test-hooks.js';
import { TriggerInterrupted, TurnTriggers } from './turn-triggers.js';

/** The exit of one step occupancy: the task left step `stepId` of `workflowId`, occupancy `entrySeq`. */
export interface ExitToRun {
  taskId: string;
  workflowId: string;
  stepId: string;
  entrySeq: number;
}

export type ExitOutcome = 'done' | 'failed' | 'unresolvable' | 'finished' | 'left_to_holder' | 'interrupted';

const exitKey = (e: ExitToRun) => `${e.taskId}~${e.workflowId}~${e.stepId}#${e.entrySeq}`;

/**
 * on_exit, after the move it follows has committed (docs/workflow-engine.md, "Triggers other than
 * on_enter"). The move records the exit (StepExitOpened, held by the process that moved); its actions
 * run in declared order and stop at the first failure (AC-C5), and the exit is then finished. An
 * action that could not be done now (its service did not take it, its stream stayed busy, the
 * engine's database could not be reached) leaves the exit open: it runs again from its first action, in the background with growing
 * pauses while this process lives, else at the next start or takeover, or at a repeat of the move —
 * every action is keyed by the exit, so what ran before is not done twice. A process other than the
 * holder runs an exit only once the holder's process is gone (it takes the exit over first).
 */
@Injectable()
export class StepExits {
  private readonly inFlight = new Map<string, Promise<ExitOutcome>>();
  /** The exits that could not be done now, waiting to run again (each with the correlation of its first run). */
  private readonly unfinished = new Map<string, { exit: ExitToRun; correlationId: string }>();
  private readonly runAgain = new RepeatingScan(
    () => this.runUnfinished(),
    () => this.unfinished.size > 0,
    { firstMs: 1_000, maxMs: 30_000 },
  );
  private stopping = false;

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(ProcessEpoch) private readonly process: ProcessEpoch,
    @Inject(TurnTriggers) private readonly triggers: TurnTriggers,
    @Inject(TestHooks) private readonly hooks: TestHooks,
    @InjectPinoLogger('on-exit') private readonly log: PinoLogger,
  ) {}

  /** Runs the exit's actions unless it is finished or another live process holds it; one run at a time per exit in this process. */
  run(exit: ExitToRun, correlationId: string): Promise<ExitOutcome> {
    const key = exitKey(exit);
    const previous = this.inFlight.get(key);
    const run = (previous ?? Promise.resolve())
      .catch(() => undefined)
      .then(() => this.runOnce(exit, correlationId));
    this.inFlight.set(key, run);
    void run.finally(() => {
      if (this.inFlight.get(key) === run) this.inFlight.delete(key);
    }).catch(() => undefined);
    return run;
  }

  /** Whether this process is running the exit, or waiting to run it again. */
  walking(exit: ExitToRun): boolean {
    const key = exitKey(exit);
    return this.inFlight.has(key) || this.unfinished.has(key);
  }

  /** Lets the runs again under way finish; nothing new starts, and an open exit waits for the next start. */
  async drain(): Promise<void> {
    this.stopping = true;
    await this.runAgain.stop();
  }

  private async runOnce(exit: ExitToRun, correlationId: string): Promise<ExitOutcome> {
    const where = { ...exit, epoch: this.process.epoch };
    try {
      const record = (await loadTaskAtStep(this.store, exit.taskId, exit.workflowId, exit.stepId)).exits[exit.entrySeq];
      if (!record) return 'finished';
      if (record.holder !== this.process.epoch) {
        if (!(await this.process.isGone(record.holder))) {
          this.log.info({ ...where, holder: record.holder }, 'on_exit left to the live process that holds it');
          return 'left_to_holder';
        }
        const taken = await this.decide(exit, { type: 'ClaimStepExit', data: { ...exit, epoch: this.process.epoch, staleEpoch: record.holder, now: this.now() } });
        if (!taken) return 'left_to_holder';
      }
      const workflow = await latestWorkflow(this.store.pool, exit.workflowId);
      const step = workflow ? stepOf(workflow.definition, exit.stepId) : null;
      const task = await loadTask(this.store, exit.taskId);
      if (!workflow || !step || !taskExists(task)) {
        this.log.warn(where, 'on_exit cannot be resolved (the task, workflow or step is gone); finished unexecuted');
        return (await this.finish(exit, 'unresolvable')) ? 'unresolvable' : 'left_to_holder';
      }
      const walked = await this.triggers.walk('onExit', { task, workflow, step, entrySeq: exit.entrySeq, cause: `exit:${exitKey(exit)}`, correlationId });
      const outcome = walked.failed ? 'failed' : 'done';
      return (await this.finish(exit, outcome)) ? outcome : 'left_to_holder';
    } catch (error) {
      // Nothing of the exit is lost: what ran is keyed by it, and the exit stays open to run again —
      // soon when the error says the same request may succeed later, else at the next start.
      const cause = error instanceof Error ? error.message : String(error);
      if (error instanceof TriggerInterrupted || notDoneNow(error)) {
        this.log.warn({ ...where, cause }, 'on_exit could not be done now; it runs again');
        this.retryLater(exit, correlationId);
      } else {
        this.log.error({ ...where, cause }, 'on_exit stopped; it resumes at the next start');
      }
      return 'interrupted';
    }
  }

  /** The exit runs again after a pause, while the process lives; a stopping process leaves it to the next start. */
  private retryLater(exit: ExitToRun, correlationId: string): void {
    if (this.stopping) return;
    this.unfinished.set(exitKey(exit), { exit, correlationId });
    this.runAgain.request();
  }

  /**
   * Every exit waiting to run again runs, side by side as they stopped; one that cannot be done now
   * again waits for the next pause (RepeatingScan: 1 s at first, twice as long each time, up to 30 s).
   */
  private async runUnfinished(): Promise<void> {
    const waiting = [...this.unfinished.values()];
    this.unfinished.clear();
    await Promise.all(
      waiting.map(({ exit, correlationId }) =>
        this.run(exit, correlationId).catch((error: unknown) => {
          this.log.error({ ...exit, error: error instanceof Error ? error.message : String(error) }, 'on_exit retry failed; it resumes at the next start');
        }),
      ),
    );
  }

  private async finish(exit: ExitToRun, outcome: 'done' | 'failed' | 'unresolvable'): Promise<boolean> {
    await this.hooks.loseConnectionOnce('exit-database-lost-once', exit.taskId, this.store.pool);
    return this.decide(exit, { type: 'FinishStepExit', data: { ...exit, outcome, epoch: this.process.epoch, now: this.now() } });
  }

  /** One command on the pair's stream; false when another process holds the exit (it is left to that one). */
  private async decide(exit: ExitToRun, command: TaskAtStepCommand): Promise<boolean> {
    try {
      await handleWithDecider(this.store, {
        decider: taskAtStepDecider,
        streamId: streamIds.taskAtStep(exit.taskId, exit.workflowId, exit.stepId),
        command,
        metadata: { correlationId: `exit:${exitKey(exit)}`, actor: 'workflow-engine' },
        reply: () => undefined,
      });
      return true;
    } catch (error) {
      // Held by another process, or finished by one meanwhile: nothing left for this one.
      if (error instanceof GantryError && (error.code === ErrorCode.ALREADY_CLAIMED || error.details?.reason === CLAIM_REFUSAL.terminal)) return false;
      throw error;
    }
  }

  private now(): string {
    return this.store.clock().toISOString();
  }
}
