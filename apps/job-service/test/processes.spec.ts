import { readFile } from 'node:fs/promises';
import { claimJob, enqueueJob, ErrorCode, getJob, startJob } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { startApp, type RunningApp } from '@gantry/testing';
import { createWorld, key, refuseLeaseExpiry, registerProducts, type TestWorld } from './harness.js';

// These start the compiled service (apps/job-service/dist): build first.
describe('job service as processes', () => {
  let world: TestWorld;
  const running: RunningApp[] = [];

  beforeAll(async () => {
    world = await createWorld('jobproc');
  });

  afterAll(async () => {
    await Promise.all(running.map((r) => r.kill('SIGKILL')));
    await world?.close();
  });

  const start = async (env: Record<string, string> = {}) => {
    const app = await startApp('job-service', { schema: world.name, naming: world.naming, env: { GANTRY_LEASE_SWEEP_MS: '50', ...env } });
    running.push(app);
    await registerProducts(world.client, ['product-2r', 'product-crash']);
    return app;
  };

  /**
   * A jobs view row with no log behind it, its lease long expired: expiring it is refused NOT_FOUND,
   * which no race explains, so every sweep pass over it logs it as an error. Returns its job id.
   */
  const ghostLease = async (): Promise<string> => {
    const ghost = `job-ghost-${key('g').slice(-8)}`;
    await world.db.query(
      `INSERT INTO jobs (job_id, enqueue_position, status, kind, product_id, exclude_from_coalescing, created_at, attempt, max_attempts,
                         lease_token, runner_id, lease_expires_at, payloads, state)
       VALUES ($1, 0, 'RUNNING', 'PLAN_CHAT', 'product-2r', false, now(), 1, 3, 1, 'runner-ghost', now() - interval '1 hour', '[]', '{}')`,
      [ghost],
    );
    return ghost;
  };
  const refusedExpiry = (app: RunningApp, ghost: string) =>
    app.output().split('\n').find((l) => l.includes('a lease could not be expired') && l.includes(ghost));

  it('with two replicas sweeping, each expired lease is requeued exactly once (one expiry event, one attempt increment)', async () => {
    const replicas = [await start(), await start()];
    const jobIds: string[] = [];
    for (let i = 0; i < 10; i++) {
      const { jobId } = await world.client.request(enqueueJob, { kind: 'PLAN_CHAT', productId: 'product-2r', idempotencyKey: key('e') });
      await world.client.request(claimJob, { runnerId: `runner-${i}`, kinds: ['PLAN_CHAT'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('c') });
      jobIds.push(jobId);
    }
    await eventually(
      async () => {
        const views = await Promise.all(jobIds.map((jobId) => world.client.request(getJob, { jobId })));
        return views.every((v) => v.status === 'QUEUED');
      },
      { timeoutMs: 25_000, what: 'every lease expired' },
    );
    // Every pass that could still see these leases live is over once each replica has begun a later
    // one (passes of a replica run one at a time): a ghost lease inserted now marks such a pass.
    const marker = await ghostLease();
    await eventually(() => replicas.every((r) => refusedExpiry(r, marker)), { timeoutMs: 20_000, what: 'a later pass of each replica' });
    await world.db.query(`DELETE FROM jobs WHERE job_id = $1`, [marker]);
    const { rows } = await world.db.query(
      `SELECT stream_id, count(*) AS n, max((data->>'nextAttempt')::int) AS next FROM events WHERE type = 'JobLeaseExpired' AND stream_id = ANY($1) GROUP BY stream_id`,
      [jobIds],
    );
    expect(rows).toHaveLength(10);
    expect(rows.every((r) => Number(r.n) === 1 && r.next === 2)).toBe(true);
    for (const jobId of jobIds) expect((await world.client.request(getJob, { jobId })).attempt).toBe(2);
    for (const replica of replicas) expect(await replica.kill('SIGTERM')).toBe(0);
  }, 60_000);

  it('killed with SIGKILL after committing a claim and before replying: the retry with the same key gets the same lease', async () => {
    const crashing = await start({ GANTRY_TEST_CRASH_AFTER_COMMIT: 'claim_job' });
    const { jobId } = await world.client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: 'product-crash', taskId: 'T-9', idempotencyKey: key('e') });
    const request = { runnerId: 'runner-crash', kinds: ['TASK_IMPLEMENTATION' as const], jobId, idempotencyKey: key('claim') };
    await expect(world.client.request(claimJob, request, { timeoutMs: 3000 })).rejects.toMatchObject({ code: expect.stringMatching(/^(TIMEOUT|UNAVAILABLE)$/) });
    await eventually(() => crashing.process.signalCode === 'SIGKILL', { what: 'the process killed' });
    const committed = await world.db.query(`SELECT data FROM events WHERE stream_id = $1 AND type = 'JobClaimed'`, [jobId]);
    expect(committed.rows).toHaveLength(1);

    await start();
    const retried = await world.client.request(claimJob, request);
    // the same lease, with its expiry as it is now: resumed at the start for as long as it was granted
    const now = await world.client.request(getJob, { jobId });
    expect(retried).toMatchObject({ claimed: true, job: { jobId, leaseToken: committed.rows[0].data.leaseToken, leaseExpiresAt: now.lease!.leaseExpiresAt } });
    expect(Date.parse(now.lease!.leaseExpiresAt)).toBeGreaterThanOrEqual(Date.parse(committed.rows[0].data.leaseExpiresAt));
    const after = await world.db.query(`SELECT count(*) AS n FROM events WHERE stream_id = $1 AND type = 'JobClaimed'`, [jobId]);
    expect(Number(after.rows[0].n)).toBe(1);
    // Another runner's claim is still refused: the lease is held.
    await expect(world.client.request(claimJob, { ...request, runnerId: 'runner-other', idempotencyKey: key('claim') })).rejects.toMatchObject({ code: ErrorCode.ALREADY_CLAIMED });
  }, 60_000);

  /**
   * Sends `request` to a replica started with GANTRY_TEST_STOP_BEFORE_COMMIT=<command>, which stops
   * itself once between deciding it and sending its write; once it is stopped, the caller sends the
   * same request to another replica, which does it; then the frozen one is woken. `prepare` makes the
   * request once both run. Returns the answers. Over HTTP, to the replica named: the bus would hand the
   * retry to the frozen one half of the time.
   */
  const raceWithFrozenReplica = async (command: string, prepare: () => Promise<Record<string, unknown>>, env: Record<string, string> = {}) => {
    const frozen = await start({ GANTRY_TEST_STOP_BEFORE_COMMIT: command, ...env });
    const other = await start(env);
    const request = await prepare();
    const post = async (app: RunningApp) => {
      const response = await fetch(`${app.url}/commands/${command}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(request) });
      return (await response.json()) as { ok: boolean; result?: Record<string, unknown> };
    };
    const late = post(frozen);
    await eventually(async () => (await readFile(`/proc/${frozen.process.pid}/stat`, 'utf8')).split(') ')[1]!.startsWith('T'), { what: 'the replica stopped before its write' });
    const done = await post(other);
    frozen.process.kill('SIGCONT');
    const woken = await late;
    // Asked again of either, the same answer: the woken replica goes on answering.
    const again = [await post(frozen), await post(other)];
    for (const app of [frozen, other]) expect(await app.kill('SIGTERM')).toBe(0);
    return { done, woken, again };
  };

  /**
   * `done` as an answer given again looks: the same but for what is left of a claim's lease, reckoned at
   * each answer — so never more than at the answer before (`answers` in the order they came).
   */
  const answeredAgain = (done: { ok: boolean; result?: Record<string, unknown> }, answers: Array<{ result?: Record<string, unknown> }>) => {
    if (typeof done.result?.leaseExpiresInMs !== 'number') return done;
    const left = answers.map((answer) => answer.result?.leaseExpiresInMs as number);
    expect(left.every((ms, i) => i === 0 || ms <= left[i - 1]!)).toBe(true);
    return { ...done, result: { ...done.result, leaseExpiresInMs: expect.any(Number) } };
  };

  it('a replica frozen (SIGSTOP) between deciding a claim and writing it, while the claim is sent again and another replica grants it: woken, its late write grants nothing a second time and it answers with the same lease', async () => {
    let jobId = '';
    const { done, woken, again } = await raceWithFrozenReplica('claim_job', async () => {
      ({ jobId } = await world.client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: 'product-2r', taskId: 'T-frozen', idempotencyKey: key('e') }));
      return { runnerId: 'runner-frozen', kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: key('claim') };
    });
    expect(done).toMatchObject({ ok: true, result: { claimed: true, job: { jobId, leaseToken: 1 } } });
    const same = answeredAgain(done, [done, woken, ...again]);
    expect(woken).toEqual(same);
    expect(again).toEqual([same, same]);
    const claims = await world.db.query(`SELECT data->>'leaseToken' AS token FROM events WHERE stream_id = $1 AND type = 'JobClaimed'`, [jobId]);
    expect(claims.rows).toEqual([{ token: '1' }]);
  }, 60_000);

  it('a replica frozen between deciding a story-log entry and writing it, while another writes it: woken, it writes no second entry and answers the same', async () => {
    let jobId = '';
    const entryKey = key('impl');
    const { done, woken, again } = await raceWithFrozenReplica('log_implementation', async () => {
      ({ jobId } = await world.client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: 'product-2r', taskId: 'T-frozen-log', idempotencyKey: key('e') }));
      const claimed = await world.client.request(claimJob, { runnerId: 'runner-log', kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: key('claim') });
      if (!claimed.claimed) throw new Error('the job was not claimed');
      const fence = { jobId, runnerId: 'runner-log', leaseToken: claimed.job.leaseToken };
      await world.client.request(startJob, { ...fence, idempotencyKey: key('start') });
      return { ...fence, summary: 'the change, once', idempotencyKey: entryKey };
    });
    expect(done).toMatchObject({ ok: true });
    expect(woken).toEqual(done);
    expect(again).toEqual([done, done]);
    const written = await world.db.query(`SELECT type FROM events WHERE stream_id = $1 AND metadata->>'idempotencyKey' = $2`, [jobId, entryKey]);
    expect(written.rows).toHaveLength(1);
  }, 60_000);

  it('a replica frozen inside its transaction (group commit: the key claimed, the write not sent): the other waits for the key until the frozen session is ended, grants the claim once; woken, the frozen one grants nothing and answers UNAVAILABLE, and sent again the same lease', async () => {
    let jobId = '';
    // Each command in a transaction of its own, and a session idle in one ended after 2 s.
    const env = { GANTRY_GROUP_COMMIT: '1x1', GANTRY_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: '2000' };
    const { done, woken, again } = await raceWithFrozenReplica(
      'claim_job',
      async () => {
        ({ jobId } = await world.client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: 'product-2r', taskId: 'T-frozen-tx', idempotencyKey: key('e') }));
        return { runnerId: 'runner-frozen-tx', kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: key('claim') };
      },
      env,
    );
    expect(done).toMatchObject({ ok: true, result: { claimed: true, job: { jobId, leaseToken: 1 } } });
    // Its session was ended under it: it cannot know whether its transaction committed, and says so —
    // UNAVAILABLE, send it again — rather than grant or refuse anything; sent again, the grant is the answer.
    expect(woken).toEqual({ ok: false, error: { code: ErrorCode.UNAVAILABLE, message: expect.stringContaining('send it again') } });
    const same = answeredAgain(done, [done, ...again]);
    expect(again).toEqual([same, same]);
    const claims = await world.db.query(`SELECT data->>'leaseToken' AS token FROM events WHERE stream_id = $1 AND type = 'JobClaimed'`, [jobId]);
    expect(claims.rows).toEqual([{ token: '1' }]);
  }, 60_000);

  it('a lease the sweep cannot expire for an unexpected reason is logged as an error, and the other leases still expire', async () => {
    const app = await start();
    const ghost = await ghostLease();
    const { jobId } = await world.client.request(enqueueJob, { kind: 'PLAN_CHAT', productId: 'product-2r', idempotencyKey: key('e') });
    await world.client.request(claimJob, { runnerId: 'runner-ghost-neighbour', kinds: ['PLAN_CHAT'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('c') });

    const line = await eventually(() => refusedExpiry(app, ghost), { timeoutMs: 20_000, what: 'the refused expiry logged' });
    expect(JSON.parse(line)).toMatchObject({ jobId: ghost, code: ErrorCode.NOT_FOUND });
    expect(line).toMatch(/"level":("error"|50)/);
    await eventually(async () => (await world.client.request(getJob, { jobId })).status === 'QUEUED', { timeoutMs: 20_000, what: "the neighbour's lease expired" });
    await world.db.query(`DELETE FROM jobs WHERE job_id = $1`, [ghost]);
  }, 60_000);

  it('a lease whose expiry the database refuses (not a refusal of the domain) is logged, and the leases after it still expire', async () => {
    await start();
    const claimed = async (runnerId: string) => {
      const { jobId } = await world.client.request(enqueueJob, { kind: 'PLAN_CHAT', productId: 'product-2r', idempotencyKey: key('e') });
      await world.client.request(claimJob, { runnerId, kinds: ['PLAN_CHAT'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('c') });
      return jobId;
    };
    // Claimed first, so its lease expires first: every pass meets it before the other.
    const refused = await claimed('runner-refused');
    const neighbour = await claimed('runner-neighbour');
    const allowExpiry = await refuseLeaseExpiry(world, refused);
    try {
      await eventually(async () => (await world.client.request(getJob, { jobId: neighbour })).status === 'QUEUED', { timeoutMs: 25_000, what: "the neighbour's lease expired" });
      // Logged by whichever replica swept it: the services of the earlier cases still run.
      const logged = () => running.flatMap((r) => r.output().split('\n')).find((l) => l.includes('a lease could not be expired') && l.includes(refused));
      expect(await eventually(logged, { timeoutMs: 20_000, what: 'the refused expiry logged' })).toMatch(/an operator trigger refuses this row/);
      expect((await world.client.request(getJob, { jobId: refused })).status).toBe('CLAIMED');
    } finally {
      await allowExpiry();
    }
    // The database takes it again: the refused lease expires at the next pass.
    await eventually(async () => (await world.client.request(getJob, { jobId: refused })).status === 'QUEUED', { timeoutMs: 25_000, what: 'the refused lease expired once allowed' });
  }, 90_000);
});
