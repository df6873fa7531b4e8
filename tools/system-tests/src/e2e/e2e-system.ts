import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  cancelJob,
  enqueueJob,
  getJob,
  isTerminalJobStatus,
  listJobs,
  listWorktreeLeases,
  registerProduct,
  type JobKind,
  type JobView,
  type Naming,
  type WorktreeLeaseView,
} from '@gantry/contracts';
import { Bus, CommandClient, readAllPages } from '@gantry/messaging';
import {
  connectTestNats,
  deleteStreams,
  dropSchema,
  eventIdOf,
  eventually,
  relayed,
  startApp,
  startCuttableProxy,
  testDatabaseUrl,
  testNatsUrl,
  testNaming,
  uniqueName,
  type CuttableProxy,
  type RunningApp,
} from '@gantry/testing';
import pg from 'pg';
import { OriginRepository } from './origin-repository.js';

const repoRoot = resolve(fileURLToPath(import.meta.url), '../../../../..');
export const standInBin = join(repoRoot, 'apps/runner/bin/stand-in-claude');
/** Loaded into a runner (`clockSkewMs`) to set its wall clock off from the machine's. */
const skewedClock = join(repoRoot, 'tools/system-tests/src/e2e/skewed-clock.mjs');

export interface RunnerOptions {
  concurrency?: number;
  kinds?: JobKind[];
  env?: Record<string, string>;
  /** false: resolve as soon as the process runs, not once it is ready. */
  waitReady?: boolean;
  /** The runner's wall clock this much ahead of the machine's (behind when negative). */
  clockSkewMs?: number;
}

export interface EnqueueOptions {
  kind?: JobKind;
  payload?: Record<string, unknown>;
  taskId?: string;
  baseRef?: string;
  /** The branch a code job pushes to (else its base ref). */
  branch?: string;
  /** Default product-e2e (registered at start, on the local origin). */
  productId?: string;
  storyId?: string;
  storyTaskIds?: string[];
  maxAttempts?: number;
  thinkingBudget?: number;
  agentProfile?: { id: string; model: string; thinkingBudget: number };
}

/** A process is running: there, and not a zombie waiting for init to reap it (a zombie writes nothing). */
export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !['Z', 'X'].includes(stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3));
  } catch {
    return false;
  }
}

/**
 * The whole system as separate processes on the real NATS and PostgreSQL: the job service, the
 * worktree service and runners driving the stand-in agent, over a real local bare origin. Every
 * name (schemas, subject root, stream prefix, directories) is this test file's own.
 */
export class E2eSystem {
  readonly name = uniqueName('e2e_runner');
  readonly naming: Naming = testNaming(this.name);
  readonly runners = new Map<string, RunningApp>();
  jobService!: RunningApp;
  worktreeService!: RunningApp;
  origin!: OriginRepository;
  root!: string;
  protected bus!: Bus;
  protected client!: CommandClient;

  get worktreeRoot(): string {
    return join(this.root, 'worktrees');
  }

  get records(): string {
    return join(this.root, 'records');
  }

  async start(): Promise<void> {
    this.root = await mkdtemp(join(tmpdir(), 'gantry-e2e-'));
    await mkdir(this.worktreeRoot, { recursive: true });
    await mkdir(this.records, { recursive: true });
    this.origin = await OriginRepository.create(join(this.root, 'origin'));
    this.bus = await Bus.connect({ servers: testNatsUrl, naming: this.naming, name: 'e2e-test' });
    this.client = new CommandClient(this.bus);
    await Promise.all([this.startJobService(), this.startWorktreeService()]);
    await this.client.request(registerProduct, {
      productId: 'product-e2e',
      repository: 'acme/e2e',
      cloneUrl: this.origin.url,
      targetBranch: 'main',
      prStrategy: 'STORY',
      mergeMethod: 'SQUASH',
      requiredChecks: [],
      idempotencyKey: 'product-e2e/register:1',
    });
  }

