import type pg from 'pg';
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
  /**
   * What an earlier version of the command hashed as its request, for a change of what counts as the
   * request (docs/architecture.md, "Idempotency receipts"): a receipt stored under one of these within
   * its window answers this request too, if its `accepts` says so; any other is IDEMPOTENCY_CONFLICT.
   */
  former?: FormerRequest[];
}

/** A request as an earlier version of the command hashed it, and when an answer stored under it is this request's. */
export interface FormerRequest {
  request: unknown;
  /**
   * Whether the stored answer (`ok` with its result, or a refusal's error) is the answer to this request:
   * what the former request left out can be read from what the command recorded (on `sql`, the
   * command's transaction, or the store's pool for `answered`). Without it, every such answer is.
   */
  accepts?: (answer: { ok: true; result: unknown } | { ok: false; error: unknown }, sql: pg.Pool | pg.PoolClient) => Promise<boolean>;
}

export interface ExecuteResult<R> {
  result: R;
  /** True when the result came from a stored receipt and nothing new was written. */
  replayed: boolean;
  events: StoredEvent[];
}
