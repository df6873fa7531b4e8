import type { Context } from '@gantry/contracts';
import type { CommandMetadata, IdempotencyOptions } from '@gantry/eventstore';
import type { CommandContext } from '@gantry/messaging';

type CallMeta = { correlationId?: string; causationId?: string; actor?: string };

/** The request without the fields that are about the call: what an idempotency key protects. */
export function intentOf<T extends CallMeta>(request: T): Omit<T, keyof CallMeta> {
  const { correlationId: _c, causationId: _k, actor: _a, ...intent } = request;
  return intent;
}

/**
 * A context's helpers for turning a command request into event metadata and idempotency options.
 * Keys are scoped per command (`<context>.<command>`): the same key on two commands names two intents.
 */
export function commandMetadata(context: Context) {
  return {
    metadataOf(request: CallMeta, call: Pick<CommandContext, 'correlationId'> | undefined): CommandMetadata {
      return {
        correlationId: request.correlationId ?? call?.correlationId ?? context,
        causationId: request.causationId ?? null,
        actor: request.actor ?? null,
      };
    },
    idempotencyFor<T extends CallMeta & { idempotencyKey: string }>(command: string, request: T, ttlMs?: number): IdempotencyOptions {
      return { scope: `${context}.${command}`, key: request.idempotencyKey, request: intentOf(request), ...(ttlMs ? { ttlMs } : {}) };
    },
  };
}
