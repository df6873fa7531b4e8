import { ErrorCode, GantryError, isSubjectToken } from '@gantry/contracts';

/** Room in one bus message for what an event's envelope has besides its data and metadata: ids, type, stream, position, time, headers. */
export const ENVELOPE_HEADROOM = 2048;

/**
 * Refuses (INVALID_COMMAND, before anything is written) an event the relay could never publish:
 * one whose stream id is not a single NATS subject token (its subject ends with the stream id), or
 * one whose envelope would be larger than `maxEventBytes`, the bus's max_payload. Such an event,
 * once committed, would stop the relay at it for good, and every later event of the service
 * behind it (docs/architecture.md, "Answers too large for the bus").
 */
export function refuseUnpublishableEvent(maxEventBytes: number | undefined, type: string, streamId: string, dataJson: string, metadataJson: string): void {
  refuseStreamIdOffTheBus(type, streamId);
  if (maxEventBytes === undefined) return;
  const bytes = Buffer.byteLength(dataJson) + Buffer.byteLength(metadataJson) + Buffer.byteLength(type) + Buffer.byteLength(streamId) + ENVELOPE_HEADROOM;
  if (bytes <= maxEventBytes) return;
  const message = `the ${type} event it would record is about ${bytes} bytes; the bus carries at most ${maxEventBytes}`;
  throw new GantryError(ErrorCode.INVALID_COMMAND, `refused: ${message}; nothing was recorded`, { bytes, maxEventBytes }, [{ path: [], message, code: 'too_large' }]);
}

/**
 * An id a command's contract let through with a ".", "*", ">", whitespace or a control character in
 * it (an agent profile id "a.b") made a stream id the relay cannot name a subject for.
 */
function refuseStreamIdOffTheBus(type: string, streamId: string): void {
  if (isSubjectToken(streamId)) return;
  const message = `the ${type} event it would record belongs to stream ${JSON.stringify(streamId.slice(0, 200))}, which cannot be published: a stream id has no ".", "*", ">", whitespace or control characters`;
  throw new GantryError(ErrorCode.INVALID_COMMAND, `refused: ${message}; nothing was recorded`, undefined, [{ path: [], message, code: 'invalid_stream_id' }]);
}
