import { Controller, Inject } from '@nestjs/common';
import { ErrorCode, GantryError, getPullRequest, markPrReadyForReview, pullRequestIdFor, type ReplyOf, type RequestOf } from '@gantry/contracts';
import { decideWithin, EventStore } from '@gantry/eventstore';
import type { CommandContext } from '@gantry/messaging';
import { CommandHandler, commandMetadata } from '@gantry/service-runtime';
import { phaseOf, pullRequestDecider, pullRequestView } from '../domain/index.js';
import { PullRequestLog } from './pull-request-log.js';

const { metadataOf, idempotencyFor } = commandMetadata('prs');

/** The pr-service's commands: the job service's "sprint run DONE" (PR-8), and the PR as it stands. */
@Controller()
export class PullRequestCommandHandlers {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(PullRequestLog) private readonly prs: PullRequestLog,
  ) {}

  @CommandHandler(markPrReadyForReview)
  async markReady(request: RequestOf<typeof markPrReadyForReview>, context?: CommandContext): Promise<ReplyOf<typeof markPrReadyForReview>> {
    const pullRequestId = pullRequestIdFor(request.repository, request.branch);
    const executed = await this.store.execute(
      { metadata: metadataOf(request, context), idempotency: idempotencyFor('mark_pr_ready_for_review', request) },
      async (uow) => {
        const command = {
          type: 'RecordSprintRunDone' as const,
          data: { pullRequestId, repository: request.repository, branch: request.branch, sprintRunId: request.sprintRunId, now: this.prs.now() },
        };
        const { after } = await decideWithin(uow, pullRequestDecider, pullRequestId, command);
        return { pullRequestId, phase: phaseOf(after), prUrl: after.pr?.url ?? null };
      },
    );
    return executed.result;
  }

  @CommandHandler(getPullRequest)
  async get(request: RequestOf<typeof getPullRequest>): Promise<ReplyOf<typeof getPullRequest>> {
    const state = await this.prs.stateOf(request.repository, request.branch);
    if (!state) throw new GantryError(ErrorCode.NOT_FOUND, `no pull request is tracked for ${request.repository} ${request.branch}`);
    return pullRequestView(state);
  }
}
