import { createHash } from 'node:crypto';

/**
 * JSON with object keys sorted at every depth, so equal values always serialise identically.
 * Fields whose value is `undefined` are dropped (as JSON.stringify does); array order is kept.
 * Values that JSON cannot carry faithfully (NaN, ±Infinity, bigint, functions, symbols, Map, Set,
 * a top-level `undefined`) are refused rather than silently collapsed onto another value's hash.
 */
export function canonicalJson(value: unknown): string {
  return serialise(value, '$', new Set());
}

function serialise(value: unknown, path: string, ancestors: Set<object>, converted = false): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError(`cannot hash ${path}: ${value} has no JSON form`);
      return JSON.stringify(value);
    case 'object':
      break;
    default:
      throw new TypeError(`cannot hash ${path}: a ${typeof value} has no JSON form`);
  }
  // Dates and other values with a JSON form of their own hash as that form.
  const withJson = value as { toJSON?: (key: string) => unknown };
  if (!converted && typeof withJson.toJSON === 'function') return serialise(withJson.toJSON(''), path, ancestors, true);
  if (value instanceof Map || value instanceof Set) {
    throw new TypeError(`cannot hash ${path}: a ${value.constructor.name} has no JSON form`);
  }
  if (ancestors.has(value)) throw new TypeError(`cannot hash ${path}: the value contains itself`);
  ancestors.add(value);
  try {
    if (Array.isArray(value)) {
      // Inside arrays JSON.stringify writes null for undefined; keep that, so positions stay meaningful.
      return `[${value.map((item, i) => (item === undefined ? 'null' : serialise(item, `${path}[${i}]`, ancestors))).join(',')}]`;
    }
    const record = value as Record<string, unknown>;
    const fields: string[] = [];
    // Built as text rather than as an object: an own `__proto__` key or integer-like keys would
    // otherwise be lost or reordered by the object that held them.
    for (const key of Object.keys(record).sort()) {
      const field = record[key];
      if (field === undefined) continue;
      fields.push(`${JSON.stringify(key)}:${serialise(field, `${path}.${key}`, ancestors)}`);
    }
    return `{${fields.join(',')}}`;
  } finally {
    ancestors.delete(value);
  }
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
