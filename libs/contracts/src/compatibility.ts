import { z } from 'zod';
import { canonicalJson } from './hashing.js';
import { eventContractKey, type EventContract } from './registry.js';

/** A JSON Schema (draft 2020-12) as produced by `z.toJSONSchema`: an object of keywords, or a boolean. */
export type JSONSchema = boolean | JSONSchemaObject;
export interface JSONSchemaObject {
  [keyword: string]: unknown;
}

/** The published event schemas, keyed `context.Type@version`. */
export type EventSchemaSnapshot = Record<string, JSONSchema>;

/** The JSON Schema of what an event's `data` accepts (zod's input side: what may be stored and replayed). */
export function eventJsonSchema(contract: EventContract): JSONSchema {
  let schema: unknown;
  try {
    schema = z.toJSONSchema(contract.data, { io: 'input' });
  } catch (error) {
    throw new Error(`event ${eventContractKey(contract)} has no JSON Schema form: ${(error as Error).message}`);
  }
  // Through JSON, so that what is compared is exactly what the committed snapshot file holds.
  return JSON.parse(JSON.stringify(schema)) as JSONSchema;
}

/** Every given event version's JSON Schema, keyed `context.Type@version`, keys sorted. */
export function eventSchemas(contracts: EventContract[]): EventSchemaSnapshot {
  const entries = contracts.map((c) => [eventContractKey(c), eventJsonSchema(c)] as const);
  return Object.fromEntries(entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

export interface SnapshotComparison {
  /** Published versions whose current schema would refuse data they accepted, or that are gone. */
  incompatible: string[];
  /** Registered versions the snapshot does not hold yet. */
  notInSnapshot: string[];
  /** Published versions that changed compatibly; the snapshot should record the new schema. */
  changedCompatibly: string[];
}

/** Compares the committed snapshot with the schemas registered now. */
export function compareWithSnapshot(snapshot: EventSchemaSnapshot, current: EventSchemaSnapshot): SnapshotComparison {
  const result: SnapshotComparison = { incompatible: [], notInSnapshot: [], changedCompatibly: [] };
  for (const [key, previous] of Object.entries(snapshot)) {
    if (!(key in current)) {
      result.incompatible.push(
        `${key}: the published event version is no longer registered (keep old versions registered; add a new version beside them)`,
      );
      continue;
    }
    const problems = findIncompatibilities(previous, current[key]!);
    if (problems.length > 0) result.incompatible.push(...problems.map((p) => `${key}: ${p}`));
    else if (canonicalJson(previous) !== canonicalJson(current[key])) result.changedCompatibly.push(key);
  }
  for (const key of Object.keys(current)) if (!(key in snapshot)) result.notInSnapshot.push(key);
  return result;
}

/**
 * The snapshot to commit next: every registered version at its current schema. Refuses (throws)
 * when a published version changed incompatibly or disappeared, so an incompatible change can
 * never be recorded over the version it breaks — except for the versions named in `replace`:
 * an explicit, reviewable escape for versions that were never released (they are overwritten,
 * or dropped when no longer registered).
 */
export function nextSnapshot(
  snapshot: EventSchemaSnapshot,
  current: EventSchemaSnapshot,
  options: { replace?: readonly string[] } = {},
): EventSchemaSnapshot {
  const replace = new Set(options.replace ?? []);
  const unknown = [...replace].filter((key) => !(key in snapshot));
  if (unknown.length > 0) throw new Error(`cannot replace ${unknown.join(', ')}: not in the snapshot`);
  const kept = Object.fromEntries(Object.entries(snapshot).filter(([key]) => !replace.has(key)));
  const { incompatible } = compareWithSnapshot(kept, current);
  if (incompatible.length > 0) {
    throw new Error(`refusing to update the event schema snapshot:\n  ${incompatible.join('\n  ')}`);
  }
  return { ...current };
}

/**
 * Why data valid under `previous` could be refused by `current` (or lose a field a reader relies
 * on), one sentence per finding, each starting with the JSON path (`$` is the root, `[]` any array
 * element, `.*` any other property). Empty when the change is compatible. Conservative: a change
 * it cannot prove compatible is reported.
 */
export function findIncompatibilities(previous: JSONSchema, current: JSONSchema): string[] {
  return [...new Set(new SchemaComparison(previous, current).compare(previous, current, '$'))];
}

type Obj = JSONSchemaObject;
type Branch = { literals: unknown[] } | { schema: Obj };

/** Keywords that describe and never constrain. */
const ANNOTATIONS = new Set([
  '$schema', '$id', '$anchor', '$comment', '$defs', 'definitions', 'id', 'title', 'description', 'default',
  'examples', 'deprecated', 'readOnly', 'writeOnly',
]);
/** Keywords compared by their own rule below; every other constraining keyword must stay equal. */
const COMPARED = new Set([
  'type', 'enum', 'const', 'anyOf', 'oneOf', '$ref', 'format', 'pattern', 'minLength', 'maxLength',
  'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf', 'items', 'prefixItems',
  'minItems', 'maxItems', 'uniqueItems', 'properties', 'required', 'additionalProperties', 'propertyNames',
  'minProperties', 'maxProperties',
]);

class SchemaComparison {
  /** Pairs of (previous, current) schema objects under comparison: a recursive schema meets itself again. */
  private readonly visiting = new Map<object, Set<object>>();

  constructor(
    private readonly previousRoot: JSONSchema,
    private readonly currentRoot: JSONSchema,
  ) {}

  compare(previousSchema: unknown, currentSchema: unknown, path: string): string[] {
    const p = resolve(previousSchema, this.previousRoot);
    const c = resolve(currentSchema, this.currentRoot);
    const seen = this.visiting.get(p) ?? new Set<object>();
    if (seen.has(c)) return []; // already being compared further up: assume compatible (coinduction)
    seen.add(c);
    this.visiting.set(p, seen);
    try {
      return this.compareResolved(p, c, path);
    } finally {
      seen.delete(c);
    }
  }

  private compareResolved(p: Obj, c: Obj, path: string): string[] {
    if (isNever(p) || isAny(c)) return [];
    if (isAny(p)) return [`${path}: narrowed from any value to ${describe(c, this.currentRoot)}`];
    if (isNever(c)) return [`${path}: no longer accepts any value`];

    const currentBranches = branches(c, this.currentRoot);
    const problems: string[] = [];
    for (const branch of branches(p, this.previousRoot)) {
      if ('literals' in branch) {
        const lost = branch.literals.filter((v) => !currentBranches.some((cb) => this.acceptsIn(cb, v)));
        if (lost.length === 0) continue;
        if (lost.length === 1 && lost[0] === null) problems.push(`${path}: no longer accepts null (was nullable)`);
        else problems.push(`${path}: no longer accepts ${lost.map((v) => JSON.stringify(v)).join(', ')} (union/enum lost members)`);
        continue;
      }
      const pb = branch.schema;
      const sameKindBranches = currentBranches.flatMap((cb) => ('schema' in cb && sameKind(pb, cb.schema) ? [cb.schema] : []));
      // Of a discriminated union, compare with the member that keeps the previous member's tags.
      const tagged = sameKindBranches.filter((cb) => this.keepsTags(pb, cb));
      const candidates = tagged.length > 0 ? tagged : sameKindBranches;
      if (candidates.length === 0) {
        problems.push(
          typeOf(pb) === 'null'
            ? `${path}: no longer accepts null (was nullable)`
            : `${path}: type changed: ${describe(pb, this.previousRoot)} is no longer accepted (now ${describe(c, this.currentRoot)})`,
        );
        continue;
      }
      let best: string[] | undefined;
      for (const cb of candidates) {
        const found = this.compareBranch(pb, cb, path);
        if (best === undefined || found.length < best.length) best = found;
        if (found.length === 0) break;
      }
      problems.push(...best!);
    }
    return problems;
  }

  /** Two branches of the same JSON type (or integer → number): compare their constraints. */
  private compareBranch(p: Obj, c: Obj, path: string): string[] {
    const problems: string[] = [];
    if (typeOf(p) === undefined && typeOf(c) !== undefined) problems.push(`${path}: narrowed from values of any type to ${typeOf(c)}`);
    const type = typeOf(c) ?? typeOf(p);
    const integer = typeOf(p) === 'integer' || typeOf(c) === 'integer';

    // strings
    let formatReported = false;
    if (c.format !== undefined && c.format !== p.format) {
      formatReported = true;
      problems.push(
        p.format === undefined
          ? `${path}: format "${String(c.format)}" added`
          : `${path}: format changed from "${String(p.format)}" to "${String(c.format)}"`,
      );
    }
    if (c.pattern !== undefined && c.pattern !== p.pattern && !formatReported) {
      problems.push(
        p.pattern === undefined
          ? `${path}: pattern /${String(c.pattern)}/ added`
          : `${path}: pattern changed from /${String(p.pattern)}/ to /${String(c.pattern)}/ (a changed pattern cannot be proven to accept the same values)`,
      );
    }
    problems.push(...boundProblems(path, 'length', lowerBound(p, 'minLength'), lowerBound(c, 'minLength'), 'lower'));
    problems.push(...boundProblems(path, 'length', upperBound(p, 'maxLength'), upperBound(c, 'maxLength'), 'upper'));

    // numbers
    problems.push(...boundProblems(path, 'value', lowerBound(p, 'minimum', 'exclusiveMinimum', integer), lowerBound(c, 'minimum', 'exclusiveMinimum', integer), 'lower'));
    problems.push(...boundProblems(path, 'value', upperBound(p, 'maximum', 'exclusiveMaximum', integer), upperBound(c, 'maximum', 'exclusiveMaximum', integer), 'upper'));
    if (typeof c.multipleOf === 'number' && !(typeof p.multipleOf === 'number' && isMultiple(p.multipleOf, c.multipleOf))) {
      problems.push(`${path}: multipleOf ${c.multipleOf} added`);
    }

    // arrays
    if (type === 'array' || p.items !== undefined || c.items !== undefined || p.prefixItems !== undefined || c.prefixItems !== undefined) {
      problems.push(...this.compareItems(p, c, path));
    }
    problems.push(...boundProblems(path, 'item count', lowerBound(p, 'minItems'), lowerBound(c, 'minItems'), 'lower'));
    problems.push(...boundProblems(path, 'item count', upperBound(p, 'maxItems'), upperBound(c, 'maxItems'), 'upper'));
    if (c.uniqueItems === true && p.uniqueItems !== true) problems.push(`${path}: items must now be unique`);

    // objects
    if (type === 'object' || p.properties !== undefined || c.properties !== undefined) {
      problems.push(...this.compareObjects(p, c, path));
    }
    problems.push(...boundProblems(path, 'property count', lowerBound(p, 'minProperties'), lowerBound(c, 'minProperties'), 'lower'));
    problems.push(...boundProblems(path, 'property count', upperBound(p, 'maxProperties'), upperBound(c, 'maxProperties'), 'upper'));

    // anything else that constrains must not be new or different
    for (const keyword of Object.keys(c)) {
      if (ANNOTATIONS.has(keyword) || COMPARED.has(keyword)) continue;
      if (!(keyword in p)) problems.push(`${path}: keyword "${keyword}" added; it cannot be proven compatible`);
      else if (canonicalJson(p[keyword]) !== canonicalJson(c[keyword])) {
        problems.push(`${path}: keyword "${keyword}" changed; it cannot be proven compatible`);
      }
    }
    return problems;
  }

  private compareObjects(p: Obj, c: Obj, path: string): string[] {
    const problems: string[] = [];
    const pProps = asObj(p.properties);
    const cProps = asObj(c.properties);
    const pRequired = new Set(asStrings(p.required));
    const cRequired = new Set(asStrings(c.required));
    for (const key of Object.keys(pProps)) {
      if (!(key in cProps)) problems.push(`${join(path, key)}: property removed`);
      else problems.push(...this.compare(pProps[key], cProps[key], join(path, key)));
    }
    for (const key of cRequired) {
      if (pRequired.has(key)) continue;
      problems.push(key in pProps ? `${join(path, key)}: optional property made required` : `${join(path, key)}: required property added`);
    }
    // A property new to `current` once fell under the previous additionalProperties schema.
    const pAdditional = p.additionalProperties;
    if (isSchemaObject(pAdditional) && !isAny(resolve(pAdditional, this.previousRoot))) {
      for (const key of Object.keys(cProps)) {
        if (!(key in pProps)) problems.push(...this.compare(pAdditional, cProps[key], join(path, key)));
      }
    }

    const cAdditional = c.additionalProperties;
    if (pAdditional !== false && cAdditional !== undefined && cAdditional !== true) {
      if (cAdditional === false) {
        problems.push(`${path}: additionalProperties tightened (properties not listed are now refused)`);
      } else if (pAdditional === undefined || pAdditional === true || isAny(resolve(pAdditional, this.previousRoot))) {
        if (!isAny(resolve(cAdditional, this.currentRoot))) {
          problems.push(`${path}: additionalProperties tightened (properties not listed must now be ${describe(resolve(cAdditional, this.currentRoot), this.currentRoot)})`);
        }
      } else {
        problems.push(...this.compare(pAdditional, cAdditional, `${path}.*`));
      }
    }
    if (c.propertyNames !== undefined) {
      // JSON object keys are always strings: an absent propertyNames means { type: 'string' }.
      problems.push(...this.compare(p.propertyNames ?? { type: 'string' }, c.propertyNames, `${path}{keys}`));
    }
    return problems;
  }

  private compareItems(p: Obj, c: Obj, path: string): string[] {
    const problems: string[] = [];
    const pPrefix = Array.isArray(p.prefixItems) ? (p.prefixItems as unknown[]) : [];
    const cPrefix = Array.isArray(c.prefixItems) ? (c.prefixItems as unknown[]) : [];
    const pRest = p.items ?? true;
    const cRest = c.items ?? true;
    for (let i = 0; i < Math.max(pPrefix.length, cPrefix.length); i++) {
      const pItem = i < pPrefix.length ? pPrefix[i] : pRest;
      if (pItem === false) continue; // the previous schema never allowed an element here
      problems.push(...this.compare(pItem, i < cPrefix.length ? cPrefix[i] : cRest, `${path}[${i}]`));
    }
    if (pRest !== false) problems.push(...this.compare(pRest, cRest, `${path}[]`));
    return problems;
  }

  /** Does the current object branch accept every constant-valued property (a union tag) of the previous one? */
  private keepsTags(previous: Obj, current: Obj): boolean {
    const pProps = asObj(previous.properties);
    const cProps = asObj(current.properties);
    return Object.entries(pProps).every(([key, schema]) => {
      const literal = resolve(schema, this.previousRoot);
      const values = 'const' in literal ? [literal.const] : Array.isArray(literal.enum) && literal.enum.length === 1 ? literal.enum : undefined;
      return values === undefined || (key in cProps && accepts(cProps[key], values[0], this.currentRoot));
    });
  }

  /** Would `branch` (of the current schema) accept the literal value `value`? */
  private acceptsIn(branch: Branch, value: unknown): boolean {
    if ('literals' in branch) return branch.literals.some((l) => canonicalJson(l) === canonicalJson(value));
    return accepts(branch.schema, value, this.currentRoot);
  }
}

/** A small validator for literal values (enum members, consts) against a current schema. */
function accepts(schema: unknown, value: unknown, root: JSONSchema): boolean {
  const s = resolve(schema, root);
  if (isNever(s)) return false;
  if (isAny(s)) return true;
  return branches(s, root).some((branch) => {
    if ('literals' in branch) return branch.literals.some((l) => canonicalJson(l) === canonicalJson(value));
    const b = branch.schema;
    const type = typeOf(b);
    if (type !== undefined && !matchesType(type, value)) return false;
    for (const keyword of Object.keys(b)) {
      if (!ANNOTATIONS.has(keyword) && !COMPARED.has(keyword)) return false; // cannot tell: do not claim acceptance
    }
    if (typeof value === 'string') {
      if (b.format !== undefined && b.pattern === undefined) return false;
      if (typeof b.pattern === 'string' && !safeRegExp(b.pattern)?.test(value)) return false;
      const length = [...value].length;
      if (typeof b.minLength === 'number' && length < b.minLength) return false;
      if (typeof b.maxLength === 'number' && length > b.maxLength) return false;
    }
    if (typeof value === 'number') {
      if (typeof b.minimum === 'number' && value < b.minimum) return false;
      if (typeof b.exclusiveMinimum === 'number' && value <= b.exclusiveMinimum) return false;
      if (typeof b.maximum === 'number' && value > b.maximum) return false;
      if (typeof b.exclusiveMaximum === 'number' && value >= b.exclusiveMaximum) return false;
      if (typeof b.multipleOf === 'number' && !isMultiple(value, b.multipleOf)) return false;
    }
    if (Array.isArray(value)) {
      const prefix = Array.isArray(b.prefixItems) ? (b.prefixItems as unknown[]) : [];
      const rest = b.items ?? true;
      if (!value.every((item, i) => accepts(i < prefix.length ? prefix[i] : rest, item, root))) return false;
      if (typeof b.minItems === 'number' && value.length < b.minItems) return false;
      if (typeof b.maxItems === 'number' && value.length > b.maxItems) return false;
    }
    if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
      const record = value as Record<string, unknown>;
      const props = asObj(b.properties);
      if (!asStrings(b.required).every((k) => k in record)) return false;
      for (const [k, v] of Object.entries(record)) {
        const sub = k in props ? props[k] : (b.additionalProperties ?? true);
        if (!accepts(sub, v, root)) return false;
        if (b.propertyNames !== undefined && !accepts(b.propertyNames, k, root)) return false;
      }
    }
    return true;
  });
}

/** A schema's alternatives: union members, one per listed type, and enum/const values as literals. */
function branches(schema: Obj, root: JSONSchema): Branch[] {
  const union = (Array.isArray(schema.anyOf) ? schema.anyOf : Array.isArray(schema.oneOf) ? schema.oneOf : undefined) as unknown[] | undefined;
  if (union) {
    const { anyOf: _a, oneOf: _o, ...siblings } = schema;
    const shared = Object.keys(siblings).some((k) => !ANNOTATIONS.has(k));
    return union.flatMap((member) => {
      const resolved = resolve(member, root);
      return branches(shared ? { ...siblings, ...resolved } : resolved, root);
    });
  }
  if (Array.isArray(schema.enum)) return [{ literals: schema.enum as unknown[] }];
  if ('const' in schema) return [{ literals: [schema.const] }];
  if (Array.isArray(schema.type)) return (schema.type as unknown[]).map((type) => ({ schema: { ...schema, type } }));
  return [{ schema }];
}

function resolve(schema: unknown, root: JSONSchema): Obj {
  let current = toObject(schema);
  const followed = new Set<string>();
  while (typeof current.$ref === 'string') {
    const ref = current.$ref;
    if (followed.has(ref)) throw new Error(`$ref ${ref} refers to itself`);
    followed.add(ref);
    const { $ref: _ref, ...siblings } = current;
    const target = toObject(pointer(root, ref));
    current = Object.keys(siblings).some((k) => !ANNOTATIONS.has(k)) ? { ...target, ...siblings } : target;
  }
  return current;
}

function pointer(root: JSONSchema, ref: string): unknown {
  if (!ref.startsWith('#')) throw new Error(`cannot resolve $ref ${ref}: only references inside the schema are supported`);
  let node: unknown = root;
  for (const raw of ref.slice(1).split('/').slice(1)) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (node === null || typeof node !== 'object' || !(key in (node as object))) throw new Error(`cannot resolve $ref ${ref}`);
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}

const FALSE_SCHEMA: Obj = Object.freeze({ not: {} });
const TRUE_SCHEMA: Obj = Object.freeze({});

function toObject(schema: unknown): Obj {
  if (schema === true || schema === undefined) return TRUE_SCHEMA;
  if (schema === false) return FALSE_SCHEMA;
  if (isSchemaObject(schema)) return schema;
  throw new Error(`not a JSON Schema: ${JSON.stringify(schema)}`);
}

function isSchemaObject(value: unknown): value is Obj {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** No constraining keyword at all: accepts every value. */
function isAny(schema: Obj): boolean {
  return Object.keys(schema).every((k) => ANNOTATIONS.has(k));
}

function isNever(schema: Obj): boolean {
  return isSchemaObject(schema.not) && isAny(schema.not as Obj);
}

function typeOf(schema: Obj): string | undefined {
  return typeof schema.type === 'string' ? schema.type : undefined;
}

/** Can a current branch stand in for a previous one at all? Same JSON type, or integer → number. */
function sameKind(previous: Obj, current: Obj): boolean {
  const p = typeOf(previous);
  const c = typeOf(current);
  return p === undefined || c === undefined || p === c || (p === 'integer' && c === 'number');
}

function matchesType(type: string, value: unknown): boolean {
  switch (type) {
    case 'null':
      return value === null;
    case 'boolean':
      return typeof value === 'boolean';
    case 'string':
      return typeof value === 'string';
    case 'number':
      return typeof value === 'number';
    case 'integer':
      return Number.isInteger(value);
    case 'array':
      return Array.isArray(value);
    case 'object':
      return value !== null && typeof value === 'object' && !Array.isArray(value);
    default:
      return false;
  }
}

interface Bound {
  value: number;
  exclusive: boolean;
}

function lowerBound(schema: Obj, inclusiveKey: string, exclusiveKey?: string, integer = false): Bound | undefined {
  return bound(schema, inclusiveKey, exclusiveKey, integer, 'lower');
}

function upperBound(schema: Obj, inclusiveKey: string, exclusiveKey?: string, integer = false): Bound | undefined {
  return bound(schema, inclusiveKey, exclusiveKey, integer, 'upper');
}

/** The tighter of an inclusive and an exclusive bound; for integers an exclusive bound becomes the next whole number. */
function bound(schema: Obj, inclusiveKey: string, exclusiveKey: string | undefined, integer: boolean, side: 'lower' | 'upper'): Bound | undefined {
  const candidates: Bound[] = [];
  const inclusive = schema[inclusiveKey];
  if (typeof inclusive === 'number') candidates.push({ value: inclusive, exclusive: false });
  const exclusive = exclusiveKey ? schema[exclusiveKey] : undefined;
  if (typeof exclusive === 'number') {
    if (integer) {
      candidates.push({ value: side === 'lower' ? Math.floor(exclusive) + 1 : Math.ceil(exclusive) - 1, exclusive: false });
    } else candidates.push({ value: exclusive, exclusive: true });
  }
  if (integer) {
    for (const b of candidates) b.value = side === 'lower' ? Math.ceil(b.value) : Math.floor(b.value);
  }
  return candidates.reduce<Bound | undefined>((tightest, b) => (tightest === undefined || tighter(b, tightest, side) ? b : tightest), undefined);
}

function tighter(a: Bound, b: Bound, side: 'lower' | 'upper'): boolean {
  if (a.value !== b.value) return side === 'lower' ? a.value > b.value : a.value < b.value;
  return a.exclusive && !b.exclusive;
}

function boundProblems(path: string, what: string, previous: Bound | undefined, current: Bound | undefined, side: 'lower' | 'upper'): string[] {
  if (current === undefined) return [];
  if (previous !== undefined && !tighter(current, previous, side)) return [];
  const word = side === 'lower' ? 'minimum' : 'maximum';
  const show = (b: Bound) => `${b.exclusive ? (side === 'lower' ? '>' : '<') : side === 'lower' ? '≥' : '≤'} ${b.value}`;
  return [
    previous === undefined
      ? `${path}: ${word} ${what} added (${show(current)})`
      : `${path}: ${word} ${what} tightened from ${show(previous)} to ${show(current)}`,
  ];
}

function isMultiple(value: number, divisor: number): boolean {
  const quotient = value / divisor;
  return Math.abs(quotient - Math.round(quotient)) < 1e-9;
}

function safeRegExp(pattern: string): RegExp | undefined {
  try {
    return new RegExp(pattern, 'u');
  } catch {
    try {
      return new RegExp(pattern);
    } catch {
      return undefined;
    }
  }
}

function describe(schema: Obj, root: JSONSchema): string {
  if (isAny(schema)) return 'any value';
  if (isNever(schema)) return 'no value';
  const parts = branches(schema, root).map((b) => {
    if ('literals' in b) return b.literals.map((l) => JSON.stringify(l)).join(' | ');
    const type = typeOf(b.schema) ?? 'value';
    return typeof b.schema.format === 'string' ? `${type} (${b.schema.format})` : type;
  });
  return [...new Set(parts)].join(' | ');
}

function asObj(value: unknown): Record<string, unknown> {
  return isSchemaObject(value) ? value : {};
}

function asStrings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

function join(path: string, key: string): string {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}
