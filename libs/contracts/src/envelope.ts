import { z } from 'zod';
import { ErrorPayloadSchema } from './errors.js';

/** Metadata every event carries besides its data. */
export const EventMetadataSchema = z.object({
  correlationId: z.string().min(1),
  causationId: z.string().min(1).nullable(),
  idempotencyKey: z.string().min(1).nullable(),
  actor: z.string().min(1).nullable(),
});
export type EventMetadata = z.infer<typeof EventMetadataSchema>;

/** The envelope of every event published on the bus; `data` is validated by the event's own schema. */
export const EventEnvelopeSchema = z.object({
  eventId: z.uuid(),
  /** PascalCase, as `defineEvent` requires. */
  type: z.string().regex(/^[A-Z][A-Za-z0-9]*$/, 'event type must be PascalCase'),
  schemaVersion: z.number().int().positive(),
  streamId: z.string().min(1).regex(/^[^.*>\s]+$/, 'stream id must be a single subject token'),
  streamVersion: z.number().int().positive(),
  position: z.number().int().positive(),
  occurredAt: z.iso.datetime({ offset: true }),
  correlationId: z.string().min(1),
  causationId: z.string().min(1).nullable(),
  idempotencyKey: z.string().min(1).nullable(),
  actor: z.string().min(1).nullable(),
  /**
   * How many messages the relay published together with this event, each the event calls for by
   * itself (a job offer with its enqueue; docs/architecture.md, "Companions"); absent when none was.
   * A consumer that would send such a message itself knows from it that it has gone.
   */
  companions: z.number().int().positive().optional(),
  data: z.unknown(),
});
export type EventEnvelope<D = unknown> = Omit<z.infer<typeof EventEnvelopeSchema>, 'data'> & { data: D };

function replyEnvelope<R extends z.ZodType>(result: R) {
  return z.discriminatedUnion('ok', [
    z.object({ ok: z.literal(true), result }),
    z.object({ ok: z.literal(false), error: ErrorPayloadSchema }),
  ]);
}

const replyEnvelopes = new WeakMap<z.ZodType, z.ZodType>();

/**
 * What a command reply looks like on the wire: a result or a typed error, never both. One schema
 * per result schema, made on first use: a zod schema compiles its parser on its first parse, so a
 * schema made per reply would be built and compiled again for every request.
 */
export function commandReplySchema<R extends z.ZodType>(result: R): ReturnType<typeof replyEnvelope<R>> {
  let schema = replyEnvelopes.get(result);
  if (!schema) replyEnvelopes.set(result, (schema = replyEnvelope(result)));
  return schema as ReturnType<typeof replyEnvelope<R>>;
}

/** A replica's answer on `servedCommandsSubject`: the names of the commands it serves. */
export const ServedCommandsReplySchema = z.object({ commands: z.array(z.string()) });
export type ServedCommandsReply = z.infer<typeof ServedCommandsReplySchema>;

/** Fields every command request may carry besides its own payload. */
export const CommandMetaSchema = z.object({
  correlationId: z.string().min(1).max(200).optional(),
  causationId: z.string().min(1).max(200).optional(),
  actor: z.string().min(1).max(200).optional(),
});

/** A list query's cursor, opaque: the previous page's nextCursor (docs/architecture.md, "Paged queries"). */
export const PageCursorSchema = z.string().min(1).max(500);

/** A list query's nextCursor: null on the last page. */
export const NextCursorSchema = z.string().nullable();
