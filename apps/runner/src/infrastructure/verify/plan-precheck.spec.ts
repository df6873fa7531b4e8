import { ErrorCode } from '@gantry/contracts';
import { createGitFixture, type GitFixture } from '@gantry/git/testing';
import { precheckPlan } from './plan-precheck.js';

describe('the idempotency pre-check against the target branch (real git)', () => {
  let repo: GitFixture;
  let addedSchema: string;
  let addedMigration: string;
  let deletedLegacy: string;

  beforeAll(async () => {
    repo = createGitFixture();
    await repo.commit({ 'legacy/job.ts': 'old\n' }, 'legacy job');
    addedSchema = await repo.commit({ 'src/schema.ts': 'export const jobs = table();\n' }, 'schema');
    await repo.commit({ 'src/schema.ts': 'export const jobs = table();\n// comment\n' }, 'touch schema later');
    addedMigration = await repo.commit({ 'migrations/001.sql': 'create table jobs ();\nalter table jobs add column pushed_at timestamptz;\n' }, 'migration');
    deletedLegacy = await repo.commit({ 'legacy/job.ts': null }, 'drop legacy job');
    await repo.commit({ 'README.md': '# product, later\n' }, 'unrelated later work');
    await repo.pushToMain('HEAD');
  });
  afterAll(() => repo.cleanup());

  it('a plan fully present is already done, naming the commit that completed it', async () => {
    const result = await precheckPlan({
      repoDir: repo.seed,
      target: 'origin/main',
      expectedChanges: [
        { path: 'src/schema.ts', contains: 'export const jobs' },
        { path: 'migrations/001.sql', contains: 'add column pushed_at' },
        { path: 'legacy/job.ts', deleted: true },
      ],
    });
    expect(result).toEqual({
      kind: 'already_done',
      commit: deletedLegacy,
      present: [
        { path: 'src/schema.ts', contains: 'export const jobs', commit: addedSchema },
        { path: 'migrations/001.sql', contains: 'add column pushed_at', commit: addedMigration },
        { path: 'legacy/job.ts', deleted: true, commit: deletedLegacy },
      ],
    });
  });

  it('a plan partly present reports what is present and what is missing', async () => {
    const result = await precheckPlan({
      repoDir: repo.seed,
      target: 'origin/main',
      expectedChanges: [{ path: 'src/schema.ts' }, { path: 'src/claims.ts' }, { path: 'migrations/001.sql', contains: 'create index' }],
    });
    expect(result).toEqual({
      kind: 'partial',
      commit: addedSchema,
      present: [{ path: 'src/schema.ts', commit: addedSchema }],
      missing: [{ path: 'src/claims.ts' }, { path: 'migrations/001.sql', contains: 'create index' }],
    });
  });

  it('a plan with nothing present is not started', async () => {
    const result = await precheckPlan({
      repoDir: repo.seed,
      target: 'origin/main',
      expectedChanges: [{ path: 'src/claims.ts' }, { path: 'src/schema.ts', contains: 'export const claims' }],
    });
    expect(result).toEqual({ kind: 'not_started' });
  });

  it('a deletion of a file that still exists, or never existed, is not done', async () => {
    const result = await precheckPlan({
      repoDir: repo.seed,
      target: 'origin/main',
      expectedChanges: [{ path: 'src/schema.ts', deleted: true }, { path: 'never/there.ts', deleted: true }],
    });
    expect(result).toEqual({ kind: 'not_started' });
  });

  it('reads a planned path as the file it names, not as a pattern: a deletion of app/[id]/page.tsx is not done by deleting app/d/page.tsx', async () => {
    const glob = createGitFixture();
    try {
      await glob.commit({ 'app/d/page.tsx': 'd\n' }, 'a page');
      await glob.commit({ 'app/d/page.tsx': null }, 'drop the d page');
      await glob.pushToMain('HEAD');
      const result = await precheckPlan({
        repoDir: glob.seed,
        target: 'origin/main',
        expectedChanges: [{ path: 'app/[id]/page.tsx', deleted: true }],
      });
      // Read as a pattern it matched the deleted app/d/page.tsx: the plan "already done", the job finished without its agent.
      expect(result).toEqual({ kind: 'not_started' });
    } finally {
      glob.cleanup();
    }
  });

  it('text expected in a directory is not present', async () => {
    const result = await precheckPlan({ repoDir: repo.seed, target: 'origin/main', expectedChanges: [{ path: 'src', contains: 'jobs' }] });
    expect(result).toEqual({ kind: 'not_started' });
  });

  it('compares with the target, not with the checked-out branch', async () => {
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'local-only');
    await repo.commit({ 'src/claims.ts': 'export const claims = 1;\n' }, 'local claims');
    try {
      const result = await precheckPlan({ repoDir: repo.seed, target: 'origin/main', expectedChanges: [{ path: 'src/claims.ts' }] });
      expect(result).toEqual({ kind: 'not_started' });
    } finally {
      await repo.git(repo.seed, 'checkout', '-q', 'main');
    }
  });

  it('refuses a plan entry that escapes the repository', async () => {
    await expect(
      precheckPlan({ repoDir: repo.seed, target: 'origin/main', expectedChanges: [{ path: '../origin.git/config' }] }),
    ).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
  });

  it('an unknown target is NOT_FOUND', async () => {
    await expect(
      precheckPlan({ repoDir: repo.seed, target: 'origin/nope', expectedChanges: [{ path: 'src/schema.ts' }] }),
    ).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
  });
});
