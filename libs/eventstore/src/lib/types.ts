import type { EventMetadata } from '@gantry/contracts';

/** An event as the log holds it. */
export interface StoredEvent<Type extends string = string, Data = unknown> {
  position: number;
  eventId: string;
  streamId: string;
  streamVersion: number;
  type: Type;
  schemaVersion: number;
  data: Data;
  metadata: EventMetadata;
  occurredAt: string;
}

/** An event a decider produced, before the log gave it a position. */
export interface NewEvent {
  type: string;
  data: unknown;
  schemaVersion?: number;
  /** Defaults to a fresh UUID; pass one to make a retried append produce the same id. */
  eventId?: string;
}

export interface CommandMetadata {
  correlationId: string;
  causationId?: string | null;
  actor?: string | null;
}

/** `0` means the stream must not exist yet; `'any'` skips the check (the unique constraint still holds). */
export type ExpectedVersion = number | 'any';

export interface IdempotencyOptions {
  /** Keys are unique within a scope (per tenant / product / command). */
  scope: string;
  key: string;
  /** The request as the caller sent it; its canonical hash is compared on a repeat. */
  request: unknown;
  /** After this the key may be used again for a new action (the run queue's 24 h window). */
  ttlMs?: number;
}

export interface ExecuteResult<R> {
  result: R;
  /** True when the result came from a stored receipt and nothing new was written. */
  replayed: boolean;
  events: StoredEvent[];
}
