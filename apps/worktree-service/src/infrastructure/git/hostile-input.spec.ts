import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { deriveWorktreeKey, ErrorCode, GantryError } from '@gantry/contracts';
import {
  assertBranchName,
  createOrReuseWorktree,
  ensureSharedClone,
  isWorktreeDirty,
  listWorktrees,
  openGitWorkspace,
  removeWorktree,
  rescueAndRemoveWorktree,
  rescueWorktree,
  resolveInsideRoot,
  runGit,
  syncWorktree,
  worktreePathFor,
  type GitWorkspace,
} from './index.js';
import { createGitFixture, snapshotTree, type GitFixture } from '@gantry/git/testing';

/*
 * Hostile input is refused with a typed error (INVALID_COMMAND) and nothing on disk is
 * touched. Each hostile value tries to create a marker file; the tests assert it never appears.
 */

const now = new Date('2026-11-30T06:00:00.000Z');

async function refusedAsInvalid(promise: Promise<unknown>): Promise<GantryError> {
  const error = await promise.then(
    () => new Error('expected INVALID_COMMAND, but it succeeded'),
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(GantryError);
  expect((error as GantryError).code).toBe(ErrorCode.INVALID_COMMAND);
  return error as GantryError;
}

describe('hostile input to the git layer', () => {
  let fx: GitFixture;
  /** The worktree root under test (inside the fixture's directory, not created yet). */
  let root: string;
  let ws: GitWorkspace;
  let marker: string;
  // The literal marker of the issue; only asserted absent when it did not exist before the run.
  const issueMarker = '/tmp/pwned';
  const issueMarkerExisted = existsSync(issueMarker);

  beforeEach(async () => {
    fx = createGitFixture();
    root = path.join(fx.dir, 'root');
    ws = await openGitWorkspace(root, { commandTimeoutMs: 20_000, networkTimeoutMs: 20_000 });
    marker = path.join(tmpdir(), `pwned-${randomUUID()}`);
  });
  afterEach(() => {
    expect(existsSync(marker)).toBe(false);
    if (!issueMarkerExisted) expect(existsSync(issueMarker)).toBe(false);
    fx.cleanup();
  });

  const hostileBranches = () => [
    `--upload-pack=touch ${marker}`,
    '--upload-pack=touch /tmp/pwned',
    '-x',
    '../../etc',
    'a..b',
    `-b${marker}`,
    'x;touch /tmp/pwned',
    'a@{1}',
    'refs/heads/.hidden',
    'foo.lock',
    '@',
  ];

  it('refuses hostile branch names before git or the disk sees them', async () => {
    const before = snapshotTree(root);
    for (const branch of hostileBranches()) {
      const key = deriveWorktreeKey(fx.origin, 'main');
      await refusedAsInvalid(createOrReuseWorktree(ws, { worktreeKey: key, repositoryUrl: fx.origin, branch, baseRef: 'main', now }));
      await refusedAsInvalid(syncWorktree(ws, { worktreeKey: key, repositoryUrl: fx.origin, branch, baseRef: 'main', now }));
      await refusedAsInvalid(assertBranchName(branch));
    }
    expect(snapshotTree(root)).toEqual(before);
    expect(readdirSync(ws.reposDir)).toEqual([]);
  });

  it('refuses a hostile base ref', async () => {
    const before = snapshotTree(root);
    for (const baseRef of [`--upload-pack=touch ${marker}`, '-x', 'a..b', '../../etc']) {
      await refusedAsInvalid(
        createOrReuseWorktree(ws, { worktreeKey: deriveWorktreeKey(fx.origin, 'main'), repositoryUrl: fx.origin, branch: 'main', baseRef, now }),
      );
    }
    expect(snapshotTree(root)).toEqual(before);
  });

  it('refuses transport-helper, option-like and other hostile repository URLs without cloning anything', async () => {
    const before = snapshotTree(root);
    const urls = [
      `ext::sh -c touch% ${marker}`,
      'ext::sh -c touch% /tmp/pwned',
      `ext::sh -c "touch ${marker}"`,
      'fd::0',
      `-oProxyCommand=touch ${marker}`,
      `--upload-pack=touch ${marker}`,
      `ssh://-oProxyCommand=touch%20${marker.replace(/\//g, '%2F')}/x`,
      'https://user:secret@github.com/acme/shop.git',
      `${fx.origin}/../../etc`,
      'relative/origin.git',
    ];
    for (const repositoryUrl of urls) {
      await refusedAsInvalid(ensureSharedClone(ws, repositoryUrl));
      await refusedAsInvalid(
        createOrReuseWorktree(ws, { worktreeKey: deriveWorktreeKey(fx.origin, 'main'), repositoryUrl, branch: 'main', baseRef: 'main', now }),
      );
      await refusedAsInvalid(listWorktrees(ws, { repositoryUrl }));
    }
    expect(snapshotTree(root)).toEqual(before);
  });

  it('refuses worktree keys and paths that leave the root', async () => {
    const before = snapshotTree(root);
    for (const worktreeKey of ['../../etc', '..', '.', 'a/../../b', '/etc', 'UPPER', '-x', '']) {
      await refusedAsInvalid(worktreePathFor(ws, worktreeKey));
      await refusedAsInvalid(removeWorktree(ws, { worktreeKey }));
      await refusedAsInvalid(isWorktreeDirty(ws, worktreeKey));
      await refusedAsInvalid(createOrReuseWorktree(ws, { worktreeKey, repositoryUrl: fx.origin, branch: 'main', baseRef: 'main', now }));
    }
    for (const candidate of ['../outside', '/etc/passwd', 'worktrees/../../x', path.join(fx.dir, 'origin.git')]) {
      await refusedAsInvalid(resolveInsideRoot(ws, candidate));
    }
    expect(await resolveInsideRoot(ws, 'worktrees/not-yet/deeper')).toBe(path.join(ws.worktreesDir, 'not-yet', 'deeper'));
    expect(snapshotTree(root)).toEqual(before);
  });

  it('refuses to use a worktree directory that is a symlink out of the root, and leaves its target alone: a rescue or removal moves the link itself aside', async () => {
    const outside = path.join(fx.dir, 'outside');
    mkdirSync(outside);
    writeFileSync(path.join(outside, 'precious.txt'), 'do not touch');
    const worktreeKey = 'evil-link';
    const link = path.join(ws.worktreesDir, worktreeKey);
    symlinkSync(outside, link);
    const before = snapshotTree(fx.dir);
    await refusedAsInvalid(isWorktreeDirty(ws, worktreeKey));
    await refusedAsInvalid(createOrReuseWorktree(ws, { worktreeKey, repositoryUrl: fx.origin, branch: 'main', baseRef: 'main', now }));
    expect(snapshotTree(fx.dir)).toEqual(before);
    // Let go (a release, an eviction), the link goes to the quarantine, never followed; its target stays as it was.
    const outsideBefore = snapshotTree(outside);
    expect(await rescueWorktree(ws, { worktreeKey, now })).toBeNull();
    expect(existsSync(link)).toBe(false);
    const [moved] = readdirSync(path.join(root, 'quarantine')).filter((name) => name.startsWith(worktreeKey));
    expect(readlinkSync(path.join(root, 'quarantine', moved!))).toBe(outside);
    symlinkSync(outside, link);
    expect(await rescueAndRemoveWorktree(ws, { worktreeKey, now })).toEqual({ rescue: null, removed: true });
    symlinkSync(outside, link);
    expect(await removeWorktree(ws, { worktreeKey })).toEqual({ removed: true });
    expect(existsSync(link)).toBe(false);
    expect(snapshotTree(outside)).toEqual(outsideBefore);
    expect(readFileSync(path.join(outside, 'precious.txt'), 'utf8')).toBe('do not touch');
  });

  it('refuses a path through a symlinked directory that leads out of the root', async () => {
    const outside = path.join(fx.dir, 'outside2');
    mkdirSync(outside);
    symlinkSync(outside, path.join(ws.root, 'escape'));
    await refusedAsInvalid(resolveInsideRoot(ws, 'escape/file'));
    await refusedAsInvalid(resolveInsideRoot(ws, path.join(ws.root, 'escape')));
  });

  it('refuses a worktree key that is not the one of the repository and branch', async () => {
    const before = snapshotTree(root);
    const otherKey = deriveWorktreeKey(fx.origin, 'other');
    await refusedAsInvalid(createOrReuseWorktree(ws, { worktreeKey: otherKey, repositoryUrl: fx.origin, branch: 'main', baseRef: 'main', now }));
    await refusedAsInvalid(syncWorktree(ws, { worktreeKey: otherKey, repositoryUrl: fx.origin, branch: 'main', baseRef: 'main', now }));
    expect(snapshotTree(root)).toEqual(before);
  });

  it('refuses a worktree directory that is a symlink even when it points inside the root', async () => {
    const target = path.join(ws.worktreesDir, 'real-dir');
    mkdirSync(target);
    symlinkSync(target, path.join(ws.worktreesDir, 'inner-link'));
    await refusedAsInvalid(worktreePathFor(ws, 'inner-link'));
  });

  it('cannot run the ext transport even when the host’s git config allows it', async () => {
    // Defence in depth: service-side git reads no global config and allows only the file, https and ssh transports (docs/git.md).
    const permissive = path.join(fx.dir, 'permissive-gitconfig');
    writeFileSync(permissive, '[protocol "ext"]\n\tallow = always\n');
    const saved = process.env.GIT_CONFIG_GLOBAL;
    process.env.GIT_CONFIG_GLOBAL = permissive;
    try {
      // Plain git with that config does run the command: the check below can fail.
      const proof = path.join(fx.dir, 'proof-ext-ran');
      try {
        execFileSync('git', ['ls-remote', '--', `ext::sh -c touch% ${proof}`], { stdio: 'ignore', env: process.env, timeout: 20_000 });
      } catch {
        // the "remote" is not a git server; what matters is whether the command ran
      }
      expect(existsSync(proof)).toBe(true);

      const viaGantry = await runGit(['ls-remote', '--', `ext::sh -c touch% ${marker}`], { timeoutMs: 20_000 }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(viaGantry).toBeInstanceOf(GantryError);
      expect(JSON.stringify((viaGantry as GantryError).details)).toMatch(/transport 'ext' not allowed/);
      expect(existsSync(marker)).toBe(false);
    } finally {
      process.env.GIT_CONFIG_GLOBAL = saved;
    }
  });

  it('cannot run the ext or fd transport even when a caller slips past validation', async () => {
    const target = path.join(fx.dir, 'ext-clone');
    const error = await runGit(['clone', '--', `ext::sh -c touch% ${marker}`, target], { timeoutMs: 20_000 }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(GantryError);
    expect(JSON.stringify((error as GantryError).details)).toMatch(/transport 'ext' not allowed/);
    const fdError = await runGit(['ls-remote', '--', 'fd::0'], { timeoutMs: 20_000 }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(JSON.stringify((fdError as GantryError).details)).toMatch(/transport 'fd' not allowed/);
  });

  it('refuses a root that is not absolute', async () => {
    await refusedAsInvalid(openGitWorkspace('relative/root'));
  });
});
