import { ErrorCode } from '@gantry/contracts';
import { jobWorkspaceOf, writesCode } from './job-workspace.js';

const defaults = { repositoryUrl: null, targetBranch: 'main', agentTimeoutMs: 60_000 };

describe('what the runner reads from a job payload', () => {
  it('takes the repository, branch, target, plan and timeout, a later payload winning over an earlier one', () => {
    const workspace = jobWorkspaceOf(
      {
        kind: 'TASK_IMPLEMENTATION',
        baseRef: 'main',
        payloads: [
          { repositoryUrl: '/srv/git/shop.git', branch: 'feat/a', timeoutMs: 5000, plan: 'free text for the agent' },
          { branch: 'feat/b', expectedChanges: [{ path: 'src/cart.ts', contains: 'total' }] },
        ],
      },
      defaults,
    );
    expect(workspace).toEqual({
      writesCode: true,
      repositoryUrl: '/srv/git/shop.git',
      branch: 'feat/b',
      baseRef: 'main',
      targetBranch: 'main',
      expectedChanges: [{ path: 'src/cart.ts', contains: 'total' }],
      timeoutMs: 5000,
    });
  });

  it('falls back to the runner defaults and works on the base ref when no branch is named', () => {
    const workspace = jobWorkspaceOf(
      { kind: 'SPRINT_IMPLEMENTATION', baseRef: 'sprint/SP-7', payloads: [{}] },
      { repositoryUrl: 'https://github.com/acme/shop.git', targetBranch: 'develop', agentTimeoutMs: 1234 },
    );
    expect(workspace).toMatchObject({ repositoryUrl: 'https://github.com/acme/shop.git', branch: 'sprint/SP-7', baseRef: 'sprint/SP-7', targetBranch: 'develop', timeoutMs: 1234 });
  });

  it('lets a kind that writes no code run without a repository', () => {
    expect(jobWorkspaceOf({ kind: 'IDEA_GRILL', baseRef: null, payloads: [{ idea: 'x' }] }, defaults)).toMatchObject({
      writesCode: false,
      repositoryUrl: null,
      branch: null,
    });
    expect(['TASK_IMPLEMENTATION', 'SPRINT_IMPLEMENTATION', 'REVIEW', 'PLAN_CHAT'].map((k) => writesCode(k as never))).toEqual([true, true, false, false]);
  });

  it.each([
    ['a code job without a repository', { kind: 'TASK_IMPLEMENTATION', baseRef: 'main', payloads: [{}] }, /needs a repository/],
    ['a repository without a branch', { kind: 'REVIEW', baseRef: null, payloads: [{ repositoryUrl: '/srv/x.git' }] }, /needs a branch/],
    ['a branch that is an option', { kind: 'TASK_IMPLEMENTATION', baseRef: null, payloads: [{ repositoryUrl: '/srv/x.git', branch: '--upload-pack=x' }] }, /invalid workspace fields/],
    ['a plan path escaping the repository', { kind: 'TASK_IMPLEMENTATION', baseRef: 'main', payloads: [{ repositoryUrl: '/srv/x.git', expectedChanges: [{ path: '../etc/passwd' }] }] }, /plain path relative/],
    ['a timeout a timer cannot hold', { kind: 'PLAN_CHAT', baseRef: null, payloads: [{ timeoutMs: 2 ** 31 }] }, /invalid workspace fields/],
  ])('refuses %s', (_what, job, sentence) => {
    expect(() => jobWorkspaceOf(job as never, defaults)).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_COMMAND, message: expect.stringMatching(sentence) }));
  });
});
