import { Controller, Inject } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type pg from 'pg';
import { ErrorCode, GantryError, type AgentConfigOverride, type EventEnvelope } from '@gantry/contracts';
import { EventStore, handleWithDecider } from '@gantry/eventstore';
import { DurableConsumer, type ConsumerContext } from '@gantry/service-runtime';
import { jobDecider, nextSprintJob, sprintRunDecider, sprintRunEffects, type SprintConfigOverrides, type SprintRunEffect, type SprintRunEvent } from '../domain/index.js';
import { loadSprintRun } from '../infrastructure/job-store.js';
import { sprintRunEventTypes } from '../infrastructure/projections.js';
import { enqueueJobRequest } from './run-queue.js';
import { OWN_EVENTS_DURABLE } from './durables.js';

/**
 * The effect processor of sprint runs (docs/architecture.md, "Effects are data"). A durable consumer of the service's own
 * stream reads each sprint-run event, recomputes the effects it requests (pure: `sprintRunEffects`)
 * and carries out those of its own service (its jobs queued and cancelled); the requests to other
 * services are SprintRunRequests'. Every effect is idempotent by a key derived from the sprint run and the
 * effect — the sprint job's key, the cancelling event and job — so a redelivery or a replay enqueues
 * and cancels nothing twice.
 */
