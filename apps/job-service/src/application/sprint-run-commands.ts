import { randomUUID } from 'node:crypto';
import { Controller, Inject } from '@nestjs/common';
import { cancelSprintRun, createSprintRun, resumeSprintRun, sprintRunIdFor, type ReplyOf, type RequestOf } from '@gantry/contracts';
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
    const executed = await handleWithDecider(this.store, {
      decider: sprintRunDecider,
      streamId: sprintRunId,
      command,
      metadata: metadataOf(request, context),
      idempotency: idempotencyFor(name, request),
      reply: statusReply,
    });
    return executed.result;
  }
}
