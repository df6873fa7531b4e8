import type { CoalescingKey, CoalescingWindowOpenedData } from '@gantry/contracts';
import type { RunQueueRequest } from './run-queue.js';

/*
 * Each coalescing key (product, kind, agent profile, reason) has a stream that records the jobs
 * opened under it. The run queue reads the stream's recent end, loads those jobs, decides with
 * routeEnqueue, and when it creates a job appends CoalescingWindowOpened at the version it read:
 * the append is the compare-and-set that keeps two concurrent requests from both creating.
 */

export type CoalescingEvent = { type: 'CoalescingWindowOpened'; data: CoalescingWindowOpenedData };

export interface CoalescingWindows {
  /** The jobs opened under the key, oldest first (as far back as the stream was read). */
  opened: Array<{ jobId: string; openedAt: string }>;
}

export const initialCoalescingWindows: CoalescingWindows = { opened: [] };

export function evolveCoalescingWindows(state: CoalescingWindows, event: CoalescingEvent): CoalescingWindows {
  switch (event.type) {
    case 'CoalescingWindowOpened':
      return { opened: [...state.opened, { jobId: event.data.jobId, openedAt: event.data.openedAt }] };
  }
}

/** The key a request coalesces under; null when it is excluded or has no agent profile to key it on. */
export function coalescingKeyOf(request: RunQueueRequest): CoalescingKey | null {
  if (request.excludeFromCoalescing || request.agentProfileId === null) return null;
  return { productId: request.productId, kind: request.kind, agentProfileId: request.agentProfileId, reason: request.reason };
}

/** What the key's stream records when the run queue creates a job for it. */
export function coalescingWindowOpened(key: CoalescingKey, jobId: string, now: string): CoalescingEvent {
  return { type: 'CoalescingWindowOpened', data: { ...key, jobId, openedAt: now } };
}
