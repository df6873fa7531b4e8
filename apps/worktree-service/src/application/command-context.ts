import { createHash } from 'node:crypto';
import type { CommandMetadata, IdempotencyOptions } from '@gantry/eventstore';
import type { CommandContext } from '@gantry/messaging';

type CallMeta = { correlationId?: string; causationId?: string; actor?: string };

/** The request without the fields that are about the call: what an idempotency key protects. */
export function intentOf<T extends CallMeta>(request: T): Omit<T, keyof CallMeta> {
  const { correlationId: _c, causationId: _k, actor: _a, ...intent } = request;
  return intent;
}

export function metadataOf(request: CallMeta, context: Pick<CommandContext, 'correlationId'> | undefined): CommandMetadata {
  return {
    correlationId: request.correlationId ?? context?.correlationId ?? 'worktree-service',
    causationId: request.causationId ?? null,
    actor: request.actor ?? null,
  };
}

/** Keys are unique per command: the same key on two commands names two intents. */
export function idempotencyFor<T extends CallMeta & { idempotencyKey: string }>(command: string, request: T): IdempotencyOptions {
  return { scope: `worktrees.${command}`, key: request.idempotencyKey, request: intentOf(request) };
}

/**
 * The lease id of an acquire: derived from its idempotency key, so a retry of the same acquire —
 * even one whose first attempt's reply was lost — names the same lease (a UUID, version 8 layout).
 */
export function leaseIdFor(idempotencyKey: string): string {
  const hex = createHash('sha256').update(`worktrees.acquire_worktree\0${idempotencyKey}`).digest('hex');
  const variant = ((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}
