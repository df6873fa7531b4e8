import { isUtf8 } from 'node:buffer';
import type { ValidationIssue } from '@gantry/contracts';

/** What a command's body is read as: UTF-8, and JSON text from its first byte (RFC 8259, section 8.1). */
export const REQUEST_CHARSET = 'utf-8';

const BYTE_ORDER_MARK = [0xef, 0xbb, 0xbf] as const;

/**
 * The text of a command's body, or the issue that refuses it, alike over NATS and over HTTP
 * (docs/architecture.md, "Commands"). Bytes that are not UTF-8 — a lone or truncated sequence, an
 * overlong form (`C0 AF` for `/`), an encoded surrogate, beyond U+10FFFF — are refused rather than
 * read as U+FFFD (or as what an overlong form spells): the caller's text would be stored, hashed for
 * its idempotency key and put on git's command line as something it never sent. A byte order mark is
 * not JSON text either.
 */
export function requestText(bytes: Uint8Array): { text: string } | { issue: ValidationIssue } {
  if (!isUtf8(bytes)) return { issue: { path: [], code: 'invalid_utf8', message: 'the body is not UTF-8 text' } };
  if (BYTE_ORDER_MARK.every((byte, i) => bytes[i] === byte)) {
    return { issue: { path: [], code: 'invalid_json', message: 'a byte order mark (U+FEFF) before the JSON text' } };
  }
  return { text: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8') };
}

/** Whether a body declared in `charset` (none: UTF-8) may be read as a command's. */
export function isRequestCharset(charset: string | null | undefined): boolean {
  return charset === null || charset === undefined || charset.toLowerCase() === REQUEST_CHARSET || charset.toLowerCase() === 'utf8';
}