  /** The job service (again, after `stopJobService`), with extra settings (e.g. a test crash hook). */
  async startJobService(env: Record<string, string> = {}): Promise<RunningApp> {
    this.jobService = await startApp('job-service', { schema: `${this.name}_jobs`, naming: this.naming, env: { GANTRY_LEASE_SWEEP_MS: '200', ...env } });
    return this.jobService;
  }

  async stopJobService(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    await this.jobService?.kill(signal);
  }

  async startWorktreeService(env: Record<string, string> = {}): Promise<RunningApp> {
    this.worktreeService = await startApp('worktree-service', {
      schema: `${this.name}_worktrees`,
      naming: this.naming,
      env: { GANTRY_WORKTREE_ROOT: this.worktreeRoot, GANTRY_WORKTREE_SWEEP_INTERVAL_MS: '200', GANTRY_WORKTREE_LOCK_TIMEOUT_MS: '30000', ...env },
    });
    return this.worktreeService;
  }

  async stopWorktreeService(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    await this.worktreeService?.kill(signal);
  }

  async startRunner(id: string, options: RunnerOptions = {}): Promise<RunningApp> {
    const runner = await startApp('runner', {
      schema: `${this.name}_runner`,
      naming: this.naming,
      ...(options.waitReady === false ? { waitReady: false } : {}),
      ...(options.clockSkewMs ? { nodeArgs: ['--import', skewedClock] } : {}),
      env: {
        ...(options.clockSkewMs ? { GANTRY_TEST_CLOCK_SKEW_MS: String(options.clockSkewMs) } : {}),
        GANTRY_RUNNER_ID: id,
        GANTRY_RUNNER_CONCURRENCY: String(options.concurrency ?? 1),
        ...(options.kinds ? { GANTRY_RUNNER_KINDS: options.kinds.join(',') } : {}),
        GANTRY_AGENT_BIN: standInBin,
        GANTRY_AGENT_TIMEOUT_MS: '60000',
        GANTRY_AGENT_KILL_GRACE_MS: '1000',
        GANTRY_LEASE_RENEW_MS: '1000',
        GANTRY_JOB_LEASE_MS: '10000',
        GANTRY_WORKTREE_LEASE_MS: '10000',
        // Short enough for an unanswered renewal to be retried within the 10 s leases (1 s + 2 × 3 s + 250 ms, docs/jobs.md).
        GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '3000',
        GANTRY_WORKTREE_ROOT: this.worktreeRoot,
        GANTRY_RUNNER_SCRATCH_DIR: join(this.root, 'scratch', id),
        GANTRY_RUNNER_SHUTDOWN_GRACE_MS: '2000',
        GANTRY_OFFER_ACK_WAIT_MS: '10000',
        ...options.env,
      },
    });
    this.runners.set(id, runner);
    return runner;
  }

  async stopRunner(id: string, signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    const runner = this.runners.get(id);
    if (!runner) return null;
    this.runners.delete(id);
    return runner.kill(signal);
  }

  async enqueue(options: EnqueueOptions = {}): Promise<string> {
    const kind = options.kind ?? 'TASK_IMPLEMENTATION';
    const reply = await this.client.request(enqueueJob, {
      kind,
      productId: options.productId ?? 'product-e2e',
      taskId: options.taskId ?? `T-${randomUUID().slice(0, 8)}`,
      ...(options.storyId ? { storyId: options.storyId } : {}),
      ...(options.storyTaskIds ? { storyTaskIds: options.storyTaskIds } : {}),
      payload: options.payload ?? {},
      baseRef: options.baseRef ?? 'main',
      ...(options.branch ? { branch: options.branch } : {}),
      idempotencyKey: `product-e2e/enqueue:${randomUUID()}`,
      ...(options.maxAttempts ? { maxAttempts: options.maxAttempts } : {}),
      ...(options.thinkingBudget !== undefined ? { configOverrides: { job: { thinkingBudget: options.thinkingBudget } } } : {}),
      ...(kind === 'REVIEW' ? { agentProfile: options.agentProfile ?? { id: 'reviewer', model: 'claude-opus-4-7', thinkingBudget: 12000 } } : {}),
      excludeFromCoalescing: true,
    });
    return reply.jobId;
  }

