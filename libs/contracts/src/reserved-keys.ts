import { ErrorCode, GantryError, type ValidationIssue } from './errors.js';

/**
 * The one key a request may not use: JSON.parse and the YAML reader keep `__proto__` as an own key,
 * but zod's objects and records (and any assignment) take it for the object's prototype, so the key
 * and its value would be dropped from what is stored — or read through as inherited fields. Every
 * front door refuses it as INVALID_COMMAND; `constructor` and `prototype` are ordinary keys and kept
 * (docs/architecture.md, "Commands").
 */
export const RESERVED_KEY = '__proto__';

type Trail = { key: string | number; up: Trail } | null;

/**
 * The path to the first place in `value` that `found` marks — it answers, for a value met in the walk,
 * the rest of the path below it (`[]`: the value itself), or undefined — or undefined when there is none.
 * Walked without recursion, so as deep as a request nests, and each object once.
 */
export function pathToFirst(value: unknown, found: (item: unknown) => (string | number)[] | undefined): (string | number)[] | undefined {
  const seen = new Set<object>();
  const pending: [unknown, Trail][] = [[value, null]];
  while (pending.length > 0) {
    const [item, trail] = pending.pop()!;
    const isObject = item !== null && typeof item === 'object';
    if (isObject) {
      if (seen.has(item)) continue;
      seen.add(item);
    }
    const below = found(item);
    if (below !== undefined) {
      const path = [...below];
      for (let at = trail; at; at = at.up) path.unshift(at.key);
      return path;
    }
    if (!isObject) continue;
    if (Array.isArray(item)) item.forEach((child, i) => pending.push([child, { key: i, up: trail }]));
    else for (const [key, child] of Object.entries(item)) pending.push([child, { key, up: trail }]);
  }
  return undefined;
}

/** The path to the first own `__proto__` key found in `value`, or undefined. */
export function reservedKeyPath(value: unknown): (string | number)[] | undefined {
  return pathToFirst(value, (item) => (item !== null && typeof item === 'object' && Object.hasOwn(item, RESERVED_KEY) ? [RESERVED_KEY] : undefined));
}

/** The issue of a `__proto__` key at `path`. */
export function reservedKeyIssue(path: (string | number)[]): ValidationIssue {
  return { path, message: `the key "${RESERVED_KEY}" is not accepted: it would be taken for the object's prototype and lost`, code: 'reserved_key' };
}

/** The refusal (INVALID_COMMAND) of `what` when it holds a `__proto__` key anywhere, or undefined. */
export function refusalOfReservedKey(value: unknown, what: string): GantryError | undefined {
  const path = reservedKeyPath(value);
  if (path === undefined) return undefined;
  return new GantryError(ErrorCode.INVALID_COMMAND, `invalid ${what}: ${path.join('.')}: the key "${RESERVED_KEY}" is not accepted`, undefined, [reservedKeyIssue(path)]);
}
