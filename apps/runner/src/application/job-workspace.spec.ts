import { ErrorCode } from '@gantry/contracts';
import { jobWorkspaceOf, writesCode } from './job-workspace.js';

const defaults = { repositoryUrl: null, targetBranch: 'main', agentTimeoutMs: 60_000 };
const identity = { jobId: 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f', productId: 'product-42', storyId: null, taskId: 'T-533' };
const resolved = { ...identity, repositoryUrl: '/srv/git/shop.git', branch: 'feat/a', targetBranch: 'develop' };
const unresolved = { ...identity, repositoryUrl: null, branch: null, targetBranch: null };

describe('where a job works, and what the runner reads from its payloads', () => {
  it('works on the repository, branch and target the claim names; from the payloads only the plan and timeout, a later one winning', () => {
    const workspace = jobWorkspaceOf(
      {
        kind: 'TASK_IMPLEMENTATION',
        baseRef: 'main',
        ...resolved,
        payloads: [
          { repositoryUrl: '/srv/git/elsewhere.git', branch: 'feat/not-this', timeoutMs: 5000, plan: 'free text for the agent' },
          { targetBranch: 'not-this-either', expectedChanges: [{ path: 'src/cart.ts', contains: 'total' }] },
        ],
      },
      defaults,
    );
    expect(workspace).toEqual({
      writesCode: true,
      repositoryUrl: '/srv/git/shop.git',
      branch: 'feat/a',
      baseRef: 'main',
      targetBranch: 'develop',
      expectedChanges: [{ path: 'src/cart.ts', contains: 'total' }],
      timeoutMs: 5000,
    });
  });

  it('falls back to the runner defaults for a job enqueued before products; a code job then works on a feature branch derived from it, not on its base ref', () => {
    const workspace = jobWorkspaceOf(
      { kind: 'SPRINT_IMPLEMENTATION', baseRef: 'develop', ...unresolved, payloads: [{}] },
      { repositoryUrl: 'https://github.com/acme/shop.git', targetBranch: 'develop', agentTimeoutMs: 1234 },
    );
    expect(workspace).toMatchObject({ repositoryUrl: 'https://github.com/acme/shop.git', branch: 'gantry/product-42/task-T-533', baseRef: 'develop', targetBranch: 'develop', timeoutMs: 1234 });
    const story = jobWorkspaceOf({ kind: 'TASK_IMPLEMENTATION', baseRef: 'main', ...unresolved, storyId: 'ST-1208', payloads: [{}] }, { ...defaults, repositoryUrl: '/srv/git/shop.git' });
    expect(story.branch).toBe('gantry/product-42/story-ST-1208');
  });

  it('lets a kind that writes no code run without a branch, in scratch, even when its product has a repository', () => {
    expect(jobWorkspaceOf({ kind: 'IDEA_GRILL', baseRef: null, ...unresolved, payloads: [{ idea: 'x' }] }, defaults)).toMatchObject({
      writesCode: false,
      repositoryUrl: null,
      branch: null,
    });
    expect(jobWorkspaceOf({ kind: 'REVIEW', baseRef: null, ...resolved, branch: null, payloads: [{}] }, defaults)).toMatchObject({ repositoryUrl: null, branch: null });
    expect(['TASK_IMPLEMENTATION', 'SPRINT_IMPLEMENTATION', 'REVIEW', 'PLAN_CHAT'].map((k) => writesCode(k as never))).toEqual([true, true, false, false]);
  });

  it.each([
    ['a code job without a branch', { kind: 'TASK_IMPLEMENTATION', baseRef: null, ...resolved, branch: null, payloads: [{}] }, /needs a branch/],
    ['a plan path escaping the repository', { kind: 'TASK_IMPLEMENTATION', baseRef: 'main', ...resolved, payloads: [{ expectedChanges: [{ path: '../etc/passwd' }] }] }, /plain path relative/],
    ['a timeout a timer cannot hold', { kind: 'PLAN_CHAT', baseRef: null, ...unresolved, payloads: [{ timeoutMs: 2 ** 31 }] }, /invalid workspace fields/],
    // Queued before the job service refused such branches: the worktree service refuses its lease at every claim.
    [
      'a branch in the rescue folder of a worktree key of its repository',
      { kind: 'TASK_IMPLEMENTATION', baseRef: 'main', ...resolved, branch: 'gantry/rescue/shop-main-1a2b3c4d5e6f', payloads: [{}] },
      /^the job's branch cannot be leased: branch gantry\/rescue\/shop-main-1a2b3c4d5e6f is in the rescue folder of worktree key shop-main-1a2b3c4d5e6f/,
    ],
    // A product's clone URL the worktree service's contract refuses (http://): its lease is refused at every claim, on every host.
    [
      'a repository the worktree service does not lease from',
      { kind: 'TASK_IMPLEMENTATION', baseRef: 'main', ...resolved, repositoryUrl: 'http://github.com/acme/shop.git', payloads: [{}] },
      /^the job's repository cannot be leased: repository URL scheme "http" is not allowed/,
    ],
    [
      'a base ref the worktree service does not lease from',
      { kind: 'REVIEW', baseRef: 'HEAD', ...resolved, payloads: [{}] },
      /^the job's base ref cannot be leased: base ref must not be "HEAD"/,
    ],
    [
      "a branch in the rescue folder of a worktree key of the runner's repository, for a job enqueued before products",
      { kind: 'REVIEW', baseRef: 'main', ...unresolved, branch: 'gantry/rescue/shop-main-1a2b3c4d5e6f/20261130T060000000Z', payloads: [{}] },
      /in the rescue folder of worktree key shop-main-1a2b3c4d5e6f/,
    ],
  ])('refuses %s', (_what, job, sentence) => {
    expect(() => jobWorkspaceOf(job as never, { ...defaults, repositoryUrl: '/srv/git/shop.git' })).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_COMMAND, message: expect.stringMatching(sentence) }));
  });

  it("refuses a code job without a repository as this runner's lack, not the job's malformation: a runner with GANTRY_REPOSITORY_URL can run it", () => {
    expect(() => jobWorkspaceOf({ kind: 'TASK_IMPLEMENTATION', baseRef: 'main', ...unresolved, payloads: [{}] } as never, defaults)).toThrow(
      expect.objectContaining({ code: ErrorCode.PRECONDITION_FAILED, message: expect.stringMatching(/needs a repository/) }),
    );
  });
});
