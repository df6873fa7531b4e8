import { Controller, Inject } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type pg from 'pg';
import {
  pullRequestIdFor,
  type EventEnvelope,
  type JobEnqueuedData,
  type JobFinishedData,
  type JobPushReportedData,
  type ProductRegisteredData,
  type ProductSettings,
} from '@gantry/contracts';
import { Bus, RetryLater } from '@gantry/messaging';
import { DurableConsumer, type ConsumerContext } from '@gantry/service-runtime';
import type { PullRequestCommand } from '../domain/index.js';
import { PullRequestLog } from './pull-request-log.js';

export const JOB_FACTS_CONSUMER = 'pr-service-job-facts';

interface JobScope {
  job_id: string;
  product_id: string;
  repository: string;
  branch: string;
  target_branch: string;
  task_id: string | null;
  story_id: string | null;
  sprint_id: string | null;
  sprint_run_id: string | null;
}

const WRITES_CODE = new Set(['TASK_IMPLEMENTATION', 'SPRINT_IMPLEMENTATION']);

/**
 * What the pr-service learns from the job service's events, as they are delivered (one durable
 * consumer of the jobs stream; not always in the stream's order, see docs/pr-service.md): products
 * and their rules; which job works on which (repository, branch) and for which task of its story; a
 * pushed head (the PR opens, PR-2); a task done or reopened (the scope, PR-3). Each fact is decided on the PR's stream in the consumer's transaction, with its inbox row.
 * A job's end is recorded on its scope, for the scope's retention (docs/pr-service.md, "Retention of job scopes").
 */
@Controller()
export class JobFacts {

  constructor(
    @Inject(PullRequestLog) private readonly prs: PullRequestLog,
    @Inject(Bus) private readonly bus: Bus,
    @InjectPinoLogger('job-facts') private readonly log: PinoLogger,
  ) {}

  @DurableConsumer({
    name: JOB_FACTS_CONSUMER,
    source: 'jobs',
    types: ['ProductRegistered', 'ProductUpdated', 'JobEnqueued', 'JobPushReported', 'JobFinished', 'JobChecksFailed', 'JobCancelled', 'JobClaimRolledBack', 'JobLeaseExpired'],
  })
  async onEvent(envelope: EventEnvelope, { sql }: ConsumerContext): Promise<void> {
    switch (envelope.type) {
      case 'ProductRegistered':
      case 'ProductUpdated':
        return this.product(envelope.data as ProductRegisteredData, sql);
      case 'JobEnqueued':
        return this.enqueued(envelope as EventEnvelope<JobEnqueuedData>, sql);
      case 'JobPushReported':
        return this.pushed(envelope as EventEnvelope<JobPushReportedData>, sql);
      case 'JobFinished':
        return this.finished(envelope as EventEnvelope<JobFinishedData>, sql);
      case 'JobChecksFailed':
        return this.reopened(envelope as EventEnvelope<{ jobId: string; error: string }>, sql);
      case 'JobCancelled':
        await this.ended((envelope.data as { jobId: string }).jobId, sql);
        return;
      case 'JobClaimRolledBack':
      case 'JobLeaseExpired':
        // A claim end that requeues the job is no end of it.
        if ((envelope.data as { outcome: string }).outcome === 'FAILED') await this.ended((envelope.data as { jobId: string }).jobId, sql);
        return;
      default:
        return;
    }
  }

  private async product(d: ProductRegisteredData, sql: pg.PoolClient): Promise<void> {
    const settings: ProductSettings = {
      repository: d.repository,
      cloneUrl: d.cloneUrl,
      targetBranch: d.targetBranch,
      prStrategy: d.prStrategy,
      mergeMethod: d.mergeMethod,
      requiredChecks: d.requiredChecks,
    };
    await sql.query(
      `INSERT INTO products (product_id, repository, clone_url, settings) VALUES ($1, $2, $3, $4)
       ON CONFLICT (product_id) DO UPDATE SET repository = EXCLUDED.repository, clone_url = EXCLUDED.clone_url, settings = EXCLUDED.settings`,
      [d.productId, d.repository, d.cloneUrl, JSON.stringify(settings)],
    );
  }

  private async enqueued(envelope: EventEnvelope<JobEnqueuedData>, sql: pg.PoolClient): Promise<void> {
    const d = envelope.data;
    // Only work that is pushed becomes a pull request; a job of the target branch itself has none.
    if (!WRITES_CODE.has(d.kind) || !d.repository || !d.branch || !d.targetBranch || d.branch === d.targetBranch) return;
    await sql.query(
      `INSERT INTO job_scopes (job_id, product_id, repository, branch, target_branch, task_id, story_id, sprint_id, sprint_run_id)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (job_id) DO NOTHING`,
      [d.jobId, d.productId, d.repository, d.branch, d.targetBranch, d.taskId, d.storyId, d.sprintId, d.sprintRunId],
    );
    const item = d.taskId ?? d.jobId;
    await this.prs.recordWithin(
      sql,
      this.command(d.repository, d.branch, envelope, {
        type: 'RecordTaskQueued',
        data: { jobId: d.jobId, taskId: item, storyId: d.storyId, storyTaskIds: d.storyTaskIds ?? [item] },
      }),
      envelope,
    );
  }

