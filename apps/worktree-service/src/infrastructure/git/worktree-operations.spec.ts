import { existsSync, lstatSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, utimesSync, writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { deriveWorktreeKey, ErrorCode, GantryError } from '@gantry/contracts';
import {
  createOrReuseWorktree,
  earlierRescue,
  ensureSharedClone,
  isWorktreeDirty,
  listWorktrees,
  measureDiskUsage,
  openGitWorkspace,
  parseWorktreeListPorcelain,
  pruneWorktrees,
  quarantineOrphanDirectory,
  removeWorktree,
  rescueAndRemoveWorktree,
  rescueWorktree,
  sharedCloneFetchCount,
  syncWorktree,
  type GitWorkspace,
} from './index.js';
import { createGitFixtureTemplate, plainGit as git, snapshotTree, type GitFixture, type GitFixtureTemplate } from '@gantry/git/testing';
import { gitOnClone } from './workspace.js';

const branch = 'feature/checkout';
const now = new Date('2026-11-30T06:00:00.000Z');

function lstatOrNullSync(at: string): ReturnType<typeof lstatSync> | null {
  try {
    return lstatSync(at);
  } catch {
    return null;
  }
}

async function expectGantryError(promise: Promise<unknown>, code: string): Promise<GantryError> {
  const error = await promise.then(
    () => new Error(`expected ${code}, but it succeeded`),
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(GantryError);
  expect((error as GantryError).code).toBe(code);
  return error as GantryError;
}

describe('git worktrees of a lease, on real repositories', () => {
  let fx: GitFixture;
  /** The worktree root under test (inside the fixture's directory, not created yet). */
  let root: string;
  let ws: GitWorkspace;
  let key: string;
  let input: { worktreeKey: string; repositoryUrl: string; branch: string; baseRef: string; now: Date };
  let mainSha: string;

  // Every case starts from the same origin (main: README.md, then app.txt v1), copied from one built
  // once: building it ran a dozen git processes per case, copying runs none.
  let template: GitFixtureTemplate;
  let templateMainSha: string;
  beforeAll(() => {
    template = createGitFixtureTemplate((prepared) => {
      templateMainSha = prepared.pushCommit('main', { 'app.txt': 'v1\n' }, 'add app');
    });
  });
  afterAll(() => template.cleanup());

  beforeEach(async () => {
    fx = template.copy();
    root = path.join(fx.dir, 'root');
    mainSha = templateMainSha;
    ws = await openGitWorkspace(root, { commandTimeoutMs: 20_000, networkTimeoutMs: 20_000 });
    key = deriveWorktreeKey(fx.origin, branch);
    input = { worktreeKey: key, repositoryUrl: fx.origin, branch, baseRef: 'main', now };
  });
  afterEach(() => fx.cleanup());

  const wt = () => path.join(ws.worktreesDir, key);
  const status = () => git(wt(), 'status', '--porcelain', '--untracked-files=all');

  it('keeps one bare shared clone per repository, fetched from the origin', async () => {
    const first = await ensureSharedClone(ws, fx.origin);
    expect(first.created).toBe(true);
    expect(path.dirname(first.clonePath)).toBe(ws.reposDir);
    expect(git(first.clonePath, 'rev-parse', '--is-bare-repository')).toBe('true');
    expect(git(first.clonePath, 'rev-parse', 'refs/remotes/origin/main')).toBe(mainSha);
    const newer = fx.pushCommit('main', { 'app.txt': 'v2\n' });
    const again = await ensureSharedClone(ws, fx.origin);
    expect(again).toEqual({ clonePath: first.clonePath, created: false });
    expect(git(first.clonePath, 'rev-parse', 'refs/remotes/origin/main')).toBe(newer);
  });

  it('creates the worktree with git worktree add, on a new branch at the base ref', async () => {
    const prepared = await createOrReuseWorktree(ws, input);
    expect(prepared).toEqual({ outcome: 'created', path: wt(), headSha: mainSha, rescue: null, atStartingPoint: true });
    expect(readFileSync(path.join(wt(), 'app.txt'), 'utf8')).toBe('v1\n');
    expect(git(wt(), 'symbolic-ref', 'HEAD')).toBe(`refs/heads/${branch}`);
    const listed = await listWorktrees(ws);
    expect(listed.worktrees.map((w) => [w.worktreeKey, w.branch, w.headSha])).toEqual([[key, branch, mainSha]]);
  });

  it('starts from the origin’s branch when it already exists there', async () => {
    const featureSha = fx.pushCommit(branch, { 'feature.txt': 'f\n' });
    const prepared = await createOrReuseWorktree(ws, input);
    expect(prepared.headSha).toBe(featureSha);
    // The origin's branch may be behind the base ref, which the sync moves it up to: it decides.
    expect(prepared.atStartingPoint).toBe(false);
  });

  it('creates a new branch at the commit an annotated tag names, and answers with that commit', async () => {
    git(fx.seed, 'tag', '-a', '-m', 'release', 'v1', mainSha);
    fx.pushCommit('main', { 'app.txt': 'v2\n' });
    git(fx.seed, 'push', '--quiet', 'origin', 'refs/tags/v1');
    const created = await createOrReuseWorktree(ws, { ...input, baseRef: 'v1' });
    expect(created.headSha).toBe(mainSha);
    expect(git(wt(), 'rev-parse', 'HEAD')).toBe(mainSha);
  });

  it('reuses a clean existing worktree instead of creating another', async () => {
    await createOrReuseWorktree(ws, input);
    const again = await createOrReuseWorktree(ws, input);
    expect(again).toEqual({ outcome: 'reused', path: wt(), headSha: mainSha, rescue: null, atStartingPoint: false });
  });

  it('rescues a dirty worktree left behind before reusing it', async () => {
    await createOrReuseWorktree(ws, input);
    writeFileSync(path.join(wt(), 'app.txt'), 'half-done\n');
    const again = await createOrReuseWorktree(ws, { ...input, now: new Date('2026-11-30T07:00:00.000Z') });
    expect(again.outcome).toBe('reused');
    expect(again.rescue?.branch).toBe(`gantry/rescue/${key}/20261130T070000000Z`);
    expect(git(wt(), 'show', `${again.rescue!.sha}:app.txt`)).toBe('half-done');
    expect(status()).toBe('');
  });

  it('refuses a non-empty directory that is not a worktree of the repository, and leaves it alone', async () => {
    mkdirSync(wt());
    writeFileSync(path.join(wt(), 'precious.txt'), 'mine');
    await expectGantryError(createOrReuseWorktree(ws, input), ErrorCode.PRECONDITION_FAILED);
    expect(readFileSync(path.join(wt(), 'precious.txt'), 'utf8')).toBe('mine');
  });

  it('recreates a worktree whose directory vanished (git forgets the old one with prune)', async () => {
    await createOrReuseWorktree(ws, input);
    rmSync(wt(), { recursive: true, force: true });
    expect((await listWorktrees(ws)).worktrees[0]?.prunable).toBe(true);
    const again = await createOrReuseWorktree(ws, input);
    expect(again.outcome).toBe('created');
    expect((await listWorktrees(ws)).worktrees.map((w) => w.prunable)).toEqual([false]);
  });

  it('recovers a worktree whose checkout was killed half-way (no index, files missing)', async () => {
    await createOrReuseWorktree(ws, input);
    rmSync(git(wt(), 'rev-parse', '--path-format=absolute', '--git-path', 'index'));
    rmSync(path.join(wt(), 'app.txt'));
    const again = await createOrReuseWorktree(ws, input);
    expect(again).toMatchObject({ outcome: 'reused', path: wt(), headSha: mainSha });
    expect(status()).toBe('');
    expect(readFileSync(path.join(wt(), 'app.txt'), 'utf8')).toBe('v1\n');
  });

  describe('a worktree found off its branch is made again, its work kept', () => {
    const gitDirOf = () => git(wt(), 'rev-parse', '--path-format=absolute', '--git-dir');

    it('a git worktree add killed during its checkout (locked "initializing"): reused, and no longer locked against removal', async () => {
      await createOrReuseWorktree(ws, input);
      const gitDir = gitDirOf();
      writeFileSync(path.join(gitDir, 'locked'), 'initializing');
      rmSync(path.join(gitDir, 'index'));
      rmSync(path.join(wt(), 'app.txt'));
      const again = await createOrReuseWorktree(ws, input);
      expect(again).toMatchObject({ path: wt(), headSha: mainSha });
      expect(status()).toBe('');
      await expect(rescueAndRemoveWorktree(ws, { worktreeKey: key, now })).resolves.toMatchObject({ removed: true });
    });

    it('a git worktree add killed before it set HEAD (all zeros) no longer fails every fetch of the repository: the next lease makes the worktree', async () => {
      await createOrReuseWorktree(ws, input);
      const gitDir = gitDirOf();
      // What such an add leaves: its registration, locked, with a HEAD of zeros; a directory with only its .git file.
      writeFileSync(path.join(gitDir, 'HEAD'), `${'0'.repeat(40)}\n`);
      writeFileSync(path.join(gitDir, 'locked'), 'initializing');
      rmSync(path.join(gitDir, 'index'));
      for (const entry of readdirSync(wt())) if (entry !== '.git') rmSync(path.join(wt(), entry), { recursive: true });
      const newer = fx.pushCommit('main', { 'app.txt': 'v2\n' });
      const { clonePath } = await ensureSharedClone(ws, fx.origin, { fetchedSince: performance.now() });
      expect(git(clonePath, 'rev-parse', 'refs/remotes/origin/main')).toBe(newer);
      // Made again on the key's branch (the clone's, which the sync then moves to the origin's state).
      const again = await createOrReuseWorktree(ws, input);
      expect(again).toMatchObject({ outcome: 'created', path: wt(), headSha: mainSha });
      expect(git(wt(), 'symbolic-ref', 'HEAD')).toBe(`refs/heads/${branch}`);
      expect(status()).toBe('');
      expect((await syncWorktree(ws, input)).baseSha).toBe(newer);
    });

    it('a worktree an agent locked (git worktree lock) is still removed by an eviction', async () => {
      await createOrReuseWorktree(ws, input);
      git(wt(), 'worktree', 'lock', '--reason', 'mine', wt());
      await expect(rescueAndRemoveWorktree(ws, { worktreeKey: key, now })).resolves.toMatchObject({ removed: true });
      expect(existsSync(wt())).toBe(false);
    });

    it('an agent that left its worktree on a detached HEAD with commits and changes: they are rescued and the worktree is on its branch again', async () => {
      await createOrReuseWorktree(ws, input);
      git(wt(), 'checkout', '--quiet', '--detach');
      writeFileSync(path.join(wt(), 'detached.txt'), 'committed off the branch\n');
      git(wt(), 'add', 'detached.txt');
      git(wt(), 'commit', '--quiet', '-m', 'off the branch');
      writeFileSync(path.join(wt(), 'app.txt'), 'half-done\n');
      const again = await createOrReuseWorktree(ws, input);
      expect(git(wt(), 'symbolic-ref', 'HEAD')).toBe(`refs/heads/${branch}`);
      expect(again.headSha).toBe(mainSha);
      expect(status()).toBe('');
      expect(git(wt(), 'show', `${again.rescue!.branch}:detached.txt`)).toBe('committed off the branch');
      expect(git(wt(), 'show', `${again.rescue!.branch}:app.txt`)).toBe('half-done');
    });

    it('an agent that switched its worktree to another branch: the next create puts it back on its own', async () => {
      await createOrReuseWorktree(ws, input);
      git(wt(), 'checkout', '--quiet', '-b', 'agent/elsewhere');
      const again = await createOrReuseWorktree(ws, input);
      expect(git(wt(), 'symbolic-ref', 'HEAD')).toBe(`refs/heads/${branch}`);
      expect(again.headSha).toBe(mainSha);
      await expect(syncWorktree(ws, input)).resolves.toMatchObject({ baseSha: mainSha });
    });

    it('an agent’s orphan branch under the lease’s name (HEAD on it, no commit): its files are rescued and the worktree is made again, so the next sync goes through', async () => {
      await createOrReuseWorktree(ws, input);
      git(wt(), 'checkout', '--quiet', '-b', 'agent/elsewhere');
      git(wt(), 'branch', '--quiet', '-D', branch);
      git(wt(), 'checkout', '--quiet', '--orphan', branch);
      writeFileSync(path.join(wt(), 'orphan.txt'), 'started over\n');
      const again = await createOrReuseWorktree(ws, input);
      expect(again).toMatchObject({ outcome: 'created', path: wt(), headSha: mainSha });
      expect(git(wt(), 'symbolic-ref', 'HEAD')).toBe(`refs/heads/${branch}`);
      expect(status()).toBe('');
      expect(git(wt(), 'show', `${again.rescue!.branch}:orphan.txt`)).toBe('started over');
      expect(git(wt(), 'show', `${again.rescue!.branch}:app.txt`)).toBe('v1');
      await expect(syncWorktree(ws, input)).resolves.toMatchObject({ baseSha: mainSha });
    });

    it('an empty orphan branch (no commit, no files), of the lease’s name or another: the worktree is made again, with nothing to rescue', async () => {
      await createOrReuseWorktree(ws, input);
      git(wt(), 'checkout', '--quiet', '--orphan', 'agent/empty');
      git(wt(), 'rm', '-r', '--quiet', '--force', '.');
      let again = await createOrReuseWorktree(ws, input);
      expect(again).toMatchObject({ outcome: 'created', path: wt(), headSha: mainSha, rescue: null });
      expect(git(wt(), 'symbolic-ref', 'HEAD')).toBe(`refs/heads/${branch}`);
      git(wt(), 'update-ref', '-d', `refs/heads/${branch}`);
      git(wt(), 'rm', '-r', '--quiet', '--force', '.');
      again = await createOrReuseWorktree(ws, input);
      expect(again).toMatchObject({ outcome: 'created', path: wt(), headSha: mainSha, rescue: null });
      expect(status()).toBe('');
      await expect(syncWorktree(ws, input)).resolves.toMatchObject({ baseSha: mainSha });
    });
  });

  describe('lock files a killed git left behind', () => {
    const tenMinutesAgo = () => new Date(Date.now() - 10 * 60_000);
    const plantLock = (file: string, at: Date) => {
      writeFileSync(file, '');
      utimesSync(file, at, at);
      return file;
    };
    const indexLock = () => git(wt(), 'rev-parse', '--path-format=absolute', '--git-path', 'index.lock');

    it('a stale index.lock (an agent or a git of ours killed mid-command) does not block the rescue of a dirty worktree', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'app.txt'), 'half-done\n');
      const lock = plantLock(indexLock(), tenMinutesAgo());
      const rescue = await rescueWorktree(ws, { worktreeKey: key, now });
      expect(git(wt(), 'show', `${rescue!.sha}:app.txt`)).toBe('half-done');
      expect(status()).toBe('');
      expect(existsSync(lock)).toBe(false);
    });

    it('a stale index.lock does not block the sync that resets a branch with unpushed commits', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'work.txt'), 'unpushed\n');
      git(wt(), 'add', 'work.txt');
      git(wt(), 'commit', '--quiet', '-m', 'unpushed');
      plantLock(indexLock(), tenMinutesAgo());
      const synced = await syncWorktree(ws, input);
      expect(synced.baseSha).toBe(mainSha);
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(mainSha);
    });

    it('a stale lock of a remote-tracking ref does not block every later fetch of the clone', async () => {
      const { clonePath } = await ensureSharedClone(ws, fx.origin);
      plantLock(path.join(clonePath, 'refs', 'remotes', 'origin', 'main.lock'), tenMinutesAgo());
      const newer = fx.pushCommit('main', { 'app.txt': 'v2\n' });
      await ensureSharedClone(ws, fx.origin);
      expect(git(clonePath, 'rev-parse', 'refs/remotes/origin/main')).toBe(newer);
    });

    it('a lock taken moments ago may be a git at work: it is left alone and the command fails', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'app.txt'), 'half-done\n');
      const lock = plantLock(indexLock(), new Date());
      await expect(rescueWorktree(ws, { worktreeKey: key, now })).rejects.toMatchObject({ details: { stderr: expect.stringContaining('index.lock') } });
      expect(existsSync(lock)).toBe(true);
      expect(readFileSync(path.join(wt(), 'app.txt'), 'utf8')).toBe('half-done\n');
    });
  });

  it('creates worktrees of one repository concurrently without git lock errors', async () => {
    const branches = ['a/one', 'a/two', 'a/three', 'a/four'];
    const results = await Promise.all(
      branches.map((b) => createOrReuseWorktree(ws, { ...input, branch: b, worktreeKey: deriveWorktreeKey(fx.origin, b) })),
    );
    expect(results.map((r) => r.outcome)).toEqual(['created', 'created', 'created', 'created']);
    expect((await listWorktrees(ws)).worktrees).toHaveLength(4);
  });

  describe('sync: every lease starts from the origin’s state', () => {
    const commitLocally = (file: string, message: string) => {
      writeFileSync(path.join(wt(), file), `${message}\n`);
      git(wt(), 'add', file);
      git(wt(), 'commit', '--quiet', '-m', message);
      return git(wt(), 'rev-parse', 'HEAD');
    };
    const rescueRefs = () => git(wt(), 'for-each-ref', '--format=%(refname:short) %(objectname)', 'refs/heads/gantry/rescue/');

    it('fetches and fast-forwards the branch to the base ref', async () => {
      await createOrReuseWorktree(ws, input);
      const newer = fx.pushCommit('main', { 'app.txt': 'v2\n' });
      const synced = await syncWorktree(ws, input);
      expect(synced).toEqual({ baseSha: newer, fastForwarded: true, rescue: null });
      expect(readFileSync(path.join(wt(), 'app.txt'), 'utf8')).toBe('v2\n');
    });

    it('starts from the fetch its lease’s create made when told when the create began, and fetches again otherwise', async () => {
      const createBegan = performance.now();
      await createOrReuseWorktree(ws, input);
      const fetches = sharedCloneFetchCount();
      // Pushed after the create's fetch: a sync served by that fetch does not see it …
      const newer = fx.pushCommit('main', { 'app.txt': 'v2\n' });
      expect(await syncWorktree(ws, { ...input, fetchedSince: createBegan })).toEqual({ baseSha: mainSha, fastForwarded: false, rescue: null });
      expect(sharedCloneFetchCount()).toBe(fetches);
      // … a sync asked for now fetches, and does.
      expect(await syncWorktree(ws, input)).toEqual({ baseSha: newer, fastForwarded: true, rescue: null });
      expect(sharedCloneFetchCount()).toBe(fetches + 1);
    });

    it('a worktree its create made at the starting point is where a full sync would leave it, so a sync told so only checks it is there', async () => {
      const prepared = await createOrReuseWorktree(ws, input);
      expect(prepared).toMatchObject({ outcome: 'created', atStartingPoint: true, headSha: mainSha });
      const fetches = sharedCloneFetchCount();
      expect(await syncWorktree(ws, { ...input, madeAtStart: prepared.headSha })).toEqual({ baseSha: mainSha, fastForwarded: false, rescue: null });
      expect(sharedCloneFetchCount()).toBe(fetches);
      // What it stands for: a sync that checks everything (and fetches, nothing new) answers the same.
      expect(await syncWorktree(ws, input)).toEqual({ baseSha: mainSha, fastForwarded: false, rescue: null });
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(mainSha);
      rmSync(wt(), { recursive: true, force: true });
      await expect(syncWorktree(ws, { ...input, madeAtStart: prepared.headSha })).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
      // A symbolic link put where the worktree was is not taken for it.
      const elsewhere = path.join(fx.dir, 'elsewhere');
      mkdirSync(elsewhere);
      symlinkSync(elsewhere, wt());
      await expect(syncWorktree(ws, { ...input, madeAtStart: prepared.headSha })).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
    });

    it('serves callers that asked before a fetch of the clone began with that one fetch', async () => {
      await ensureSharedClone(ws, fx.origin);
      const fetches = sharedCloneFetchCount();
      const newer = fx.pushCommit('main', { 'app.txt': 'v2\n' });
      // Asked together: the first fetches, the others waited for the clone meanwhile and take its fetch.
      await Promise.all([1, 2, 3].map(() => ensureSharedClone(ws, fx.origin)));
      expect(sharedCloneFetchCount()).toBe(fetches + 1);
      expect(git(path.join(ws.reposDir, readdirSync(ws.reposDir)[0]!), 'rev-parse', 'refs/remotes/origin/main')).toBe(newer);
    });

    it('a pass over the clone that failed serves nobody: the next caller fetches', async () => {
      const asked = performance.now();
      await ensureSharedClone(ws, fx.origin);
      const moved = `${fx.origin}.away`;
      renameSync(fx.origin, moved);
      await expect(ensureSharedClone(ws, fx.origin)).rejects.toThrow();
      renameSync(moved, fx.origin);
      const fetches = sharedCloneFetchCount();
      await ensureSharedClone(ws, fx.origin, { fetchedSince: asked });
      expect(sharedCloneFetchCount()).toBe(fetches + 1);
    });

    it('fetches again for a clone made anew, whatever it fetched before', async () => {
      const { clonePath } = await ensureSharedClone(ws, fx.origin);
      rmSync(clonePath, { recursive: true, force: true });
      const asked = performance.now();
      const fetches = sharedCloneFetchCount();
      expect((await ensureSharedClone(ws, fx.origin, { fetchedSince: asked - 60_000 })).created).toBe(true);
      expect(sharedCloneFetchCount()).toBe(fetches + 1);
      expect(git(clonePath, 'rev-parse', 'refs/remotes/origin/main')).toBe(mainSha);
    });

    it('does nothing when the branch is already at the base ref', async () => {
      await createOrReuseWorktree(ws, input);
      expect(await syncWorktree(ws, input)).toEqual({ baseSha: mainSha, fastForwarded: false, rescue: null });
    });

    it('never builds on unpushed local commits: they go to a rescue branch and the branch starts at the origin’s base ref', async () => {
      await createOrReuseWorktree(ws, input);
      const local = commitLocally('work.txt', 'unpushed work');
      const synced = await syncWorktree(ws, input);
      expect(synced).toEqual({ baseSha: mainSha, fastForwarded: false, rescue: { branch: `gantry/rescue/${key}/20261130T060000000Z`, sha: local } });
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(mainSha);
      expect(git(wt(), 'rev-parse', `refs/heads/${branch}`)).toBe(mainSha);
      expect(existsSync(path.join(wt(), 'work.txt'))).toBe(false);
      expect(status()).toBe('');
      expect(git(wt(), 'show', `${synced.rescue!.branch}:work.txt`)).toBe('unpushed work');
      // Again: nothing left to rescue, nothing moves.
      expect(await syncWorktree(ws, { ...input, now: new Date('2026-11-30T06:01:00.000Z') })).toEqual({ baseSha: mainSha, fastForwarded: false, rescue: null });
      expect(rescueRefs()).toBe(`${synced.rescue!.branch} ${local}`);
    });

    it('when the base moved on as well: the commits are rescued and the branch starts at the new base', async () => {
      await createOrReuseWorktree(ws, input);
      const local = commitLocally('work.txt', 'unpushed work');
      const newer = fx.pushCommit('main', { 'app.txt': 'v2\n' });
      const synced = await syncWorktree(ws, input);
      expect(synced).toEqual({ baseSha: newer, fastForwarded: false, rescue: { branch: expect.stringMatching(/^gantry\/rescue\//), sha: local } });
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(newer);
      expect(readFileSync(path.join(wt(), 'app.txt'), 'utf8')).toBe('v2\n');
    });

    it('starts from the origin’s branch when the origin has it, not from the base ref nor from local commits', async () => {
      const pushed = fx.pushCommit(branch, { 'feature.txt': 'f1\n' });
      await createOrReuseWorktree(ws, input);
      const local = commitLocally('work.txt', 'unpushed on top of the pushed branch');
      const synced = await syncWorktree(ws, input);
      expect(synced).toEqual({ baseSha: pushed, fastForwarded: false, rescue: { branch: expect.stringMatching(/^gantry\/rescue\//), sha: local } });
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(pushed);
    });

    it('moves the origin’s branch up to its base ref when it is only behind it', async () => {
      fx.pushCommit(branch, { 'feature.txt': 'f1\n' });
      git(fx.seed, 'checkout', '--quiet', 'main');
      git(fx.seed, 'merge', '--quiet', '--ff-only', branch);
      const newer = fx.pushCommit('main', { 'app.txt': 'v2\n' });
      await createOrReuseWorktree(ws, input);
      expect(await syncWorktree(ws, input)).toEqual({ baseSha: newer, fastForwarded: true, rescue: null });
    });

    it('follows the origin’s branch when the base ref is the branch itself', async () => {
      fx.pushCommit(branch, { 'feature.txt': 'f1\n' });
      await createOrReuseWorktree(ws, input);
      const pushedByOthers = fx.pushCommit(branch, { 'feature.txt': 'f2\n' });
      expect(await syncWorktree(ws, { ...input, baseRef: branch })).toEqual({ baseSha: pushedByOthers, fastForwarded: true, rescue: null });
    });

    it('a local branch left in the shared clone by a removed worktree does not seed the next lease', async () => {
      await createOrReuseWorktree(ws, input);
      const local = commitLocally('work.txt', 'failed attempt');
      await removeWorktree(ws, { worktreeKey: key });
      const again = await createOrReuseWorktree(ws, input);
      expect(again).toMatchObject({ outcome: 'created', headSha: local, atStartingPoint: false });
      const synced = await syncWorktree(ws, input);
      expect(synced).toMatchObject({ baseSha: mainSha, rescue: { sha: local } });
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(mainSha);
    });

    it('run again after a crash between the rescue and the reset, it reuses the rescue branch it made', async () => {
      await createOrReuseWorktree(ws, input);
      const local = commitLocally('work.txt', 'unpushed work');
      // As if the first run had made its rescue branch and died before the reset:
      git(wt(), 'branch', `gantry/rescue/${key}/20261130T055900000Z`, local);
      const synced = await syncWorktree(ws, input);
      expect(synced.rescue).toEqual({ branch: `gantry/rescue/${key}/20261130T055900000Z`, sha: local });
      expect(rescueRefs()).toBe(`gantry/rescue/${key}/20261130T055900000Z ${local}`);
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(mainSha);
    });

    it('run again after the reset, it finds nothing to keep, and the rescue the first run made for the same sync is found', async () => {
      await createOrReuseWorktree(ws, input);
      const local = commitLocally('work.txt', 'unpushed work');
      const rescueFor = 'sync of lease L (token 2)';
      const first = await syncWorktree(ws, { ...input, rescueFor });
      expect(first.rescue).toMatchObject({ sha: local });
      expect(await syncWorktree(ws, { ...input, rescueFor })).toMatchObject({ rescue: null });
      expect(await earlierRescue(ws, { worktreeKey: key, rescueFor })).toEqual(first.rescue);
      expect(await earlierRescue(ws, { worktreeKey: key, rescueFor: 'sync of lease L (token 3)' })).toBeNull();
    });

    it('local commits a rescue branch of other work already points at are kept for this sync too, and found again by a run after the reset', async () => {
      await createOrReuseWorktree(ws, input);
      const local = commitLocally('work.txt', 'unpushed work');
      // Another work's rescue branch at that commit: one an older service made (no work named), then one of lease L.
      git(wt(), 'branch', `gantry/rescue/${key}/20261130T055800000Z`, local);
      const rescueFor = 'sync of lease M (token 2)';
      const first = await syncWorktree(ws, { ...input, rescueFor });
      expect(first.rescue).toMatchObject({ sha: local });
      expect(await syncWorktree(ws, { ...input, rescueFor })).toMatchObject({ rescue: null });
      expect(await earlierRescue(ws, { worktreeKey: key, rescueFor })).toEqual(first.rescue);
      // Run again before its reset, the sync keeps the branch it made for itself rather than make another.
      git(wt(), 'reset', '--hard', '--quiet', local);
      expect(await syncWorktree(ws, { ...input, rescueFor })).toMatchObject({ rescue: first.rescue });
    });

    it('refuses a worktree that is not on the lease’s branch — detached, on another branch, or on a branch with no commit — and moves nothing', async () => {
      await createOrReuseWorktree(ws, input);
      fx.pushCommit('main', { 'app.txt': 'v2\n' });
      git(wt(), 'checkout', '--quiet', '--detach');
      let refused = await expectGantryError(syncWorktree(ws, input), ErrorCode.PRECONDITION_FAILED);
      expect(refused.message).toContain('a detached HEAD');
      git(wt(), 'checkout', '--quiet', '-b', 'other');
      refused = await expectGantryError(syncWorktree(ws, input), ErrorCode.PRECONDITION_FAILED);
      expect(refused.message).toContain('refs/heads/other');
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(mainSha);
      // An agent's orphan branch under the lease's name: HEAD names it, but it has no commit.
      git(wt(), 'branch', '--quiet', '-D', branch);
      git(wt(), 'checkout', '--quiet', '--orphan', branch);
      await expect(syncWorktree(ws, input)).rejects.toThrow();
      expect(git(wt(), 'symbolic-ref', 'HEAD')).toBe(`refs/heads/${branch}`);
      expect(git(wt(), 'for-each-ref', `refs/heads/${branch}`)).toBe('');
    });

    it('refuses to sync over uncommitted changes, leaving them in place', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'app.txt'), 'uncommitted\n');
      fx.pushCommit('main', { 'app.txt': 'v2\n' });
      await expectGantryError(syncWorktree(ws, input), ErrorCode.PRECONDITION_FAILED);
      expect(readFileSync(path.join(wt(), 'app.txt'), 'utf8')).toBe('uncommitted\n');
    });

    it('refuses a base ref the origin does not have', async () => {
      await createOrReuseWorktree(ws, input);
      await expectGantryError(syncWorktree(ws, { ...input, baseRef: 'no-such-branch' }), ErrorCode.PRECONDITION_FAILED);
    });

    it('refuses a base given as the SHA of a commit only this clone has, and changes nothing', async () => {
      await createOrReuseWorktree(ws, input);
      const local = commitLocally('work.txt', 'only here');
      const error = await expectGantryError(syncWorktree(ws, { ...input, baseRef: local }), ErrorCode.PRECONDITION_FAILED);
      expect(error.message).toMatch(/is not a branch, tag or commit of the origin/);
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(local);
      expect(rescueRefs()).toBe('');
    });

    it('moves to a base given as a commit SHA of the origin', async () => {
      await createOrReuseWorktree(ws, input);
      const newer = fx.pushCommit('main', { 'app.txt': 'v3\n' });
      expect((await syncWorktree(ws, { ...input, baseRef: newer })).baseSha).toBe(newer);
    });

    it('takes a tag of the origin as the base ref — lightweight, annotated or a tag of a tag — at the commit it names', async () => {
      await createOrReuseWorktree(ws, input);
      const tagged = fx.pushCommit('main', { 'app.txt': 'v2\n' });
      git(fx.seed, 'tag', 'v2-light', tagged);
      git(fx.seed, 'tag', '-a', '-m', 'release', 'v2', tagged);
      git(fx.seed, 'tag', '-a', '-m', 'the release again', 'v2-again', 'v2');
      fx.pushCommit('main', { 'app.txt': 'v3\n' }); // main moves on: the tags name an older commit
      git(fx.seed, 'push', '--quiet', 'origin', '--tags');
      for (const tag of ['v2-light', 'v2', 'v2-again']) {
        expect((await syncWorktree(ws, { ...input, baseRef: tag })).baseSha).toBe(tagged);
      }
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(tagged);
    });

    it('refuses a tag that names no commit, and a name the origin only has refs below', async () => {
      await createOrReuseWorktree(ws, input);
      git(fx.seed, 'tag', 'a-tree', `${mainSha}^{tree}`);
      git(fx.seed, 'push', '--quiet', 'origin', 'refs/tags/a-tree');
      fx.pushCommit('release/1.0', { 'app.txt': 'v1.0\n' });
      for (const baseRef of ['a-tree', 'release']) {
        const error = await expectGantryError(syncWorktree(ws, { ...input, baseRef }), ErrorCode.PRECONDITION_FAILED);
        expect(error.message).toMatch(/is not a branch, tag or commit of the origin/);
      }
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(mainSha);
    });
  });

  describe('dirty detection and rescue', () => {
    it('sees modified tracked files and untracked files as dirty', async () => {
      await createOrReuseWorktree(ws, input);
      expect(await isWorktreeDirty(ws, key)).toBe(false);
      writeFileSync(path.join(wt(), 'new.txt'), 'new\n');
      expect(await isWorktreeDirty(ws, key)).toBe(true);
      rmSync(path.join(wt(), 'new.txt'));
      writeFileSync(path.join(wt(), 'app.txt'), 'changed\n');
      expect(await isWorktreeDirty(ws, key)).toBe(true);
    });

    it('commits a tracked change and an untracked file to a rescue branch and leaves the worktree clean', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'app.txt'), 'tracked change\n');
      writeFileSync(path.join(wt(), 'untracked.txt'), 'untracked file\n');
      const rescue = await rescueWorktree(ws, { worktreeKey: key, now });
      expect(rescue?.branch).toBe(`gantry/rescue/${key}/20261130T060000000Z`);
      expect(git(wt(), 'rev-parse', `refs/heads/${rescue!.branch}`)).toBe(rescue!.sha);
      expect(git(wt(), 'show', `${rescue!.sha}:app.txt`)).toBe('tracked change');
      expect(git(wt(), 'show', `${rescue!.sha}:untracked.txt`)).toBe('untracked file');
      expect(git(wt(), 'rev-parse', `${rescue!.sha}~1`)).toBe(mainSha);
      expect(status()).toBe('');
      expect(git(wt(), 'symbolic-ref', 'HEAD')).toBe(`refs/heads/${branch}`);
      expect(existsSync(path.join(wt(), 'untracked.txt'))).toBe(false);
      expect(readFileSync(path.join(wt(), 'app.txt'), 'utf8')).toBe('v1\n');
    });

    it('has nothing to rescue in a clean worktree', async () => {
      await createOrReuseWorktree(ws, input);
      expect(await rescueWorktree(ws, { worktreeKey: key, now })).toBeNull();
      expect(git(wt(), 'branch', '--list', 'gantry/*')).toBe('');
    });

    it('gives a second rescue at the same instant its own branch', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'a.txt'), '1');
      const first = await rescueWorktree(ws, { worktreeKey: key, now });
      writeFileSync(path.join(wt(), 'a.txt'), '2');
      const second = await rescueWorktree(ws, { worktreeKey: key, now });
      expect(second!.branch).toBe(`${first!.branch}-2`);
      expect(git(wt(), 'show', `${second!.sha}:a.txt`)).toBe('2');
    });

    it('does not make a second rescue branch for the same changes after a crash before the cleaning', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'app.txt'), 'interrupted\n');
      writeFileSync(path.join(wt(), 'new.txt'), 'new\n');
      const first = await rescueWorktree(ws, { worktreeKey: key, now });
      // As if the crash came after the rescue commit but before the worktree was cleaned:
      writeFileSync(path.join(wt(), 'app.txt'), 'interrupted\n');
      writeFileSync(path.join(wt(), 'new.txt'), 'new\n');
      const retried = await rescueWorktree(ws, { worktreeKey: key, now: new Date('2026-11-30T06:05:00.000Z') });
      expect(retried).toEqual(first);
      expect(git(wt(), 'for-each-ref', '--format=%(refname)', 'refs/heads/gantry/rescue/')).toBe(`refs/heads/${first!.branch}`);
      expect(status()).toBe('');
    });

    it('run again after the cleaning (or the removal) it finds nothing to rescue, and the rescue the first run made for the same work is found', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'app.txt'), 'saved before the crash\n');
      const rescueFor = 'rescue of lease L (token 3)';
      const first = await rescueWorktree(ws, { worktreeKey: key, now, rescueFor });
      expect(await rescueWorktree(ws, { worktreeKey: key, now: new Date('2026-11-30T06:05:00.000Z'), rescueFor })).toBeNull();
      expect(await earlierRescue(ws, { worktreeKey: key, rescueFor })).toEqual(first);
      // Another lease's, or the same lease's under another token, is not this work's.
      expect(await earlierRescue(ws, { worktreeKey: key, rescueFor: 'rescue of lease L (token 4)' })).toBeNull();
      expect(await earlierRescue(ws, { worktreeKey: key, rescueFor: 'rescue of lease L (token 3' })).toBeNull();

      writeFileSync(path.join(wt(), 'app.txt'), 'saved before the removal\n');
      const removing = 'rescue_and_remove of lease M (token 4)';
      const second = await rescueAndRemoveWorktree(ws, { worktreeKey: key, now, rescueFor: removing });
      expect(await rescueAndRemoveWorktree(ws, { worktreeKey: key, now, rescueFor: removing })).toEqual({ rescue: null, removed: true });
      expect(await earlierRescue(ws, { worktreeKey: key, rescueFor: removing })).toEqual(second.rescue);
      expect(git(fx.dir, '--git-dir', (await ensureSharedClone(ws, fx.origin)).clonePath, 'show', `${second.rescue!.branch}:app.txt`)).toBe('saved before the removal');
    });

    it('a rescue whose changes another lease’s rescue branch already holds, or one made before rescues named their work, is found again by a run after its cleaning', async () => {
      await createOrReuseWorktree(ws, input);
      // The same changes on the same HEAD, rescued for lease L first; then, by an older service, with no work named.
      writeFileSync(path.join(wt(), 'app.txt'), 'the same change\n');
      await rescueWorktree(ws, { worktreeKey: key, now, rescueFor: 'rescue of lease L (token 1)' });
      writeFileSync(path.join(wt(), 'other.txt'), 'another change\n');
      await rescueWorktree(ws, { worktreeKey: key, now });
      for (const [files, rescueFor] of [
        [{ 'app.txt': 'the same change\n' }, 'rescue of lease M (token 2)'],
        [{ 'other.txt': 'another change\n' }, 'rescue of lease N (token 3)'],
      ] as const) {
        for (const [file, content] of Object.entries(files)) writeFileSync(path.join(wt(), file), content);
        const first = await rescueWorktree(ws, { worktreeKey: key, now, rescueFor });
        expect(first).not.toBeNull();
        // Killed after its cleaning, before its report: run again, nothing is left, and what it saved is found.
        expect(await rescueWorktree(ws, { worktreeKey: key, now, rescueFor })).toBeNull();
        expect(await earlierRescue(ws, { worktreeKey: key, rescueFor })).toEqual(first);
      }
    });

    it('rescues a worktree on a detached HEAD without moving HEAD', async () => {
      await createOrReuseWorktree(ws, input);
      git(wt(), 'checkout', '--quiet', '--detach', 'HEAD');
      writeFileSync(path.join(wt(), 'app.txt'), 'detached work\n');
      const rescue = await rescueWorktree(ws, { worktreeKey: key, now });
      expect(git(wt(), 'show', `${rescue!.sha}:app.txt`)).toBe('detached work');
      expect(git(wt(), 'rev-parse', 'HEAD')).toBe(mainSha);
      expect(status()).toBe('');
    });

    it('leaves ignored files alone (they are not work git would lose on removal)', async () => {
      fx.pushCommit('main', { '.gitignore': 'build/\n' });
      await createOrReuseWorktree(ws, input);
      await syncWorktree(ws, input);
      mkdirSync(path.join(wt(), 'build'));
      writeFileSync(path.join(wt(), 'build', 'out.js'), 'compiled');
      expect(await isWorktreeDirty(ws, key)).toBe(false);
      expect(await rescueWorktree(ws, { worktreeKey: key, now })).toBeNull();
      expect(existsSync(path.join(wt(), 'build', 'out.js'))).toBe(true);
    });
  });

  describe('remove', () => {
    it('never removes a dirty worktree that was not rescued', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'untracked.txt'), 'precious\n');
      await expectGantryError(removeWorktree(ws, { worktreeKey: key }), ErrorCode.PRECONDITION_FAILED);
      expect(readFileSync(path.join(wt(), 'untracked.txt'), 'utf8')).toBe('precious\n');
    });

    it('rescues then removes a dirty worktree: the rescue branch holds the changes, the directory is gone', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'app.txt'), 'tracked change\n');
      writeFileSync(path.join(wt(), 'untracked.txt'), 'untracked file\n');
      const { rescue, removed } = await rescueAndRemoveWorktree(ws, { worktreeKey: key, now });
      expect(removed).toBe(true);
      expect(existsSync(wt())).toBe(false);
      const { clonePath } = await ensureSharedClone(ws, fx.origin);
      expect(git(clonePath, 'show', `${rescue!.branch}:app.txt`)).toBe('tracked change');
      expect(git(clonePath, 'show', `${rescue!.branch}:untracked.txt`)).toBe('untracked file');
      expect((await listWorktrees(ws)).worktrees).toEqual([]);
    });

    it('a write between the rescue and the removal is not lost: git worktree remove, as the service runs it, refuses a dirty worktree', async () => {
      // rescueAndRemoveWorktree removes right after its rescue found the worktree clean, relying on this.
      await createOrReuseWorktree(ws, input);
      const { clonePath } = await ensureSharedClone(ws, fx.origin);
      writeFileSync(path.join(wt(), 'untracked.txt'), 'written late\n');
      await expect(gitOnClone(ws, clonePath, ['worktree', 'remove', '--', wt()])).rejects.toThrow(/modified or untracked/);
      rmSync(path.join(wt(), 'untracked.txt'));
      writeFileSync(path.join(wt(), 'app.txt'), 'changed late\n');
      await expect(gitOnClone(ws, clonePath, ['worktree', 'remove', '--', wt()])).rejects.toThrow(/modified or untracked/);
      expect(readFileSync(path.join(wt(), 'app.txt'), 'utf8')).toBe('changed late\n');
      // Tried again, the rescue saves it and the removal goes through.
      const { rescue, removed } = await rescueAndRemoveWorktree(ws, { worktreeKey: key, now });
      expect(removed).toBe(true);
      expect(git(clonePath, 'show', `${rescue!.branch}:app.txt`)).toBe('changed late');
    });

    it('removes a clean worktree once; removing it again changes nothing and still says it is gone', async () => {
      await createOrReuseWorktree(ws, input);
      expect(await removeWorktree(ws, { worktreeKey: key })).toEqual({ removed: true });
      const before = snapshotTree(ws.root);
      expect(await removeWorktree(ws, { worktreeKey: key })).toEqual({ removed: true });
      expect(snapshotTree(ws.root)).toEqual(before);
      expect(existsSync(wt())).toBe(false);
    });

    it('a worktree whose directory is already gone is pruned and counts as removed', async () => {
      await createOrReuseWorktree(ws, input);
      rmSync(wt(), { recursive: true, force: true });
      expect((await listWorktrees(ws)).worktrees.map((w) => w.prunable)).toEqual([true]);
      expect(await rescueAndRemoveWorktree(ws, { worktreeKey: key, now })).toEqual({ rescue: null, removed: true });
      expect((await listWorktrees(ws)).worktrees).toEqual([]);
    });

    it('a worktree whose .git file an agent deleted is repaired from its clone, then rescued and removed', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'app.txt'), 'changed before the gitlink went\n');
      rmSync(path.join(wt(), '.git'));
      const repaired: string[] = [];
      const told = { ...ws, onGitlinkRepaired: (p: string) => repaired.push(p) };
      const { rescue, removed } = await rescueAndRemoveWorktree(told, { worktreeKey: key, now });
      expect(removed).toBe(true);
      expect(repaired).toEqual([wt()]);
      const { clonePath } = await ensureSharedClone(ws, fx.origin);
      expect(git(clonePath, 'show', `${rescue!.branch}:app.txt`)).toBe('changed before the gitlink went');
      expect(existsSync(wt())).toBe(false);
    });

    it('a prune of its clone does not forget a worktree whose .git file an agent deleted: it is repaired first, and rescued rather than moved to the quarantine', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'app.txt'), 'staged before the gitlink went\n');
      git(wt(), 'add', 'app.txt');
      writeFileSync(path.join(wt(), 'app.txt'), 'changed again after staging\n');
      rmSync(path.join(wt(), '.git'));
      // Another key of the clone whose directory went: its create prunes the clone, and so does a removal's pruneWorktrees.
      const other = { ...input, worktreeKey: deriveWorktreeKey(fx.origin, 'feature/other'), branch: 'feature/other' };
      const otherPath = path.join(ws.worktreesDir, other.worktreeKey);
      await createOrReuseWorktree(ws, other);
      rmSync(otherPath, { recursive: true, force: true });
      expect(await createOrReuseWorktree(ws, other)).toMatchObject({ outcome: 'created' });
      rmSync(otherPath, { recursive: true, force: true });
      await pruneWorktrees(ws);
      expect((await listWorktrees(ws)).worktrees.map((w) => [w.worktreeKey, w.prunable])).toEqual([[key, false]]);

      const { rescue, removed } = await rescueAndRemoveWorktree(ws, { worktreeKey: key, now });
      expect(removed).toBe(true);
      const { clonePath } = await ensureSharedClone(ws, fx.origin);
      expect(git(clonePath, 'show', `${rescue!.branch}:app.txt`)).toBe('changed again after staging');
      expect(existsSync(path.join(ws.root, 'quarantine'))).toBe(false);
    });

    it('a worktree with no .git file that no clone registers any more is moved, whole, to the quarantine and counts as removed', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'app.txt'), 'work beside no gitlink\n');
      rmSync(path.join(wt(), '.git'));
      // Forgotten by a prune the service did not run (by hand, or before it repaired first).
      git(fx.dir, '--git-dir', (await ensureSharedClone(ws, fx.origin)).clonePath, 'worktree', 'prune');
      expect(await rescueAndRemoveWorktree(ws, { worktreeKey: key, now })).toEqual({ rescue: null, removed: true });
      expect(existsSync(wt())).toBe(false);
      const [moved] = readdirSync(path.join(ws.root, 'quarantine'));
      expect(readFileSync(path.join(ws.root, 'quarantine', moved!, 'app.txt'), 'utf8')).toBe('work beside no gitlink\n');
      expect(await createOrReuseWorktree(ws, input)).toMatchObject({ outcome: 'created' });
    });

    it('a .git directory an agent put in place of the .git file (git repairs no such one): the next lease of the key moves it, whole, to the quarantine and makes the worktree again', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'app.txt'), 'work of its own repository\n');
      rmSync(path.join(wt(), '.git'));
      git(wt(), 'init', '--quiet');
      expect(await createOrReuseWorktree(ws, input)).toMatchObject({ outcome: 'created', rescue: null });
      expect(status()).toBe('');
      const [moved] = readdirSync(path.join(ws.root, 'quarantine'));
      expect(readFileSync(path.join(ws.root, 'quarantine', moved!, 'app.txt'), 'utf8')).toBe('work of its own repository\n');
      expect(existsSync(path.join(ws.root, 'quarantine', moved!, '.git', 'HEAD'))).toBe(true);
      expect((await listWorktrees(ws)).worktrees.map((w) => w.prunable)).toEqual([false]);
    });

    it('keeps unpushed commits of a removed worktree on its branch (the next sync rescues them)', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'work.txt'), 'agent work\n');
      git(wt(), 'add', 'work.txt');
      git(wt(), 'commit', '--quiet', '-m', 'unpushed work');
      const local = git(wt(), 'rev-parse', 'HEAD');
      await removeWorktree(ws, { worktreeKey: key });
      const again = await createOrReuseWorktree(ws, input);
      expect(again).toMatchObject({ outcome: 'created', headSha: local, atStartingPoint: false });
    });
  });

  describe('inventory and disk use', () => {
    it('lists registered worktrees with their dirty state, and directories no clone knows', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'x.txt'), 'x');
      mkdirSync(path.join(ws.worktreesDir, 'orphan-dir'));
      const inventory = await listWorktrees(ws, { withDirtyState: true });
      expect(inventory.worktrees).toEqual([
        expect.objectContaining({ worktreeKey: key, path: wt(), branch, headSha: mainSha, dirty: true, prunable: false, locked: false }),
      ]);
      expect(inventory.orphanDirectories).toEqual([path.join(ws.worktreesDir, 'orphan-dir')]);
    });

    it('moves an orphan directory aside without deleting it, and removes an empty one', async () => {
      await createOrReuseWorktree(ws, input);
      mkdirSync(path.join(ws.worktreesDir, 'orphan-dir'));
      writeFileSync(path.join(ws.worktreesDir, 'orphan-dir', 'notes.txt'), 'keep');
      mkdirSync(path.join(ws.worktreesDir, 'empty-dir'));
      const moved = await quarantineOrphanDirectory(ws, { directory: 'orphan-dir', now });
      expect(moved).toBe(path.join(ws.root, 'quarantine', 'orphan-dir-20261130T060000000Z'));
      expect(readFileSync(path.join(moved!, 'notes.txt'), 'utf8')).toBe('keep');
      expect(await quarantineOrphanDirectory(ws, { directory: 'empty-dir', now })).toBeNull();
      expect((await listWorktrees(ws)).orphanDirectories).toEqual([]);
    });

    it('keeps both of two orphans of one name moved to the quarantine in the same millisecond: the second gets a suffix, neither fails nor overwrites', async () => {
      const quarantined = (name: string) => path.join(ws.root, 'quarantine', name);
      // Directories: the second, moved onto the first's name, failed (not empty).
      mkdirSync(path.join(ws.worktreesDir, 'twice'));
      writeFileSync(path.join(ws.worktreesDir, 'twice', 'notes.txt'), 'first');
      expect(await quarantineOrphanDirectory(ws, { directory: 'twice', now })).toBe(quarantined('twice-20261130T060000000Z'));
      mkdirSync(path.join(ws.worktreesDir, 'twice'));
      writeFileSync(path.join(ws.worktreesDir, 'twice', 'notes.txt'), 'second');
      expect(await quarantineOrphanDirectory(ws, { directory: 'twice', now })).toBe(quarantined('twice-20261130T060000000Z-2'));
      expect(readFileSync(quarantined('twice-20261130T060000000Z/notes.txt'), 'utf8')).toBe('first');
      expect(readFileSync(quarantined('twice-20261130T060000000Z-2/notes.txt'), 'utf8')).toBe('second');
      // Files: the second, moved onto the first's name, replaced it.
      writeFileSync(path.join(ws.worktreesDir, 'stray'), 'first');
      expect(await quarantineOrphanDirectory(ws, { directory: 'stray', now })).toBe(quarantined('stray-20261130T060000000Z'));
      writeFileSync(path.join(ws.worktreesDir, 'stray'), 'second');
      expect(await quarantineOrphanDirectory(ws, { directory: 'stray', now })).toBe(quarantined('stray-20261130T060000000Z-2'));
      expect(readFileSync(quarantined('stray-20261130T060000000Z'), 'utf8')).toBe('first');
      expect(readFileSync(quarantined('stray-20261130T060000000Z-2'), 'utf8')).toBe('second');
      expect((await listWorktrees(ws)).orphanDirectories).toEqual([]);
    });

    it('gives two things set aside at once under one name in the same millisecond a name each: a key\'s directory past repair and an orphan of that name', async () => {
      // The release of a key whose directory is a link (set aside whole) and the start's move of an
      // orphan of the same name, at the same moment: one entry each in the quarantine, nothing replaced.
      const target = path.join(fx.dir, 'elsewhere');
      writeFileSync(target, 'the link\'s target');
      symlinkSync(target, wt());
      const [removed, moved] = await Promise.all([
        removeWorktree(ws, { worktreeKey: key, now }),
        (async () => {
          // Made as soon as the link has gone: an orphan of the key's name, moved in the same millisecond.
          for (let i = 0; i < 2000 && lstatOrNullSync(wt()) !== null; i++) await new Promise((r) => setImmediate(r));
          mkdirSync(wt());
          writeFileSync(path.join(wt(), 'notes.txt'), 'orphan');
          return quarantineOrphanDirectory(ws, { directory: key, now });
        })(),
      ]);
      expect(removed).toEqual({ removed: true });
      const entries = readdirSync(path.join(ws.root, 'quarantine')).sort();
      expect(entries).toEqual([`${key}-20261130T060000000Z`, `${key}-20261130T060000000Z-2`]);
      expect(moved).toBe(path.join(ws.root, 'quarantine', entries[1]!));
      expect(readFileSync(path.join(moved!, 'notes.txt'), 'utf8')).toBe('orphan');
      expect(lstatSync(path.join(ws.root, 'quarantine', entries[0]!)).isSymbolicLink()).toBe(true);
      expect(readFileSync(target, 'utf8')).toBe('the link\'s target');
    });

    it('refuses to quarantine a registered worktree or anything outside the worktrees directory', async () => {
      await createOrReuseWorktree(ws, input);
      await expectGantryError(quarantineOrphanDirectory(ws, { directory: key, now }), ErrorCode.PRECONDITION_FAILED);
      await expectGantryError(quarantineOrphanDirectory(ws, { directory: '../repos', now }), ErrorCode.INVALID_COMMAND);
      await expectGantryError(quarantineOrphanDirectory(ws, { directory: '..', now }), ErrorCode.INVALID_COMMAND);
      expect(existsSync(wt())).toBe(true);
    });

    it('prunes worktrees whose directory is gone', async () => {
      await createOrReuseWorktree(ws, input);
      rmSync(wt(), { recursive: true, force: true });
      await pruneWorktrees(ws);
      expect((await listWorktrees(ws)).worktrees).toEqual([]);
    });

    it('measures the disk use of the root per clone and per worktree', async () => {
      await createOrReuseWorktree(ws, input);
      writeFileSync(path.join(wt(), 'big.bin'), Buffer.alloc(256 * 1024, 1));
      const usage = await measureDiskUsage(ws, now);
      expect(usage.root).toBe(ws.root);
      expect(usage.measuredAt).toBe(now.toISOString());
      expect(usage.worktrees).toEqual([{ worktreeKey: key, bytes: expect.any(Number) }]);
      expect(usage.worktrees[0]!.bytes).toBeGreaterThanOrEqual(256 * 1024);
      expect(usage.repositories).toHaveLength(1);
      expect(usage.totalBytes).toBeGreaterThan(usage.worktrees[0]!.bytes + usage.repositories[0]!.bytes - 1);
    });
  });
});

