import { setTimeout as sleep } from 'node:timers/promises';
import type { INestApplication } from '@nestjs/common';
import { jetstreamManager } from '@nats-io/jetstream';
import { randomUUID } from 'node:crypto';
import {
  acquireWorktree,
  cancelJob,
  claimableAfterMs,
  claimJob,
  createSprintRun,
  deriveWorktreeKey,
  dispatchStreamName,
  enqueueJob,
  ErrorCode,
  eventSubject,
  finishJob,
  GantryError,
  getJob,
  getProduct,
  getSprintRun,
  listJobs,
  logCommit,
  logImplementation,
  logTestResult,
  renewJobLease,
  registerProduct,
  reportPush,
  rescueBranchName,
  rollbackClaim,
  startJob,
  streamName,
  updateProduct,
  type JobKind,
  type ProductSettings,
  type VerificationFacts,
} from '@gantry/contracts';
import { EventStore, rebuildProjections } from '@gantry/eventstore';
import { readAllPages } from '@gantry/messaging';
import { eventually } from '@gantry/testing';
import { ClaimPicker } from '../src/application/claim-picker.js';
import { LeaseExpirySweep } from '../src/application/lease-expiry.js';
import { jobServiceProjections } from '../src/infrastructure/projections.js';
import { createWorld, key, publishEnqueueWithoutItsOffer, registerProducts, sha, startInProcess, taskEnqueueRequest, type TestWorld } from './harness.js';

const runner = (n: number | string) => `runner-${n}`;

