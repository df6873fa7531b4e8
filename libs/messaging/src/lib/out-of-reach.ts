import { NoRespondersError, TimeoutError } from '@nats-io/transport-node';
import { isDatabaseUnreachable } from '@gantry/eventstore';
import { serviceOutOfReach } from './commands.js';

/** What an outage a handler met kept from it: a database, or another service. */
export type OutOfReach = 'database' | 'service';

/**
 * What a handler's error says was out of reach, when it is an outage rather than a failure of the
 * handler's own (docs/DEVELOPING.md, "Event consumers"): a database it could not reach (on a pool or
 * connection of its own, e.g. an event store's), or another service — its command found nobody
 * serving it, got no answer in time, or was answered UNAVAILABLE (that service's database out of
 * reach, or the service stopping). Null for anything else: a bug, invalid data, any other refusal,
 * an error of the handler's own process whatever its code.
 * The errors it was caused by count too: a handler may wrap what it met in an error of its own.
 */
export function outOfReachOf(error: unknown): OutOfReach | null {
  for (let cause = error, depth = 0; cause !== undefined && cause !== null && depth < MAX_CAUSES; depth++) {
    if (isDatabaseUnreachable(cause)) return 'database';
    // CommandClient's TIMEOUT or UNAVAILABLE (not the same codes on an error of this process's own: a
    // git that is not installed waits for nothing), or NATS's own from a bare request (the cause of its
    // RequestError).
    if (serviceOutOfReach(cause) || cause instanceof NoRespondersError || cause instanceof TimeoutError) return 'service';
    cause = (cause as { cause?: unknown }).cause;
  }
  return null;
}

/** How deep a chain of causes is followed (a cycle ends there too). */
const MAX_CAUSES = 5;
