import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Controller, Inject } from '@nestjs/common';
import { z } from 'zod';
import { defineCommand, defineEvent, eventSubject, type Context, type EventEnvelope } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Bus, CommandClient, replayDeadLetters } from '@gantry/messaging';
import { connectTestNats, eventually } from '@gantry/testing';
import { jetstream } from '@nats-io/jetstream';
import pg from 'pg';
import { startTestService, type TestService } from '../testing.js';
import { CommandHandler, DurableConsumer } from './transport/decorators.js';

const context: Context = 'workflow';
const TOKEN = 'dead-letters-test-token';
const Note = defineCommand({
  context,
  name: 'note_dead_letter_test',
  request: z.object({ note: z.string().min(1) }),
  reply: z.object({}),
  examples: { valid: [{ note: 'n' }], invalid: [{ note: '' }] },
});
defineEvent({
  context,
  type: 'DeadLettersTestNoted',
  schemaVersion: 1,
  data: z.object({ note: z.string() }),
  examples: { valid: [{ note: 'n' }], invalid: [{ note: 1 }] },
});

/** What the consumers did: the events each handled (its handler succeeded), and whether the failing one fails. */
const seen = { failing: true, handled: [] as string[], alsoHandled: [] as string[] };

@Controller()
class NoteConsumers {
  @DurableConsumer({ name: 'dead-letters-test-notes', source: 'workflow', type: 'DeadLettersTestNoted', maxDeliver: 2, backoffMs: () => 20 })
  async onNoted(event: EventEnvelope): Promise<void> {
    if (seen.failing) throw new Error('the downstream system is away');
    seen.handled.push(event.eventId);
  }

  @DurableConsumer({ name: 'dead-letters-test-other', source: 'workflow', type: 'DeadLettersTestNoted' })
  async alsoOnNoted(event: EventEnvelope): Promise<void> {
    seen.alsoHandled.push(event.eventId);
  }
}

@Controller()
class NoteCommands {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  @CommandHandler(Note)
  async note(request: z.infer<typeof Note.request>) {
    await this.store.execute({ metadata: { correlationId: randomUUID() } }, async (uow) => {
      await uow.append(`note-${randomUUID()}`, 0, [{ type: 'DeadLettersTestNoted', data: { note: request.note } }]);
    });
    return {};
  }
}

type Listed = { id: number; consumer: string; subject: string; eventId: string | null; kind: string; error: Record<string, unknown> };