describe('job service through the NATS command path', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('jobs');
    app = await startInProcess(world, { GANTRY_LEASE_SWEEP_MS: '200' });
    await registerProducts(world.client, ['product-1', 'product-co', 'product-poll', 'product-offer', 'product-redeliver', 'product-expiry', 'product-pause']);
  });

  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const countEvents = async (streamId: string) =>
    Number((await world.db.query(`SELECT count(*) AS n FROM events WHERE stream_id = $1`, [streamId])).rows[0].n);

  const enqueue = (over: Partial<Parameters<typeof world.client.request<typeof enqueueJob>>[1]> = {}) =>
    world.client.request(enqueueJob, taskEnqueueRequest('product-1', over));

  /** Enqueue, claim and start one job; returns what a runner holds. */
  async function runningJob(kind: JobKind = 'TASK_IMPLEMENTATION', extra: Record<string, unknown> = {}) {
    const { jobId } = await enqueue({ kind, ...extra });
    const reply = await world.client.request(claimJob, { runnerId: runner('a'), kinds: [kind], jobId, baseSha: sha('b'), idempotencyKey: key('claim') });
    if (!reply.claimed) throw new Error('not claimed');
    const lease = { jobId, runnerId: runner('a'), leaseToken: reply.job.leaseToken };
    await world.client.request(startJob, { ...lease, branch: 'feat/story-1', idempotencyKey: key('start') });
    return { jobId, lease, claimed: reply.job };
  }

  async function logged(lease: { jobId: string; runnerId: string; leaseToken: number }, commit = true) {
    await world.client.request(logImplementation, { ...lease, summary: 'start: task, branch, plan', plan: 'plan', idempotencyKey: key('log') });
    if (commit) await world.client.request(logCommit, { ...lease, commitSha: sha('c'), message: 'feat: x', summary: '1 file', idempotencyKey: key('log') });
    await world.client.request(logTestResult, { ...lease, status: 'PASSED', summary: 'green', idempotencyKey: key('log') });
  }

  describe('products: where work lands', () => {
    it('an enqueue for a product nobody registered is refused with UNKNOWN_PRODUCT, and nothing is written', async () => {
      const before = Number((await world.db.query(`SELECT count(*) AS n FROM events`)).rows[0].n);
      await expect(enqueue({ productId: 'product-unregistered', taskId: 'T-unknown' })).rejects.toMatchObject({
        code: ErrorCode.UNKNOWN_PRODUCT,
        message: expect.stringContaining('product-unregistered is not registered'),
      });
      expect(Number((await world.db.query(`SELECT count(*) AS n FROM events`)).rows[0].n)).toBe(before);
      expect((await world.client.request(listJobs, { taskId: 'T-unknown' })).jobs).toHaveLength(0);
    });

    it('a claim carries the repository, clone URL, branch and target branch the job was resolved to at enqueue', async () => {
      await registerProducts(world.client, ['product-where'], { repository: 'acme/where', cloneUrl: '/srv/git/where.git', targetBranch: 'develop' });
      const { jobId } = await enqueue({ productId: 'product-where', baseRef: 'develop', branch: 'story/ST-9', storyId: 'ST-9', taskId: 'T-91', storyTaskIds: ['T-90', 'T-91'] });
      // A later update changes what later jobs land on, not this one.
      await world.client.request(updateProduct, { productId: 'product-where', changes: { targetBranch: 'main' }, idempotencyKey: key('update') });
      const reply = await world.client.request(claimJob, { runnerId: runner('where'), kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: key('claim') });
      expect(reply).toMatchObject({
        claimed: true,
        job: { repository: 'acme/where', repositoryUrl: '/srv/git/where.git', branch: 'story/ST-9', targetBranch: 'develop', baseRef: 'develop' },
      });
      expect(await world.client.request(getJob, { jobId })).toMatchObject({ repository: 'acme/where', branch: 'story/ST-9', targetBranch: 'develop' });
      const next = await enqueue({ productId: 'product-where', baseRef: 'main' });
      // a code job that names no branch gets a feature branch derived from it, never its base ref (docs/jobs.md, "Branches")
      expect(await world.client.request(getJob, { jobId: next.jobId })).toMatchObject({ branch: 'gantry/product-where/story-ST-1', targetBranch: 'main' });
    });

    it('register, update and read a product; a repeated registration under its key replays, under another key is refused', async () => {
      const settings: ProductSettings = { repository: 'acme/products', cloneUrl: 'https://github.com/acme/products.git', targetBranch: 'main', prStrategy: 'SPRINT', mergeMethod: 'MERGE', requiredChecks: ['ci/test'] };
      const request = { productId: 'product-reg', ...settings, idempotencyKey: key('register') };
      expect(await world.client.request(registerProduct, request)).toEqual({ productId: 'product-reg', version: 1 });
      expect(await world.client.request(registerProduct, request)).toEqual({ productId: 'product-reg', version: 1 });
      await expect(world.client.request(registerProduct, { ...request, idempotencyKey: key('register-again') })).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
      const updated = await world.client.request(updateProduct, { productId: 'product-reg', changes: { requiredChecks: ['ci/test', 'ci/lint'] }, idempotencyKey: key('update') });
      expect(updated).toMatchObject({ version: 2, settings: { ...settings, requiredChecks: ['ci/test', 'ci/lint'] } });
      expect(await world.client.request(getProduct, { productId: 'product-reg' })).toMatchObject({ ...settings, requiredChecks: ['ci/test', 'ci/lint'], version: 2 });
      await expect(world.client.request(getProduct, { productId: 'product-none' })).rejects.toMatchObject({ code: ErrorCode.UNKNOWN_PRODUCT });
      await expect(world.client.request(updateProduct, { productId: 'product-none', changes: { mergeMethod: 'MERGE' }, idempotencyKey: key('u') })).rejects.toMatchObject({
        code: ErrorCode.UNKNOWN_PRODUCT,
      });
      const events = await world.db.query(`SELECT type FROM events WHERE stream_id = 'product-product-reg' ORDER BY stream_version`);
      expect(events.rows.map((r) => r.type)).toEqual(['ProductRegistered', 'ProductUpdated']);
    });

    it('a branch, base ref or target branch that git (and so every runner and the worktree service) would refuse is refused INVALID_COMMAND, and nothing is recorded', async () => {
      const before = Number((await world.db.query(`SELECT count(*) AS n FROM events`)).rows[0].n);
      for (const branch of ['story/x.lock', 'HEAD', 'story/', 'story//x', 'story/.hidden', 'story@{1}', 'story\u0001x']) {
        await expect(enqueue({ taskId: 'T-bad-branch', branch })).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND, message: expect.stringContaining('branch') });
      }
      await expect(enqueue({ taskId: 'T-bad-branch', baseRef: 'main.lock' })).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND, message: expect.stringContaining('base ref') });
      await expect(
        world.client.request(createSprintRun, { sprintId: 'SP-bad', productId: 'product-1', taskIds: ['T-bad'], branch: 'sprint/SP-bad.', idempotencyKey: key('sprint') }),
      ).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
      await expect(
        world.client.request(registerProduct, {
          productId: 'product-bad-target', repository: 'acme/bad', cloneUrl: '/srv/git/bad.git', targetBranch: 'HEAD',
          prStrategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: [], idempotencyKey: key('register'),
        }),
      ).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
      await expect(world.client.request(updateProduct, { productId: 'product-1', changes: { targetBranch: 'main/' }, idempotencyKey: key('update') })).rejects.toMatchObject({
        code: ErrorCode.INVALID_COMMAND,
      });
      expect(Number((await world.db.query(`SELECT count(*) AS n FROM events`)).rows[0].n)).toBe(before);
      expect((await world.client.request(listJobs, { taskId: 'T-bad-branch' })).jobs).toHaveLength(0);
    });

    it('a branch git takes with a blank beyond ASCII in it (U+00A0, U+3000) is queued, read back and claimed with it: what a door accepts, every event and view of it holds', async () => {
      for (const [n, branch] of ['story/a\u00a0b', 'story/a\u3000b'].entries()) {
        const { jobId } = await enqueue({ taskId: `T-wide-blank-${n}`, branch });
        expect((await world.client.request(getJob, { jobId })).branch).toBe(branch);
        const reply = await world.client.request(claimJob, { runnerId: runner('wide'), kinds: ['TASK_IMPLEMENTATION'], jobId, baseSha: sha('b'), idempotencyKey: key('claim') });
        expect(reply.claimed && reply.job.branch).toBe(branch);
        await world.client.request(cancelJob, { jobId, idempotencyKey: key('cancel') });
      }
    });

    it("a branch in the rescue folder of a key of the product's repository (gantry/rescue/<key>, or under it) is refused INVALID_COMMAND by enqueue_job and create_sprint_run, naming it, and nothing is recorded", async () => {
      const cloneUrl = 'https://github.com/acme/shop.git';
      await registerProducts(world.client, ['product-rescue-folder'], { repository: 'acme/shop', cloneUrl });
      const review = (branch?: string) => ({
        kind: 'REVIEW' as const, productId: 'product-rescue-folder', taskId: 'T-rescue-folder', reason: 'rescue-folder',
        agentProfile: { id: 'profile-reviewer', model: 'claude-opus-4-7', thinkingBudget: 12000 }, idempotencyKey: key('review'), ...(branch ? { branch } : {}),
      });
      // A queued job a coalescible request could join.
      const queued = await world.client.request(enqueueJob, review());
      expect(queued.outcome).toBe('created');
      const before = Number((await world.db.query(`SELECT count(*) AS n FROM events`)).rows[0].n);
      const shopKey = deriveWorktreeKey(cloneUrl, 'main');
      const refused = [
        `gantry/rescue/${shopKey}`,
        rescueBranchName(shopKey, new Date('2026-11-30T06:01:02.345Z')),
        `gantry/rescue/${deriveWorktreeKey('https://github.com/Acme/Shop', 'feature/x')}/anything`,
      ];
      const outcomes: Record<string, unknown> = {};
      const outcome = (attempt: Promise<{ outcome?: string; status?: string }>) =>
        attempt.then((reply) => reply.outcome ?? reply.status, (error: { code?: string; message?: string }) => ({ code: error.code, message: error.message }));
      for (const branch of refused) {
        outcomes[branch] = {
          enqueue: await outcome(enqueue({ productId: 'product-rescue-folder', taskId: 'T-rescue-folder', branch })),
          coalescible: await outcome(world.client.request(enqueueJob, review(branch))),
          sprint: await outcome(world.client.request(createSprintRun, { sprintId: 'SP-rescue-folder', productId: 'product-rescue-folder', taskIds: ['T-rescue-folder'], branch, idempotencyKey: key('sprint') })),
        };
      }
      const refusal = (branch: string) => ({
        code: ErrorCode.INVALID_COMMAND,
        message: expect.stringMatching(new RegExp(`branch ${branch.replaceAll('/', '\\/')} is in the rescue folder of worktree key .* of this repository`)),
      });
      expect(outcomes).toEqual(Object.fromEntries(refused.map((branch) => [branch, { enqueue: refusal(branch), coalescible: refusal(branch), sprint: refusal(branch) }])));
      // The worktree service refuses each of them the same way: queued, the job would be refused its worktree at every claim.
      for (const branch of refused) expect(acquireWorktree.request.safeParse({ ...acquireWorktree.examples.valid[0], repositoryUrl: cloneUrl, branch }).success).toBe(false);
      expect(Number((await world.db.query(`SELECT count(*) AS n FROM events`)).rows[0].n)).toBe(before);
      expect((await world.client.request(listJobs, { taskId: 'T-rescue-folder' })).jobs.map((j) => j.jobId)).toEqual([queued.jobId]);
      expect((await world.client.request(getJob, { jobId: queued.jobId })).payloads).toHaveLength(0);
    });

    it("a job whose worktree could never be leased — its product's clone URL or target branch recorded before they were held to the worktree service's checks — is refused INVALID_COMMAND at enqueue, naming what, and nothing is recorded", async () => {
      const store = app.get(EventStore);
      // Products as the log may hold them from before: what register_product refuses today, CloneUrlSchema and GitRefSchema took.
      const legacy = { http: { cloneUrl: 'http://git.example/acme/old.git', targetBranch: 'main' }, lock: { cloneUrl: 'https://github.com/acme/old.git', targetBranch: 'main.lock' } };
      for (const [name, settings] of Object.entries(legacy)) {
        const productId = `product-legacy-${name}`;
        await store.append(
          `product-${productId}`,
          0,
          [{ type: 'ProductRegistered', data: { productId, repository: 'acme/old', ...settings, prStrategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: [], registeredAt: new Date().toISOString() } }],
          { correlationId: `legacy-${name}` },
        );
      }
      const before = Number((await world.db.query(`SELECT count(*) AS n FROM events`)).rows[0].n);
      const outcome = (attempt: Promise<unknown>) => attempt.then(() => 'queued', (error: { code?: string; message?: string }) => ({ code: error.code, message: error.message }));
      expect({
        url: await outcome(enqueue({ productId: 'product-legacy-http', taskId: 'T-legacy' })),
        target: await outcome(enqueue({ productId: 'product-legacy-lock', taskId: 'T-legacy', baseRef: undefined })),
        // A base ref named by the request stands in for the target branch.
        targetNamedAway: await outcome(enqueue({ productId: 'product-legacy-lock', taskId: 'T-legacy-base', baseRef: 'main' })),
      }).toEqual({
        url: { code: ErrorCode.INVALID_COMMAND, message: expect.stringMatching(/clone URL http:\/\/git\.example\/acme\/old\.git, the job's repository, cannot be leased: repository URL scheme "http" is not allowed/) },
        target: { code: ErrorCode.INVALID_COMMAND, message: expect.stringMatching(/target branch main\.lock, the job's base ref, cannot be leased: no part of a base ref may end with "\.lock"/) },
        targetNamedAway: 'queued',
      });
      // Each refusal is what acquire_worktree itself refuses.
      for (const [repositoryUrl, baseRef] of [[legacy.http.cloneUrl, 'main'], [legacy.lock.cloneUrl, legacy.lock.targetBranch]] as const) {
        expect(acquireWorktree.request.safeParse({ ...acquireWorktree.examples.valid[0], repositoryUrl, baseRef }).success).toBe(false);
      }
      expect(Number((await world.db.query(`SELECT count(*) AS n FROM events`)).rows[0].n)).toBe(before + 1);
      expect((await world.client.request(listJobs, { taskId: 'T-legacy' })).jobs).toHaveLength(0);
      for (const { jobId } of (await world.client.request(listJobs, { taskId: 'T-legacy-base' })).jobs) await world.client.request(cancelJob, { jobId, idempotencyKey: key('cancel') });
    });

    it('a product named rescue gets at enqueue_job and create_sprint_run exactly the branches under gantry/rescue/ the worktree service leases it, derived or named', async () => {
      const shop = 'https://github.com/acme/shop.git';
      const job = 'https://github.com/acme/job.git';
      await registerProducts(world.client, ['rescue'], { repository: 'acme/shop', cloneUrl: shop });
      type Asked = { repositoryUrl: string; request: Partial<Parameters<typeof taskEnqueueRequest>[1]> } | { repositoryUrl: string; sprintBranch: string };
      const asked: Asked[] = [
        // in acme/shop: its derived branches (per story, per task, per job) and names beside them
        { repositoryUrl: shop, request: { storyId: 'ST-7' } },
        { repositoryUrl: shop, request: { storyId: undefined, taskId: 'T-1' } },
        { repositoryUrl: shop, request: { storyId: undefined, taskId: undefined } },
        { repositoryUrl: shop, request: { branch: 'gantry/rescue/story-st-7' } },
        { repositoryUrl: shop, request: { branch: `gantry/rescue/${deriveWorktreeKey('https://github.com/acme/other.git', 'main')}` } },
        { repositoryUrl: shop, sprintBranch: 'gantry/rescue/sprint-SP-1' },
        // in a repository named job, a job id's branch has the shape of one of its keys
        { repositoryUrl: job, request: { storyId: 'ST-7' } },
        { repositoryUrl: job, request: { storyId: undefined, taskId: undefined } },
        { repositoryUrl: job, request: { branch: 'gantry/rescue/job-0f1e2d3c-4b5a-4968-8776-655443322110' } },
        { repositoryUrl: job, sprintBranch: 'gantry/rescue/sprint-SP-1' },
        { repositoryUrl: job, sprintBranch: 'gantry/rescue/job-0f1e2d3c-4b5a-4968-8776-655443322110' },
      ];
      const seen: Array<{ branch: string; accepted: boolean; leasable: boolean }> = [];
      const sprintRuns: string[] = [];
      let at = shop;
      for (const one of asked) {
        if (one.repositoryUrl !== at) {
          await world.client.request(updateProduct, { productId: 'rescue', changes: { repository: 'acme/job', cloneUrl: one.repositoryUrl }, idempotencyKey: key('update') });
          at = one.repositoryUrl;
        }
        let branch: string;
        let accepted: boolean;
        try {
          if ('sprintBranch' in one) {
            branch = one.sprintBranch;
            sprintRuns.push((await world.client.request(createSprintRun, { sprintId: `SP-${randomUUID().slice(0, 6)}`, productId: 'rescue', taskIds: ['T-sprint'], branch, idempotencyKey: key('sprint') })).sprintRunId);
          } else {
            const { jobId } = await enqueue({ productId: 'rescue', ...one.request });
            branch = (await world.client.request(getJob, { jobId })).branch!;
          }
          accepted = true;
        } catch (error) {
          if (!(error instanceof GantryError) || error.code !== ErrorCode.INVALID_COMMAND) throw error;
          branch = (error.details as { branch: string }).branch;
          accepted = false;
        }
        const leasable = acquireWorktree.request.safeParse({ ...acquireWorktree.examples.valid[0], repositoryUrl: at, branch }).success;
        seen.push({ branch, accepted, leasable });
      }
      // what the job service takes is what the worktree service leases
      expect(seen.filter((s) => s.accepted !== s.leasable)).toEqual([]);
      expect(seen.map((s) => s.accepted)).toEqual([true, true, true, true, true, true, true, false, false, true, false]);
      expect(seen.map((s) => s.branch).slice(0, 3)).toEqual(['gantry/rescue/story-ST-7', 'gantry/rescue/task-T-1', expect.stringMatching(/^gantry\/rescue\/job-/)]);
      expect(seen[7]!.branch).toMatch(/^gantry\/rescue\/job-/);
      // The runs' jobs are not left queued for the polling claims of the tests after this one.
      const sprintJobs = await eventually(async () => {
        const { jobs } = await world.client.request(listJobs, { productId: 'rescue', kind: ['SPRINT_IMPLEMENTATION'], status: ['QUEUED'] });
        return jobs.length === sprintRuns.length ? jobs : null;
      }, { what: "each run's job queued" });
      for (const { jobId } of sprintJobs) await world.client.request(cancelJob, { jobId, idempotencyKey: key('cancel') });
      await eventually(async () => {
        for (const sprintRunId of sprintRuns) if ((await world.client.request(getSprintRun, { sprintRunId })).status !== 'FAILED') return false;
        return true;
      }, { what: 'the runs failed by their cancelled jobs' });
    });

    it("an allowed tool the agent's command line cannot carry as one rule is refused INVALID_COMMAND at enqueue, and nothing is recorded", async () => {
      const before = Number((await world.db.query(`SELECT count(*) AS n FROM events`)).rows[0].n);
      for (const tool of ['Read,Write', 'Read Write', 'Bash(git commit:*']) {
        await expect(enqueue({ taskId: 'T-bad-tool', configOverrides: { product: { allowedTools: ['Read', tool] } } })).rejects.toMatchObject({
          code: ErrorCode.INVALID_COMMAND,
          message: expect.stringContaining('allowed tool'),
        });
      }
      await expect(
        world.client.request(createSprintRun, { sprintId: 'SP-bad-tool', productId: 'product-1', taskIds: ['T-bad'], branch: 'sprint/SP-bad-tool', configOverrides: { sprint: { allowedTools: ['Edit Write'] } }, idempotencyKey: key('sprint') }),
      ).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
      expect(Number((await world.db.query(`SELECT count(*) AS n FROM events`)).rows[0].n)).toBe(before);
      // a rule whose blank or comma sits inside its parentheses is one rule
      expect(await enqueue({ taskId: 'T-good-tool', configOverrides: { job: { allowedTools: ['Bash(git commit:*)', 'Bash(echo a,b)'] } } })).toMatchObject({ outcome: 'created' });
    });

    it('a clone URL with credentials in it is refused before anything is recorded', async () => {
      await expect(
        world.client.request(registerProduct, {
          productId: 'product-secret', repository: 'acme/secret', cloneUrl: 'https://user:hunter2@github.com/acme/secret.git', targetBranch: 'main',
          prStrategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: [], idempotencyKey: key('register'),
        }),
      ).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND, message: expect.not.stringContaining('hunter2') });
      expect((await world.db.query(`SELECT count(*) AS n FROM events WHERE stream_id = 'product-product-secret'`)).rows[0].n).toBe('0');
    });
  });

  describe('enqueue: the run queue', () => {
    it('the same idempotency key twice gives one job, the second reply "deduplicated"', async () => {
      const idempotencyKey = key('dedupe');
      const first = await enqueue({ idempotencyKey, taskId: 'T-dedupe' });
      const second = await enqueue({ idempotencyKey, taskId: 'T-dedupe' });
      expect(first).toMatchObject({ outcome: 'created', status: 'QUEUED' });
      expect(second).toEqual({ jobId: first.jobId, outcome: 'deduplicated', status: 'QUEUED' });
      const list = await world.client.request(listJobs, { taskId: 'T-dedupe' });
      expect(list.jobs).toHaveLength(1);
    });

    it('the same key with a different request is an IDEMPOTENCY_CONFLICT and creates nothing', async () => {
      const idempotencyKey = key('conflict');
      await enqueue({ idempotencyKey, taskId: 'T-conflict' });
      await expect(enqueue({ idempotencyKey, taskId: 'T-conflict', prompt: 'something else' })).rejects.toMatchObject({ code: ErrorCode.IDEMPOTENCY_CONFLICT });
      expect((await world.client.request(listJobs, { taskId: 'T-conflict' })).jobs).toHaveLength(1);
    });

    const review = (reason: string, payload: Record<string, unknown>, excludeFromCoalescing = false) => ({
      kind: 'REVIEW' as const,
      productId: 'product-co',
      taskId: 'T-review',
      reason,
      payload,
      agentProfile: { id: 'profile-reviewer', model: 'claude-opus-4-7', thinkingBudget: 12000 },
      idempotencyKey: key('review'),
      excludeFromCoalescing,
    });

    it('two requests for the same agent profile and reason within 5 s coalesce into one job that keeps both payloads', async () => {
      const first = await enqueue(review('comment_added', { comment: 1 }));
      const second = await enqueue(review('comment_added', { comment: 2 }));
      expect(first.outcome).toBe('created');
      expect(second).toEqual({ jobId: first.jobId, outcome: 'coalesced', status: 'QUEUED' });
      const job = await world.client.request(getJob, { jobId: first.jobId });
      expect(job.payloads).toEqual([{ comment: 1 }, { comment: 2 }]);
    });

    it('a request naming another branch than the queued job works on is not coalesced into it: each job works on the branch it was asked for', async () => {
      const on = (branch: string | undefined, n: number) => ({ ...review('branch_asked', { n }), ...(branch === undefined ? {} : { branch }) });
      const first = await enqueue(on('review/one', 1));
      const second = await enqueue(on('review/two', 2));
      expect(first.outcome).toBe('created');
      expect(second).toMatchObject({ outcome: 'created', status: 'QUEUED' });
      expect(second.jobId).not.toBe(first.jobId);
      expect((await world.client.request(getJob, { jobId: second.jobId })).payloads).toEqual([{ n: 2 }]);
      // the same branch joins its job; a request naming none (a REVIEW works on no branch then) joins neither
      expect(await enqueue(on('review/two', 3))).toMatchObject({ jobId: second.jobId, outcome: 'coalesced' });
      const none = await enqueue(on(undefined, 4));
      expect(none.outcome).toBe('created');
      expect([first.jobId, second.jobId]).not.toContain(none.jobId);
      expect((await world.client.request(getJob, { jobId: first.jobId })).payloads).toEqual([{ n: 1 }]);
    });

    it('a request that would run with other settings than the queued job (its configuration, or a product updated meanwhile) is not coalesced into it: each job runs as it was asked', async () => {
      await registerProducts(world.client, ['product-co-settings']);
      const asked = (model: string, n: number) => ({ ...review('settings_changed', { n }), productId: 'product-co-settings', configOverrides: { product: { model, maxTurns: 10 + n } } });
      const first = await enqueue(asked('claude-sonnet-4-6', 1));
      // the product's model and limits changed between the two requests
      const second = await enqueue(asked('claude-opus-4-7', 2));
      expect(first.outcome).toBe('created');
      expect(second).toMatchObject({ outcome: 'created', status: 'QUEUED' });
      expect(second.jobId).not.toBe(first.jobId);
      // a request with the settings of the second joins it, not the first
      expect(await enqueue(asked('claude-opus-4-7', 2))).toMatchObject({ jobId: second.jobId, outcome: 'coalesced' });
      // the product's target branch changed: a later request lands where the product says now
      await world.client.request(updateProduct, { productId: 'product-co-settings', changes: { targetBranch: 'develop' }, idempotencyKey: key('update') });
      const third = await enqueue(asked('claude-opus-4-7', 2));
      expect(third).toMatchObject({ outcome: 'created' });
      const claims = [];
      for (const jobId of [first.jobId, second.jobId, third.jobId]) {
        const claim = await world.client.request(claimJob, { runnerId: runner('settings'), kinds: ['REVIEW'], jobId, idempotencyKey: key('claim-settings') });
        if (!claim.claimed) throw new Error('not claimed');
        claims.push(claim.job);
      }
      expect(claims.map((c) => [c.agentConfig.model, c.agentConfig.maxTurns, c.targetBranch, c.payloads.length])).toEqual([
        ['claude-sonnet-4-6', 11, 'main', 1],
        ['claude-opus-4-7', 12, 'main', 2],
        ['claude-opus-4-7', 12, 'develop', 1],
      ]);
    });

    it('concurrent coalescible requests make exactly one job', async () => {
      const replies = await Promise.all(Array.from({ length: 8 }, (_, i) => enqueue(review('concurrent', { n: i }))));
      const created = replies.filter((r) => r.outcome === 'created');
      expect(created).toHaveLength(1);
      expect(new Set(replies.map((r) => r.jobId))).toEqual(new Set([created[0]!.jobId]));
      const job = await world.client.request(getJob, { jobId: created[0]!.jobId });
      expect(job.payloads).toHaveLength(8);
    });

    it('coalescing stops growing a job before it outgrows one message: twelve 100,000-character prompts make jobs that can each be read and claimed', async () => {
      const prompt = (n: number) => `${n}`.padEnd(100_000, '.');
      const replies: Array<{ jobId: string; outcome: string }> = [];
      for (let n = 0; n < 12; n++) replies.push(await enqueue({ ...review('big-prompts', { n }), prompt: prompt(n) }));
      // Two such prompts fit the bound (MAX_JOB_INPUT_BYTES), a third does not.
      expect(replies.some((r) => r.outcome === 'coalesced')).toBe(true);
      const jobIds = [...new Set(replies.map((r) => r.jobId))];
      expect(jobIds.length).toBeGreaterThanOrEqual(6);
      let prompts = 0;
      for (const jobId of jobIds) {
        const job = await world.client.request(getJob, { jobId });
        prompts += job.prompts.length;
        const claim = await world.client.request(claimJob, { runnerId: runner('big'), kinds: ['REVIEW'], jobId, idempotencyKey: key(`claim-big-${jobId}`) });
        expect(claim).toMatchObject({ claimed: true, job: { jobId } });
      }
      // Nothing accepted is lost: every prompt is in one of the jobs.
      expect(prompts).toBe(12);
    });

    it('a request excluded from coalescing makes its own job, and nothing coalesces into it', async () => {
      const first = await enqueue(review('on_enter', { n: 1 }, true));
      const second = await enqueue(review('on_enter', { n: 2 }, true));
      const third = await enqueue(review('on_enter', { n: 3 }));
      expect([first.outcome, second.outcome, third.outcome]).toEqual(['created', 'created', 'created']);
      expect(new Set([first.jobId, second.jobId, third.jobId]).size).toBe(3);
    });
  });

  describe('claim', () => {
    it('50 concurrent claims of one job from 50 runners: exactly one lease, the others ALREADY_CLAIMED', async () => {
      const { jobId } = await enqueue({ taskId: 'T-race' });
      const outcomes = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          world.client
            .request(claimJob, { runnerId: runner(i), kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: key(`claim-${i}`) }, { timeoutMs: 30_000 })
            .then((r) => ({ ok: true as const, r }), (e: { code: string }) => ({ ok: false as const, code: e.code })),
        ),
      );
      const winners = outcomes.filter((o) => o.ok && o.r.claimed);
      expect(winners).toHaveLength(1);
      expect(outcomes.filter((o) => !o.ok).map((o) => (o as { code: string }).code)).toEqual(Array(49).fill(ErrorCode.ALREADY_CLAIMED));
      const job = await world.client.request(getJob, { jobId });
      expect(job.status).toBe('CLAIMED');
      expect(job.lease?.leaseToken).toBe(1);
      const claims = await world.db.query(`SELECT count(*) AS n FROM events WHERE stream_id = $1 AND type = 'JobClaimed'`, [jobId]);
      expect(Number(claims.rows[0].n)).toBe(1);
    });

    it('without an offered job the oldest queued job of the runner\'s kinds is claimed, with its resolved configuration recorded', async () => {
      const first = await enqueue({ kind: 'IDEA_MAKE_PLAN', productId: 'product-poll', configOverrides: { product: { maxTurns: 7 } } });
      const second = await enqueue({ kind: 'IDEA_MAKE_PLAN', productId: 'product-poll' });
      const a = await world.client.request(claimJob, { runnerId: runner('p1'), kinds: ['IDEA_MAKE_PLAN'], idempotencyKey: key('poll') });
      const b = await world.client.request(claimJob, { runnerId: runner('p2'), kinds: ['IDEA_MAKE_PLAN'], idempotencyKey: key('poll') });
      const c = await world.client.request(claimJob, { runnerId: runner('p3'), kinds: ['IDEA_MAKE_PLAN'], idempotencyKey: key('poll') });
      expect(a).toMatchObject({ claimed: true, job: { jobId: first.jobId, effort: 'xhigh', agentConfig: { model: 'claude-opus-4-7', thinkingBudget: 24000, maxTurns: 7 } } });
      expect(b).toMatchObject({ claimed: true, job: { jobId: second.jobId } });
      expect(c).toEqual({ claimed: false });
      const events = await world.db.query(`SELECT data FROM events WHERE stream_id = $1 AND type = 'JobClaimed'`, [first.jobId]);
      expect(events.rows[0].data.agentConfig).toMatchObject({ model: 'claude-opus-4-7', maxTurns: 7 });
    });

    it('claims that poll at once take different jobs: 16 claims over 12 queued jobs claim each job once and leave 4 runners without one', async () => {
      const queued = [];
      for (let i = 0; i < 12; i++) queued.push((await enqueue({ kind: 'PLAN_CHAT', productId: 'product-poll' })).jobId);
      // Whatever else of this kind other tests left queued is claimed first: take it out of the way.
      const { rows: older } = await world.db.query<{ job_id: string }>(`SELECT job_id FROM jobs WHERE status = 'QUEUED' AND kind = 'PLAN_CHAT' AND NOT (job_id = ANY($1))`, [queued]);
      for (const { job_id } of older) await world.client.request(cancelJob, { jobId: job_id, reason: 'out of the way', idempotencyKey: key('cancel') });
      const replies = await Promise.all(
        Array.from({ length: 16 }, (_, i) => world.client.request(claimJob, { runnerId: runner(`poll-${i}`), kinds: ['PLAN_CHAT'], idempotencyKey: key('poll-at-once') })),
      );
      const claimed = replies.flatMap((r) => (r.claimed ? [r.job.jobId] : []));
      expect(claimed.sort()).toEqual([...queued].sort());
      expect(replies.filter((r) => !r.claimed)).toHaveLength(4);
      // Each job was claimed by one append: two events (enqueued, claimed), no lost race written down.
      expect(await Promise.all(queued.map(countEvents))).toEqual(queued.map(() => 2));
    });

    /** Enqueues `count` PLAN_CHAT jobs and cancels whatever else of that kind is queued: the claims of the test take these, in order. */
    async function onlyQueued(count: number): Promise<string[]> {
      const queued = [];
      for (let i = 0; i < count; i++) queued.push((await enqueue({ kind: 'PLAN_CHAT', productId: 'product-poll' })).jobId);
      const { rows: others } = await world.db.query<{ job_id: string }>(`SELECT job_id FROM jobs WHERE status = 'QUEUED' AND kind = 'PLAN_CHAT' AND NOT (job_id = ANY($1))`, [queued]);
      for (const { job_id } of others) await world.client.request(cancelJob, { jobId: job_id, reason: 'out of the way', idempotencyKey: key('cancel') });
      return queued;
    }
    const poll = (label: string, idempotencyKey = key('poll')) => world.client.request(claimJob, { runnerId: runner(label), kinds: ['PLAN_CHAT'], idempotencyKey });

    it('a job whose claim was rolled back is claimed again before the jobs enqueued after it, though a claim read them ahead', async () => {
      const [first, second, third] = await onlyQueued(3);
      const a = await poll('order-1'); // its look-up read the second and the third ahead
      expect(a).toMatchObject({ claimed: true, job: { jobId: first } });
      if (!a.claimed) return;
      await world.client.request(rollbackClaim, { jobId: first!, runnerId: runner('order-1'), leaseToken: a.job.leaseToken, reason: 'agent exited 1', exitCode: 1, idempotencyKey: key('rb') });
      expect(await poll('order-2')).toMatchObject({ claimed: true, job: { jobId: first, attempt: 2 } });
      expect(await poll('order-3')).toMatchObject({ claimed: true, job: { jobId: second } });
      expect(await poll('order-4')).toMatchObject({ claimed: true, job: { jobId: third } });
    });

    it('a claim repeated under its key claims nothing new, and the job it looked at keeps its place', async () => {
      const [first, second, third] = await onlyQueued(3);
      const idempotencyKey = key('poll-again');
      const claimed = await poll('again', idempotencyKey);
      expect(claimed).toMatchObject({ claimed: true, job: { jobId: first } });
      // Looks at the second job, then finds its key answered: the second job was not claimed. What is
      // left of the lease is reckoned at each answer.
      expect(await poll('again', idempotencyKey)).toEqual({ ...claimed, leaseExpiresInMs: expect.any(Number) });
      expect(await countEvents(second!)).toBe(1);
      expect(await poll('after-again')).toMatchObject({ claimed: true, job: { jobId: second } });
      expect(await poll('after-again-2')).toMatchObject({ claimed: true, job: { jobId: third } });
    });

    it('a claim retried with the same idempotency key returns the same lease and claims nothing new', async () => {
      const { jobId } = await enqueue();
      const request = { runnerId: runner('r'), kinds: ['TASK_IMPLEMENTATION' as const], jobId, idempotencyKey: key('retry') };
      const first = await world.client.request(claimJob, request);
      await sleep(200);
      const again = await world.client.request(claimJob, request);
      expect(again).toEqual({ ...first, leaseExpiresInMs: expect.any(Number) });
      // What is left of the lease, reckoned as it answers again: not the first answer's.
      expect(first.claimed && again.claimed && again.leaseExpiresInMs! <= first.leaseExpiresInMs! - 200).toBe(true);
      expect(await countEvents(jobId)).toBe(2);
    });

    it('a claim of a cancelled job is refused', async () => {
      const { jobId } = await enqueue();
      await world.client.request(cancelJob, { jobId, idempotencyKey: key('cancel') });
      await expect(world.client.request(claimJob, { runnerId: runner('x'), kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: key('c') })).rejects.toMatchObject({
        code: ErrorCode.INVALID_TRANSITION,
      });
    });
  });

  describe('fencing and the story log', () => {
    it('finish, log and renew with a stale token are STALE_FENCE and change nothing', async () => {
      const { jobId, lease } = await runningJob();
      // Roll back and claim again: the first token is now stale.
      await world.client.request(rollbackClaim, { ...lease, reason: 'agent exited 1', exitCode: 1, idempotencyKey: key('rb') });
      const again = await world.client.request(claimJob, { runnerId: runner('b'), kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: key('claim') });
      expect(again).toMatchObject({ claimed: true, job: { leaseToken: 2, attempt: 2 } });
      const before = await countEvents(jobId);
      const facts: VerificationFacts = {
        verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 1, insertions: 1, deletions: 0 },
        workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false,
      };
      const stale = [
        world.client.request(finishJob, { ...lease, facts, idempotencyKey: key('f') }),
        world.client.request(logImplementation, { ...lease, summary: 'x', idempotencyKey: key('l') }),
        world.client.request(logCommit, { ...lease, commitSha: sha('d'), message: 'm', summary: 's', idempotencyKey: key('l') }),
        world.client.request(logTestResult, { ...lease, status: 'PASSED', summary: 's', idempotencyKey: key('l') }),
        world.client.request(renewJobLease, lease),
      ];
      for (const attempt of stale) await expect(attempt).rejects.toMatchObject({ code: ErrorCode.STALE_FENCE });
      expect(await countEvents(jobId)).toBe(before);
      expect((await world.client.request(getJob, { jobId })).lease).toMatchObject({ runnerId: runner('b'), leaseToken: 2 });
    });

    it('a finish without the implementation and test-result logs is refused, naming what is missing', async () => {
      const { jobId, lease } = await runningJob();
      const before = await countEvents(jobId);
      const facts: VerificationFacts = {
        verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 1, insertions: 1, deletions: 0 },
        workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false,
      };
      const refusal = world.client.request(finishJob, { ...lease, facts, idempotencyKey: key('f') });
      await expect(refusal).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
      await expect(refusal).rejects.toThrow(/implementation-log entry.*test-result entry/);
      expect(await countEvents(jobId)).toBe(before);
      expect((await world.client.request(getJob, { jobId })).status).toBe('RUNNING');
    });

    const doneFacts = (headSha: string): VerificationFacts => ({
      verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 1, insertions: 1, deletions: 0 },
      workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false, headSha,
    });

    it('a DONE on a new commit whose push was never reported under the claim is refused, naming it, and nothing is recorded; reported, it finishes DONE', async () => {
      const { jobId, lease } = await runningJob();
      await logged(lease);
      const before = await countEvents(jobId);
      const refusal = world.client.request(finishJob, { ...lease, facts: doneFacts(sha('e')), idempotencyKey: key('f') });
      await expect(refusal).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED, details: { pushReported: false, verifiedHeadSha: sha('e') } });
      await expect(refusal).rejects.toThrow(/no push of it was reported.*report_push/);
      expect(await countEvents(jobId)).toBe(before);
      expect((await world.client.request(getJob, { jobId })).status).toBe('RUNNING');

      await world.client.request(reportPush, { ...lease, branch: 'feat/story-1', headSha: sha('e'), pushed: true, idempotencyKey: key('push') });
      const done = await world.client.request(finishJob, { ...lease, facts: doneFacts(sha('e')), idempotencyKey: key('f') });
      expect(done).toMatchObject({ jobStatus: 'DONE', taskStatus: 'DONE' });
      expect(await world.client.request(getJob, { jobId })).toMatchObject({ status: 'DONE', headSha: sha('e') });
    });

    it('a DONE whose verified head is not the head pushed under the claim is refused, naming both, and nothing is recorded', async () => {
      const { jobId, lease } = await runningJob();
      await logged(lease);
      await world.client.request(reportPush, { ...lease, branch: 'feat/story-1', headSha: sha('e'), pushed: true, idempotencyKey: key('push') });
      const before = await countEvents(jobId);
      const refusal = world.client.request(finishJob, { ...lease, facts: doneFacts(sha('f')), idempotencyKey: key('f') });
      await expect(refusal).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED, details: { pushReported: true, pushedHeadSha: sha('e'), verifiedHeadSha: sha('f') } });
      expect(await countEvents(jobId)).toBe(before);
      expect((await world.client.request(getJob, { jobId })).status).toBe('RUNNING');
    });

    it("an earlier claim's push does not back a later claim's DONE unless that claim adopts it", async () => {
      const first = await runningJob();
      await logged(first.lease);
      await world.client.request(reportPush, { ...first.lease, branch: 'feat/story-1', headSha: sha('e'), pushed: true, idempotencyKey: key('push') });
      await world.client.request(rollbackClaim, { ...first.lease, reason: 'agent exited 1', exitCode: 1, idempotencyKey: key('rb') });
      const again = await world.client.request(claimJob, { runnerId: runner('a'), kinds: ['TASK_IMPLEMENTATION'], jobId: first.jobId, idempotencyKey: key('claim') });
      if (!again.claimed) throw new Error('not claimed');
      const second = { jobId: first.jobId, runnerId: runner('a'), leaseToken: again.job.leaseToken };
      await world.client.request(startJob, { ...second, branch: 'feat/story-1', idempotencyKey: key('start') });
      await logged(second);
      const before = await countEvents(first.jobId);
      await expect(world.client.request(finishJob, { ...second, facts: doneFacts(sha('e')), idempotencyKey: key('f') })).rejects.toMatchObject({
        code: ErrorCode.PRECONDITION_FAILED,
        details: { pushReported: false },
      });
      expect(await countEvents(first.jobId)).toBe(before);
    });

    it('a claim that adopts a verified push finishes DONE with its head, without a push report of its own', async () => {
      const first = await runningJob();
      await logged(first.lease);
      await world.client.request(reportPush, { ...first.lease, branch: 'feat/story-1', headSha: sha('e'), pushed: true, facts: doneFacts(sha('e')), idempotencyKey: key('push') });
      await world.client.request(rollbackClaim, { ...first.lease, reason: 'the job service did not answer finish_job', idempotencyKey: key('rb') });
      const again = await world.client.request(claimJob, { runnerId: runner('b'), kinds: ['TASK_IMPLEMENTATION'], jobId: first.jobId, idempotencyKey: key('claim') });
      if (!again.claimed) throw new Error('not claimed');
      expect(again.job.verifiedPush).toMatchObject({ leaseToken: first.lease.leaseToken, headSha: sha('e') });
      const second = { jobId: first.jobId, runnerId: runner('b'), leaseToken: again.job.leaseToken };
      await world.client.request(startJob, { ...second, adoptPushOf: first.lease.leaseToken, idempotencyKey: key('start') });
      const done = await world.client.request(finishJob, { ...second, facts: doneFacts(sha('e')), idempotencyKey: key('f') });
      expect(done).toMatchObject({ jobStatus: 'DONE', taskStatus: 'DONE' });
      expect(await world.client.request(getJob, { jobId: first.jobId })).toMatchObject({ status: 'DONE', headSha: sha('e') });
    });

    it('start_job, log_implementation and report_push refuse a branch git would refuse INVALID_COMMAND, naming the branch, and record nothing', async () => {
      const { jobId } = await enqueue({ taskId: 'T-runner-branch' });
      const reply = await world.client.request(claimJob, { runnerId: runner('a'), kinds: ['TASK_IMPLEMENTATION'], jobId, baseSha: sha('b'), idempotencyKey: key('claim') });
      if (!reply.claimed) throw new Error('not claimed');
      const lease = { jobId, runnerId: runner('a'), leaseToken: reply.job.leaseToken };
      const before = await countEvents(jobId);
      for (const branch of ['story/x.lock', 'HEAD', 'story/', 'story//x', 'story/.hidden', 'story@{1}', 'story.', '@', 'story\u0000x', 'story\u0001x', 'story\u007fx']) {
        const refused = { code: ErrorCode.INVALID_COMMAND, issues: [expect.objectContaining({ path: ['branch'] })] };
        await expect(world.client.request(startJob, { ...lease, branch, idempotencyKey: key('start') })).rejects.toMatchObject(refused);
        await expect(world.client.request(logImplementation, { ...lease, branch, summary: 'start', idempotencyKey: key('log') })).rejects.toMatchObject(refused);
        await expect(world.client.request(reportPush, { ...lease, branch, headSha: sha('c'), pushed: true, idempotencyKey: key('push') })).rejects.toMatchObject(refused);
      }
      expect(await countEvents(jobId)).toBe(before);
      expect((await world.client.request(getJob, { jobId })).status).toBe('CLAIMED');
      await world.client.request(cancelJob, { jobId, idempotencyKey: key('cancel') });
    });

    it('renew extends the lease under the current token', async () => {
      const { lease, claimed } = await runningJob();
      const renewed = await world.client.request(renewJobLease, { ...lease, leaseDurationMs: 2 * 60 * 60 * 1000 });
      expect(Date.parse(renewed.leaseExpiresAt)).toBeGreaterThan(Date.parse(claimed.leaseExpiresAt));
    });
  });

  describe('the finishing table through the command path', () => {
    const base = { netDiff: { filesChanged: 0, insertions: 0, deletions: 0 }, workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false, newCommit: false };
    const diff = { filesChanged: 2, insertions: 10, deletions: 1 };
    const rows: Array<[string, VerificationFacts, string, string, string | RegExp | null]> = [
      ['ALIGNED with a new commit', { ...base, verifyResult: 'ALIGNED', newCommit: true, netDiff: diff }, 'DONE', 'DONE', null],
      ['PARTIAL with a new commit', { ...base, verifyResult: 'PARTIAL', newCommit: true, netDiff: diff }, 'DONE', 'DONE', null],
      ['EMPTY, work already on the target', { ...base, verifyResult: 'EMPTY', workAlreadyOnTarget: true }, 'SKIPPED', 'DONE', null],
      ['EMPTY, work not on the target', { ...base, verifyResult: 'EMPTY' }, 'FAILED', 'IN_PROGRESS', 'verify produced no output'],
      ['DIVERGENT, identical to a merged branch', { ...base, verifyResult: 'DIVERGENT', netDiff: diff, diffIdenticalToMergedBranch: true, workAlreadyOnTarget: true }, 'SKIPPED', 'DONE', null],
      ['DIVERGENT, not matching the target', { ...base, verifyResult: 'DIVERGENT', netDiff: diff }, 'FAILED', 'IN_PROGRESS', 'verify divergent — manual review'],
      ['a compile failure', { ...base, verifyResult: 'ALIGNED', newCommit: true, netDiff: diff, failure: { kind: 'COMPILE', message: 'src/a.ts(3,1): error TS1005' } }, 'FAILED', 'IN_PROGRESS', /src\/a\.ts\(3,1\): error TS1005/],
      ['a push failure', { ...base, verifyResult: 'ALIGNED', newCommit: true, netDiff: diff, failure: { kind: 'PUSH', message: 'rejected: non-fast-forward' } }, 'FAILED', 'IN_PROGRESS', /non-fast-forward/],
      ['a delete-only change called EMPTY (a diff all the same)', { ...base, verifyResult: 'EMPTY', newCommit: true, netDiff: { filesChanged: 1, insertions: 0, deletions: 12 } }, 'DONE', 'DONE', null],
    ];

    it.each(rows)('%s', async (_label, facts, jobStatus, taskStatus, error) => {
      const { jobId, lease } = await runningJob();
      await logged(lease, facts.newCommit);
      // As the runner does: a new commit without a failure is pushed, and the push reported, before the finish.
      if (facts.newCommit && facts.failure === null) {
        await world.client.request(reportPush, { ...lease, branch: 'feat/story-1', headSha: sha('c'), pushed: true, idempotencyKey: key('push') });
      }
      const reply = await world.client.request(finishJob, { ...lease, facts, idempotencyKey: key('finish') });
      expect(reply).toMatchObject({ jobId, jobStatus, taskStatus });
      if (error === null) expect(reply.error).toBeNull();
      else expect(reply.error).toMatch(error);
      const view = await world.client.request(getJob, { jobId });
      expect(view).toMatchObject({ status: jobStatus, taskStatus, lease: null });
    });

    it('pushed_at is recorded only when something was really pushed', async () => {
      const pushed = await runningJob();
      const notPushed = await runningJob();
      const p = await world.client.request(reportPush, { ...pushed.lease, branch: 'feat/story-1', headSha: sha('e'), pushed: true, idempotencyKey: key('push') });
      const n = await world.client.request(reportPush, { ...notPushed.lease, branch: 'feat/story-1', headSha: sha('e'), pushed: false, idempotencyKey: key('push') });
      expect(p.pushedAt).not.toBeNull();
      expect(n.pushedAt).toBeNull();
      expect((await world.client.request(getJob, { jobId: notPushed.jobId })).pushedAt).toBeNull();
      expect((await world.client.request(getJob, { jobId: pushed.jobId })).headSha).toBe(sha('e'));
    });
  });

  describe('offers and liveness', () => {
    it('a new job and a requeued one are each offered on dispatch.<kind>, once per attempt', async () => {
      const { jobId } = await enqueue({ kind: 'PLAN_CHAT', productId: 'product-offer' });
      const jsm = await jetstreamManager(world.bus.nc);
      const stream = dispatchStreamName(world.naming);
      const offers = async () => {
        const found: Array<{ attempt: number; id: string | undefined }> = [];
        const info = await jsm.streams.info(stream);
        for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
          const msg = await jsm.streams.getMessage(stream, { seq }).catch(() => null);
          if (!msg) continue;
          const body = msg.json<{ jobId: string; attempt: number }>();
          if (body.jobId === jobId) found.push({ attempt: body.attempt, id: msg.header?.get('Nats-Msg-Id') });
        }
        return found;
      };
      await eventually(async () => (await offers()).length === 1, { what: 'the first offer' });
      const claim = await world.client.request(claimJob, { runnerId: runner('o'), kinds: ['PLAN_CHAT'], jobId, idempotencyKey: key('c') });
      if (!claim.claimed) throw new Error('not claimed');
      await world.client.request(rollbackClaim, { jobId, runnerId: runner('o'), leaseToken: claim.job.leaseToken, reason: 'agent exited 1', idempotencyKey: key('rb') });
      await eventually(async () => (await offers()).length === 2, { what: 'the offer of attempt 2' });
      expect(await offers()).toEqual([
        { attempt: 1, id: `${jobId}-offer-1-0` },
        { attempt: 2, id: `${jobId}-offer-2-1` },
      ]);
    });

    it('an enqueue\'s offer goes out with its event; the offers consumer offers an enqueue published without it, and the server drops that copy (one offer per attempt)', async () => {
      const { jobId } = await enqueue({ kind: 'IDEA_GRILL', productId: 'product-redeliver' });
      const stream = dispatchStreamName(world.naming);
      const jsm = await jetstreamManager(world.bus.nc);
      const offersOf = async () => {
        const info = await jsm.streams.info(stream);
        let n = 0;
        for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
          const msg = await jsm.streams.getMessage(stream, { seq }).catch(() => null);
          if (msg && msg.json<{ jobId: string }>().jobId === jobId) n++;
        }
        return n;
      };
      await eventually(async () => (await offersOf()) === 1, { what: 'the offer' });
      // The relay published the offer with the event, and the event says so: the consumer left it alone.
      const published = await jsm.streams.getMessage(streamName(world.naming, 'jobs'), { last_by_subj: eventSubject(world.naming, 'jobs', 'JobEnqueued', jobId) });
      expect(published?.json<{ companions?: number }>().companions).toBe(1);
      const handledByConsumer = async () =>
        (await world.db.query(`SELECT 1 FROM inbox i JOIN events e ON e.event_id::text = i.event_id WHERE i.consumer = 'job-service-offers' AND e.stream_id = $1`, [jobId])).rows.length > 0;
      expect(await handledByConsumer()).toBe(false);

      // As a relay before companions published it: the consumer offers the job, with the same message id.
      await publishEnqueueWithoutItsOffer(world, jobId);
      await eventually(handledByConsumer, { what: 'the offers consumer handled the enqueue published without its offer' });
      expect(await offersOf()).toBe(1);
    });

    it('an expired lease requeues the job with attempt + 1; after the last attempt the job FAILs with a clear error', async () => {
      // Each expiry drops the claims' look-ahead: the requeued job goes before the jobs read ahead.
      const picker = app.get(ClaimPicker);
      const drop = picker.requeued.bind(picker);
      let drops = 0;
      picker.requeued = () => {
        drops += 1;
        drop();
      };
      const requeued = await enqueue({ kind: 'IDEA_GRILL', productId: 'product-expiry' });
      const last = await enqueue({ kind: 'IDEA_GRILL', productId: 'product-expiry', maxAttempts: 1 });
      for (const { jobId } of [requeued, last]) {
        await world.client.request(claimJob, { runnerId: runner('slow'), kinds: ['IDEA_GRILL'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('c') });
      }
      await eventually(async () => (await world.client.request(getJob, { jobId: requeued.jobId })).status === 'QUEUED', { timeoutMs: 20_000, what: 'requeue' });
      const view = await world.client.request(getJob, { jobId: requeued.jobId });
      expect(view).toMatchObject({ attempt: 2, lease: null });
      const failed = await eventually(async () => {
        const j = await world.client.request(getJob, { jobId: last.jobId });
        return j.status === 'FAILED' ? j : null;
      }, { timeoutMs: 20_000, what: 'failure after the last attempt' });
      expect(failed.error).toMatch(/lease of attempt 1 expired.*1 attempt is the maximum/);
      const expiries = await world.db.query(`SELECT count(*) AS n FROM events WHERE stream_id = ANY($1) AND type = 'JobLeaseExpired'`, [[requeued.jobId, last.jobId]]);
      expect(Number(expiries.rows[0].n)).toBe(2);
      expect(drops).toBeGreaterThanOrEqual(2);
      picker.requeued = drop;
    }, 40_000);
  });

  describe('rollbacks that are not the job\'s fault', () => {
    it('a rollback for an unavailable dependency keeps the attempt, and the job is offered again only after its pause', async () => {
      const { jobId } = await enqueue({ kind: 'IDEA_MAKE_PLAN', productId: 'product-pause', maxAttempts: 1 });
      const jsm = await jetstreamManager(world.bus.nc);
      const stream = dispatchStreamName(world.naming);
      const offers = async () => {
        const found: Array<{ id: string | undefined; storedAt: number }> = [];
        const info = await jsm.streams.info(stream);
        for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
          const msg = await jsm.streams.getMessage(stream, { seq }).catch(() => null);
          if (msg && msg.json<{ jobId: string }>().jobId === jobId) found.push({ id: msg.header?.get('Nats-Msg-Id'), storedAt: msg.timestamp ? Date.parse(msg.timestamp) : 0 });
        }
        return found;
      };
      await eventually(async () => (await offers()).length === 1, { what: 'the first offer' });
      const claim = await world.client.request(claimJob, { runnerId: runner('dep'), kinds: ['IDEA_MAKE_PLAN'], jobId, idempotencyKey: key('c') });
      if (!claim.claimed) throw new Error('not claimed');
      const reply = await world.client.request(rollbackClaim, {
        jobId, runnerId: runner('dep'), leaseToken: claim.job.leaseToken, reason: 'the worktree service did not answer acquire_worktree', cause: 'DEPENDENCY', idempotencyKey: key('rb'),
      });
      // one attempt is the maximum, and the job is still queued for it
      expect(reply).toEqual({ jobId, status: 'QUEUED', attempt: 1 });
      const rolledBack = (await world.db.query(`SELECT data FROM events WHERE stream_id = $1 AND type = 'JobClaimRolledBack'`, [jobId])).rows[0].data;
      expect(rolledBack).toMatchObject({ cause: 'DEPENDENCY', nextAttempt: 1 });
      const due = Date.parse(rolledBack.offerNotBefore);
      expect(due - Date.parse(rolledBack.rolledBackAt)).toBe(1000);
      await eventually(async () => (await offers()).length === 2, { what: 'the offer after the pause' });
      const second = (await offers())[1]!;
      expect(second.id).toBe(`${jobId}-offer-1-1`);
      expect(second.storedAt).toBeGreaterThanOrEqual(due);
    });

    it('a claim sent before the pause has passed is refused, naming when the job may be claimed, and writes nothing; a polling claim passes the job over; once the pause has passed it is claimed', async () => {
      const kind = 'SPRINT_IMPLEMENTATION' as const;
      const { jobId } = await enqueue({ kind, productId: 'product-pause' });
      const claim = (runnerId: string) => world.client.request(claimJob, { runnerId: runner(runnerId), kinds: [kind], jobId, idempotencyKey: key('c') });
      const handBack = async (leaseToken: number) => {
        await world.client.request(rollbackClaim, { jobId, runnerId: runner('dep'), leaseToken, reason: 'the worktree service did not answer acquire_worktree', cause: 'DEPENDENCY', idempotencyKey: key('rb') });
        const { rows } = await world.db.query(`SELECT data FROM events WHERE stream_id = $1 AND type = 'JobClaimRolledBack' ORDER BY stream_version DESC LIMIT 1`, [jobId]);
        return rows[0].data.offerNotBefore as string;
      };
      const claimOnceDue = async (due: string) => {
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, Date.parse(due) - Date.now())));
        const reply = await claim('dep');
        if (!reply.claimed) throw new Error('not claimed');
        return reply.job;
      };
      // Three hand-backs in a row: pauses of 1 s, 2 s, then 4 s, each ended before the next claim.
      let leaseToken = (await claimOnceDue(new Date().toISOString())).leaseToken;
      for (const pauseMs of [1000, 2000]) {
        const due = await handBack(leaseToken);
        expect(Date.parse(due) - Date.now()).toBeLessThanOrEqual(pauseMs);
        leaseToken = (await claimOnceDue(due)).leaseToken;
      }
      const due = await handBack(leaseToken);
      const before = await countEvents(jobId);
      const early = claim('early');
      await expect(early).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED, details: { offerNotBefore: due } });
      await expect(early).rejects.toThrow(`may be claimed from ${due}`);
      // What is left of the pause, by the job service's clock: a claimer whose clock is off waits for that.
      const afterMs = claimableAfterMs(await early.catch((error: unknown) => error));
      expect(afterMs).toBeGreaterThan(0);
      expect(afterMs).toBeLessThanOrEqual(4000);
      expect(await countEvents(jobId)).toBe(before);

      // A claim without an offered job takes the next queued job of its kinds, and none while only the paused one is left.
      const other = await enqueue({ kind, productId: 'product-pause' });
      const polled = await world.client.request(claimJob, { runnerId: runner('poll'), kinds: [kind], idempotencyKey: key('poll') });
      expect(polled).toMatchObject({ claimed: true, job: { jobId: other.jobId } });
      expect(await world.client.request(claimJob, { runnerId: runner('poll'), kinds: [kind], idempotencyKey: key('poll') })).toEqual({ claimed: false });
      expect(Date.now()).toBeLessThan(Date.parse(due));

      const after = await claimOnceDue(due);
      expect(after).toMatchObject({ jobId, attempt: 1, leaseToken: leaseToken + 1 });
    }, 30_000);

    it('a polling claim never picks a job whose pause has not ended: it takes the next queued job at once, no refusal tried first', async () => {
      const kind = 'IDEA_GRILL' as const;
      const { rows: earlier } = await world.db.query<{ job_id: string }>(`SELECT job_id FROM jobs WHERE status = 'QUEUED' AND kind = $1`, [kind]);
      for (const { job_id } of earlier) await world.client.request(cancelJob, { jobId: job_id, reason: 'out of the way', idempotencyKey: key('cancel') });
      const paused = await enqueue({ kind, productId: 'product-pause' });
      const first = await world.client.request(claimJob, { runnerId: runner('dep'), kinds: [kind], jobId: paused.jobId, idempotencyKey: key('c') });
      if (!first.claimed) throw new Error('not claimed');
      await world.client.request(rollbackClaim, {
        jobId: paused.jobId, runnerId: runner('dep'), leaseToken: first.job.leaseToken, reason: 'the worktree service did not answer', cause: 'DEPENDENCY', idempotencyKey: key('rb'),
      });
      const other = await enqueue({ kind, productId: 'product-pause' });
      // What the claims' picks handed out, each in turn.
      const picker = app.get(ClaimPicker);
      const pick = picker.pick.bind(picker);
      const picks: Array<string | null> = [];
      picker.pick = async (kinds, passed) => {
        const jobId = await pick(kinds, passed);
        picks.push(jobId);
        return jobId;
      };
      try {
        const polled = await world.client.request(claimJob, { runnerId: runner('poll'), kinds: [kind], idempotencyKey: key('poll') });
        expect(polled).toMatchObject({ claimed: true, job: { jobId: other.jobId } });
        expect(await world.client.request(claimJob, { runnerId: runner('poll'), kinds: [kind], idempotencyKey: key('poll') })).toEqual({ claimed: false });
        // The paused job was never handed to a claim to be refused: one pick each, the second finding none.
        expect(picks).toEqual([other.jobId, null]);
      } finally {
        picker.pick = pick;
      }
      const { rows } = await world.db.query(`SELECT data FROM events WHERE stream_id = $1 AND type = 'JobClaimRolledBack'`, [paused.jobId]);
      // get_job says when the pause ends, while the job waits it out.
      expect(await world.client.request(getJob, { jobId: paused.jobId })).toMatchObject({ status: 'QUEUED', offerNotBefore: rows[0].data.offerNotBefore });
      expect(await world.client.request(getJob, { jobId: other.jobId })).toMatchObject({ status: 'CLAIMED', offerNotBefore: null });
    });

    it('a claim refused for the pause keeps no answer under its key: the same claim, sent again once the pause has passed, claims the job', async () => {
      // A runner's claim is keyed by the offer it took: refused while the job service that decides it
      // reads a moment before the one that published the offer, the same offer published again by the
      // offer sweep is claimed under the same key.
      const { jobId } = await enqueue({ kind: 'IDEA_MAKE_PLAN', productId: 'product-pause' });
      const first = await world.client.request(claimJob, { runnerId: runner('dep'), kinds: ['IDEA_MAKE_PLAN'], jobId, idempotencyKey: key('c') });
      if (!first.claimed) throw new Error('not claimed');
      await world.client.request(rollbackClaim, {
        jobId, runnerId: runner('dep'), leaseToken: first.job.leaseToken, reason: 'the worktree service did not answer', cause: 'DEPENDENCY', idempotencyKey: key('rb'),
      });
      const { offerNotBefore } = await world.client.request(getJob, { jobId });
      const request = { runnerId: runner('offered'), kinds: ['IDEA_MAKE_PLAN' as const], jobId, idempotencyKey: key('offer') };
      await expect(world.client.request(claimJob, request)).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED, details: { offerNotBefore } });
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, Date.parse(offerNotBefore!) - Date.now())));
      expect(await world.client.request(claimJob, request)).toMatchObject({ claimed: true, job: { jobId, leaseToken: first.job.leaseToken + 1 } });
    });

    it('list_jobs names the claims a runner holds', async () => {
      const held = await runningJob('TASK_IMPLEMENTATION');
      const mine = await world.client.request(listJobs, { runnerId: runner('a'), status: ['CLAIMED', 'RUNNING'], limit: 500 });
      expect(mine.jobs.map((j) => j.jobId)).toContain(held.jobId);
      expect(mine.jobs.every((j) => j.lease?.runnerId === runner('a'))).toBe(true);
      expect((await world.client.request(listJobs, { runnerId: runner('nobody'), limit: 10 })).jobs).toEqual([]);
    });
  });

  describe('a claim replayed under its key answers with the job as it is now', () => {
    it('while the claim lives: the same lease, with its expiry as renewed', async () => {
      const { jobId } = await enqueue();
      const request = { runnerId: runner('replay'), kinds: ['TASK_IMPLEMENTATION' as const], jobId, idempotencyKey: key('replay') };
      const first = await world.client.request(claimJob, request);
      if (!first.claimed) throw new Error('not claimed');
      const renewed = await world.client.request(renewJobLease, { jobId, runnerId: runner('replay'), leaseToken: first.job.leaseToken, leaseDurationMs: 2 * 60 * 60 * 1000 });
      const again = await world.client.request(claimJob, request);
      expect(again).toMatchObject({ claimed: true, job: { leaseToken: first.job.leaseToken, leaseExpiresAt: renewed.leaseExpiresAt } });
    });

    it('after the claim was rolled back, or the job cancelled: claimed false, and nothing is written', async () => {
      const rolled = await enqueue();
      const cancelled = await enqueue();
      for (const [{ jobId }, end] of [[rolled, 'rollback'], [cancelled, 'cancel']] as const) {
        const request = { runnerId: runner('restarted'), kinds: ['TASK_IMPLEMENTATION' as const], jobId, idempotencyKey: key('replay') };
        const first = await world.client.request(claimJob, request);
        if (!first.claimed) throw new Error('not claimed');
        if (end === 'rollback') {
          await world.client.request(rollbackClaim, { jobId, runnerId: runner('restarted'), leaseToken: first.job.leaseToken, reason: 'the runner restarted', cause: 'RUNNER', idempotencyKey: key('rb') });
        } else {
          await world.client.request(cancelJob, { jobId, idempotencyKey: key('cancel') });
        }
        const before = await countEvents(jobId);
        expect(await world.client.request(claimJob, request)).toEqual({ claimed: false });
        expect(await countEvents(jobId)).toBe(before);
      }
      expect((await world.client.request(getJob, { jobId: rolled.jobId })).status).toBe('QUEUED');
      expect((await world.client.request(getJob, { jobId: cancelled.jobId })).status).toBe('CANCELLED');
    });
  });

  describe('cancelling a running job', () => {
    it('a finish saying cancelled under a live claim nobody cancelled is refused and changes nothing', async () => {
      const { jobId, lease } = await runningJob();
      await logged(lease, false);
      const facts: VerificationFacts = {
        verifyResult: 'ALIGNED', newCommit: false, netDiff: { filesChanged: 0, insertions: 0, deletions: 0 },
        workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: true,
      };
      await expect(world.client.request(finishJob, { ...lease, facts, idempotencyKey: key('cancelled-unasked') })).rejects.toMatchObject({
        code: ErrorCode.PRECONDITION_FAILED,
        message: expect.stringMatching(/no cancel was requested/),
      });
      expect(await world.client.request(getJob, { jobId })).toMatchObject({ status: 'RUNNING', lease: { leaseToken: lease.leaseToken }, cancelledRun: null });
    });

    it("the revoked claim's runner reports its agent stopped (finish with cancelled: true); the view shows when", async () => {
      const { jobId, lease } = await runningJob();
      await world.client.request(cancelJob, { jobId, idempotencyKey: key('cancel') });
      const facts: VerificationFacts = {
        verifyResult: 'EMPTY', newCommit: false, netDiff: { filesChanged: 0, insertions: 0, deletions: 0 },
        workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: true,
      };
      expect((await world.client.request(getJob, { jobId })).cancelledRun).toEqual({ runnerId: runner('a'), leaseToken: lease.leaseToken, stoppedAt: null });
      const reply = await world.client.request(finishJob, { ...lease, facts, idempotencyKey: key('stopped') });
      expect(reply).toEqual({ jobId, jobStatus: 'CANCELLED', taskStatus: 'TO_DO', error: null });
      const view = await world.client.request(getJob, { jobId });
      expect(view).toMatchObject({ status: 'CANCELLED', cancelledRun: { runnerId: runner('a'), leaseToken: lease.leaseToken, stoppedAt: expect.any(String) } });
      // anything but that report stays refused under the revoked claim
      await expect(world.client.request(finishJob, { ...lease, facts: { ...facts, cancelled: false }, idempotencyKey: key('f') })).rejects.toMatchObject({ code: ErrorCode.STALE_FENCE });
    });
  });

  it('every projection dropped and rebuilt from the log answers every query as before', async () => {
    // Every page: the jobs with long prompts above fill a page by its size.
    const jobsWhere = (filter: Omit<Parameters<typeof world.client.request<typeof listJobs>>[1], 'cursor'>) =>
      readAllPages((cursor) => world.client.request(listJobs, { ...filter, cursor }), (page) => page.jobs);
    const queries = async () => {
      const all = await jobsWhere({ limit: 500 });
      const byStatus = await jobsWhere({ status: ['QUEUED', 'FAILED'], limit: 500 });
      const byStory = await jobsWhere({ storyId: 'ST-1', limit: 500 });
      const single = await Promise.all(all.slice(0, 10).map((j) => world.client.request(getJob, { jobId: j.jobId })));
      return { all, byStatus, byStory, single };
    };
    const before = await queries();
    expect(before.all.length).toBeGreaterThan(20);
    const store = app.get(EventStore);
    for (const table of ['jobs', 'sprint_runs']) await world.db.query(`DELETE FROM ${table}`);
    await expect(world.client.request(getJob, { jobId: before.all[0]!.jobId })).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
    await rebuildProjections(store, jobServiceProjections);
    expect(await queries()).toEqual(before);
  });

  it('list_jobs pages with a cursor', async () => {
    // digits, but no position a bigint holds: refused as a cursor, not an INTERNAL from PostgreSQL
    const huge = Buffer.from(JSON.stringify({ after: '9'.repeat(30) })).toString('base64url');
    await expect(world.client.request(listJobs, { cursor: huge })).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
    const first = await world.client.request(listJobs, { limit: 3 });
    expect(first.jobs).toHaveLength(3);
    const second = await world.client.request(listJobs, { limit: 3, cursor: first.nextCursor! });
    expect(second.jobs[0]!.jobId).not.toBe(first.jobs[2]!.jobId);
    await expect(world.client.request(listJobs, { cursor: 'bogus' })).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
  });

  it('a request that fits the bus but whose job would not fit one message is refused INVALID_COMMAND, nothing recorded, and the relay goes on publishing', async () => {
    const limit = world.bus.nc.info!.max_payload;
    const taskId = `T-${Math.random().toString(36).slice(2, 8)}`;
    const error = await enqueue({ storyId: 'ST-oversize', taskId, prompt: 'p'.repeat(100_000), payload: { blob: 'b'.repeat(limit - 100_000 - 700) } }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: ErrorCode.INVALID_COMMAND, message: expect.stringContaining(`(MAX_JOB_INPUT_BYTES)`) });
    expect((await world.client.request(listJobs, { taskId })).jobs).toEqual([]);
    // what comes after is published: nothing is left stuck in the outbox
    const { jobId } = await enqueue({ storyId: 'ST-oversize' });
    await eventually(async () => Number((await world.db.query('SELECT count(*) AS n FROM outbox')).rows[0].n) === 0, { what: 'the outbox emptied' });
    expect(await countEvents(jobId)).toBeGreaterThan(0);
  });

  it('list_jobs ends a page before its answer outgrows one NATS message: large jobs come on more pages, none lost', async () => {
    const enqueued: string[] = [];
    for (let i = 0; i < 15; i++) enqueued.push((await enqueue({ storyId: 'ST-large', prompt: `${i} ${'x'.repeat(90_000)}` })).jobId);
    const listed: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await world.client.request(listJobs, { storyId: 'ST-large', limit: 500, ...(cursor ? { cursor } : {}) });
      expect(Buffer.byteLength(JSON.stringify(page))).toBeLessThan(600 * 1024);
      listed.push(...page.jobs.map((j) => j.jobId));
      cursor = page.nextCursor ?? undefined;
      pages++;
    } while (cursor);
    expect(listed).toEqual(enqueued);
    expect(pages).toBeGreaterThan(2);
  });
});