  job(jobId: string): Promise<JobView> {
    return this.client.request(getJob, { jobId });
  }

  cancel(jobId: string): Promise<unknown> {
    return this.client.request(cancelJob, { jobId, reason: 'not needed any more', idempotencyKey: `product-e2e/cancel:${jobId}` });
  }

  /** Cancels every job not yet terminal (a case that failed half-way leaves none for the next one). */
  async cancelOpenJobs(): Promise<void> {
    const jobs = await readAllPages(
      (cursor) => this.client.request(listJobs, { status: ['QUEUED', 'CLAIMED', 'RUNNING'], limit: 500, ...(cursor ? { cursor } : {}) }),
      (page) => page.jobs,
    );
    for (const job of jobs) await this.cancel(job.jobId).catch(() => undefined);
  }

  /** Waits for the job to reach a terminal status; if it does not, the failure names the status it stayed in and its events. */
  async terminal(jobId: string, timeoutMs = 60_000): Promise<JobView> {
    try {
      return await eventually(
        async () => {
          const job = await this.job(jobId);
          return isTerminalJobStatus(job.status) ? job : null;
        },
        { what: `job ${jobId} terminal`, timeoutMs, intervalMs: 100 },
      );
    } catch (error) {
      throw new Error(`${(error as Error).message}; ${await this.describeJob(jobId)}`);
    }
  }

  /** Where a job stands and its events, one per line: what a failed wait reports. */
  async describeJob(jobId: string): Promise<string> {
    const job = await this.job(jobId).catch(() => null);
    const events = await this.events(jobId).catch(() => []);
    const history = events.map((e) => `${e.type} ${JSON.stringify(e.data)}`).join('\n  ');
    // What each runner said about the job: why it did not claim it, or what its run did.
    const said = [...this.runners].map(([id, runner]) => {
      const lines = runner.output().split('\n').filter((line) => line.includes(jobId) || /offer|intake|paus|claim/i.test(line));
      return lines.length ? `runner ${id}:\n  ${lines.slice(-25).join('\n  ')}` : `runner ${id}: nothing about it`;
    });
    // And the job service: its lines about the job, its leases' sweep and resumption, and its bus.
    const served = this.jobService.output().split('\n').filter((line) => line.includes(jobId) || /lease|NATS|bus/.test(line));
    said.push(served.length ? `job service:\n  ${served.slice(-25).join('\n  ')}` : 'job service: nothing about it');
    return `job ${jobId} is ${job?.status ?? 'unknown'} (attempt ${job?.attempt ?? '?'}), its events:\n  ${history}\n${said.join('\n')}`;
  }

  async leases(jobId?: string): Promise<WorktreeLeaseView[]> {
    return readAllPages(
      (cursor) => this.client.request(listWorktreeLeases, { ...(jobId ? { jobId } : {}), limit: 1000, ...(cursor ? { cursor } : {}) }),
      (page) => page.leases,
    );
  }

  /** Waits until no lease of the job (or of any job) is held any more. */
  async leasesReleased(jobId?: string, timeoutMs = 20_000): Promise<WorktreeLeaseView[]> {
    return eventually(
      async () => {
        const leases = await this.leases(jobId);
        return leases.every((l) => !['acquiring_lock', 'creating_or_reusing', 'syncing', 'ready', 'releasing'].includes(l.status)) ? leases : null;
      },
      { what: `worktree leases of ${jobId ?? 'every job'} released`, timeoutMs, intervalMs: 200 },
    );
  }

