import { eventually } from '@gantry/testing';
import { alive, E2eSystem } from './e2e-system.js';

/*
 * A cancelled job's worktree is not handed to the next job on its branch while the cancelled agent
 * may still write to it (docs/worktrees.md, "When a lease ends"): the job service, the worktree
 * service and two runners as processes, the stand-in agent, a real bare origin. The cancelled agent
 * ignores SIGTERM, so its runner needs the whole kill grace to stop it.
 */
describe('a cancelled job’s worktree and the next job on its branch', () => {
  const system = new E2eSystem();

  beforeAll(async () => {
    await system.start();
    const env = { GANTRY_AGENT_KILL_GRACE_MS: '6000', GANTRY_WORKTREE_LEASE_MS: '12000' };
    await Promise.all([system.startRunner('runner-a', { env }), system.startRunner('runner-b', { env })]);
  }, 60_000);
  afterAll(() => system.stop(), 60_000);

  it('the second job gets the worktree only after the cancelled agent is gone, and only it pushes', async () => {
    const branch = 'feat/cancel-handover';
    const first = system.recordFile('cancelled-first');
    const second = system.recordFile('second-after-cancel');
    const cancelledId = await system.enqueue({
      branch,
      payload: { standIn: { behaviour: 'hang', ignoreSigterm: true, recordArgvTo: first } },
    });
    await eventually(async () => (await system.agentStarts(first)).length === 1, { what: 'the first agent started', timeoutMs: 30_000 });
    const cancelled = (await system.agentStarts(first))[0]!;

    const nextId = await system.enqueue({
      branch,
      payload: { standIn: { behaviour: 'commit', files: { 'src/after-cancel.ts': 'after\n' }, recordArgvTo: second } },
    });
    // The second job's claim waits in line for the worktree its branch shares with the first.
    await eventually(async () => (await system.leases(nextId)).some((l) => l.status === 'acquiring_lock'), { what: 'the second job in line', timeoutMs: 30_000 });

    let goneAt: number | null = null;
    const watching = (async () => {
      while (alive(cancelled.pid)) await new Promise((r) => setTimeout(r, 20));
      goneAt = Date.now();
    })();
    const cancelledAt = Date.now();
    await system.cancel(cancelledId);
    expect(await system.terminal(cancelledId)).toMatchObject({ status: 'CANCELLED', pushedAt: null });
    // The cancelled claim's worktree lease is kept for its holder while its agent may still run.
    const held = await eventually(async () => (await system.leases(cancelledId)).find((l) => l.releasePending), { what: 'the cancelled lease waiting for its holder' });
    expect(held).toMatchObject({ status: 'ready', releasePending: { cause: 'job_cancelled' } });

    const done = await system.terminal(nextId, 90_000);
    await watching;
    expect(done).toMatchObject({ status: 'DONE', headSha: await system.origin.sha(branch) });
    const [started] = await system.agentStarts(second);
    // Same worktree, never shared: the second agent started after the first was gone.
    expect(started!.cwd).toBe(cancelled.cwd);
    expect(goneAt).not.toBeNull();
    expect(goneAt!).toBeGreaterThan(cancelledAt);
    expect(Date.parse((started as unknown as { at: string }).at)).toBeGreaterThanOrEqual(goneAt!);
    // Only the second job pushed, once.
    const pushes = (await system.origin.pushes()).filter((p) => p.ref === `refs/heads/${branch}`);
    expect(pushes).toEqual([{ ref: `refs/heads/${branch}`, oldSha: '0'.repeat(40), newSha: done.headSha }]);
    await system.leasesReleased();
  }, 120_000);
});

