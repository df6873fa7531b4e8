import type { WorktreeLeaseGrant } from '@gantry/contracts';
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
});
