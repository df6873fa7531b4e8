import { contractRegistry } from '../registry.js';
import { ErrorCode, GantryError } from '../errors.js';
import {
  acquireWorktree,
  branchNameProblem,
  deriveWorktreeKey,
  featureBranchFor,
  canonicalRepositoryUrl,
  isLegacyWorktreeKey,
  legacyRepositoryCloneName,
  repositoryCloneName,
  repositoryUrlProblem,
  rescueBranchName,
  rescueFolderProblem,
  WorktreeKeySchema,
  worktreeEventContracts,
  worktreeLeaseEndedError,
  worktreeLeaseEndedOf,
} from './index.js';

const worktreeContracts = () => [
  ...contractRegistry.commands().filter((c) => c.context === 'worktrees').map((c) => ({ name: c.name, schema: c.request, examples: c.examples })),
  ...contractRegistry.events().filter((e) => e.context === 'worktrees').map((e) => ({ name: e.type, schema: e.data, examples: e.examples })),
];

describe('worktree contracts', () => {
  it('registers the six commands and every event of the WorktreeLease stream', () => {
    const names = contractRegistry.commands().filter((c) => c.context === 'worktrees').map((c) => c.name).sort();
    expect(names).toEqual(['acquire_worktree', 'get_disk_usage', 'list_worktree_leases', 'list_worktrees', 'release_worktree', 'renew_worktree_lease']);
    const types = contractRegistry.events().filter((e) => e.context === 'worktrees').map((e) => e.type);
    expect(types).toHaveLength(worktreeEventContracts.length);
  });

  it.each(worktreeContracts())('$name accepts its valid examples and refuses its invalid ones', ({ schema, examples }) => {
    expect(examples.valid.length).toBeGreaterThan(0);
    expect(examples.invalid.length).toBeGreaterThan(0);
    for (const example of examples.valid) expect(schema.safeParse(example).error).toBeUndefined();
    for (const example of examples.invalid) expect(schema.safeParse(example).success).toBe(false);
  });

  it('refuses hostile acquire inputs (option-like branch, bad URL) with a message naming the field', () => {
    const base = acquireWorktree.examples.valid[0]!;
    const branchIssue = acquireWorktree.request.safeParse({ ...base, branch: '--upload-pack=touch /tmp/pwned' });
    expect(branchIssue.error?.issues[0]?.path).toEqual(['branch']);
    const urlIssue = acquireWorktree.request.safeParse({ ...base, repositoryUrl: 'ext::sh -c touch% /tmp/pwned' });
    expect(urlIssue.error?.issues[0]?.path).toEqual(['repositoryUrl']);
  });

  it("a grant may say what is left of its lease, as a whole number of milliseconds; an older worktree service's grant, without it, still parses", () => {
    const grant = { leaseId: '0b7a4c3e-2f7d-4b8e-9a51-6c2d1e0f9a11', token: 4, worktreeKey: 'shop-feature-checkout-1a2b3c4d5e6f', path: '/var/lib/gantry/worktrees/shop', expiresAt: '2026-11-30T06:10:00.000Z', baseSha: '4b825dc642cb6eb9a060e54bf8d69288fbee4904' };
    expect(acquireWorktree.reply.safeParse(grant).error).toBeUndefined();
    expect(acquireWorktree.reply.parse({ ...grant, expiresInMs: 598_750 })).toMatchObject({ expiresInMs: 598_750 });
    expect(acquireWorktree.reply.safeParse({ ...grant, expiresInMs: 0 }).success).toBe(true);
    for (const expiresInMs of [-1, 1.5, '600000']) expect(acquireWorktree.reply.safeParse({ ...grant, expiresInMs }).success).toBe(false);
  });

  it('an acquire whose lease ended is a STALE_FENCE refusal that says so across the wire; other refusals say nothing of it', () => {
    const ended = { leaseId: '0b7a4c3e-2f7d-4b8e-9a51-6c2d1e0f9a11', status: 'released', reason: 'job_terminal', claimEnded: true } as const;
    const error = worktreeLeaseEndedError(ended);
    expect(error.code).toBe(ErrorCode.STALE_FENCE);
    expect(error.message).toMatch(/has ended \(released: job_terminal\).*its claim has ended too/);
    expect(worktreeLeaseEndedOf(GantryError.fromPayload(JSON.parse(JSON.stringify(error.toPayload()))))).toEqual(ended);
    expect(worktreeLeaseEndedOf(new GantryError(ErrorCode.STALE_FENCE, 'claim 1 of job j has ended (QUEUED)', { jobId: 'j' }))).toBeNull();
    expect(worktreeLeaseEndedOf(new GantryError(ErrorCode.UNAVAILABLE, 'x', { leaseEnded: ended }))).toBeNull();
    expect(worktreeLeaseEndedOf(new Error('x'))).toBeNull();
  });
});

