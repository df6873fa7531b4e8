import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import {
  createSprintRun,
  ErrorCode,
  getPullRequest,
  getSprintRun,
  isGantryError,
  listJobs,
  registerProduct,
  resumeSprintRun,
  type JobPayload,
  type JobView,
  type MergeMethod,
  type PrStrategy,
  type PullRequestView,
  type SprintRunView,
} from '@gantry/contracts';
import { GitHubFakeControl } from '@gantry/github-fake';
import { dropSchema, eventually, freePort, startApp, startNodeProcess, testDatabaseUrl, type ChildService, type RunningApp } from '@gantry/testing';
import { EventStore, rebuildProjections } from '@gantry/eventstore';
import { prServiceProjections } from '../../../../apps/pr-service/src/infrastructure/persistence/projections.js';
import { E2eSystem } from './e2e-system.js';

const repoRoot = resolve(fileURLToPath(import.meta.url), '../../../../..');
const fakeEntry = join(repoRoot, 'tools/github-fake/dist/main.js');

export interface ProductOptions {
  strategy: PrStrategy;
  /** The product's required checks (what the pr-service waits for). */
  requiredChecks?: string[];
  mergeMethod?: MergeMethod;
  /** The repository's own settings on the local GitHub. */
  allowAutoMerge?: boolean;
  /** false: a repository without drafts (GitHub refuses `draft: true`). */
  allowDraftPullRequests?: boolean;
  /** Branch protection of main on the local GitHub (what GitHub itself waits for). */
  protectedBy?: string[];
  initialFiles?: Record<string, string>;
}

/**
 * The pull-request world: the job service, the worktree service, runners, the pr-service and
 * the local GitHub (tools/github-fake), each its own process, on the real NATS and PostgreSQL. The
 * products' repositories live on the local GitHub; runners clone and push them there.
 */
export class PrSystem extends E2eSystem {
  readonly secret = 'whsec-acceptance';
  github!: GitHubFakeControl;
  githubUrl!: string;
  prService!: RunningApp;
  /** The extra settings the running pr-service was started with. */
  private prServiceEnv: Record<string, string> = {};
  private fake!: ChildService;
  private db!: pg.Pool;

  constructor(private readonly prEnv: Record<string, string> = {}) {
    super();
  }

