import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
// The whole package index: importing it registers every context's events.
import { contractRegistry } from './index.js';
import {
  compareWithSnapshot,
  eventSchemas,
  findIncompatibilities,
  nextSnapshot,
  type EventSchemaSnapshot,
  type JSONSchema,
} from './compatibility.js';

const js = (schema: z.ZodType): JSONSchema => JSON.parse(JSON.stringify(z.toJSONSchema(schema, { io: 'input' }))) as JSONSchema;
const check = (before: z.ZodType, after: z.ZodType) => findIncompatibilities(js(before), js(after));

describe('findIncompatibilities: changes that break published data', () => {
  it('a removed property', () => {
    expect(check(z.object({ a: z.string(), b: z.string() }), z.object({ a: z.string() }))).toEqual(['$.b: property removed']);
  });

  it('a renamed property, as a removal plus a required addition', () => {
    expect(check(z.object({ jobId: z.string() }), z.object({ job_id: z.string() }))).toEqual([
      '$.jobId: property removed',
      '$.job_id: required property added',
    ]);
  });

  it('a removed optional property', () => {
    expect(check(z.object({ a: z.string().optional() }), z.object({}))).toEqual(['$.a: property removed']);
  });

  it('a property removed deep inside objects in arrays', () => {
    const before = z.object({ steps: z.array(z.object({ actions: z.array(z.object({ kind: z.string(), at: z.number() })) })) });
    const after = z.object({ steps: z.array(z.object({ actions: z.array(z.object({ kind: z.string() })) })) });
    expect(check(before, after)).toEqual(['$.steps[].actions[].at: property removed']);
  });

  it('a type changed from string to number', () => {
    expect(check(z.object({ a: z.string() }), z.object({ a: z.number() }))).toEqual([
      '$.a: type changed: string is no longer accepted (now number)',
    ]);
  });

  it('a type narrowed from number to integer', () => {
    expect(check(z.object({ n: z.number() }), z.object({ n: z.int() }))).toEqual([
      '$.n: type changed: number is no longer accepted (now integer)',
    ]);
  });

  it('an enum that lost a member', () => {
    expect(check(z.object({ s: z.enum(['QUEUED', 'RUNNING', 'DONE']) }), z.object({ s: z.enum(['QUEUED', 'DONE']) }))).toEqual([
      '$.s: no longer accepts "RUNNING" (union/enum lost members)',
    ]);
  });

  it('a union that lost a member', () => {
    expect(check(z.object({ v: z.union([z.string(), z.number()]) }), z.object({ v: z.string() }))).toEqual([
      '$.v: type changed: number is no longer accepted (now string)',
    ]);
    expect(check(z.union([z.literal('a'), z.literal('b')]), z.literal('a'))).toEqual(['$: no longer accepts "b" (union/enum lost members)']);
  });

  it('a discriminated union whose member lost a field', () => {
    const before = z.discriminatedUnion('kind', [
      z.object({ kind: z.literal('merged'), sha: z.string() }),
      z.object({ kind: z.literal('failed'), reason: z.string(), code: z.string() }),
    ]);
    const after = z.discriminatedUnion('kind', [
      z.object({ kind: z.literal('merged'), sha: z.string() }),
      z.object({ kind: z.literal('failed'), reason: z.string() }),
    ]);
    expect(check(before, after)).toEqual(['$.code: property removed']);
  });

  it('a discriminated union member that lost several fields, reported against the member with the same tag', () => {
    const before = z.discriminatedUnion('kind', [
      z.object({ kind: z.literal('merged'), sha: z.string() }),
      z.object({ kind: z.literal('failed'), reason: z.string(), code: z.string(), url: z.string() }),
    ]);
    const after = z.discriminatedUnion('kind', [
      z.object({ kind: z.literal('merged'), sha: z.string().optional(), reason: z.string().optional(), code: z.string().optional(), url: z.string().optional() }),
      z.object({ kind: z.literal('failed') }),
    ]);
    expect(check(before, after)).toEqual(['$.reason: property removed', '$.code: property removed', '$.url: property removed']);
  });

  it('an untyped schema narrowed to one type', () => {
    expect(findIncompatibilities({ properties: { a: { type: 'string' } } }, { type: 'object', properties: { a: { type: 'string' } } })).toEqual([
      '$: narrowed from values of any type to object',
    ]);
  });

  it('a nullable property made not nullable', () => {
    expect(check(z.object({ a: z.string().nullable() }), z.object({ a: z.string() }))).toEqual(['$.a: no longer accepts null (was nullable)']);
    expect(check(z.object({ a: z.enum(['x', 'y']).nullable() }), z.object({ a: z.enum(['x', 'y']) }))).toEqual([
      '$.a: no longer accepts null (was nullable)',
    ]);
  });

  it('a format added to a plain string', () => {
    expect(check(z.object({ id: z.string() }), z.object({ id: z.uuid() }))).toEqual(['$.id: format "uuid" added']);
    expect(check(z.object({ id: z.uuid() }), z.object({ id: z.email() }))).toEqual(['$.id: format changed from "uuid" to "email"']);
  });

  it('a pattern added or changed', () => {
    expect(check(z.string(), z.string().regex(/^a/))).toEqual(['$: pattern /^a/ added']);
    expect(check(z.string().regex(/^a/), z.string().regex(/^b/))).toEqual([expect.stringMatching(/^\$: pattern changed from \/\^a\/ to \/\^b\//)]);
  });

  it('a required property added', () => {
    expect(check(z.object({ a: z.string() }), z.object({ a: z.string(), b: z.string() }))).toEqual(['$.b: required property added']);
  });

  it('a required property added even where the object never allowed extra properties', () => {
    expect(check(z.strictObject({ a: z.string() }), z.strictObject({ a: z.string(), b: z.string() }))).toEqual([
      '$.b: required property added',
    ]);
  });

  it('an optional property made required', () => {
    expect(check(z.object({ a: z.string().optional() }), z.object({ a: z.string() }))).toEqual(['$.a: optional property made required']);
    expect(check(z.object({ a: z.string().default('x') }), z.object({ a: z.string() }))).toEqual(['$.a: optional property made required']);
  });

  it('additionalProperties tightened', () => {
    expect(check(z.object({ a: z.string() }), z.strictObject({ a: z.string() }))).toEqual([
      '$: additionalProperties tightened (properties not listed are now refused)',
    ]);
    expect(check(z.looseObject({ a: z.string() }), z.strictObject({ a: z.string() }))).toEqual([
      '$: additionalProperties tightened (properties not listed are now refused)',
    ]);
    expect(check(z.object({ a: z.string() }), z.object({ a: z.string() }).catchall(z.number()))).toEqual([
      '$: additionalProperties tightened (properties not listed must now be number)',
    ]);
  });

  it('a record whose values narrowed', () => {
    expect(check(z.record(z.string(), z.union([z.string(), z.number()])), z.record(z.string(), z.string()))).toEqual([
      '$.*: type changed: number is no longer accepted (now string)',
    ]);
  });

  it('a record whose keys narrowed', () => {
    expect(check(z.record(z.string(), z.number()), z.record(z.enum(['a', 'b']), z.number()))).toEqual(
      expect.arrayContaining(['$.a: required property added', '$.b: required property added']),
    );
    expect(check(z.partialRecord(z.string(), z.number()), z.partialRecord(z.string().min(2), z.number()))).toEqual([
      '${keys}: minimum length added (≥ 2)',
    ]);
  });

  it('an array item type changed', () => {
    expect(check(z.object({ tags: z.array(z.string()) }), z.object({ tags: z.array(z.number()) }))).toEqual([
      '$.tags[]: type changed: string is no longer accepted (now number)',
    ]);
  });

  it('a tuple element changed', () => {
    expect(check(z.tuple([z.string(), z.number()]), z.tuple([z.string(), z.string()]))).toEqual([
      '$[1]: type changed: number is no longer accepted (now string)',
    ]);
  });

  it('bounds tightened', () => {
    expect(check(z.string(), z.string().min(1))).toEqual(['$: minimum length added (≥ 1)']);
    expect(check(z.string().max(200), z.string().max(100))).toEqual(['$: maximum length tightened from ≤ 200 to ≤ 100']);
    expect(check(z.int().min(0), z.int().positive())).toEqual(['$: minimum value tightened from ≥ 0 to ≥ 1']);
    expect(check(z.number().min(0), z.number().positive())).toEqual(['$: minimum value tightened from ≥ 0 to > 0']);
    expect(check(z.array(z.string()), z.array(z.string()).nonempty())).toEqual(['$: minimum item count added (≥ 1)']);
    expect(check(z.number(), z.number().multipleOf(5))).toEqual(['$: multipleOf 5 added']);
  });

  it('a change inside a recursive schema, without looping', () => {
    const Before = z.object({ name: z.string(), get children(): z.ZodArray<typeof Before> { return z.array(Before); } });
    const After = z.object({ title: z.string(), get children(): z.ZodArray<typeof After> { return z.array(After); } });
    expect(check(Before, After)).toEqual(['$.name: property removed', '$.title: required property added']);
    expect(check(Before, Before)).toEqual([]);
  });

  it('a change behind a $ref into $defs', () => {
    const before: JSONSchema = {
      $defs: { lease: { type: 'object', properties: { token: { type: 'integer' } }, required: ['token'] } },
      type: 'object',
      properties: { lease: { $ref: '#/$defs/lease' } },
      required: ['lease'],
    };
    const after: JSONSchema = {
      $defs: { lease: { type: 'object', properties: { token: { type: 'string' } }, required: ['token'] } },
      type: 'object',
      properties: { lease: { $ref: '#/$defs/lease' } },
      required: ['lease'],
    };
    expect(findIncompatibilities(before, after)).toEqual(['$.lease.token: type changed: integer is no longer accepted (now string)']);
  });

  it('any value narrowed to a type, and a schema that accepts nothing any more', () => {
    expect(check(z.object({ m: z.unknown() }), z.object({ m: z.string() }))).toEqual(['$.m: narrowed from any value to string']);
    expect(findIncompatibilities({ type: 'string' }, false)).toEqual(['$: no longer accepts any value']);
  });

  it('a new constraining keyword it does not know, reported rather than trusted', () => {
    expect(findIncompatibilities({ type: 'string' }, { type: 'string', contentMediaType: 'application/json' })).toEqual([
      '$: keyword "contentMediaType" added; it cannot be proven compatible',
    ]);
  });
});

describe('findIncompatibilities: changes published data survives', () => {
  it.each<[string, z.ZodType, z.ZodType]>([
    ['an identical schema', z.object({ a: z.string(), b: z.array(z.number()) }), z.object({ a: z.string(), b: z.array(z.number()) })],
    ['an optional property added', z.object({ a: z.string() }), z.object({ a: z.string(), b: z.string().optional() })],
    ['a property with a default added', z.object({ a: z.string() }), z.object({ a: z.string(), b: z.number().default(0) })],
    ['an optional property added deep inside', z.object({ x: z.array(z.object({ a: z.string() })) }), z.object({ x: z.array(z.object({ a: z.string(), b: z.boolean().optional() })) })],
    ['an enum widened', z.object({ s: z.enum(['A', 'B']) }), z.object({ s: z.enum(['A', 'B', 'C']) })],
    ['an enum widened to its type', z.enum(['A', 'B']), z.string()],
    ['a literal widened to a union of literals', z.literal('a'), z.union([z.literal('a'), z.literal('b')])],
    ['a union widened', z.string(), z.union([z.string(), z.number()])],
    ['a property made nullable', z.object({ a: z.string() }), z.object({ a: z.string().nullable() })],
    ['a required property made optional', z.object({ a: z.string() }), z.object({ a: z.string().optional() })],
    ['an integer widened to a number', z.object({ n: z.int() }), z.object({ n: z.number() })],
    ['a format widened to a plain string', z.object({ id: z.uuid() }), z.object({ id: z.string() })],
    ['a strict object made open', z.strictObject({ a: z.string() }), z.object({ a: z.string() })],
    ['an optional property added to a strict object', z.strictObject({ a: z.string() }), z.strictObject({ a: z.string(), b: z.string().optional() })],
    ['bounds loosened', z.string().min(3).max(10), z.string().min(1).max(20)],
    ['an exclusive bound rewritten as the equivalent inclusive integer bound', z.int().positive(), z.int().min(1)],
    ['an enum of ids turned into the id format that accepts them all', z.enum(['0196d1e2-7c1a-4000-8000-000000000000']), z.uuid()],
    ['an open object turned into a record of any values', z.object({ a: z.string() }), z.object({ a: z.string() }).catchall(z.unknown())],
    ['an open object turned into a record keyed by any string', z.looseObject({}), z.record(z.string(), z.unknown())],
    ['a record widened', z.record(z.enum(['a', 'b']), z.string()), z.record(z.string(), z.string().nullable())],
    ['a description changed', z.object({ a: z.string().describe('old') }), z.object({ a: z.string().describe('new') })],
    ['a field narrowed to any value', z.object({ m: z.string() }), z.object({ m: z.unknown() })],
    ['a discriminated union gaining a member', z.discriminatedUnion('k', [z.object({ k: z.literal('a') })]), z.discriminatedUnion('k', [z.object({ k: z.literal('a') }), z.object({ k: z.literal('b'), x: z.string() })])],
  ])('%s', (_name, before, after) => {
    expect(check(before, after)).toEqual([]);
  });
});

describe('comparing the snapshot with the registry', () => {
  const v1 = js(z.object({ jobId: z.string() }));
  const v1WithNote = js(z.object({ jobId: z.string(), note: z.string().optional() }));
  const v1Renamed = js(z.object({ job: z.string() }));

  it('finds nothing when they are equal', () => {
    expect(compareWithSnapshot({ 'jobs.JobQueued@1': v1 }, { 'jobs.JobQueued@1': v1 })).toEqual({
      incompatible: [],
      notInSnapshot: [],
      changedCompatibly: [],
    });
  });

  it('reports a published event version that is no longer registered as incompatible', () => {
    const result = compareWithSnapshot({ 'jobs.JobQueued@1': v1 }, { 'jobs.JobQueued@2': v1 });
    expect(result.incompatible).toEqual([expect.stringMatching(/^jobs\.JobQueued@1: the published event version is no longer registered/)]);
    expect(result.notInSnapshot).toEqual(['jobs.JobQueued@2']);
  });

  it('reports an incompatible change under the event version it breaks', () => {
    expect(compareWithSnapshot({ 'jobs.JobQueued@1': v1 }, { 'jobs.JobQueued@1': v1Renamed }).incompatible).toEqual([
      'jobs.JobQueued@1: $.jobId: property removed',
      'jobs.JobQueued@1: $.job: required property added',
    ]);
  });

  it('tells a compatible change apart, so the snapshot can record it', () => {
    const result = compareWithSnapshot({ 'jobs.JobQueued@1': v1 }, { 'jobs.JobQueued@1': v1WithNote });
    expect(result).toEqual({ incompatible: [], notInSnapshot: [], changedCompatibly: ['jobs.JobQueued@1'] });
  });

  it('updates the snapshot with new and compatibly changed versions', () => {
    expect(nextSnapshot({ 'jobs.JobQueued@1': v1 }, { 'jobs.JobQueued@1': v1WithNote, 'jobs.JobClaimed@1': v1 })).toEqual({
      'jobs.JobQueued@1': v1WithNote,
      'jobs.JobClaimed@1': v1,
    });
  });

  it('refuses to record an incompatible change over the version it breaks', () => {
    expect(() => nextSnapshot({ 'jobs.JobQueued@1': v1 }, { 'jobs.JobQueued@1': v1Renamed })).toThrow(/\$\.jobId: property removed/);
    expect(() => nextSnapshot({ 'jobs.JobQueued@1': v1 }, {})).toThrow(/no longer registered/);
  });

  it('replaces, or drops, only the never-released versions it is explicitly told to', () => {
    const snapshot = { 'jobs.JobQueued@1': v1, 'jobs.JobClaimed@1': v1 };
    expect(nextSnapshot(snapshot, { 'jobs.JobQueued@1': v1Renamed, 'jobs.JobClaimed@1': v1 }, { replace: ['jobs.JobQueued@1'] })).toEqual({
      'jobs.JobQueued@1': v1Renamed,
      'jobs.JobClaimed@1': v1,
    });
    expect(nextSnapshot(snapshot, { 'jobs.JobClaimed@1': v1 }, { replace: ['jobs.JobQueued@1'] })).toEqual({ 'jobs.JobClaimed@1': v1 });
    expect(() =>
      nextSnapshot(snapshot, { 'jobs.JobQueued@1': v1Renamed, 'jobs.JobClaimed@1': v1Renamed }, { replace: ['jobs.JobQueued@1'] }),
    ).toThrow(/jobs\.JobClaimed@1: \$\.jobId: property removed/);
    expect(() => nextSnapshot(snapshot, snapshot, { replace: ['jobs.JobQueud@1'] })).toThrow(/cannot replace jobs\.JobQueud@1: not in the snapshot/);
  });
});

// ----- the committed snapshot against the contracts registered now -----

const SNAPSHOT_FILE = fileURLToPath(new URL('../event-schemas.snapshot.json', import.meta.url));
const UPDATE = process.env.UPDATE_CONTRACT_SNAPSHOT === '1';
/** Comma-separated `context.Type@version` keys of never-released versions the update may overwrite incompatibly. */
const REPLACE = (process.env.CONTRACT_SNAPSHOT_REPLACE ?? '').split(',').map((key) => key.trim()).filter(Boolean);
const HOW_TO_UPDATE = 'run `npm run contracts:snapshot` and commit libs/contracts/event-schemas.snapshot.json';

function readSnapshot(): { text: string; snapshot: EventSchemaSnapshot } {
  let text: string;
  try {
    text = readFileSync(SNAPSHOT_FILE, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { text: '', snapshot: {} };
    throw error;
  }
  return { text, snapshot: JSON.parse(text) as EventSchemaSnapshot };
}

function serialiseSnapshot(snapshot: EventSchemaSnapshot): string {
  const sorted = Object.fromEntries(Object.keys(snapshot).sort().map((key) => [key, snapshot[key]]));
  return `${JSON.stringify(sorted, null, 2)}\n`;
}

describe('the committed event schema snapshot', () => {
  const current = eventSchemas(contractRegistry.events());

  it('finds every registered event schema compatible with itself (no false alarm on the real schemas)', () => {
    expect(Object.keys(current).length).toBe(contractRegistry.events().length);
    expect(Object.entries(current).flatMap(([key, schema]) => findIncompatibilities(schema, schema).map((p) => `${key}: ${p}`))).toEqual([]);
  });

  it('names every entry context.Type@version', () => {
    const { snapshot } = readSnapshot();
    expect(Object.keys(snapshot).filter((key) => !/^(jobs|workflow|prs|worktrees)\.[A-Z][A-Za-z0-9]*@[1-9][0-9]*$/.test(key))).toEqual([]);
  });

  it(
    UPDATE
      ? 'is updated with every registered event version, refusing incompatible changes'
      : 'still accepts what every published event version accepted, and holds every registered version',
    () => {
      const { text, snapshot } = readSnapshot();
      if (UPDATE) {
        const next = nextSnapshot(snapshot, current, { replace: REPLACE }); // throws, writing nothing, on an incompatible change
        writeFileSync(SNAPSHOT_FILE, serialiseSnapshot(next));
        expect(compareWithSnapshot(readSnapshot().snapshot, current)).toEqual({ incompatible: [], notInSnapshot: [], changedCompatibly: [] });
        return;
      }

      const { incompatible, notInSnapshot, changedCompatibly } = compareWithSnapshot(snapshot, current);
      const report: string[] = [];
      if (incompatible.length > 0) {
        report.push(
          'Incompatible event schema changes (published data would be refused or lose fields). Keep the old version ' +
            'registered and define the change as a new schemaVersion:',
          ...incompatible.map((line) => `  ${line}`),
          '(Only for a version that was never released: CONTRACT_SNAPSHOT_REPLACE=<context.Type@version,...> npm run contracts:snapshot)',
        );
      }
      if (notInSnapshot.length > 0) {
        report.push(`Event versions not yet in the snapshot — ${HOW_TO_UPDATE}:`, ...notInSnapshot.map((key) => `  ${key}`));
      }
      if (changedCompatibly.length > 0) {
        report.push(`Event versions changed compatibly since the snapshot — ${HOW_TO_UPDATE}:`, ...changedCompatibly.map((key) => `  ${key}`));
      }
      if (report.length === 0 && text !== serialiseSnapshot(snapshot)) {
        report.push(`The snapshot file is not in its canonical form — ${HOW_TO_UPDATE}.`);
      }
      if (report.length > 0) throw new Error(report.join('\n'));
      expect(Object.keys(snapshot).sort()).toEqual(Object.keys(current).sort());
    },
  );
});