describe('branch names follow git check-ref-format --branch', () => {
  it.each(['main', 'feature/checkout', 'release-1.2', 'a/b/c', 'user@host', 'x.y', 'UPPER_case'])('accepts %s', (name) => {
    expect(branchNameProblem(name)).toBeNull();
  });
  it.each([
    '', '-x', '--upload-pack=touch /tmp/pwned', '../../etc', 'a..b', 'a@{1}', '@', 'HEAD', 'a b', 'a~1', 'a^', 'a:b',
    'a?', 'a*', 'a[b', 'a\\b', 'a\tb', 'a\u0001', 'x.lock', 'a/b.lock/c', 'a/', 'a.', 'a//b', '/a', '.hidden', 'a/.b',
    'x'.repeat(256),
  ])('refuses %j', (name) => {
    expect(branchNameProblem(name)).not.toBeNull();
  });
});

describe('repository URLs', () => {
  it.each([
    'https://github.com/acme/shop.git',
    'ssh://git@github.com/acme/shop.git',
    'ssh://git@github.com:2222/acme/shop.git',
    'git@github.com:acme/shop.git',
    'file:///srv/git/shop.git',
    '/srv/git/shop.git',
  ])('accepts %s', (url) => {
    expect(repositoryUrlProblem(url)).toBeNull();
  });
  it.each([
    'ext::sh -c touch% /tmp/pwned',
    'ext::sh',
    'fd::17',
    'transport::https://x/y',
    '-oProxyCommand=touch /tmp/pwned',
    '--upload-pack=touch /tmp/pwned',
    'ssh://-oProxyCommand=x/y',
    'ssh://--/y',
    'git@github.com:-x',
    'http://github.com/acme/shop.git',
    'git://github.com/acme/shop.git',
    'https://user:token@github.com/acme/shop.git',
    'https://github.com',
    'file://otherhost/srv/x.git',
    'file:///srv/../etc',
    '/srv/../etc',
    'relative/path',
    '/srv/with space',
    '',
  ])('refuses %j', (url) => {
    expect(repositoryUrlProblem(url)).not.toBeNull();
  });
});

