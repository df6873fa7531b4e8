import { createHash } from 'node:crypto';

/** JSON with object keys sorted at every depth, so equal values always serialise identically. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value instanceof Date) return value.toISOString();
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) {
      const v = (value as Record<string, unknown>)[key];
      if (v !== undefined) out[key] = sortKeys(v);
    }
    return out;
  }
  return value;
}

/** sha256 (hex) of the canonical JSON: the request hash stored with an idempotency receipt. */
export function canonicalHash(value: unknown): string {
  return createHash('sha256').update(canonicalJson(value)).digest('hex');
}

/**
 * An idempotency key for one intended action, derived from its identifying parts.
 * Parts must not contain personal data; the key is a digest, so it never reveals them anyway.
 */
export function deriveIdempotencyKey(scope: string, parts: Record<string, unknown>): string {
  return `${scope}:${canonicalHash(parts).slice(0, 40)}`;
}
