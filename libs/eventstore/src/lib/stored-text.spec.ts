import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { dropSchema, testDatabaseUrl, uniqueName } from '@gantry/testing';
import { createPool } from './database.js';
import { handleWithDecider, type Decider } from './decider.js';
import { jsonRows } from './deferred-writes.js';
import { EventStore } from './event-store.js';
import { migrate } from './migrations.js';
import { stateProjection } from './projection.js';

type NoteEvent = { type: 'Noted'; data: { text: string } };
type Notes = { texts: string[] };
const notes: Decider<{ text: string }, Notes, NoteEvent> = {
  initialState: { texts: [] },
  decide: (command) => {
    if (command.text.startsWith('refuse')) throw new GantryError(ErrorCode.INVALID_TRANSITION, `refused: ${command.text}`);
    return [{ type: 'Noted', data: { text: command.text } }];
  },
  evolve: (state, event) => ({ texts: [...state.texts, event.data.text] }),
};

/** A view holding each stream's whole state as JSON, written as rows of one JSON array (as the services' views are). */
const notesView = stateProjection<Notes>({
  name: 'notes',
  tables: ['notes'],
  types: ['Noted'],
  initialState: notes.initialState,
  evolve: (state, event) => notes.evolve(state, event as unknown as NoteEvent),
  async load(sql, ids) {
    const { rows } = await sql.query<{ id: string; state: Notes }>('SELECT id, state FROM notes WHERE id = ANY($1)', [ids]);
    return new Map(rows.map((r) => [r.id, r.state]));
  },
  async save(sql, rows) {
    await sql.query(
      `INSERT INTO notes (id, state) SELECT r.id, r.state FROM json_to_recordset($1::json) AS r(id text, state json)
       ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state`,
      [jsonRows(rows.map((r) => ({ id: r.streamId, state: r.state })))],
    );
  },
});

const meta = { correlationId: 'test' };

/**
 * Text PostgreSQL cannot keep: a NUL character (U+0000). `text` and `jsonb` refuse it, and so does
 * `json_to_recordset`, which the one-message write and the views read their rows with. A command's
 * free text from outside (what an agent reports, a git or GitHub error) may carry one.
 */
