import { Controller, Inject } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { deriveIdempotencyKey, ErrorCode, GantryError, markPrReadyForReview, returnTasksToTodo, SprintRunCancelled, SprintRunCompleted, type EventEnvelope } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { CommandClient, RetryLater } from '@gantry/messaging';
import { DurableConsumer, holdHereIfAsked, type ConsumerContext } from '@gantry/service-runtime';
import { OWN_EVENTS_DURABLE } from './durables.js';
import { effectsOf } from './sprint-run-effects.js';

/**
 * A sprint run's requests to other services (docs/jobs.md, "Sprint runs"): its open tasks back to
 * TO_DO (the workflow engine) when it is cancelled, its pull request ready for review (the
 * pr-service) when it is done. Each has a durable consumer of its own, apart from the run's own
 * effects (SprintRunEffects): a service that does not answer leaves its request to be asked again
 * (RetryLater, until answered, never dead-lettered for it) and holds back nothing else — neither the
 * run's jobs cancelled in this service nor the other events of the stream. Each request is keyed by
 * the event that asked for it, so asking again is answered once in effect.
 */
@Controller()
export class SprintRunRequests {

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(CommandClient) private readonly client: CommandClient,
    @InjectPinoLogger('sprint-run-requests') private readonly log: PinoLogger,
  ) {}

  @DurableConsumer({ name: 'job-service-sprint-run-task-returns', source: 'jobs', type: SprintRunCancelled.type, startsAfter: OWN_EVENTS_DURABLE })
  async onCancelled(cause: EventEnvelope, { sql }: ConsumerContext): Promise<void> {
    for (const effect of await effectsOf(this.store, cause, sql)) {
      if (effect.type !== 'RETURN_TASKS_TO_TODO') continue;
      // The workflow engine owns tasks and their place on a workflow: it takes each one it knows back
      // to its workflow's start step (docs/workflow-engine.md, AC-T1). Keyed by the cancelling event.
      const reply = await this.ask('the workflow engine', () => this.client.request(returnTasksToTodo, {
        sprintRunId: effect.sprintRunId,
        taskIds: effect.taskIds,
        idempotencyKey: deriveIdempotencyKey('sprint-run', { returnTasksToTodo: cause.eventId }),
        ...metadataOf(cause),
      }, { timeoutMs: 10_000 }));
      this.log.info({
        sprintRunId: effect.sprintRunId,
        returned: reply.returned.map((r) => r.taskId),
        unknownTaskIds: reply.unknownTaskIds,
      }, 'sprint run cancelled: its open tasks are back at their start step');
    }
  }

  @DurableConsumer({ name: 'job-service-sprint-run-pr-ready', source: 'jobs', type: SprintRunCompleted.type, startsAfter: OWN_EVENTS_DURABLE })
  async onCompleted(cause: EventEnvelope, { sql }: ConsumerContext): Promise<void> {
    for (const effect of await effectsOf(this.store, cause, sql)) {
      if (effect.type !== 'MARK_PR_READY_FOR_REVIEW') continue;
      if (effect.repository === null) {
        this.log.warn({ sprintRunId: effect.sprintRunId }, 'a sprint run created before products names no repository; its pull request is not made ready');
        continue;
      }
      // The pr-service's command, keyed by the completing event: a redelivery asks once.
      const reply = await this.ask('the pr-service', () => this.client.request(markPrReadyForReview, {
        repository: effect.repository!,
        branch: effect.branch,
        sprintRunId: effect.sprintRunId,
        idempotencyKey: deriveIdempotencyKey('sprint-run', { markPrReady: cause.eventId }),
        ...metadataOf(cause),
      }, { timeoutMs: 10_000 }));
      // Test-only (GANTRY_TEST_HOLD_AT): the request answered, the event's transaction not committed yet.
      await holdHereIfAsked('sprint-run-requests:pr-ready-asked');
      this.log.info({ sprintRunId: effect.sprintRunId, pullRequestId: reply.pullRequestId, phase: reply.phase }, 'sprint run done: its pull request is made ready for review');
    }
  }

  /** A request no one answered (TIMEOUT, UNAVAILABLE) is asked again later; a refusal fails the handler. */
  private async ask<T>(service: string, request: () => Promise<T>): Promise<T> {
    try {
      return await request();
    } catch (error) {
      if (error instanceof GantryError && (error.code === ErrorCode.TIMEOUT || error.code === ErrorCode.UNAVAILABLE)) {
        throw new RetryLater(`${service} did not answer (${error.code})`, 2000);
      }
      throw error;
    }
  }
}

function metadataOf(cause: EventEnvelope): { correlationId: string; causationId: string; actor: string } {
  return { correlationId: cause.correlationId, causationId: cause.eventId, actor: 'job-service' };
}
