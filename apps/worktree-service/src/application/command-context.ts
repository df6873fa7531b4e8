import { createHash } from 'node:crypto';
import { commandMetadata } from '@gantry/service-runtime';

export const { metadataOf, idempotencyFor } = commandMetadata('worktrees');

/**
 * The lease id of an acquire: derived from its idempotency key, so a retry of the same acquire —
 * even one whose first attempt's reply was lost — names the same lease (a UUID, version 8 layout).
 */
export function leaseIdFor(idempotencyKey: string): string {
  const hex = createHash('sha256').update(`worktrees.acquire_worktree\0${idempotencyKey}`).digest('hex');
  const variant = ((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}