describe('a job service outage longer than a claim\'s lease (docs/jobs.md, "A job service outage")', () => {
  let world: TestWorld;
  let app: INestApplication | undefined;

  beforeAll(async () => {
    world = await createWorld('jobs_outage');
    app = await startInProcess(world, { GANTRY_LEASE_SWEEP_MS: '100' });
    await registerProducts(world.client, ['product-outage']);
  });

  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  it('the job service started again resumes the lease for as long as it was granted: the runner\'s commands are obeyed, nothing expires, no attempt is spent', async () => {
    const { jobId } = await world.client.request(enqueueJob, {
      kind: 'TASK_IMPLEMENTATION', productId: 'product-outage', taskId: 'T-outage', payload: {}, baseRef: 'main', maxAttempts: 1, idempotencyKey: key('enqueue'),
    });
    const claim = await world.client.request(claimJob, { runnerId: runner('o'), kinds: ['TASK_IMPLEMENTATION'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    const lease = { jobId, runnerId: runner('o'), leaseToken: claim.job.leaseToken };
    await world.client.request(startJob, { ...lease, branch: 'feat/outage', idempotencyKey: key('start') });

    await app!.close();
    app = undefined;
    // down until the lease's expiry has passed: with nobody serving, no runner could renew it
    await eventually(() => Date.now() > Date.parse(claim.job.leaseExpiresAt) + 500, { what: 'the lease expiry passed while down', timeoutMs: 30_000 });
    app = await startInProcess(world, { GANTRY_LEASE_SWEEP_MS: '100' });

    // the agent's story-log call, sent again under its key after the outage, is recorded
    await world.client.request(logImplementation, { ...lease, summary: 'written while the job service was down', idempotencyKey: key('log') });
    const renewed = await world.client.request(renewJobLease, { ...lease, leaseDurationMs: 10_000 });
    expect(Date.parse(renewed.leaseExpiresAt)).toBeGreaterThan(Date.now());
    const types = (await world.db.query<{ type: string; data: Record<string, unknown> }>(`SELECT type, data FROM events WHERE stream_id = $1 ORDER BY stream_version`, [jobId])).rows;
    const resumed = types.find((e) => e.type === 'JobLeaseRenewed' && e.data.resumedAtStart === true);
    expect(resumed?.data).toMatchObject({ leaseToken: 1, runnerId: runner('o') });
    // resumed for the 10 s it was granted, from the start
    expect(Date.parse(resumed!.data.leaseExpiresAt as string) - Date.parse(resumed!.data.renewedAt as string)).toBe(10_000);
    expect(types.map((e) => e.type)).not.toContain('JobLeaseExpired');
    expect(await world.client.request(getJob, { jobId })).toMatchObject({ status: 'RUNNING', attempt: 1, storyLog: { implementationEntries: 1 } });
  }, 60_000);

  it('a lease that ran out while a job service served is not resumed by the next start: the sweep expires it and the attempt is spent', async () => {
    const { jobId } = await world.client.request(enqueueJob, {
      kind: 'TASK_IMPLEMENTATION', productId: 'product-outage', taskId: 'T-served', payload: {}, baseRef: 'main', maxAttempts: 2, idempotencyKey: key('enqueue'),
    });
    const claim = await world.client.request(claimJob, { runnerId: runner('dead'), kinds: ['TASK_IMPLEMENTATION'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    // The row held, so that the serving replica's sweep passes over the lease (as one that had not got
    // to it yet) while its runner, dead, stays silent past the lease's end.
    const holder = await world.db.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM jobs WHERE job_id = $1 FOR UPDATE`, [jobId]);
      await eventually(() => Date.now() > Date.parse(claim.job.leaseExpiresAt) + 500, { what: 'the lease ran out', timeoutMs: 30_000 });
      // a pass of the serving replica after the lease ran out
      expect(await app!.get(LeaseExpirySweep).sweep()).toBe(0);
      await app!.close();
      app = undefined;
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    app = await startInProcess(world, { GANTRY_LEASE_SWEEP_MS: '100' });

    await eventually(async () => (await world.client.request(getJob, { jobId })).status === 'QUEUED', { what: 'the lease expired by the sweep' });
    const types = (await world.db.query<{ type: string; data: Record<string, unknown> }>(`SELECT type, data FROM events WHERE stream_id = $1 ORDER BY stream_version`, [jobId])).rows;
    expect(types.map((e) => e.type)).toEqual(['JobEnqueued', 'JobClaimed', 'JobLeaseExpired']);
    expect(await world.client.request(getJob, { jobId })).toMatchObject({ status: 'QUEUED', attempt: 2 });
  }, 60_000);
});
