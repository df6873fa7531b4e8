import type { CommandMetadata, IdempotencyOptions } from '@gantry/eventstore';
import type { CommandContext } from '@gantry/messaging';

type CallMeta = { correlationId?: string; causationId?: string; actor?: string };

/** The request without the fields that are about the call: what an idempotency key must protect. */
export function intentOf<T extends CallMeta>(request: T): Omit<T, keyof CallMeta> {
  const { correlationId: _c, causationId: _k, actor: _a, ...intent } = request;
  return intent;
}

export function metadataOf(request: CallMeta, context: Pick<CommandContext, 'correlationId'> | undefined): CommandMetadata {
  return {
    correlationId: request.correlationId ?? context?.correlationId ?? 'job-service',
    causationId: request.causationId ?? null,
    actor: request.actor ?? null,
  };
}

/** Every key is unique per command: the same key on two commands names two different intents. */
export function idempotencyFor<T extends CallMeta & { idempotencyKey: string }>(command: string, request: T, ttlMs?: number): IdempotencyOptions {
  return { scope: `jobs.${command}`, key: request.idempotencyKey, request: intentOf(request), ...(ttlMs ? { ttlMs } : {}) };
}