describe('dead letters over HTTP: listed, and replayed to their consumer', () => {
  let service: TestService;
  let client: CommandClient;
  let db: pg.Pool;
  const failing = 'dead-letters-test-notes';

  beforeAll(async () => {
    service = await startTestService({ label: 'dead-letters', context, controllers: [NoteCommands, NoteConsumers], env: { GANTRY_HTTP_TOKEN: TOKEN } });
    client = service.app.get(CommandClient);
    db = service.app.get(EventStore).pool;
  });

  afterAll(async () => {
    await service?.close();
  });

  const call = async (method: 'GET' | 'POST', path: string, body?: unknown, token: string | null = TOKEN) => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (token) headers['authorization'] = `Bearer ${token}`;
    const response = await fetch(`${service.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: response.status, body: (await response.json()) as { ok: boolean; result?: Record<string, unknown>; error?: { code: string; message: string } } };
  };
  const listed = async (consumer = failing) => (await call('GET', `/dead-letters?consumer=${consumer}`)).body.result!['deadLetters'] as Listed[];
  const rows = async () => Number((await db.query(`SELECT count(*) AS n FROM dead_letters`)).rows[0].n);

  /** Notes something while the failing consumer fails: it is dead-lettered after its second delivery. Returns the dead letter. */
  async function deadLettered(): Promise<Listed> {
    const before = new Set((await listed()).map((d) => d.id));
    seen.failing = true;
    await client.request(Note, { note: randomUUID() });
    return eventually(async () => (await listed()).find((d) => !before.has(d.id)) ?? null, { what: 'the failing handler dead-lettered the event' });
  }

  it("lists what a failing handler gave up on; replayed once the handler works, the event is handled once, and the other consumer of it is not run again", async () => {
    const letter = await deadLettered();
    expect(letter).toMatchObject({ consumer: failing, kind: 'handler_failed', error: { message: expect.stringContaining('the downstream system is away'), deliveries: 2 } });
    const eventId = letter.eventId!;
    await eventually(async () => seen.alsoHandled.includes(eventId), { what: 'the other consumer handled the event' });

    seen.failing = false;
    const replay = await call('POST', '/dead-letters/replay', { consumer: failing });
    expect(replay).toEqual({ status: 200, body: { ok: true, result: { replayed: [letter.id], skipped: [], failed: null } } });
    await eventually(async () => seen.handled.includes(eventId), { what: 'the consumer handled the replayed event' });
    expect(await listed()).toEqual([]);

    // A later event handled by both consumers: the replayed copy, before it on the stream, has been settled by then.
    await client.request(Note, { note: 'after the replay' });
    await eventually(async () => seen.handled.length === 2 && seen.alsoHandled.length === 2, { what: 'the later event handled' });
    expect(seen.handled.filter((id) => id === eventId)).toHaveLength(1);
    expect(seen.alsoHandled.filter((id) => id === eventId)).toHaveLength(1);
    expect((await call('POST', '/dead-letters/replay', { consumer: failing })).body.result).toEqual({ replayed: [], skipped: [], failed: null });
  });

  it("a dead letter replayed after its event was handled (a crash before its row was deleted) runs nothing again: the consumer's inbox has the event", async () => {
    const letter = await deadLettered();
    const { rows: kept } = await db.query(`SELECT consumer, subject, stream_sequence, event_id, payload, error FROM dead_letters WHERE id = $1`, [letter.id]);
    seen.failing = false;
    await call('POST', '/dead-letters/replay', { ids: [letter.id] });
    await eventually(async () => seen.handled.includes(letter.eventId!), { what: 'the replayed event handled' });
    // The row back, as if the replay had crashed between its publish and its commit.
    const row = kept[0]!;
    const { rows: again } = await db.query<{ id: string }>(
      `INSERT INTO dead_letters (consumer, subject, stream_sequence, event_id, payload, error) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
      [row.consumer, row.subject, row.stream_sequence, row.event_id, row.payload, JSON.stringify(row.error)],
    );
    const id = Number(again[0]!.id);
    expect((await call('POST', '/dead-letters/replay', { ids: [id] })).body.result).toEqual({ replayed: [id], skipped: [], failed: null });
    const handledBefore = seen.handled.length;
    await client.request(Note, { note: 'after the second replay' });
    await eventually(async () => seen.handled.length === handledBefore + 1, { what: 'the later event handled' });
    expect(seen.handled.filter((e) => e === letter.eventId)).toHaveLength(1);
    expect(await listed()).toEqual([]);
  });

  it("a dead letter older than the receipt window is left where it is unless forced: the commands its handler sent before may have lost their receipts (docs/operations.md, \"Dead letters\")", async () => {
    const letter = await deadLettered();
    seen.failing = false;
    // Dead-lettered eight days ago: the receipts of what its handler sent then (seven days by default) may be pruned.
    await db.query(`UPDATE dead_letters SET recorded_at = now() - interval '8 days' WHERE id = $1`, [letter.id]);
    const refused = await call('POST', '/dead-letters/replay', { ids: [letter.id] });
    expect(refused.body.result).toEqual({ replayed: [], skipped: [{ id: letter.id, reason: expect.stringContaining('GANTRY_RECEIPT_TTL_MS') }], failed: null });
    expect(((refused.body.result!['skipped'] as Array<{ reason: string }>)[0]!).reason).toContain('"force": true');
    expect((await listed()).map((d) => d.id)).toContain(letter.id);
    // Replayed by consumer too, it is still left, and the younger ones go.
    expect((await call('POST', '/dead-letters/replay', { consumer: failing })).body.result).toMatchObject({ replayed: [], skipped: [{ id: letter.id }] });
    expect((await call('POST', '/dead-letters/replay', { ids: [letter.id], force: 'yes' })).status).toBe(400);

    const forced = await call('POST', '/dead-letters/replay', { ids: [letter.id], force: true });
    expect(forced.body.result).toEqual({ replayed: [letter.id], skipped: [], failed: null });
    await eventually(async () => seen.handled.includes(letter.eventId!), { what: 'the forced replay handled' });
    expect(await listed()).toEqual([]);
  });

  it('leaves a payload that failed its schema where it is, and says why', async () => {
    await service.app.get(Bus).js.publish(eventSubject(service.naming, context, 'DeadLettersTestNoted', 'bad'), '{ not JSON');
    const letter = await eventually(async () => (await listed()).find((d) => d.kind === 'invalid_payload') ?? null, { what: 'the malformed message dead-lettered' });
    const replay = await call('POST', '/dead-letters/replay', { consumer: failing });
    expect(replay.body.result).toEqual({ replayed: [], skipped: [{ id: letter.id, reason: 'invalid_payload: it would fail the same way again' }], failed: null });
    expect((await listed()).map((d) => d.id)).toEqual([letter.id]);
  });

  it('refuses a request without the token or a malformed one, and changes nothing', async () => {
    const before = await rows();
    expect(before).toBeGreaterThan(0);
    expect((await call('POST', '/dead-letters/replay', { consumer: failing }, null)).status).toBe(401);
    expect((await call('GET', '/dead-letters', undefined, 'wrong-token')).status).toBe(401);
    for (const body of [{}, { ids: ['1'] }, { ids: [] }, { consumer: '' }, { consumer: `${failing}\u0000` }, { consumer: failing, all: true }]) {
      const refused = await call('POST', '/dead-letters/replay', body);
      expect({ body, status: refused.status, code: refused.body.error?.code }).toEqual({ body, status: 400, code: 'INVALID_COMMAND' });
    }
    expect((await call('GET', '/dead-letters?limit=0')).body.error?.code).toBe('INVALID_COMMAND');
    expect((await call('GET', `/dead-letters?consumer=${failing}%00`)).body.error?.code).toBe('INVALID_COMMAND');
    // A body that is not JSON is refused before any handler, in the same shape (and so is a command's).
    for (const path of ['/dead-letters/replay', '/dead-letters/discard', '/projections/rebuild', `/commands/${Note.name}`]) {
      const response = await fetch(`${service.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` }, body: '{ consumer' });
      expect({ path, status: response.status, body: await response.json() }).toEqual({ path, status: 400, body: { ok: false, error: { code: 'INVALID_COMMAND', message: expect.any(String), issues: [expect.objectContaining({ code: 'invalid_json' })] } } });
    }
    expect(await rows()).toBe(before);
  });

  it('two replays at once hand each dead letter back once', async () => {
    const letters = [await deadLettered(), await deadLettered()];
    seen.failing = false;
    const replays = await Promise.all([call('POST', '/dead-letters/replay', { consumer: failing }), call('POST', '/dead-letters/replay', { consumer: failing })]);
    const replayed = replays.flatMap((r) => r.body.result!['replayed'] as number[]);
    expect(replayed.sort((a, b) => a - b)).toEqual(letters.map((l) => l.id).sort((a, b) => a - b));
    for (const letter of letters) await eventually(async () => seen.handled.includes(letter.eventId!), { what: 'the replayed event handled' });
    expect(seen.handled.filter((id) => letters.some((l) => l.eventId === id))).toHaveLength(2);
  });

  it('a publish that fails stops the replay there, and its dead letter stays', async () => {
    const letter = await deadLettered();
    const nc = await connectTestNats();
    const js = jetstream(nc);
    await nc.close();
    const outcome = await replayDeadLetters(db, js, { ids: [letter.id] });
    expect(outcome).toEqual({ replayed: [], skipped: [], failed: { id: letter.id, error: expect.any(String) } });
    expect((await listed()).map((d) => d.id)).toContain(letter.id);
  });

  it('a replay or a discard the database refuses answers 500 INTERNAL and leaves its dead letters; the next replay hands each back once', async () => {
    const letter = await deadLettered();
    seen.failing = false;
    // The replay publishes the event, then its delete is refused: its transaction rolls back.
    await db.query(`CREATE FUNCTION refuse_dead_letter_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`);
    await db.query(`CREATE TRIGGER refuse_dead_letter_delete BEFORE DELETE ON dead_letters FOR EACH ROW EXECUTE FUNCTION refuse_dead_letter_delete()`);
    try {
      const refused = await call('POST', '/dead-letters/replay', { ids: [letter.id] });
      expect(refused).toEqual({ status: 500, body: { ok: false, error: { code: 'INTERNAL', message: expect.stringContaining('rolled back') } } });
      expect(refused.body.error!.message).not.toContain('refused by the test');
      expect((await listed()).map((d) => d.id)).toContain(letter.id);
      // A discard the database refuses: the same answer's shape, and nothing deleted.
      const discard = await call('POST', '/dead-letters/discard', { ids: [letter.id] });
      expect(discard).toEqual({ status: 500, body: { ok: false, error: { code: 'INTERNAL', message: 'the discard failed: no dead letter was deleted' } } });
      expect((await listed()).map((d) => d.id)).toContain(letter.id);
    } finally {
      await db.query(`DROP TRIGGER refuse_dead_letter_delete ON dead_letters`);
      await db.query(`DROP FUNCTION refuse_dead_letter_delete()`);
    }
    expect((await call('POST', '/dead-letters/replay', { ids: [letter.id] })).body.result).toEqual({ replayed: [letter.id], skipped: [], failed: null });
    await eventually(async () => seen.handled.includes(letter.eventId!), { what: 'the replayed event handled' });
    const handledBefore = seen.handled.length;
    await client.request(Note, { note: 'after the refused replay' });
    await eventually(async () => seen.handled.length === handledBefore + 1, { what: 'the later event handled' });
    expect(seen.handled.filter((id) => id === letter.eventId)).toHaveLength(1);
    expect((await listed()).map((d) => d.id)).not.toContain(letter.id);
  });

  it('a list the database fails answers 500 INTERNAL in the shape every answer has, the cause only in the log', async () => {
    // The table out of the way: every statement on it fails, as with a schema dropped under the service.
    await db.query(`ALTER TABLE dead_letters RENAME TO dead_letters_away`);
    try {
      const response = await fetch(`${service.url}/dead-letters`, { headers: { authorization: `Bearer ${TOKEN}`, 'x-correlation-id': 'list-that-failed' } });
      expect({ status: response.status, body: await response.json() }).toEqual({
        status: 500,
        body: { ok: false, error: { code: 'INTERNAL', message: 'internal error in GET /dead-letters', details: { correlationId: 'list-that-failed' } } },
      });
    } finally {
      await db.query(`ALTER TABLE dead_letters_away RENAME TO dead_letters`);
    }
    expect((await call('GET', '/dead-letters')).status).toBe(200);
  });

  it('discards the dead letters named, whatever their kind: their consumer is never given them, and ids not there are reported', async () => {
    await service.app.get(Bus).js.publish(eventSubject(service.naming, context, 'DeadLettersTestNoted', 'bad-again'), '{ still not JSON');
    const malformed = await eventually(async () => (await listed()).find((d) => d.kind === 'invalid_payload' && d.subject.endsWith('bad-again')) ?? null, {
      what: 'the malformed message dead-lettered',
    });
    const failed = await deadLettered();
    const discard = await call('POST', '/dead-letters/discard', { ids: [failed.id, malformed.id, 999_999] });
    expect(discard).toEqual({
      status: 200,
      body: {
        ok: true,
        result: {
          discarded: [
            { id: malformed.id, consumer: failing, eventId: null, kind: 'invalid_payload' },
            { id: failed.id, consumer: failing, eventId: failed.eventId, kind: 'handler_failed' },
          ].sort((a, b) => a.id - b.id),
          missing: [999_999],
        },
      },
    });
    const left = (await listed()).map((d) => d.id);
    expect(left).not.toContain(failed.id);
    expect(left).not.toContain(malformed.id);
    // Replaying it now finds nothing; the consumer, working again, handles later events and never this one.
    seen.failing = false;
    expect((await call('POST', '/dead-letters/replay', { ids: [failed.id] })).body.result).toEqual({ replayed: [], skipped: [], failed: null });
    const handledBefore = seen.handled.length;
    await client.request(Note, { note: 'after the discard' });
    await eventually(async () => seen.handled.length === handledBefore + 1, { what: 'the later event handled' });
    expect(seen.handled).not.toContain(failed.eventId);
    expect((await call('POST', '/dead-letters/discard', { ids: [failed.id] })).body.result).toEqual({ discarded: [], missing: [failed.id] });
  });

  it('refuses a discard without the token or without ids, and deletes nothing', async () => {
    const letter = await deadLettered();
    const before = await rows();
    expect((await call('POST', '/dead-letters/discard', { ids: [letter.id] }, null)).status).toBe(401);
    for (const body of [{}, { consumer: failing }, { ids: [] }, { ids: ['1'] }, { ids: [0] }, { ids: [letter.id], all: true }]) {
      const refused = await call('POST', '/dead-letters/discard', body);
      expect({ body, status: refused.status, code: refused.body.error?.code }).toEqual({ body, status: 400, code: 'INVALID_COMMAND' });
    }
    expect(await rows()).toBe(before);
    expect((await listed()).map((d) => d.id)).toContain(letter.id);
  });

  it('a replay and a discard of one dead letter at once: exactly one of them has it', async () => {
    const letter = await deadLettered();
    seen.failing = false;
    const [replay, discard] = await Promise.all([call('POST', '/dead-letters/replay', { ids: [letter.id] }), call('POST', '/dead-letters/discard', { ids: [letter.id] })]);
    const replayed = (replay.body.result!['replayed'] as number[]).includes(letter.id);
    const discarded = (discard.body.result!['discarded'] as Array<{ id: number }>).some((d) => d.id === letter.id);
    expect({ replayed, discarded, missing: discard.body.result!['missing'] }).toEqual(replayed ? { replayed, discarded: false, missing: [letter.id] } : { replayed, discarded: true, missing: [] });
    expect((await listed()).map((d) => d.id)).not.toContain(letter.id);
    const handledBefore = seen.handled.length;
    await client.request(Note, { note: 'after the race' });
    await eventually(async () => seen.handled.length >= handledBefore + 1, { what: 'the later event handled' });
    await eventually(async () => seen.handled.filter((id) => id === letter.eventId).length === (replayed ? 1 : 0), { what: 'the replayed event handled, or not, as its outcome says' });
  });
});