  /** The argv records the stand-in appended for one job (one line per agent start). */
  async agentStarts(recordFile: string): Promise<{ argv: string[]; pid: number; cwd: string; at: string }[]> {
    const text = await readFile(recordFile, 'utf8').catch(() => '');
    return text
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l))
      .filter((r) => Array.isArray(r.argv));
  }

  /** The events of one stream of the job service's log (a job, or its `agentreports-<jobId>`). */
  events(streamId: string): Promise<{ type: string; data: Record<string, unknown> }[]> {
    return this.query('jobs', `SELECT type, data FROM events WHERE stream_id = $1 ORDER BY stream_version`, [streamId]);
  }

  /** Every event of a service's log as text (type and data), oldest first. */
  async allEventsText(service: 'jobs' | 'worktrees'): Promise<string> {
    const rows = await this.query<{ line: string }>(service, `SELECT type || ' ' || data::text AS line FROM events ORDER BY position`, []);
    return rows.map((r) => r.line).join('\n');
  }

  /** The worktree service's events about one lease, read from its log (also while it is down). */
  worktreeLeaseEvents(leaseId: string): Promise<{ type: string; data: Record<string, unknown> }[]> {
    return this.query('worktrees', `SELECT type, data FROM events WHERE data->>'leaseId' = $1 ORDER BY position`, [leaseId]);
  }

  /** The worktree service's lease rows of one job, read from its schema (also while it is down). */
  worktreeLeaseRows(jobId: string): Promise<{ lease_id: string; status: string; expires_at: Date | null; release_reason: string | null }[]> {
    return this.query('worktrees', `SELECT lease_id, status, expires_at, release_reason FROM worktree_leases WHERE job_id = $1 ORDER BY requested_at`, [jobId]);
  }

  private async query<R>(service: 'jobs' | 'worktrees', sql: string, params: unknown[]): Promise<R[]> {
    const client = new pg.Client({ connectionString: testDatabaseUrl, options: `-c search_path=${this.name}_${service}` });
    await client.connect();
    try {
      return (await client.query(sql, params)).rows as R[];
    } finally {
      await client.end();
    }
  }

  /**
   * Waits until the job service has offered the job to runners: the relay published the job's
   * JobEnqueued, whose offer goes with it (its companion). From then on a runner that takes work of
   * the kind would get it — what a "no runner took it" check waits for.
   */
  async offered(jobId: string): Promise<void> {
    const db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${this.name}_jobs`, max: 1 });
    try {
      await relayed(db, await eventIdOf(db, jobId, 'JobEnqueued'));
    } finally {
      await db.end();
    }
  }

  /** What the agent reported through update_job_status and ask_question, as the job service recorded it. */
  agentReports(jobId: string): Promise<{ type: string; data: Record<string, unknown> }[]> {
    return this.events(`agentreports-${jobId}`);
  }

  recordFile(label: string): string {
    return join(this.records, `${label}.jsonl`);
  }

  async health(id: string): Promise<{ status: number; body: unknown }> {
    const runner = this.runners.get(id)!;
    const res = await fetch(`${runner.url}/health`);
    return { status: res.status, body: await res.json() };
  }

  output(id: string): string {
    return this.runners.get(id)?.output() ?? '';
  }

  async stop(): Promise<void> {
    for (const id of [...this.runners.keys()]) await this.stopRunner(id, 'SIGKILL');
    await this.jobService?.kill('SIGKILL');
    await this.worktreeService?.kill('SIGKILL');
    await this.bus?.close();
    const nc = await connectTestNats();
    await deleteStreams(nc, this.naming.streamPrefix);
    await nc.close();
    await dropSchema(`${this.name}_jobs`);
    await dropSchema(`${this.name}_worktrees`);
    if (this.root) await rm(this.root, { recursive: true, force: true });
  }
}

/** The system of a describe block and the NATS proxy its test cuts; with `jobServiceCutToo`, the job service reaches NATS through it as well. */
export function systemBehindProxy(options: { jobServiceCutToo: boolean }): { system: E2eSystem; proxy: () => CuttableProxy } {
  const system = new E2eSystem();
  let proxy: CuttableProxy | undefined;
  beforeAll(async () => {
    proxy = await startCuttableProxy(testNatsUrl);
    await system.start();
    if (options.jobServiceCutToo) {
      await system.stopJobService();
      await system.startJobService({ GANTRY_NATS_URL: proxy.url });
    }
  }, 60_000);
  afterAll(async () => {
    try {
      await system.stop();
    } finally {
      await proxy?.close();
    }
  }, 60_000);
  return { system, proxy: () => proxy! };
}