  override async start(): Promise<void> {
    await super.start();
    const port = await freePort();
    this.fake = startNodeProcess(fakeEntry, {
      GANTRY_GITHUB_FAKE_PORT: String(port),
      GANTRY_GITHUB_FAKE_DATA_DIR: join(this.root, 'github'),
      GANTRY_GITHUB_FAKE_MERGEABILITY_DELAY_MS: '150',
      GANTRY_GITHUB_FAKE_REF_POLL_MS: '100',
    });
    this.githubUrl = `http://127.0.0.1:${port}`;
    await eventually(async () => (await fetch(`${this.githubUrl}/ready`).catch(() => null))?.status === 200, { what: 'the local GitHub ready', timeoutMs: 30_000 });
    this.github = new GitHubFakeControl(this.githubUrl);
    this.db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${this.name}_prs`, max: 2 });
    await this.startPrService();
  }

  /** (Re)starts the pr-service; the local GitHub's webhooks follow it to its new port. */
  async startPrService(env: Record<string, string> = {}): Promise<RunningApp> {
    this.prServiceEnv = env;
    this.prService = await startApp('pr-service', {
      schema: `${this.name}_prs`,
      naming: this.naming,
      env: {
        GANTRY_GITHUB_API_URL: this.githubUrl,
        GANTRY_GITHUB_TOKEN: 'acceptance-token',
        GANTRY_GITHUB_WEBHOOK_SECRETS: this.secret,
        GANTRY_GITHUB_SECONDARY_RATE_LIMIT_WAIT_S: '1',
        GANTRY_PR_RESYNC_INTERVAL_MS: '1000',
        GANTRY_PR_GIT_DIR: join(this.root, 'pr-git'),
        ...this.prEnv,
        ...env,
      },
    });
    await this.github.setWebhooks([{ url: `${this.prService.url}/webhooks/github`, secret: this.secret }]);
    return this.prService;
  }

  /** Stops the pr-service (SIGTERM, or SIGKILL) and starts it again with `env`. */
  async restartPrService(env: Record<string, string> = {}, signal: NodeJS.Signals = 'SIGTERM'): Promise<RunningApp> {
    await this.prService.kill(signal);
    return this.startPrService(env);
  }

  /**
   * A pr-service with exactly these extra settings: the running one when it has them and still runs, else
   * one started again with them (a boot costs seconds of CPU; a group of cases says what it needs instead
   * of each undoing what the last one changed).
   */
  async prServiceWith(env: Record<string, string> = {}): Promise<RunningApp> {
    const running = this.prService.process.exitCode === null && this.prService.process.signalCode === null;
    if (running && JSON.stringify(Object.entries(env).sort()) === JSON.stringify(Object.entries(this.prServiceEnv).sort())) return this.prService;
    return this.restartPrService(env);
  }

  /** Waits for the pr-service process to end by itself (a test crash point) and says how. */
  async prServiceExited(timeoutMs = 60_000): Promise<string | null> {
    const child = this.prService.process;
    await eventually(() => child.exitCode !== null || child.signalCode !== null, { what: 'the pr-service process gone', timeoutMs });
    return child.signalCode;
  }

  /** A repository on the local GitHub and the product whose work lands in it. */
  async product(productId: string, name: string, o: ProductOptions): Promise<{ repository: string; cloneUrl: string }> {
    const created = await this.github.createRepository({
      owner: 'acme',
      name,
      initialFiles: o.initialFiles ?? { 'README.md': `# ${name}\n`, 'src/app.ts': 'export const app = 1;\n' },
      settings: { allowAutoMerge: o.allowAutoMerge ?? true, allowDraftPullRequests: o.allowDraftPullRequests ?? true },
      requiredChecks: o.protectedBy ?? [],
    });
    await this.client.request(registerProduct, {
      productId,
      repository: created.fullName,
      cloneUrl: created.cloneUrl,
      targetBranch: 'main',
      prStrategy: o.strategy,
      mergeMethod: o.mergeMethod ?? 'SQUASH',
      requiredChecks: o.requiredChecks ?? ['ci/test'],
      idempotencyKey: `${productId}/register:1`,
    });
    return { repository: created.fullName, cloneUrl: created.cloneUrl };
  }

  /** The pr-service's view of the (repository, branch) PR, or null while it tracks none. */
  async pr(repository: string, branch: string): Promise<PullRequestView | null> {
    try {
      return await this.client.request(getPullRequest, { repository, branch });
    } catch (error) {
      if (isGantryError(error) && error.code === ErrorCode.NOT_FOUND) return null;
      throw error;
    }
  }

  async prWhere(repository: string, branch: string, holds: (pr: PullRequestView) => boolean, what: string, timeoutMs = 60_000): Promise<PullRequestView> {
    return eventually(async () => {
      const pr = await this.pr(repository, branch);
      return pr && holds(pr) ? pr : null;
    }, { what: `${repository} ${branch}: ${what}`, timeoutMs, intervalMs: 150 });
  }

  /** What CI reports on a head. */
  async check(repository: string, sha: string, conclusion: 'success' | 'failure', name = 'ci/test'): Promise<void> {
    await this.github.setCheck(repository, { sha, name, status: 'completed', conclusion });
  }

  async createSprintRun(productId: string, sprintId: string, branch: string, taskPayloads: Record<string, JobPayload>): Promise<string> {
    const reply = await this.client.request(createSprintRun, {
      sprintId,
      productId,
      taskIds: Object.keys(taskPayloads),
      branch,
      taskPayloads,
      idempotencyKey: `${productId}/sprint-run:${sprintId}`,
    });
    return reply.sprintRunId;
  }

  async sprintJobs(sprintRunId: string): Promise<JobView[]> {
    return (await this.client.request(listJobs, { sprintRunId })).jobs;
  }

  sprintRun(sprintRunId: string): Promise<SprintRunView> {
    return this.client.request(getSprintRun, { sprintRunId });
  }

  /** Waits for the run to reach `status`; a timeout names the status it had last and its jobs'. */
  async sprintRunWhere(sprintRunId: string, status: SprintRunView['status'], timeoutMs = 90_000): Promise<SprintRunView> {
    let seen = 'never read';
    try {
      return await eventually(async () => {
        const run = await this.sprintRun(sprintRunId);
        seen = run.status;
        return run.status === status ? run : null;
      }, { what: `sprint run ${sprintRunId} ${status}`, timeoutMs, intervalMs: 200 });
    } catch (error) {
      const jobs = await this.sprintJobs(sprintRunId).catch(() => []);
      const of = jobs.map((j) => `${j.taskId} ${j.status}${j.error ? ` (${j.error.slice(0, 200)})` : ''}`).join('; ');
      throw new Error(`${String(error)}; it was ${seen}, its jobs: ${of || 'none read'}`);
    }
  }

  resume(sprintRunId: string, note: string): Promise<unknown> {
    return this.client.request(resumeSprintRun, { sprintRunId, note, idempotencyKey: `acceptance/resume:${sprintRunId}` });
  }

  /** The pr-service's log of one pull request (its event types, in order). */
  async prEvents(pullRequestId: string): Promise<{ type: string; data: Record<string, unknown> }[]> {
    const { rows } = await this.db.query(`SELECT type, data FROM events WHERE stream_id = $1 ORDER BY stream_version`, [pullRequestId]);
    return rows;
  }

  /** Waits until the pr-service has learnt the product (its registration handled). */
  async productKnown(productId: string): Promise<void> {
    await eventually(async () => (await this.db.query(`SELECT 1 FROM products WHERE product_id = $1`, [productId])).rows.length > 0, { what: `the pr-service knows ${productId}` });
  }

  async deliveries(): Promise<{ delivery_id: string; event: string; processed_at: Date | null; outcome: string | null }[]> {
    return (await this.db.query(`SELECT delivery_id, event, processed_at, outcome FROM webhook_deliveries ORDER BY received_at`)).rows;
  }

  /** Someone else on the local GitHub, with a token of their own (what a person does on github.com): REST, or GraphQL at POST /graphql. */
  async asSomeone(method: string, path: string, body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
    const res = await fetch(`${this.githubUrl}${path}`, {
      method,
      headers: { authorization: 'token a-person', 'content-type': 'application/json', accept: 'application/vnd.github+json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  }

  /**
   * The pr-service's views now, and as a rebuild from its log makes them: the pr-service is stopped
   * first, so that its log does not move between the two.
   */
  async viewsAndTheirRebuild(): Promise<{ live: unknown[]; rebuilt: unknown[] }> {
    await this.prService.kill('SIGTERM');
    const view = async () => (await this.db.query(`SELECT * FROM pull_requests ORDER BY pull_request_id`)).rows;
    const live = await view();
    await rebuildProjections(new EventStore({ pool: this.db, schema: `${this.name}_prs` }), prServiceProjections);
    return { live, rebuilt: await view() };
  }

  override async stop(): Promise<void> {
    await this.prService?.kill('SIGKILL');
    await this.fake?.kill('SIGTERM');
    await this.db?.end();
    await super.stop();
    await dropSchema(`${this.name}_prs`);
  }
}
