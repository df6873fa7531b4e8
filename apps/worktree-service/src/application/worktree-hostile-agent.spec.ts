import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { acquireWorktree, deriveWorktreeKey, listWorktreeLeases, releaseWorktree, type WorktreeLeaseGrant } from '@gantry/contracts';
import { plainGit as git } from '@gantry/git/testing';
import { eventually } from '@gantry/testing';
import { claimedJob, createWorld, type TestWorld } from './testing/world.js';
import { startServiceProcess, type ServiceProcess } from './testing/process.js';

/*
 * A hostile agent: while it holds a worktree it writes the shared clone's config, hooks and the
 * worktree's .gitattributes, and leaves the worktree dirty. Then the service does what it does at
 * the end of a lease and at the next ones — the release with its rescue (status, add, commit-tree,
 * update-ref, reset --hard, clean), an acquire of the same key (fetch, status, reset or merge) and of
 * a new key (worktree add) — as a process, through its commands. No program of the agent runs
 * (marker files never appear), the agent's changes are rescued, the next holder starts from the
 * origin's state, and the keys it wrote are gone from the clone (and logged).
 */

interface Planted {
  /** The key(s) the service must remove and log, as it names them. */
  keys: string[];
}

interface HostileCase {
  name: string;
  /** The branch the agent works on; pushed to the origin with `files` first when given. */
  originFiles?: Record<string, string>;
  plant(ctx: { worktree: string; clone: string; marker: string; script: string; world: TestWorld }): Planted;
}

const HOOKS = ['post-checkout', 'reference-transaction', 'post-merge', 'post-commit', 'post-rewrite', 'pre-auto-gc'];

function hooks(dir: string, marker: string): void {
  mkdirSync(dir, { recursive: true });
  for (const name of HOOKS) {
    writeFileSync(path.join(dir, name), `#!/bin/sh\ntouch '${marker}'\ncat >/dev/null\n`);
    chmodSync(path.join(dir, name), 0o755);
  }
}

const cases: HostileCase[] = [
  {
    name: 'core.fsmonitor',
    plant: ({ worktree, script }) => {
      git(worktree, 'config', 'core.fsmonitor', script);
      return { keys: ['core.fsmonitor'] };
    },
  },
  {
    name: 'hooks in the shared clone’s hooks directory',
    plant: ({ clone, marker }) => {
      hooks(path.join(clone, 'hooks'), marker);
      return { keys: [] };
    },
  },
  {
    name: 'core.hooksPath',
    plant: ({ worktree, marker, world }) => {
      const dir = path.join(world.git.dir, 'agent-hooks');
      hooks(dir, marker);
      git(worktree, 'config', 'core.hooksPath', dir);
      return { keys: ['core.hookspath'] };
    },
  },
  {
    name: 'filter.<driver>.clean / smudge / process named by .gitattributes',
    originFiles: { '.gitattributes': '* filter=agent\n', 'a.txt': 'a\n', 'b.txt': 'b\n' },
    plant: ({ worktree, script }) => {
      git(worktree, 'config', 'filter.agent.clean', script);
      git(worktree, 'config', 'filter.agent.smudge', script);
      // The rescue then modifies a.txt (clean) and restores b.txt (smudge).
      rmSync(path.join(worktree, 'b.txt'));
      return { keys: ['filter.<…>.clean', 'filter.<…>.smudge'] };
    },
  },
  {
    name: 'filter.<driver>.process named by .gitattributes',
    originFiles: { '.gitattributes': '* filter=agent\n', 'a.txt': 'a\n', 'b.txt': 'b\n' },
    plant: ({ worktree, script }) => {
      git(worktree, 'config', 'filter.agent.process', script);
      rmSync(path.join(worktree, 'b.txt'));
      return { keys: ['filter.<…>.process'] };
    },
  },
  {
    name: 'remote.origin.uploadpack',
    plant: ({ worktree, marker }) => {
      git(worktree, 'config', 'remote.origin.uploadpack', `touch '${marker}'; git-upload-pack`);
      return { keys: ['remote.<…>.uploadpack'] };
    },
  },
  {
    name: 'include.path pulling in core.fsmonitor',
    plant: ({ worktree, script, world }) => {
      const included = path.join(world.git.dir, 'agent-include');
      writeFileSync(included, `[core]\n\tfsmonitor = ${script}\n`);
      git(worktree, 'config', 'include.path', included);
      return { keys: ['include.path'] };
    },
  },
];