@Controller()
export class SprintRunEffects {

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @InjectPinoLogger('sprint-run-effects') private readonly log: PinoLogger,
  ) {}

  @DurableConsumer({ name: 'job-service-sprint-run-effects', source: 'jobs', durable: OWN_EVENTS_DURABLE, types: sprintRunEventTypes })
  async onEvent(envelope: EventEnvelope, { sql }: ConsumerContext): Promise<void> {
    if (!sprintRunEventTypes.includes(envelope.type as SprintRunEvent['type'])) return;
    for (const effect of await effectsOf(this.store, envelope, sql)) await this.execute(effect, envelope, sql);
  }

  private async execute(effect: SprintRunEffect, cause: EventEnvelope, sql: pg.PoolClient): Promise<void> {
    const metadata = { correlationId: cause.correlationId, causationId: cause.eventId, actor: 'job-service' };
    switch (effect.type) {
      case 'ENQUEUE_NEXT_SPRINT_JOB': {
        // Only a live run gets jobs, one task after the other (nextSprintJob): a replayed request of a run
        // that has moved on asks for nothing, and a task whose job is still queued or running (a pause
        // does not stop jobs) holds the next one back. The run's row is locked first, so two requests of
        // one run handled at once (a redelivery beside its successor's, two replicas) take turns, and the
        // second sees the job the first queued.
        await sql.query(`SELECT 1 FROM sprint_runs WHERE sprint_run_id = $1 FOR NO KEY UPDATE`, [effect.sprintRunId]);
        const { run: current } = await loadSprintRun(this.store, effect.sprintRunId, sql);
        if (!current || (current.status !== 'QUEUED' && current.status !== 'RUNNING')) return;
        const { rows } = await sql.query<{ task_id: string }>(
          `SELECT task_id FROM jobs WHERE sprint_run_id = $1 AND status IN ('QUEUED', 'CLAIMED', 'RUNNING') AND task_id IS NOT NULL`,
          [effect.sprintRunId],
        );
        const job = nextSprintJob(effect, current, rows.map((r) => r.task_id));
        if (job === null) return;
        try {
          await enqueueJobRequest(
            this.store,
            {
              kind: 'SPRINT_IMPLEMENTATION',
              productId: effect.productId,
              sprintId: effect.sprintId,
              sprintRunId: effect.sprintRunId,
              taskId: job.taskId,
              prompt: `Implement task ${job.taskId} of sprint ${effect.sprintId} on branch ${effect.branch}.`,
              // The sprint branch, started from the product's target branch when it does not exist yet.
              branch: effect.branch,
              ...(job.payload ? { payload: job.payload } : {}),
              ...configOverridesOf(effect.configOverrides),
              idempotencyKey: job.idempotencyKey,
              excludeFromCoalescing: true,
            },
            metadata,
            sql,
          );
        } catch (error) {
          // A refusal no retry changes — the run's branch, taken at its creation, is one the product's
          // repository as it is now refuses (its clone URL changed: docs/jobs.md, "Branches") — fails the
          // task, and the run with it, naming why; a resume asks again.
          if (!(error instanceof GantryError && error.code === ErrorCode.INVALID_COMMAND)) throw error;
          this.log.warn({ sprintRunId: effect.sprintRunId, taskId: job.taskId, code: error.code, error: error.message, causationId: cause.eventId }, "a sprint job's enqueue was refused: its task fails");
          await handleWithDecider(this.store, {
            decider: sprintRunDecider,
            streamId: effect.sprintRunId,
            command: {
              type: 'RecordSprintTaskFailed',
              data: { sprintRunId: effect.sprintRunId, taskId: job.taskId, jobId: null, error: error.message, superseded: false, now: this.store.clock().toISOString() },
            },
            metadata,
            idempotency: { scope: 'jobs.sprint_run_effect', key: `enqueue-refused:${cause.eventId}:${job.taskId}`, request: { taskId: job.taskId } },
            reply: () => ({ taskId: job.taskId }),
            within: sql,
          });
        }
        return;
      }
      case 'CANCEL_SPRINT_JOBS': {
        // Only while the run is still failed or cancelled: a cancel that comes late (its event handed back
        // and delivered again after a resume) would cancel the jobs the resume queued or kept, and leave
        // the run RUNNING with nothing to run (docs/jobs.md, "Sprint runs"). The run's row is read with a
        // share lock, so a resume that commits meanwhile waits for this cancel, and its enqueue then
        // sees the jobs cancelled and queues fresh ones.
        const { rows: [current] } = await sql.query<{ status: string }>(
          `SELECT status FROM sprint_runs WHERE sprint_run_id = $1 FOR SHARE`,
          [effect.sprintRunId],
        );
        if (current?.status !== 'FAILED' && current?.status !== 'CANCELLED') {
          this.log.info({ sprintRunId: effect.sprintRunId, status: current?.status ?? null, causationId: cause.eventId }, 'sprint run moved on before its cancel: nothing cancelled');
          return;
        }
        const { rows } = await sql.query<{ job_id: string }>(
          `SELECT job_id FROM jobs WHERE sprint_run_id = $1 AND status IN ('QUEUED', 'CLAIMED', 'RUNNING') ORDER BY enqueue_position`,
          [effect.sprintRunId],
        );
        for (const { job_id: jobId } of rows) {
          try {
            await handleWithDecider(this.store, {
              decider: jobDecider,
              streamId: jobId,
              command: { type: 'CancelJob', data: { jobId, reason: effect.reason, now: this.store.clock().toISOString() } },
              metadata,
              idempotency: { scope: 'jobs.sprint_run_effect', key: `cancel:${cause.eventId}:${jobId}`, request: { jobId } },
              reply: () => ({ jobId }),
              within: sql,
            });
          } catch (error) {
            // Finished in the meantime: nothing left to cancel. Any other refusal is a fault to retry.
            if (!(error instanceof GantryError && error.code === ErrorCode.INVALID_TRANSITION)) throw error;
            this.log.info({ sprintRunId: effect.sprintRunId, jobId, causationId: cause.eventId }, 'sprint job finished before its cancel');
          }
        }
        return;
      }
      case 'MARK_PR_READY_FOR_REVIEW':
      case 'RETURN_TASKS_TO_TODO':
        // Requests to other services, carried out by SprintRunRequests on their own: waiting here for a
        // service that does not answer would hold back (and roll back) the run's own effects.
        return;
      case 'RAISE_QUESTION':
        // Owned by another context (questions); no command for it exists yet.
        // The request stays in the log (the event that asked for it) for the owner to consume.
        this.log.info({ effect, causationId: cause.eventId }, 'sprint run effect requested of another context');
        return;
      default:
        return assertNever(effect);
    }
  }
}

/** The effects a sprint-run event requests, from the run as it was before the event (pure: `sprintRunEffects`). */
export async function effectsOf(store: EventStore, envelope: EventEnvelope, sql: pg.PoolClient): Promise<SprintRunEffect[]> {
  const { run: before } = await loadSprintRun(store, envelope.streamId, sql, envelope.streamVersion - 1);
  return sprintRunEffects({ type: envelope.type, data: envelope.data } as SprintRunEvent, before ?? { status: 'ABSENT' });
}

/**
 * The run's levels of the configuration cascade as the enqueue takes them. A run without overrides
 * adds nothing, so its jobs' requests (and their hashes under their keys) stay as they were.
 */
function configOverridesOf(overrides: SprintConfigOverrides): { configOverrides?: { product?: AgentConfigOverride; sprint?: AgentConfigOverride } } {
  if (overrides.product === null && overrides.sprint === null) return {};
  return {
    configOverrides: {
      ...(overrides.product === null ? {} : { product: overrides.product }),
      ...(overrides.sprint === null ? {} : { sprint: overrides.sprint }),
    },
  };
}

function assertNever(value: never): never {
  throw new Error(`unhandled sprint run effect ${JSON.stringify(value)}`);
}
