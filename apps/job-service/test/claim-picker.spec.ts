import { migrate, type EventStore } from '@gantry/eventstore';
import { testDatabaseUrl } from '@gantry/testing';
import { ClaimPicker, HOLD_MS, LOOK_AHEAD_MS, PICK_AND_HOLD } from '../src/application/claim-picker.js';
import { jobServiceMigrations } from '../src/infrastructure/migrations.js';
import { createWorld, type TestWorld } from './harness.js';

/**
 * The claims' picker on the jobs view (docs/jobs.md, "Claims"): which queued job each claim is
 * given, and when it reads the queue for it. Rows are written to the view directly: the picker reads
 * nothing else, and a requeue is, for the view, a job of an old position queued again.
 */
describe('the claim picker and its look-ahead', () => {
  let world: TestWorld;
  /** The look-ups sent, each with how many jobs it asked for. */
  let lookUps: number[];
  /** Every statement the picker sent, settled or not: a look-ahead read again in the background among them. */
  let sent: Array<Promise<unknown>> = [];
  /** While set, look-ups' answers reach the picker only once it resolves. */
  let heldBack: Promise<void> | null = null;
  /** The next look-up fails, as on a lost connection. */
  let failNext = false;
  /** What the picker uses of the event store: its pool (the real one, its look-ups counted) and its clock. */
  let store: EventStore;

  beforeAll(async () => {
    world = await createWorld('claim-picker');
    await migrate({ url: testDatabaseUrl, schema: world.name, migrations: jobServiceMigrations });
    const pool = {
      query: (statement: { name?: string; values?: unknown[] }) => {
        if (statement.name === PICK_AND_HOLD.name) lookUps.push(statement.values![2] as number);
        if (statement.name === PICK_AND_HOLD.name && failNext) {
          failNext = false;
          const lost = Promise.reject(new Error('Connection terminated unexpectedly'));
          sent.push(lost.catch(() => undefined));
          return lost;
        }
        const result: Promise<unknown> = world.db.query(statement as never);
        sent.push(result.catch(() => undefined));
        // A look-up's answer held back (PostgreSQL has answered; the picker is told later).
        return statement.name === PICK_AND_HOLD.name && heldBack ? heldBack.then(() => result) : result;
      },
    };
    store = { pool, clock: () => new Date() } as unknown as EventStore;
  });

  afterAll(async () => {
    await Promise.all(sent);
    await world?.close();
  });

  /** The view holds exactly these queued jobs: `<kind>-<position>` at those positions. */
  async function queue(kind: string, positions: number[]): Promise<void> {
    await world.db.query(`DELETE FROM jobs WHERE kind = $1`, [kind]);
    await world.db.query(
      `INSERT INTO jobs (job_id, enqueue_position, status, kind, product_id, exclude_from_coalescing, created_at, attempt, max_attempts, payloads, state)
       SELECT $1 || '-' || p, p, 'QUEUED', $1, 'p', false, now(), 1, 3, '{}', '{}' FROM unnest($2::bigint[]) AS p`,
      [kind, positions],
    );
  }

  const picker = (lookAhead: number) => new ClaimPicker(store, { claimLookAhead: lookAhead });

  /** Picks one at a time; each job stays reserved, as by a claim still being written. */
  async function pickEach(p: ClaimPicker, kinds: string[], count: number): Promise<Array<string | null>> {
    const picked: Array<string | null> = [];
    for (let i = 0; i < count; i++) picked.push(await p.pick(kinds));
    return picked;
  }

  /** Until what the picker sent so far (a look-ahead being read again included) has been answered. */
  const settled = async () => {
    await Promise.all(sent);
    await new Promise((resolve) => setImmediate(resolve)); // and the picker has taken the answers in
  };

  beforeEach(async () => {
    await Promise.all(sent); // a look-ahead the last test's picker was reading again holds jobs once answered
    lookUps = [];
    sent = [];
    await world.db.query('DELETE FROM claim_holds'); // each test's pickers are new holders
  });

  it('claims after a look-up take the jobs it read ahead, oldest first, without a look-up of their own', async () => {
    await queue('REVIEW', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    const p = picker(4);
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-1');
    expect(lookUps).toEqual([5]);
    expect(await pickEach(p, ['REVIEW'], 2)).toEqual(['REVIEW-2', 'REVIEW-3']);
    expect(lookUps).toEqual([5]); // half of the look-ahead is left
  });

  it('a look-ahead that runs low is read again in the background: under a steady stream of claims none waits for a look-up', async () => {
    await queue('REVIEW', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    const p = picker(4);
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-1');
    expect(await pickEach(p, ['REVIEW'], 3)).toEqual(['REVIEW-2', 'REVIEW-3', 'REVIEW-4']);
    expect(lookUps).toEqual([5, 4]); // REVIEW-4 left one: the look-ahead is read again, the claims not waiting for it
    await settled();
    expect(await pickEach(p, ['REVIEW'], 4)).toEqual(['REVIEW-5', 'REVIEW-6', 'REVIEW-7', 'REVIEW-8']);
    expect(lookUps).toEqual([5, 4, 4]); // each from memory, the look-ahead as read again; REVIEW-7 left one
    await settled();
    expect(await pickEach(p, ['REVIEW'], 2)).toEqual(['REVIEW-9', 'REVIEW-10']);
    await settled();
    expect(lookUps).toEqual([5, 4, 4, 4]);
    expect(await p.pick(['REVIEW'])).toBeNull(); // the queue is empty: the claim looks up and finds nothing
    expect(lookUps).toEqual([5, 4, 4, 4, 5]);
  });

  it('a reading again that fails leaves the look-ahead as it was, and the next claim that runs it low reads it again', async () => {
    await queue('REVIEW', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    const p = picker(4);
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-1');
    failNext = true;
    expect(await pickEach(p, ['REVIEW'], 3)).toEqual(['REVIEW-2', 'REVIEW-3', 'REVIEW-4']); // the reading again is lost
    await settled();
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-5'); // still from the look-ahead; and it is read again
    expect(lookUps).toEqual([5, 4, 4]);
    await settled();
    expect(await pickEach(p, ['REVIEW'], 4)).toEqual(['REVIEW-6', 'REVIEW-7', 'REVIEW-8', 'REVIEW-9']);
    expect(lookUps).toEqual([5, 4, 4, 4]);
  });

  it('a job taken from the look-ahead while it is read again is not put back in it, though its claim was written meanwhile', async () => {
    await queue('REVIEW', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    const p = picker(4);
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-1');
    expect(await pickEach(p, ['REVIEW'], 3)).toEqual(['REVIEW-2', 'REVIEW-3', 'REVIEW-4']); // the reading again is sent
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-5');
    p.release('REVIEW-5'); // its claim written; the reading again may still see it queued (here, the view is not told)
    await settled();
    expect(await pickEach(p, ['REVIEW'], 3)).toEqual(['REVIEW-6', 'REVIEW-7', 'REVIEW-8']);
  });

  it('a job a claim took from the look-ahead while a look-up was under way is not given by that look-up, though its claim was written meanwhile', async () => {
    await queue('REVIEW', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    const p = picker(4);
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-1'); // REVIEW-2 … -5 read ahead
    let answer = () => {};
    heldBack = new Promise((resolve) => (answer = resolve));
    // A claim that passed over a stale job looks up on its own: the oldest queued job, REVIEW-2, is in the look-ahead.
    const passedOver = p.pick(['REVIEW'], ['REVIEW-0']);
    await new Promise((resolve) => setImmediate(resolve)); // its look-up has been sent
    await Promise.all(sent); // and answered by PostgreSQL (REVIEW-2 queued), the answer held back
    heldBack = null;
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-2'); // taken from the look-ahead meanwhile
    await world.db.query(`UPDATE jobs SET status = 'CLAIMED' WHERE job_id = 'REVIEW-2'`); // its claim written
    p.release('REVIEW-2');
    answer();
    const got = await passedOver;
    expect(got).not.toBe('REVIEW-2'); // it would be refused as claimed, and the claim look again, alone
    expect(got).toBe('REVIEW-3');
    expect(lookUps).toEqual([5, 1, 1]); // the held-back answer left REVIEW-2 out: the claim looked again
  });

  it('a job put back in the queue while the look-ahead is read again is taken first: the reading again is dropped', async () => {
    await queue('REVIEW', [1, 2, 3, 4, 5, 6, 7, 8]);
    const p = picker(4);
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-1');
    expect(await pickEach(p, ['REVIEW'], 3)).toEqual(['REVIEW-2', 'REVIEW-3', 'REVIEW-4']);
    expect(lookUps).toEqual([5, 4]);
    p.release('REVIEW-2'); // its claim was rolled back: queued again, ahead of what is being read
    p.requeued();
    await settled();
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-2');
    expect(lookUps).toEqual([5, 4, 5]);
  });

  it('claims that arrive together share a look-up, get different jobs, and leave the rest for the next ones', async () => {
    await queue('REVIEW', [1, 2, 3, 4, 5, 6, 7, 8]);
    const p = picker(4);
    expect(await Promise.all([p.pick(['REVIEW']), p.pick(['REVIEW']), p.pick(['REVIEW'])])).toEqual(['REVIEW-1', 'REVIEW-2', 'REVIEW-3']);
    expect(lookUps).toEqual([7]);
    expect(await pickEach(p, ['REVIEW'], 5)).toEqual(['REVIEW-4', 'REVIEW-5', 'REVIEW-6', 'REVIEW-7', 'REVIEW-8']);
    // REVIEW-6 left one of the look-ahead, which was read again; REVIEW-8 came before the answer, by a look-up.
    expect(lookUps).toEqual([7, 4, 5]);
    expect(await p.pick(['REVIEW'])).toBeNull();
  });

  it('a job put back in the queue is taken before the look-ahead: requeued() drops it', async () => {
    await queue('REVIEW', [1, 2, 3, 4, 5]);
    const p = picker(4);
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-1');
    p.release('REVIEW-1'); // its claim was rolled back: the job is queued again, in its place
    p.requeued();
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-1');
    expect(lookUps).toEqual([5, 5]);
  });

  it('a look-up under way when a job is put back leaves nothing to read ahead', async () => {
    await queue('REVIEW', [1, 2, 3, 4, 5]);
    const p = picker(4);
    const first = p.pick(['REVIEW']);
    await new Promise((resolve) => setImmediate(resolve)); // the look-up has been sent
    p.requeued();
    expect(await first).toBe('REVIEW-1');
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-2');
    expect(lookUps).toEqual([5, 5]);
  });

  it('a look-ahead serves for a quarter of a second at most', async () => {
    await queue('REVIEW', [1, 2, 3, 4, 5]);
    const p = picker(4);
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-1');
    await new Promise((resolve) => setTimeout(resolve, LOOK_AHEAD_MS + 50));
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-2');
    expect(lookUps).toEqual([5, 5]);
  });

  it('two replicas\' pickers never pick the same job: each holds what it picked and read ahead, and skips what the other holds', async () => {
    await queue('REVIEW', Array.from({ length: 20 }, (_, i) => i + 1));
    const [a, b] = [picker(4), picker(4)];
    expect(await a.pick(['REVIEW'])).toBe('REVIEW-1'); // REVIEW-2 … -5 read ahead, and held
    expect(await b.pick(['REVIEW'])).toBe('REVIEW-6'); // REVIEW-7 … -10 read ahead
    const [fromA, fromB] = [await pickEach(a, ['REVIEW'], 4), await pickEach(b, ['REVIEW'], 4)];
    expect(fromA).toEqual(['REVIEW-2', 'REVIEW-3', 'REVIEW-4', 'REVIEW-5']);
    expect(fromB).toEqual(['REVIEW-7', 'REVIEW-8', 'REVIEW-9', 'REVIEW-10']);
    // Look-ups of both at the same moment still get different jobs.
    const together = await Promise.all([a.pick(['REVIEW']), b.pick(['REVIEW']), a.pick(['REVIEW']), b.pick(['REVIEW'])]);
    expect(new Set(together).size).toBe(4);
    expect(together.every((jobId) => jobId !== null && Number(jobId.split('-')[1]) > 10)).toBe(true);
    const { rows } = await world.db.query<{ holders: number }>(`SELECT count(DISTINCT holder)::int AS holders FROM claim_holds WHERE job_id LIKE 'REVIEW-%'`);
    expect(rows[0]!.holders).toBe(2);
  });

  it('a look-up that meets another replica\'s hold being taken waits for it, finds the job taken, and its claim gets the next job', async () => {
    await queue('REVIEW', [1, 2, 3]);
    const other = await world.db.connect();
    try {
      // Another replica's look-up has held REVIEW-1 and not committed yet: this one's does not see it.
      await other.query('BEGIN');
      await other.query(`INSERT INTO claim_holds (job_id, holder, held_until) VALUES ('REVIEW-1', 'the other replica', now() + interval '1 minute')`);
      const p = picker(0);
      const picked = p.pick(['REVIEW']);
      await new Promise((resolve) => setTimeout(resolve, 200)); // the look-up waits on REVIEW-1's hold
      await other.query('COMMIT');
      expect(await picked).toBe('REVIEW-2');
      expect(lookUps).toEqual([1, 1]); // the first came back with REVIEW-1 taken; the second skipped it
    } finally {
      await other.query('ROLLBACK').catch(() => undefined);
      other.release();
    }
  });

  it('a hold runs out: a replica that stopped (or dropped its look-ahead) leaves its jobs to the others after HOLD_MS', async () => {
    await queue('REVIEW', [1, 2, 3]);
    const [gone, other] = [picker(4), picker(4)];
    expect(await gone.pick(['REVIEW'])).toBe('REVIEW-1'); // and holds REVIEW-2, -3, never to claim them
    expect(await other.pick(['REVIEW'])).toBeNull();
    await new Promise((resolve) => setTimeout(resolve, HOLD_MS + 50));
    expect(await pickEach(other, ['REVIEW'], 3)).toEqual(['REVIEW-1', 'REVIEW-2', 'REVIEW-3']);
  });

  it('a job one kind\'s look-up took is no longer in the look-ahead of kinds that overlap', async () => {
    await queue('REVIEW', [1, 3, 5, 7]);
    await queue('PLAN_CHAT', [2, 4, 6, 8]);
    const p = picker(4);
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-1'); // REVIEW-3, -5, -7 read ahead
    expect(await p.pick(['PLAN_CHAT', 'REVIEW'])).toBe('PLAN_CHAT-2'); // PLAN_CHAT-4, REVIEW-3, … read ahead
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-3');
    expect(await p.pick(['PLAN_CHAT', 'REVIEW'])).toBe('PLAN_CHAT-4');
    expect(await p.pick(['PLAN_CHAT', 'REVIEW'])).toBe('REVIEW-5');
    expect(await p.pick(['REVIEW'])).toBe('REVIEW-7');
    expect(lookUps).toEqual([5, 5, 4, 4]); // two look-ups, and each look-ahead, run low, read again in the background
  });

  it('with no look-ahead every claim looks up exactly what it needs', async () => {
    await queue('REVIEW', [1, 2, 3]);
    const p = picker(0);
    expect(await pickEach(p, ['REVIEW'], 3)).toEqual(['REVIEW-1', 'REVIEW-2', 'REVIEW-3']);
    expect(lookUps).toEqual([1, 1, 1]);
  });
});
