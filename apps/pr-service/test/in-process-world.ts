import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pullRequestIdFor } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { startGitHubFake, type GitHubFake, type RequestLogEntry } from '@gantry/github-fake';
import { Clone, octokitFor } from '@gantry/github-fake/testing';
import { startInProcess, startTestService, type TestService } from '@gantry/service-runtime/testing';
import { eventually, removeTestNamespace, testDatabaseUrl } from '@gantry/testing';
import { AppModule, prServiceRawBodyRoutes } from '../src/app.module.js';
import { PullRequestLog } from '../src/application/pull-request-log.js';
import { PullRequestReconciler } from '../src/application/reconciler.js';
import type { PullRequestCommand } from '../src/domain/index.js';

/**
 * The pr-service in this test file's process against the local GitHub, on the real PostgreSQL and
 * NATS, with no job service: a test records the flow's commands itself (`pullRequest`) and watches the
 * reconciler carry out its effects. Call at the top of a describe block; the set-up and tear-down are
 * that block's. `settings`: more of the service's environment (e.g. its pool and concurrency).
 */
export function inProcessPrService(label: string, settings: Record<string, string> = {}): InProcessWorld {
  const world = {} as { fake: GitHubFake; service: TestService; gitDir: string };
  const clones: Clone[] = [];
  const env = () => ({
    GANTRY_GITHUB_API_URL: world.fake.url,
    GANTRY_GITHUB_TOKEN: 'unused',
    GANTRY_GITHUB_WEBHOOK_SECRETS: 'unused',
    GANTRY_PR_GIT_DIR: world.gitDir,
    GANTRY_PR_RESYNC_INTERVAL_MS: '3600000',
    ...settings,
  });
  beforeAll(async () => {
    world.fake = await startGitHubFake({});
    world.gitDir = mkdtempSync(join(tmpdir(), `${label}-`));
    world.service = await startTestService({ label, module: AppModule, env: env(), rawBodyRoutes: prServiceRawBodyRoutes });
  }, 90_000);
  afterAll(async () => {
    clones.forEach((clone) => clone.remove());
    await world.service?.close();
    await world.fake?.close();
    if (world.gitDir) rmSync(world.gitDir, { recursive: true, force: true });
  });
  return {
    get fake() {
      return world.fake;
    },
    get service() {
      return world.service;
    },
    get gitDir() {
      return world.gitDir;
    },
    get log() {
      return world.service.app.get(PullRequestLog);
    },
    get reconciler() {
      return world.service.app.get(PullRequestReconciler);
    },
    async addProduct(productId, repository, cloneUrl) {
      const db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${world.service.schema}`, max: 1 });
      try {
        await db.query(`INSERT INTO products (product_id, repository, clone_url, settings) VALUES ($1, $2, $3, '{}')`, [productId, repository, cloneUrl]);
      } finally {
        await db.end();
      }
    },
    pullRequest(repository, branch) {
      const log = world.service.app.get(PullRequestLog);
      const pullRequestId = pullRequestIdFor(repository, branch);
      const id = { pullRequestId, repository, branch };
      return {
        pullRequestId,
        record: (type, data) =>
          log.record({ type, data: { ...id, ...data, now: log.now() } } as PullRequestCommand, { correlationId: pullRequestId, causationId: null, actor: 'test' }),
      };
    },
    async storyPushedTwice(name, jobId, storyTaskIds, o = {}) {
      const owner = 'acme';
      const branch = `story/ST-${name}`;
      const repo = await world.fake.control.createRepository({ owner, name, initialFiles: { 'README.md': '# shop\n' }, settings: { allowAutoMerge: false }, requiredChecks: ['ci/test'] });
      const repository = repo.fullName;
      const clone = new Clone(repo.cloneUrl);
      clones.push(clone);
      const h1 = clone.commitAndPush(branch, { 'src/one.ts': 'export const one = 1;\n' }, 'first task');
      const { octokit } = octokitFor(world.fake);
      const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name, head: branch, base: 'main', title: `Story ST-${name}` });
      // GitHub answered a read of the PR at H1: a replica of GitHub behind the push of H2 answers it so again.
      if (o.readAtFirstHead) await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr.number });
      if (o.h1Green) await world.fake.control.setCheck(repository, { sha: h1, name: 'ci/test', status: 'completed', conclusion: 'success' });
      const h2 = clone.commitAndPush(branch, { 'src/two.ts': 'export const two = 2;\n' }, 'second task');
      await world.fake.control.refresh();

      const log = world.service.app.get(PullRequestLog);
      await this.addProduct(`product-${name}`, repository, repo.cloneUrl);
      const { pullRequestId, record } = this.pullRequest(repository, branch);
      const flow = { productId: `product-${name}`, baseBranch: 'main', strategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: ['ci/test'], title: `Story ST-${name}` };
      await record('RecordTaskQueued', { jobId, taskId: storyTaskIds[0], storyId: `ST-${name}`, storyTaskIds });
      await record('RecordBranchPushed', { headSha: h1, pushedAt: log.now(), position: null, jobId, sprintRunId: null, flow });
      await record('RecordOpened', { prNumber: pr.number, prUrl: pr.html_url, nodeId: pr.node_id, draft: false, headSha: h1, adopted: true });
      await record('RecordBranchPushed', { headSha: h2, pushedAt: log.now(), position: null, jobId, sprintRunId: null, flow });
      const merges = async () => (await world.fake.control.requests({ method: 'PUT', path: `/repos/${repository}/pulls/${pr.number}/merge` })).length;
      return { branch, repository, clone, octokit, pr, h1, h2, pullRequestId, record, merges };
    },
    async adoptedSprintPullRequest(productId, repository, branch, head, pr) {
      const tracked = this.pullRequest(repository, branch);
      const log = world.service.app.get(PullRequestLog);
      await tracked.record('RecordBranchPushed', {
        headSha: head,
        pushedAt: log.now(),
        position: null,
        jobId: null,
        sprintRunId: null,
        flow: { productId, baseBranch: 'main', strategy: 'SPRINT', mergeMethod: 'SQUASH', requiredChecks: [], title: `Sprint ${branch}` },
      });
      await tracked.record('RecordOpened', { prNumber: pr.number, prUrl: pr.html_url, nodeId: pr.node_id, draft: true, headSha: head, adopted: true });
      return tracked;
    },
    async restart(o = {}) {
      // The process stops (its shutdown hooks run) and a new one starts on the same schema and streams: what it
      // knows is what its log and tables hold.
      const { schema, naming } = world.service;
      await world.service.app.close();
      await o.whileStopped?.();
      const app = await startInProcess(AppModule, { name: schema, naming }, env(), { nestLogs: false, rawBodyRoutes: prServiceRawBodyRoutes });
      world.service = {
        ...world.service,
        app,
        close: async () => {
          await app.close();
          await removeTestNamespace(naming, schema);
        },
      };
    },
    async secondReplica(o = {}) {
      // Another process of the service on the same schema and streams, as a second replica in production: it shares the
      // log, the tables and the durable consumers, and nothing of this process's memory.
      const { schema, naming } = world.service;
      const app = await startInProcess(AppModule, { name: schema, naming }, env(), { nestLogs: false, rawBodyRoutes: prServiceRawBodyRoutes });
      // Its host's clock, running ahead of this one's: the service takes every time from its event store's clock.
      const ahead = o.clockAheadMs ?? 0;
      if (ahead) Object.defineProperty(app.get(EventStore), 'clock', { value: () => new Date(Date.now() + ahead) });
      return { reconciler: app.get(PullRequestReconciler), close: () => app.close() };
    },
    prReads(repository, prNumber) {
      const path = `/repos/${repository}/pulls/${prNumber}`;
      const all = async () => (await world.fake.control.requests({ method: 'GET', path })).filter((r) => r.path === path);
      return { path, all, stale: async () => (await all()).filter((r) => r.fault === 'stale_read') };
    },
    async keptAtHead(pullRequestId, head, reads) {
      const after = new Date().toISOString();
      await eventually(async () => (await reads.all()).some((r) => r.at > after && r.fault === null), { what: 'a read of the PR showing its head', timeoutMs: 30_000 });
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const events = await world.service.app.get(EventStore).readStream(pullRequestId);
      expect(events.filter((e) => e.type === 'PullRequestHeadMoved').map((e) => (e.data as { headSha: string }).headSha)).toEqual([head]);
      expect(await world.service.app.get(PullRequestLog).load(pullRequestId)).toMatchObject({ headSha: head, checks: { headSha: head, verdict: 'GREEN' } });
    },
    failedRuns(pullRequestId) {
      const reconciler = world.service.app.get(PullRequestReconciler);
      return (reconciler as unknown as { attempts: { get(id: string): number | undefined } }).attempts.get(pullRequestId);
    },
  };
}

export interface InProcessWorld {
  readonly fake: GitHubFake;
  readonly service: TestService;
  /** A folder removed with the world (the service's git folder is in it). */
  readonly gitDir: string;
  readonly log: PullRequestLog;
  readonly reconciler: PullRequestReconciler;
  /** A product row as the job service's product events would leave it. */
  addProduct(productId: string, repository: string, cloneUrl: string): Promise<void>;
  /** The pull request of a branch, and a way to record its commands as the job events' consumers would. */
  pullRequest(repository: string, branch: string): { pullRequestId: string; record: (type: PullRequestCommand['type'], data: Record<string, unknown>) => Promise<unknown> };
  /**
   * A STORY branch pushed twice (H1, then H2) in a repository `acme/<name>` of its own (main protected by ci/test, no
   * auto-merge), its PR opened on GitHub at H1 and tracked: the flow recorded as the job events' consumers would, the
   * first of `storyTaskIds` queued. `h1Green`: H1's check is green on GitHub before H2 is pushed. `readAtFirstHead`:
   * GitHub answered a read of the PR at H1 (what a replica of GitHub behind the push shows).
   */
  storyPushedTwice(
    name: string,
    jobId: string,
    storyTaskIds: string[],
    o?: { h1Green?: boolean; readAtFirstHead?: boolean },
  ): Promise<{
    branch: string;
    repository: string;
    clone: Clone;
    octokit: ReturnType<typeof octokitFor>['octokit'];
    pr: { number: number; html_url: string; node_id: string };
    h1: string;
    h2: string;
    pullRequestId: string;
    record: (type: PullRequestCommand['type'], data: Record<string, unknown>) => Promise<unknown>;
    merges: () => Promise<number>;
  }>;
  /** A SPRINT pull request on `main`, pushed at `head` and opened on GitHub as `pr` (a draft), recorded as adopted. */
  adoptedSprintPullRequest(
    productId: string,
    repository: string,
    branch: string,
    head: string,
    pr: { number: number; html_url: string; node_id: string },
  ): Promise<{ pullRequestId: string; record: (type: PullRequestCommand['type'], data: Record<string, unknown>) => Promise<unknown> }>;
  /**
   * The service stopped and started again on the same schema and streams (`service`, `log`, `reconciler` are the new
   * process's); `whileStopped` runs between the two (e.g. a long gap, a change of GitHub).
   */
  restart(o?: { whileStopped?: () => Promise<void> }): Promise<void>;
  /** A second replica of the service on the same schema and streams (closed by the caller); `clockAheadMs`: its clock runs that far ahead. */
  secondReplica(o?: { clockAheadMs?: number }): Promise<{ reconciler: PullRequestReconciler; close(): Promise<void> }>;
  /** The reads of a PR (`GET /repos/{o}/{r}/pulls/{n}`) the local GitHub answered, and those a replica behind answered (`stale_read`). */
  prReads(repository: string, prNumber: number): { path: string; all: () => Promise<RequestLogEntry[]>; stale: () => Promise<RequestLogEntry[]> };
  /**
   * After a read from now on showing the PR's current head (no fault), and a second for what it leads to: the PR only
   * ever moved to `head` (no head shown back was followed), and is at it, green.
   */
  keptAtHead(pullRequestId: string, head: string, reads: { all: () => Promise<RequestLogEntry[]> }): Promise<void>;
  /** How many times in a row the reconciler's run of a pull request has failed (undefined: none is waiting to be tried again). */
  failedRuns(pullRequestId: string): number | undefined;
}

/** Commits `files` on `branch` of a repository of the local GitHub and pushes it; answers the new head. */
export function pushedBranch(cloneUrl: string, branch: string, files: Record<string, string>, message: string): string {
  const clone = new Clone(cloneUrl);
  try {
    return clone.commitAndPush(branch, files, message);
  } finally {
    clone.remove();
  }
}