describe('the worktree service after a hostile agent (a real process, real git)', () => {
  let world: TestWorld;
  let service: ServiceProcess;
  let n = 0;
  let mainSha: string;

  beforeAll(async () => {
    world = await createWorld('wt-hostile');
    service = await startServiceProcess(world);
    mainSha = git(world.git.seed, 'rev-parse', 'main');
  });
  afterAll(async () => {
    await service?.kill('SIGKILL');
    await world?.close();
  });

  const acquire = async (branch: string, repositoryUrl = world.git.origin) =>
    world.client.request(
      acquireWorktree,
      { jobId: await claimedJob(world), jobLeaseToken: 1, repositoryUrl, branch, baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${++n}` },
      { timeoutMs: 60_000 },
    );
  const release = async (grant: WorktreeLeaseGrant) => {
    await world.client.request(releaseWorktree, { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `release:${++n}` }, { timeoutMs: 30_000 });
    await eventually(async () => (await world.client.request(listWorktreeLeases, { worktreeKey: grant.worktreeKey })).leases.find((l) => l.leaseId === grant.leaseId)?.status === 'released', {
      what: `lease ${grant.leaseId} released`,
    });
  };
  const cloneOf = (worktree: string) => git(worktree, 'rev-parse', '--path-format=absolute', '--git-common-dir');
  const rescues = (clone: string, key: string) => git(clone, 'for-each-ref', '--format=%(refname)', `refs/heads/gantry/rescue/${key}/`).split('\n').filter(Boolean);

  it.each(cases.map((c, i) => [c.name, c, i] as const))('%s: no program of the agent runs, its work is rescued, the next lease starts from the origin', async (_name, hostile, i) => {
    const branch = `feature/hostile-${i}`;
    if (hostile.originFiles) {
      world.git.git(world.git.seed, 'checkout', '-q', 'main');
      world.git.pushCommit(branch, hostile.originFiles, 'attributes for the agent');
      world.git.git(world.git.seed, 'checkout', '-q', 'main');
    }
    const start = hostile.originFiles ? git(world.git.origin, 'rev-parse', `refs/heads/${branch}`) : mainSha;
    const first = await acquire(branch);
    expect(first.baseSha).toBe(start);
    const clone = cloneOf(first.path);
    const marker = world.git.marker('hostile');
    const script = world.git.markerScript(marker);

    // The agent: plants, and leaves work behind.
    const planted = hostile.plant({ worktree: first.path, clone, marker, script, world });
    writeFileSync(path.join(first.path, 'agent-work.txt'), 'unfinished\n');
    writeFileSync(path.join(first.path, hostile.originFiles ? 'a.txt' : 'README.md'), 'changed by the agent\n');
    const logBefore = service.output().length;

    await release(first);
    const rescued = rescues(clone, first.worktreeKey);
    expect(rescued).toHaveLength(1);
    expect(git(clone, 'show', `${rescued[0]}:agent-work.txt`)).toBe('unfinished');
    // Cleaned after the rescue (looked at without git: the test's own git would run what the agent planted).
    expect(existsSync(path.join(first.path, 'agent-work.txt'))).toBe(false);

    const again = await acquire(branch);
    expect(again.baseSha).toBe(start);
    const fresh = await acquire(`feature/hostile-${i}-fresh`);
    expect(fresh.baseSha).toBe(mainSha);
    await release(again);
    await release(fresh);

    expect(existsSync(marker)).toBe(false);
    // The service took the keys out of the clone's config and said so, naming the keys only.
    const config = readFileSync(path.join(clone, 'config'), 'utf8');
    expect(config).not.toMatch(/fsmonitor|hookspath|filter|uploadpack|include/i);
    const said = service.output().slice(logBefore);
    for (const key of planted.keys) expect(said).toContain(key);
    if (planted.keys.length > 0) expect(said).toContain('removed git config that service-side git does not accept');
    if (existsSync(path.join(clone, 'hooks'))) rmSync(path.join(clone, 'hooks'), { recursive: true });
  });

  it('url.<x>.insteadOf: the next lease still starts from the origin, not from where the agent pointed it', async () => {
    const branch = 'feature/hostile-insteadof';
    const first = await acquire(branch);
    const clone = cloneOf(first.path);
    // Elsewhere: a repository whose main is another history.
    const elsewhere = path.join(world.git.dir, 'elsewhere.git');
    git(world.git.dir, 'init', '-q', '--bare', '--initial-branch=main', elsewhere);
    const other = path.join(world.git.dir, 'elsewhere-work');
    git(world.git.dir, 'clone', '-q', elsewhere, other);
    world.git.commit({ 'evil.txt': 'evil\n' }, 'not the origin', other);
    git(other, 'push', '-q', 'origin', 'HEAD:refs/heads/main');
    world.git.pushCommit('main', { 'moved.txt': 'main moved on\n' }, 'main moves on');
    const movedMain = git(world.git.origin, 'rev-parse', 'refs/heads/main');
    git(first.path, 'config', `url.${elsewhere}.insteadOf`, world.git.origin);
    await release(first);

    const again = await acquire(branch);
    expect(again.baseSha).toBe(movedMain);
    expect(git(clone, 'rev-parse', 'refs/remotes/origin/main')).toBe(movedMain);
    expect(readFileSync(path.join(clone, 'config'), 'utf8')).not.toContain('insteadOf');
    await release(again);
    mainSha = movedMain;
  });

  it('remote.origin.url pointed elsewhere: the next lease fetches from the repository it was asked for, and origin names it again', async () => {
    const branch = 'feature/hostile-origin-url';
    const first = await acquire(branch);
    const clone = cloneOf(first.path);
    const elsewhere = path.join(world.git.dir, 'elsewhere.git');
    git(first.path, 'remote', 'set-url', 'origin', elsewhere);
    const logBefore = service.output().length;
    await release(first);
    world.git.pushCommit('main', { 'again.txt': 'main moves on again\n' }, 'main moves on again');
    const movedMain = git(world.git.origin, 'rev-parse', 'refs/heads/main');

    const again = await acquire(branch);
    expect(again.baseSha).toBe(movedMain);
    expect(git(clone, 'config', '--get', 'remote.origin.url')).toBe(world.git.origin);
    expect(service.output().slice(logBefore)).toContain('remote.origin.url');
    await release(again);
    mainSha = movedMain;
  });

  it('remote.origin.fetch rewritten to write local branches: the fetch neither overwrites nor prunes them', async () => {
    const branch = 'feature/hostile-refspec';
    const first = await acquire(branch);
    const clone = cloneOf(first.path);
    writeFileSync(path.join(first.path, 'agent-work.txt'), 'unfinished\n');
    await release(first);
    const [rescue] = rescues(clone, first.worktreeKey);
    expect(rescue).toBeDefined();
    const rescueSha = git(clone, 'rev-parse', rescue!);
    git(clone, 'config', '--replace-all', 'remote.origin.fetch', '+refs/heads/*:refs/heads/*');

    const again = await acquire(branch);
    expect(again.baseSha).toBe(mainSha);
    expect(git(clone, 'rev-parse', rescue!)).toBe(rescueSha);
    await release(again);
  });

  it('core.sshCommand in the clone of an ssh origin is never run', async () => {
    const repositoryUrl = 'ssh://git.example.invalid/acme/hostile.git';
    // The first acquire makes the clone; its fetch cannot reach the host.
    await expect(acquire('feature/ssh', repositoryUrl)).rejects.toBeDefined();
    const clone = path.join(world.root, 'repos', readdirSync(path.join(world.root, 'repos')).find((name) => name.startsWith('hostile-'))!);
    const marker = world.git.marker('ssh');
    git(clone, 'config', 'core.sshCommand', `touch '${marker}'; false`);
    await expect(acquire('feature/ssh', repositoryUrl)).rejects.toBeDefined();
    expect(existsSync(marker)).toBe(false);
    expect(readFileSync(path.join(clone, 'config'), 'utf8')).not.toContain('sshCommand');
  });
});