  private async pushed(envelope: EventEnvelope<JobPushReportedData>, sql: pg.PoolClient): Promise<void> {
    const d = envelope.data;
    // Only a code-writing job on a feature branch pushes (the runner pushes nothing else), and every such job is tracked.
    const scope = await this.scopeOrLater(d.jobId, sql, 'a push');
    const { rows } = await sql.query<{ settings: ProductSettings }>(`SELECT settings FROM products WHERE product_id = $1`, [scope.product_id]);
    const product = rows[0]?.settings;
    if (!product) {
      // The job was enqueued for this product, so its registration is earlier in the jobs stream; it has
      // not been handled yet only because it was delivered out of order (redelivered after a process
      // that held it died). Acknowledged now, the push would be lost and the PR never opened: wait for it.
      this.log.warn({ jobId: d.jobId, productId: scope.product_id }, 'a push for a product this service has not learnt yet; handled again once it has');
      throw new RetryLater(`product ${scope.product_id} not known yet`, 2000);
    }
    const title = scope.story_id ? `Story ${scope.story_id}` : scope.sprint_id ? `Sprint ${scope.sprint_id}` : `Gantry: ${scope.branch}`;
    await this.prs.recordWithin(
      sql,
      this.command(scope.repository, scope.branch, envelope, {
        type: 'RecordBranchPushed',
        data: {
          headSha: d.headSha,
          pushedAt: d.reportedAt,
          position: envelope.position,
          jobId: d.jobId,
          sprintRunId: scope.sprint_run_id,
          flow: {
            productId: scope.product_id,
            baseBranch: scope.target_branch,
            strategy: product.prStrategy,
            mergeMethod: product.mergeMethod,
            requiredChecks: product.requiredChecks,
            title,
          },
        },
      }),
      envelope,
    );
  }

  private async finished(envelope: EventEnvelope<JobFinishedData>, sql: pg.PoolClient): Promise<void> {
    const d = envelope.data;
    const known = await this.ended(d.jobId, sql);
    // A task is done when its job says so (DONE, or SKIPPED: the work was already there).
    const doneFor = (taskId: string | null) => (taskId ? d.taskStatus === 'DONE' : d.jobStatus === 'DONE' || d.jobStatus === 'SKIPPED');
    // Not known: a job this service does not track, or a code-writing one whose enqueue is late. A code job's
    // finish always has a verify result (the job service refuses NOT_APPLICABLE for it) and, when it has a task,
    // a taskStatus; a late one that is done would be lost — the scope never done — so it is handed back.
    if (!known && (d.facts.verifyResult === 'NOT_APPLICABLE' || !doneFor(d.taskStatus === null ? null : 'its task'))) return;
    const scope = known ?? (await this.scopeOrLater(d.jobId, sql, 'a finish'));
    if (!doneFor(scope.task_id)) return;
    await this.prs.recordWithin(sql, this.command(scope.repository, scope.branch, envelope, { type: 'RecordTaskDone', data: { jobId: d.jobId, taskId: scope.task_id ?? d.jobId } }), envelope);
  }

  private async reopened(envelope: EventEnvelope<{ jobId: string; error: string }>, sql: pg.PoolClient): Promise<void> {
    // Red checks are reported only for the job that pushed a PR's head: a code-writing job on that branch, always tracked.
    const scope = await this.scopeOrLater(envelope.data.jobId, sql, 'failed checks', true);
    const command = this.command(scope.repository, scope.branch, envelope, {
      type: 'RecordTaskReopened',
      data: { jobId: envelope.data.jobId, taskId: scope.task_id ?? envelope.data.jobId, reason: envelope.data.error },
    });
    await this.prs.recordWithin(sql, command, envelope);
  }

  /**
   * The scope of a job this event can only be about a tracked job: not known yet means its JobEnqueued was
   * delivered late (after a process holding it died), behind this event. Acknowledged now, the fact would be
   * lost; it is handed back and handled once the enqueue has been (docs/pr-service.md).
   */
  private async scopeOrLater(jobId: string, sql: pg.PoolClient, what: string, ends = false): Promise<JobScope> {
    const scope = ends ? await this.ended(jobId, sql) : await this.scopeOf(jobId, sql);
    if (scope) return scope;
    this.log.warn({ jobId }, `${what} of a job this service has not learnt yet; handled again once it has`);
    throw new RetryLater(`job ${jobId} not known yet`, 2000);
  }

  /**
   * The job ended (or, red checks, ended again): its scope's retention counts from now, by the
   * database's clock (docs/pr-service.md, "Retention of job scopes"). Its scope, when tracked.
   */
  private async ended(jobId: string, sql: pg.PoolClient): Promise<JobScope | null> {
    const { rows } = await sql.query<JobScope>(`UPDATE job_scopes SET ended_at = now() WHERE job_id = $1 RETURNING *`, [jobId]);
    return rows[0] ?? null;
  }

  private async scopeOf(jobId: string, sql: pg.PoolClient): Promise<JobScope | null> {
    const { rows } = await sql.query<JobScope>(`SELECT * FROM job_scopes WHERE job_id = $1`, [jobId]);
    return rows[0] ?? null;
  }

  private command<C extends PullRequestCommand>(
    repository: string,
    branch: string,
    _cause: EventEnvelope,
    c: { type: C['type']; data: Omit<C['data'], 'pullRequestId' | 'repository' | 'branch' | 'now'> },
  ): PullRequestCommand {
    return { type: c.type, data: { ...c.data, pullRequestId: pullRequestIdFor(repository, branch), repository, branch, now: this.prs.now() } } as PullRequestCommand;
  }
}
