import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { deriveWorktreeKey, type WorktreeLeaseGrant } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { plainGit as git } from '@gantry/git/testing';
import { claimedJob, createWorld, type TestWorld } from './testing/world.js';
import { startServiceProcess, type ServiceProcess } from './testing/process.js';

/*
 * Two replicas of the worktree service on one schema and one worktree root, as on a host that runs
 * two (docs/worktrees.md, "Replicas"): their git runs on a shared clone take turns with each other's.
 */
describe('two worktree-service replicas on one schema and root (real processes)', () => {
  let world: TestWorld;
  const replicas: ServiceProcess[] = [];
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-replicas');
    replicas.push(await startServiceProcess(world), await startServiceProcess(world));
  }, 120_000);
  afterAll(async () => {
    for (const replica of replicas) await replica.kill('SIGTERM');
    await world?.close();
  }, 60_000);

  /** A command answered by this replica (over HTTP: not the queue group, which may pick either). */
  async function command<T>(replica: ServiceProcess, name: string, body: Record<string, unknown>): Promise<T> {
    const response = await fetch(`${replica.url}/commands/${name}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const answer = (await response.json()) as { ok: boolean; result?: T; error?: { code: string; message: string } };
    if (!answer.ok) throw new Error(`${answer.error?.code}: ${answer.error?.message}`);
    return answer.result as T;
  }

  it('grants leases of branches of one repository asked of both replicas at once, each after a new push to the base', async () => {
    const failures: string[] = [];
    for (let round = 0; round < 6; round++) {
      // Each replica's first lease of the round fetches the clone: both fetch at once.
      world.git.pushCommit('main', { [`round-${round}.txt`]: `${round}\n` });
      const asked = replicas.flatMap((replica, r) =>
        [0, 1].map(async (i) => {
          const jobId = await claimedJob(world);
          const request = { jobId, jobLeaseToken: 1, repositoryUrl: world.git.origin, branch: `feature/r${round}-${r}-${i}`, baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${++n}` };
          try {
            return { replica, grant: await command<WorktreeLeaseGrant>(replica, 'acquire_worktree', request) };
          } catch (error) {
            failures.push(`round ${round}, ${request.branch}: ${String(error)}`);
            return null;
          }
        }),
      );
      for (const granted of await Promise.all(asked)) {
        if (granted) await command(granted.replica, 'release_worktree', { leaseId: granted.grant.leaseId, token: granted.grant.token, idempotencyKey: `release:${++n}` });
      }
    }
    expect(failures).toEqual([]);
  }, 300_000);

  it('a replica started while another prepares a lease does not run that preparation again once the lease is handed out', async () => {
    // Effects wait before they run (as behind other git work on a busy clone), each once per process.
    const hold = { GANTRY_TEST_HOLD_AT: 'worktree-effect:create_or_reuse' };
    const holding = (replica: ServiceProcess) => replica.output().includes('"testHold":"worktree-effect:create_or_reuse"');
    for (const replica of replicas.splice(0)) await replica.kill('SIGTERM');
    const first = await startServiceProcess(world, hold);
    replicas.push(first);
    const branch = 'feature/handed-out';
    const jobId = await claimedJob(world);
    const granting = command<WorktreeLeaseGrant>(first, 'acquire_worktree', {
      jobId, jobLeaseToken: 1, repositoryUrl: world.git.origin, branch, baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${++n}`,
    });
    await eventually(() => holding(first), { what: 'the first replica about to create the worktree' });
    // The second replica starts now: its reconciliation finds the lease being prepared and queues its create.
    const second = await startServiceProcess(world, hold, false);
    replicas.push(second);
    await eventually(() => holding(second), { what: 'the second replica about to create the worktree too', timeoutMs: 30_000 });
    first.process.kill('SIGUSR2');
    const grant = await granting;
    // The holder's agent is at work in its worktree.
    writeFileSync(path.join(grant.path, 'agent-work.txt'), 'not committed yet\n');
    second.process.kill('SIGUSR2');
    // Ready once the effects its reconciliation asked for have run.
    await eventually(async () => (await fetch(`${second.url}/ready`)).ok, { what: 'the second replica ready', timeoutMs: 30_000 });
    expect(existsSync(path.join(grant.path, 'agent-work.txt'))).toBe(true);
    // Nothing of the agent's was rescued away: no rescue branch in the shared clone.
    for (const clone of readdirSync(path.join(world.root, 'repos'))) {
      expect(git(path.join(world.root, 'repos', clone), 'for-each-ref', '--format=%(refname)', 'refs/heads/gantry/rescue/')).toBe('');
    }
    const rows = await world.db.query(`SELECT status, token FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId]);
    expect(rows.rows).toEqual([{ status: 'ready', token: grant.token }]);
  }, 120_000);

  it('a replica that restarts while another serves leaves the held leases\' expiry alone; a start after a full outage resumes them', async () => {
    const jobId = await claimedJob(world);
    const grant = await command<WorktreeLeaseGrant>(replicas[0]!, 'acquire_worktree', {
      jobId, jobLeaseToken: 1, repositoryUrl: world.git.origin, branch: 'feature/resume', baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${++n}`,
    });
    const expiry = async () => (await world.db.query<{ expires_at: Date }>(`SELECT expires_at FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId])).rows[0]!.expires_at.getTime();
    const granted = await expiry();
    // The holder dies (it renews no more); the second replica crashes and comes back, twice, while the first serves.
    for (let restart = 0; restart < 2; restart++) {
      await replicas.pop()!.kill('SIGKILL');
      await new Promise((r) => setTimeout(r, 50));
      replicas.push(await startServiceProcess(world));
      expect(await expiry()).toBe(granted);
    }
    // Nobody serves for a while: the first start after it runs the lease as long again from then.
    for (const replica of replicas.splice(0)) await replica.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 50));
    const restarted = Date.now();
    replicas.push(await startServiceProcess(world));
    expect(await expiry()).toBeGreaterThanOrEqual(restarted + 600_000);
  }, 180_000);

  it('a replica whose start found a directory no clone knew leaves it alone once another replica has made it a leased worktree', async () => {
    const branch = 'feature/made-meanwhile';
    const key = deriveWorktreeKey(world.git.origin, branch);
    // What a `git worktree add` looks like to a replica that lists the clones before the add and the directories after it.
    mkdirSync(path.join(world.root, 'worktrees', key));
    const second = await startServiceProcess(world, { GANTRY_TEST_HOLD_AT: 'worktree-reconcile:planned' }, false);
    replicas.push(second);
    await eventually(() => second.output().includes('"testHold":"worktree-reconcile:planned"'), { what: 'the second replica with its reconciliation planned', timeoutMs: 30_000 });
    // Meanwhile the running replica leases the key: its create makes the worktree there.
    const jobId = await claimedJob(world);
    const grant = await command<WorktreeLeaseGrant>(replicas[0]!, 'acquire_worktree', {
      jobId, jobLeaseToken: 1, repositoryUrl: world.git.origin, branch, baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${++n}`,
    });
    writeFileSync(path.join(grant.path, 'agent-work.txt'), 'not committed yet\n');
    second.process.kill('SIGUSR2');
    await eventually(async () => (await fetch(`${second.url}/ready`).catch(() => null))?.ok === true, { what: 'the second replica ready', timeoutMs: 30_000 });
    expect(existsSync(path.join(grant.path, 'agent-work.txt'))).toBe(true);
    expect(readdirSync(world.root)).not.toContain('quarantine');
    const rows = await world.db.query(`SELECT status, token FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId]);
    expect(rows.rows).toEqual([{ status: 'ready', token: grant.token }]);
  }, 120_000);
});