describe('text a command writes', () => {
  const schema = uniqueName('stored_text');
  let pool: pg.Pool;
  let store: EventStore;

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema });
    pool = createPool({ url: testDatabaseUrl, schema, max: 2 });
    await pool.query('CREATE TABLE notes (id text PRIMARY KEY, state json NOT NULL)');
    store = new EventStore({ pool, schema, inlineProjections: [notesView] });
  });
  afterAll(async () => {
    await pool.end();
    await dropSchema(schema);
  });

  const note = (streamId: string, text: string, key: string) =>
    handleWithDecider(store, {
      decider: notes,
      streamId,
      command: { text },
      metadata: meta,
      idempotency: { scope: 'test.note', key, request: { streamId, text } },
      reply: (d) => d.after,
    });
  const storedTexts = async (id: string) =>
    (await pool.query<{ text: string }>(`SELECT data->>'text' AS text FROM events WHERE stream_id = $1 ORDER BY stream_version`, [id])).rows.map((r) => r.text);
  const viewOf = async (id: string) => (await pool.query<{ state: Notes }>('SELECT state FROM notes WHERE id = $1', [id])).rows[0]?.state;

  it.each([
    ['in one message', (id: string, text: string, key: string) => note(id, text, key)],
    [
      'on the full path',
      (id: string, text: string, key: string) =>
        store.execute({ metadata: meta, idempotency: { scope: 'test.note.full', key, request: { id, text } } }, async (uow) => {
          const history = await uow.readStream(id);
          await uow.append(id, history.length, [{ type: 'Noted', data: { text } }]);
          return { texts: [...history.map((e) => (e.data as { text: string }).text), text] };
        }),
    ],
  ])('a NUL character in what a command writes (%s) is kept as U+FFFD: the command lands, its view and receipt with it, and its repeat is answered', async (_, write) => {
    const id = `n-${randomUUID()}`;
    const key = randomUUID();
    await write(id, 'first', randomUUID());
    const written = await write(id, 'agent said a\u0000b', key);
    expect(written.replayed).toBe(false);
    expect(await storedTexts(id)).toEqual(['first', 'agent said a\uFFFDb']);
    expect(await viewOf(id)).toEqual({ texts: ['first', 'agent said a\uFFFDb'] });
    const again = await write(id, 'agent said a\u0000b', key);
    expect(again).toMatchObject({ replayed: true, result: { texts: ['first', 'agent said a\uFFFDb'] } });
    expect(await storedTexts(id)).toHaveLength(2);
    // The next command on the stream decides on what was stored.
    await expect(write(id, 'third', randomUUID())).resolves.toMatchObject({ result: { texts: ['first', 'agent said a\uFFFDb', 'third'] } });
  });

  it.each([
    ['in one message', (id: string, text: string, key: string) => note(id, text, key)],
    ['on the full path', (id: string, text: string) => store.append(id, 0, [{ type: 'Noted', data: { text } }], meta)],
  ])('half of a surrogate pair (text cut in the middle of an emoji) is kept as U+FFFD (%s)', async (_, write) => {
    const id = `n-${randomUUID()}`;
    const cut = 'done \u{1F389}'.slice(0, -1);
    await write(id, cut, randomUUID());
    expect(await storedTexts(id)).toEqual(['done \uFFFD']);
  });

  it.each([
    ['in one message', (id: string, actor: string) => handleWithDecider(store, { decider: notes, streamId: id, command: { text: 'n' }, metadata: { ...meta, actor }, reply: () => null })],
    ['on the full path', (id: string, actor: string) => store.append(id, 0, [{ type: 'Noted', data: { text: 'n' } }], { ...meta, actor })],
  ])('a NUL character in the metadata a command was given (%s) is kept as U+FFFD', async (_, write) => {
    const id = `n-${randomUUID()}`;
    await write(id, 'person\u0000one');
    const { rows } = await pool.query<{ actor: string }>(`SELECT metadata->>'actor' AS actor FROM events WHERE stream_id = $1`, [id]);
    expect(rows).toEqual([{ actor: 'person\uFFFDone' }]);
  });

  it('a refusal whose text carries a NUL character is stored, and its repeat gets the same refusal', async () => {
    const id = `n-${randomUUID()}`;
    const key = randomUUID();
    await note(id, 'first', randomUUID());
    await expect(note(id, 'refuse \u0000 this', key)).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION, message: 'refused: refuse \uFFFD this' });
    await expect(note(id, 'refuse \u0000 this', key)).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION, message: 'refused: refuse \uFFFD this' });
    expect(await storedTexts(id)).toEqual(['first']);
  });

  it.each(['in one message', 'on the full path'])('an event larger than the bus carries (%s) is refused INVALID_COMMAND before anything is written, and its repeat gets the same refusal', async (path) => {
    // A pool of its own: a store's prepared statements are its own, per connection.
    const boundedPool = createPool({ url: testDatabaseUrl, schema, max: 2 });
    const bounded = new EventStore({ pool: boundedPool, schema, inlineProjections: [notesView], maxEventBytes: 10_000 });
    const id = `big-${randomUUID()}`;
    const key = randomUUID();
    const write = (text: string, k: string) =>
      path === 'in one message'
        ? handleWithDecider(bounded, { decider: notes, streamId: id, command: { text }, metadata: meta, idempotency: { scope: 'test.big', key: k, request: { id, text } }, reply: (d) => d.after })
        : bounded.execute({ metadata: meta, idempotency: { scope: 'test.big.full', key: k, request: { id, text } } }, async (uow) => {
            await uow.append(id, (await uow.readStream(id)).length, [{ type: 'Noted', data: { text } }]);
            return null;
          });
    for (let i = 0; i < 2; i++) {
      await expect(write('x'.repeat(20_000), key)).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND, details: { maxEventBytes: 10_000 } });
    }
    expect(await storedTexts(id)).toEqual([]);
    expect(await viewOf(id)).toBeUndefined();
    await write('small', randomUUID());
    expect(await storedTexts(id)).toEqual(['small']);
    await boundedPool.end();
  });

  it.each(['in one message', 'on the full path'])('an event whose stream id is no NATS subject token (%s) is refused INVALID_COMMAND before anything is written', async (path) => {
    // The relay publishes an event on a subject ending with its stream id: with a "." in it, never.
    const id = `agentprofile-../../profile-${randomUUID()}`;
    const write = (k: string) =>
      path === 'in one message'
        ? handleWithDecider(store, { decider: notes, streamId: id, command: { text: 'x' }, metadata: meta, idempotency: { scope: 'test.token', key: k, request: { id } }, reply: (d) => d.after })
        : store.execute({ metadata: meta, idempotency: { scope: 'test.token.full', key: k, request: { id } } }, async (uow) => {
            await uow.append(id, (await uow.readStream(id)).length, [{ type: 'Noted', data: { text: 'x' } }]);
            return null;
          });
    const key = randomUUID();
    for (let i = 0; i < 2; i++) await expect(write(key)).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND, issues: [{ code: 'invalid_stream_id' }] });
    expect(await storedTexts(id)).toEqual([]);
  });
});