describe('the feature branch of a code job that names none', () => {
  const job = { productId: 'product-42', storyId: null, taskId: null, jobId: 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f' };

  it('is per story, else per task, else per job — never the target branch', () => {
    expect(featureBranchFor({ ...job, storyId: 'ST-1208', taskId: 'T-533' })).toBe('gantry/product-42/story-ST-1208');
    expect(featureBranchFor({ ...job, taskId: 'T-533' })).toBe('gantry/product-42/task-T-533');
    expect(featureBranchFor(job)).toBe(`gantry/product-42/${job.jobId}`);
  });

  it('turns what a branch name cannot hold into "-", and always passes the branch-name rules', () => {
    for (const id of ['T:5?3', 'a~b^c', '@{x}', 'x.lock', '--upload-pack', '~', 'a//b']) {
      const branch = featureBranchFor({ ...job, taskId: id });
      expect({ id, problem: branchNameProblem(branch) }).toEqual({ id, problem: null });
      expect(branch.startsWith('gantry/product-42/task-')).toBe(true);
    }
  });
});

describe('names on disk', () => {
  it('derives a stable worktree key that is a safe directory name and differs per branch', () => {
    const a = deriveWorktreeKey('https://github.com/acme/shop.git', 'feature/Checkout');
    expect(a).toBe(deriveWorktreeKey('https://github.com/acme/shop.git', 'feature/Checkout'));
    expect(a).toMatch(/^shop-feature-checkout-[0-9a-f]{12}$/);
    expect(WorktreeKeySchema.safeParse(a).success).toBe(true);
    expect(deriveWorktreeKey('https://github.com/acme/shop.git', 'feature/checkout')).not.toBe(a);
    expect(deriveWorktreeKey('https://github.com/other/shop.git', 'feature/Checkout')).not.toBe(a);
  });

  it('derives a clone name per repository URL', () => {
    expect(repositoryCloneName('/srv/git/shop.git')).toMatch(/^shop-[0-9a-f]{12}$/);
    expect(repositoryCloneName('/srv/git/shop.git')).not.toBe(repositoryCloneName('/srv/other/shop.git'));
  });

  it.each([
    ['https://github.com/acme/shop.git', ['https://github.com/acme/shop', 'https://github.com/acme/shop/', 'https://github.com/acme/shop.git/', 'https://GitHub.com/Acme/Shop', 'HTTPS://github.com:443/acme/shop.git']],
    ['git@github.com:acme/shop.git', ['git@github.com:acme/shop', 'git@GITHUB.COM:Acme/shop.git/', 'ssh://git@github.com/acme/shop.git', 'ssh://git@github.com:22/Acme/Shop', 'git@github.com:/acme/shop']],
    ['https://git.example.com/Team/Shop.git', ['https://git.example.com/Team/Shop.git/', 'https://Git.Example.com:443/Team/Shop.git']],
    ['ssh://git@git.example.com:2222/team/shop', ['ssh://git@Git.Example.com:2222/team/shop/']],
    ['ssh://git@git.example.com/team/shop', ['ssh://git@git.example.com:22/team/shop']],
    ['git@git.example.com:team/shop', ['git@GIT.example.com:team/shop/']],
    ['/srv/git/shop.git', ['/srv/git/shop.git/', '/srv/git/shop.git//']],
    ['file:///srv/git/shop.git', ['file:///srv/git/shop.git/']],
  ])('spells %s one way however it is written', (canonical, spellings) => {
    expect(canonicalRepositoryUrl(canonical)).toBe(canonical);
    for (const url of spellings) {
      expect({ url, canonical: canonicalRepositoryUrl(url) }).toEqual({ url, canonical });
      expect(repositoryUrlProblem(canonicalRepositoryUrl(url))).toBeNull();
      expect(deriveWorktreeKey(url, 'main')).toBe(deriveWorktreeKey(canonical, 'main'));
      expect(repositoryCloneName(url)).toBe(repositoryCloneName(canonical));
    }
  });

  it.each([
    // Path case and `.git` matter on hosts other than github.com; scp-like paths are relative to home.
    ['https://git.example.com/team/shop', 'https://git.example.com/Team/Shop'],
    ['https://git.example.com/team/shop', 'https://git.example.com/team/shop.git'],
    ['git@git.example.com:team/shop', 'ssh://git@git.example.com/team/shop'],
    ['/srv/git/shop', '/srv/git/shop.git'],
    ['/srv/git/shop', '/srv/git/Shop'],
    ['/srv/git/shop.git', 'file:///srv/git/shop.git'],
    // Another transport, user or port is another spelling left apart.
    ['https://github.com/acme/shop.git', 'git@github.com:acme/shop.git'],
    ['ssh://alice@github.com/acme/shop.git', 'git@github.com:acme/shop.git'],
    ['ssh://git@git.example.com:2222/team/shop', 'ssh://git@git.example.com/team/shop'],
    ['https://github.com/acme/shop.git', 'https://github.com/acme/shop-2.git'],
  ])('keeps %s and %s apart', (a, b) => {
    expect(canonicalRepositoryUrl(a)).not.toBe(canonicalRepositoryUrl(b));
    expect(deriveWorktreeKey(a, 'main')).not.toBe(deriveWorktreeKey(b, 'main'));
  });

  it('keeps the key and clone name of a URL already in its canonical spelling, and tells a legacy key of another spelling', () => {
    // The values these had before URLs had a canonical spelling: existing keys and clones keep their names.
    expect(deriveWorktreeKey('https://github.com/acme/shop.git', 'feature/Checkout')).toBe('shop-feature-checkout-dfb76ef7a07e');
    expect(repositoryCloneName('/srv/git/shop.git')).toBe(legacyRepositoryCloneName('/srv/git/shop.git'));
    const legacy = 'shop-main-139301a341c3'; // the key '/srv/git/shop.git/' had
    expect(isLegacyWorktreeKey(legacy, '/srv/git/shop.git/', 'main')).toBe(true);
    expect(isLegacyWorktreeKey(legacy, '/srv/git/shop.git', 'main')).toBe(false);
    expect(isLegacyWorktreeKey(deriveWorktreeKey('/srv/git/shop.git/', 'main'), '/srv/git/shop.git/', 'main')).toBe(false);
    expect(isLegacyWorktreeKey('shop-main-000000000000', '/srv/git/shop.git/', 'main')).toBe(false);
    expect(legacyRepositoryCloneName('/srv/git/shop.git/')).not.toBe(repositoryCloneName('/srv/git/shop.git/'));
  });

  it('leaves a URL it refuses as it is', () => {
    for (const url of ['https://user:secret@github.com/acme/shop.git', 'git@github.com:-x', 'ext::sh']) expect(canonicalRepositoryUrl(url)).toBe(url);
  });

  it('names a rescue branch after the key and the UTC time, as a valid branch name', () => {
    const name = rescueBranchName('shop-main-1a2b3c4d5e6f', new Date('2026-11-30T06:01:02.345Z'));
    expect(name).toBe('gantry/rescue/shop-main-1a2b3c4d5e6f/20261130T060102345Z');
    expect(branchNameProblem(name)).toBeNull();
  });

  it("refuses to lease a branch in the rescue folder of a key of the lease's repository, and only there", () => {
    const url = 'https://github.com/acme/shop.git';
    const key = deriveWorktreeKey(url, 'main');
    for (const branch of [`gantry/rescue/${key}`, rescueBranchName(key, new Date('2026-11-30T06:01:02.345Z')), `gantry/rescue/${key}/anything`]) {
      expect(rescueFolderProblem(url, branch)).toMatch(/rescue folder of worktree key/);
      // With the repository as written otherwise too: one repository, one key.
      expect(rescueFolderProblem('https://github.com/Acme/Shop', branch)).toMatch(/rescue folder of worktree key/);
      expect(acquireWorktree.request.safeParse({ ...acquireWorktree.examples.valid[0], repositoryUrl: url, branch }).success).toBe(false);
    }
    // Another repository's key, a product named rescue's feature branches, a branch merely near the folder.
    for (const branch of [
      `gantry/rescue/${deriveWorktreeKey('https://github.com/acme/other.git', 'main')}`,
      featureBranchFor({ productId: 'rescue', storyId: 'ST-7', taskId: null, jobId: 'job-0f1e2d3c-4b5a-4968-8776-655443322110' }),
      featureBranchFor({ productId: 'rescue', storyId: null, taskId: 'T-1', jobId: 'job-0f1e2d3c-4b5a-4968-8776-655443322110' }),
      featureBranchFor({ productId: 'rescue', storyId: null, taskId: null, jobId: 'job-0f1e2d3c-4b5a-4968-8776-655443322110' }),
      `feature/gantry/rescue/${key}`,
    ]) {
      expect(rescueFolderProblem(url, branch)).toBeNull();
      expect(acquireWorktree.request.safeParse({ ...acquireWorktree.examples.valid[0], repositoryUrl: url, branch }).success).toBe(true);
    }
  });

  it('refuses worktree keys that could leave the worktrees directory', () => {
    for (const key of ['../../etc', '.', '..', 'a/b', '-x', 'A', '', 'a'.repeat(129)]) {
      expect(WorktreeKeySchema.safeParse(key).success).toBe(false);
    }
  });
});
