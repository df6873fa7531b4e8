import { randomUUID } from 'node:crypto';
import { Controller, Inject } from '@nestjs/common';
import { cancelSprintRun, createSprintRun, ErrorCode, GantryError, resumeSprintRun, sprintRunIdFor, type ReplyOf, type RequestOf } from '@gantry/contracts';
import { EventStore, handleWithDecider, type Decision } from '@gantry/eventstore';
import type { CommandContext } from '@gantry/messaging';
import { CommandHandler } from '@gantry/service-runtime';
import {
  cancelSprintRunCommand,
  createSprintRunCommand,
  productResolution,
  resumeSprintRunCommand,
  sprintRunDecider,
  sprintRunExists,
  type SprintRunCommand,
  type SprintRunEvent,
  type SprintRunState,
} from '../domain/index.js';
import { productRow } from '../infrastructure/job-store.js';
import { OPEN_RUN_PER_BRANCH } from '../infrastructure/migrations.js';
import { idempotencyFor, metadataOf } from './command-context.js';

type Reply = ReplyOf<typeof createSprintRun>;

function statusReply(decision: Decision<SprintRunState, SprintRunEvent>): Reply {
  const run = decision.after;
  if (!sprintRunExists(run)) throw new Error('a decided sprint run command left no sprint run');
  return { sprintRunId: run.sprintRunId, status: run.status };
}

/** The user's sprint run commands (docs/domain.md, "Sprint run"); the effects they request run in SprintRunEffects. */
@Controller()
export class SprintRunCommandHandlers {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  @CommandHandler(createSprintRun)
  async create(request: RequestOf<typeof createSprintRun>, context?: CommandContext): Promise<Reply> {
    const sprintRunId = sprintRunIdFor(randomUUID());
    // Resolved before the transaction: a product registered or updated a moment later makes no difference to the run.
    const product = await productRow(this.store.pool, request.productId);
    const command = createSprintRunCommand(request, { sprintRunId, now: this.now(), product: product ? productResolution(product) : null });
    return this.decide(sprintRunId, command, 'create_sprint_run', request, context);
  }

  @CommandHandler(resumeSprintRun)
  resume(request: RequestOf<typeof resumeSprintRun>, context?: CommandContext): Promise<Reply> {
    return this.decide(request.sprintRunId, resumeSprintRunCommand(request, { now: this.now() }), 'resume_sprint_run', request, context);
  }

  @CommandHandler(cancelSprintRun)
  cancel(request: RequestOf<typeof cancelSprintRun>, context?: CommandContext): Promise<Reply> {
    return this.decide(request.sprintRunId, cancelSprintRunCommand(request, { now: this.now() }), 'cancel_sprint_run', request, context);
  }

  private now(): string {
    return this.store.clock().toISOString();
  }

  private async decide(
    sprintRunId: string,
    command: SprintRunCommand,
    name: string,
    request: { idempotencyKey: string; correlationId?: string; causationId?: string; actor?: string },
    context: CommandContext | undefined,
  ): Promise<Reply> {
    try {
      const executed = await handleWithDecider(this.store, {
        decider: sprintRunDecider,
        streamId: sprintRunId,
        command,
        metadata: metadataOf(request, context),
        idempotency: idempotencyFor(name, request),
        reply: statusReply,
      });
      return executed.result;
    } catch (error) {
      if (!isBranchHeld(error)) throw error;
      throw await this.branchHeldRefusal(sprintRunId, command);
    }
  }

  /**
   * A create or a resume that would make a second sprint run open on its (repository, branch) failed
   * on the runs view's index (docs/jobs.md, "Sprint runs"): refused, naming the run that holds it.
   */
  private async branchHeldRefusal(sprintRunId: string, command: SprintRunCommand): Promise<GantryError> {
    const place =
      command.type === 'CreateSprintRun'
        ? { repository: command.data.product?.repository ?? null, branch: command.data.branch }
        : (await this.store.pool.query<{ repository: string | null; branch: string }>(`SELECT repository, branch FROM sprint_runs WHERE sprint_run_id = $1`, [sprintRunId])).rows[0];
    const holder = place
      ? (
          await this.store.pool.query<{ sprint_run_id: string; status: string }>(
            `SELECT sprint_run_id, status FROM sprint_runs WHERE repository = $1 AND branch = $2 AND status IN ('QUEUED', 'RUNNING', 'PAUSED') AND sprint_run_id <> $3`,
            [place.repository, place.branch, sprintRunId],
          )
        ).rows[0]
      : undefined;
    const held = holder ? `sprint run ${holder.sprint_run_id} (${holder.status})` : 'another open sprint run';
    const verb = command.type === 'CreateSprintRun' ? 'create' : 'resume';
    return new GantryError(
      ErrorCode.PRECONDITION_FAILED,
      `cannot ${verb} sprint run ${sprintRunId}: branch ${place?.branch ?? '?'} of ${place?.repository ?? '?'} is held by ${held}; one sprint run works a branch at a time, until it is DONE, FAILED or CANCELLED`,
      { sprintRunId, heldBy: holder?.sprint_run_id ?? null, repository: place?.repository ?? null, branch: place?.branch ?? null },
    );
  }
}

function isBranchHeld(error: unknown): boolean {
  const e = error as { code?: string; constraint?: string };
  return e?.code === '23505' && e.constraint === OPEN_RUN_PER_BRANCH;
}
