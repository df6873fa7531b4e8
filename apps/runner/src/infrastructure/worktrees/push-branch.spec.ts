import { createServer, type Socket } from 'node:net';
import { writeFile, chmod, readFile, access } from 'node:fs/promises';
import { join } from 'node:path';
import { ErrorCode } from '@gantry/contracts';
import { createGitFixture, type GitFixture } from '@gantry/git/testing';
import { processesWith } from '@gantry/testing';
import { originBranchHead, pushBranch } from './push-branch.js';

const target = { targetBranch: 'main' };

describe('pushing a job branch to the origin', () => {
  let fixture: GitFixture;
  /** The commit the origin has on a ref, read on the origin itself; null when it has no such ref. */
  const remoteBranchSha = async (_worktree: string, origin: string, ref: string) =>
    (await fixture.git(origin, 'for-each-ref', '--format=%(objectname)', ref)) || null;

  beforeEach(async () => {
    fixture = createGitFixture();
    await fixture.git(fixture.seed, 'checkout', '-q', '-b', 'feat/cart');
  });
  afterEach(() => fixture.cleanup());

  it('pushes the verified commit once and reports that nothing was pushed when the origin already has it', async () => {
    const head = await fixture.commit({ 'cart.ts': 'export const total = 1;\n' }, 'feat: cart');
    expect(await remoteBranchSha(fixture.seed, fixture.origin, 'refs/heads/feat/cart')).toBeNull();
    expect(await pushBranch(fixture.seed, fixture.origin, 'feat/cart', head, target)).toEqual({ branch: 'feat/cart', headSha: head, pushed: true });
    expect(await remoteBranchSha(fixture.seed, fixture.origin, 'refs/heads/feat/cart')).toBe(head);
    expect(await pushBranch(fixture.seed, fixture.origin, 'feat/cart', head, target)).toEqual({ branch: 'feat/cart', headSha: head, pushed: false });
  });

  it('pushes exactly the verified commit, not whatever HEAD moved on to', async () => {
    const verified = await fixture.commit({ 'a.ts': 'a\n' }, 'a');
    await fixture.commit({ 'b.ts': 'b\n' }, 'b (after verify)');
    await pushBranch(fixture.seed, fixture.origin, 'feat/cart', verified, target);
    expect(await remoteBranchSha(fixture.seed, fixture.origin, 'refs/heads/feat/cart')).toBe(verified);
  });

  it('refuses to overwrite a branch that moved on the origin (no force push)', async () => {
    const mine = await fixture.commit({ 'a.ts': 'mine\n' }, 'mine');
    await fixture.git(fixture.seed, 'push', '-q', 'origin', 'main:refs/heads/feat/cart');
    await fixture.git(fixture.seed, 'checkout', '-q', '--detach', 'main');
    const theirs = await fixture.commit({ 'b.ts': 'theirs\n' }, 'theirs');
    await fixture.git(fixture.seed, 'push', '-q', 'origin', `${theirs}:refs/heads/feat/cart`);
    await expect(pushBranch(fixture.seed, fixture.origin, 'feat/cart', mine, target)).rejects.toMatchObject({
      code: ErrorCode.PRECONDITION_FAILED,
      message: expect.stringMatching(/pushing feat\/cart to the origin failed/),
    });
    expect(await remoteBranchSha(fixture.seed, fixture.origin, 'refs/heads/feat/cart')).toBe(theirs);
  });

  it('runs no hook the agent left in the repository', async () => {
    const head = await fixture.commit({ 'a.ts': 'a\n' }, 'a');
    const marker = join(fixture.dir, 'hook-ran');
    const hook = join(fixture.seed, '.git', 'hooks', 'pre-push');
    await writeFile(hook, `#!/bin/sh\ntouch ${marker}\n`);
    await chmod(hook, 0o755);
    await pushBranch(fixture.seed, fixture.origin, 'feat/cart', head, target);
    await expect(access(marker)).rejects.toThrow();
    expect(await readFile(hook, 'utf8')).toContain('touch');
  });

  it('pushes to the leased repository’s URL even when the worktree’s origin now names another repository', async () => {
    const head = await fixture.commit({ 'a.ts': 'a\n' }, 'a');
    const elsewhere = join(fixture.dir, 'elsewhere.git');
    await fixture.git(fixture.seed, 'init', '-q', '--bare', elsewhere);
    await fixture.git(fixture.seed, 'remote', 'set-url', 'origin', elsewhere);
    expect(await pushBranch(fixture.seed, fixture.origin, 'feat/cart', head, target)).toMatchObject({ pushed: true });
    expect(await remoteBranchSha(fixture.seed, fixture.origin, 'refs/heads/feat/cart')).toBe(head);
    expect(await fixture.git(fixture.seed, 'ls-remote', '--heads', elsewhere)).toBe('');
  });

  it.each([
    ['remote.origin.pushurl', 'ELSEWHERE'],
    ['url.ELSEWHERE.pushInsteadOf', 'ORIGIN'],
    ['url.ELSEWHERE.insteadOf', 'ORIGIN'],
  ])('fails loudly, and pushes nowhere, when the agent set %s', async (key, value) => {
    const head = await fixture.commit({ 'a.ts': 'a\n' }, 'a');
    const elsewhere = join(fixture.dir, 'elsewhere.git');
    await fixture.git(fixture.seed, 'init', '-q', '--bare', elsewhere);
    const fill = (text: string) => text.replace('ELSEWHERE', elsewhere).replace('ORIGIN', fixture.origin);
    await fixture.git(fixture.seed, 'config', fill(key), fill(value));
    await expect(pushBranch(fixture.seed, fixture.origin, 'feat/cart', head, target)).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
    expect(await fixture.git(fixture.seed, 'ls-remote', '--heads', elsewhere)).toBe('');
    expect(await fixture.git(fixture.seed, 'ls-remote', '--heads', fixture.origin)).not.toContain('feat/cart');
  });

  it.each(['ext::sh -c touch% /tmp/pwned', 'fd::0', '--receive-pack=touch /tmp/pwned'])('refuses the repository URL %j and pushes nothing', async (url) => {
    const head = await fixture.commit({ 'a.ts': 'a\n' }, 'a');
    await expect(pushBranch(fixture.seed, url, 'feat/cart', head, target)).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
  });

  it.each(['--upload-pack=touch /tmp/pwned', '-x', 'a..b', 'has space'])('refuses the branch name %j and pushes nothing', async (branch) => {
    const head = await fixture.commit({ 'a.ts': 'a\n' }, 'a');
    await expect(pushBranch(fixture.seed, fixture.origin, branch, head, target)).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
    expect(await fixture.git(fixture.seed, 'ls-remote', '--heads', 'origin')).not.toContain(head);
  });

  it('never pushes to the target branch, whatever the job names', async () => {
    const head = await fixture.commit({ 'a.ts': 'a\n' }, 'a');
    const before = await remoteBranchSha(fixture.seed, fixture.origin, 'refs/heads/main');
    await expect(pushBranch(fixture.seed, fixture.origin, 'main', head, target)).rejects.toMatchObject({
      code: ErrorCode.PRECONDITION_FAILED,
      message: expect.stringMatching(/refusing to push to main: it is the target branch/),
    });
    expect(await remoteBranchSha(fixture.seed, fixture.origin, 'refs/heads/main')).toBe(before);
  });

  it('refuses a revision that is not a full SHA', async () => {
    await expect(pushBranch(fixture.seed, fixture.origin, 'feat/cart', 'HEAD', target)).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
  });
  it('asks an origin that does not answer only until the signal aborts: git is stopped, not left to its 60 s bound', async () => {
    // An https origin that takes the connection and never says a word (a host gone behind a partition).
    const sockets = new Set<Socket>();
    const silent = createServer((socket) => sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const url = `https://127.0.0.1:${(silent.address() as { port: number }).port}/silent/app.git`;
    try {
      const deadline = new AbortController();
      const asked = originBranchHead(fixture.seed, url, 'feat/cart', deadline.signal).then(
        () => null,
        (error: unknown) => error,
      );
      // git is connected and waits for the origin when the deadline comes
      const connected = Date.now();
      while (sockets.size === 0 && Date.now() - connected < 30_000) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(sockets.size).toBe(1);
      const began = Date.now();
      deadline.abort();
      const error = await asked;
      expect(Date.now() - began).toBeLessThan(5_000);
      // the signal's reason, not a failure of git's own
      expect(error).toMatchObject({ name: 'AbortError' });
      expect(processesWith('ls-remote', url)).toEqual([]);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  }, 90_000);
});