describe('git worktree list --porcelain parsing', () => {
  it('reads NUL-separated records: bare clone, branch, detached, locked and prunable worktrees', () => {
    const z = [
      'worktree /r/repos/a.git', 'bare', '',
      'worktree /r/worktrees/k1', 'HEAD 1111111111111111111111111111111111111111', 'branch refs/heads/feature/x', '',
      'worktree /r/worktrees/k2', 'HEAD 2222222222222222222222222222222222222222', 'detached', 'locked reason with spaces', '',
      'worktree /r/worktrees/k3', 'HEAD 3333333333333333333333333333333333333333', 'branch refs/heads/y', 'prunable gitdir file points to non-existent location', '',
    ].join('\0');
    expect(parseWorktreeListPorcelain(z)).toEqual([
      { path: '/r/repos/a.git', headSha: null, branch: null, bare: true, detached: false, locked: false, prunable: false },
      { path: '/r/worktrees/k1', headSha: '1'.repeat(40), branch: 'refs/heads/feature/x', bare: false, detached: false, locked: false, prunable: false },
      { path: '/r/worktrees/k2', headSha: '2'.repeat(40), branch: null, bare: false, detached: true, locked: true, prunable: false },
      { path: '/r/worktrees/k3', headSha: '3'.repeat(40), branch: 'refs/heads/y', bare: false, detached: false, locked: false, prunable: true },
    ]);
  });

  it('reads the line-separated form the same way', () => {
    const text = 'worktree /r/worktrees/k1\nHEAD abc\nbranch refs/heads/main\n\nworktree /r/worktrees/k2 with space\nHEAD def\ndetached\n';
    expect(parseWorktreeListPorcelain(text).map((e) => [e.path, e.branch, e.detached])).toEqual([
      ['/r/worktrees/k1', 'refs/heads/main', false],
      ['/r/worktrees/k2 with space', null, true],
    ]);
  });
});
