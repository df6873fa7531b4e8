import { randomUUID } from 'node:crypto';
import { Controller, Inject } from '@nestjs/common';
import type pg from 'pg';
import {
  agentReportsStreamId,
  askQuestion,
  ErrorCode,
  GantryError,
  reportAgentStatus,
  type AgentQuestionAskedData,
  type AgentStatusReportedData,
  type ReplyOf,
  type RequestOf,
} from '@gantry/contracts';
import { EventStore, type UnitOfWork } from '@gantry/eventstore';
import type { CommandContext } from '@gantry/messaging';
import { CommandHandler } from '@gantry/service-runtime';
import type { Job } from '../domain/index.js';
import { idempotencyFor, metadataOf } from './command-context.js';
import { LeaseExpirySweep } from './lease-expiry.js';

/**
 * The agent's own words about its job (MCP `update_job_status`, `ask_question`), recorded in the
 * job's `agentreports-<jobId>` stream under the claim's fencing token. The fence is checked against
 * the jobs row locked FOR SHARE in the same transaction, so no claim change (expiry, rollback, a new
 * grant) can commit between the check and the append. They never change the job itself.
 */
@Controller()
export class AgentReportHandlers {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(LeaseExpirySweep) private readonly leases: LeaseExpirySweep,
  ) {}

  @CommandHandler(reportAgentStatus)
  async reportStatus(request: RequestOf<typeof reportAgentStatus>, context?: CommandContext): Promise<ReplyOf<typeof reportAgentStatus>> {
    // A lease this service could not renew while its bus was down is judged as resumed.
    await this.leases.afterBusLoss();
    const now = this.store.clock().toISOString();
    const executed = await this.store.execute(
      { metadata: metadataOf(request, context), idempotency: idempotencyFor('report_agent_status', request) },
      async (uow) => {
        await fence(uow.sql, request, now, 'report the agent status');
        const data: AgentStatusReportedData = {
          jobId: request.jobId,
          runnerId: request.runnerId,
          leaseToken: request.leaseToken,
          status: request.status,
          summary: request.summary,
          error: request.error ?? null,
          reportedAt: now,
        };
        await appendReport(uow, request.jobId, { type: 'AgentStatusReported', data });
        return { jobId: request.jobId, status: request.status, reportedAt: now };
      },
    );
    return executed.result;
  }

  @CommandHandler(askQuestion)
  async ask(request: RequestOf<typeof askQuestion>, context?: CommandContext): Promise<ReplyOf<typeof askQuestion>> {
    // A lease this service could not renew while its bus was down is judged as resumed.
    await this.leases.afterBusLoss();
    const now = this.store.clock().toISOString();
    const executed = await this.store.execute(
      { metadata: metadataOf(request, context), idempotency: idempotencyFor('ask_question', request) },
      async (uow) => {
        const job = await fence(uow.sql, request, now, 'ask a question');
        const questionId = `question-${randomUUID()}`;
        const data: AgentQuestionAskedData = {
          jobId: request.jobId,
          runnerId: request.runnerId,
          leaseToken: request.leaseToken,
          questionId,
          taskId: job.taskId,
          question: request.question,
          context: request.context ?? null,
          options: request.options ?? null,
          askedAt: now,
        };
        await appendReport(uow, request.jobId, { type: 'AgentQuestionAsked', data });
        return { jobId: request.jobId, questionId, answer: null };
      },
    );
    return executed.result;
  }
}

async function appendReport(uow: UnitOfWork, jobId: string, event: { type: string; data: unknown }): Promise<void> {
  const streamId = agentReportsStreamId(jobId);
  const existing = await uow.readStream(streamId);
  await uow.append(streamId, existing.at(-1)?.streamVersion ?? 0, [event]);
}

/**
 * The claim's fence, as every command under a claim has it: the latest grant, still active, held by
 * this runner, not expired at `now`. The row lock makes the check and the append one step.
 */
async function fence(sql: pg.PoolClient, d: { jobId: string; runnerId: string; leaseToken: number }, now: string, action: string): Promise<Job> {
  const { rows } = await sql.query<{ state: Job }>(`SELECT state FROM jobs WHERE job_id = $1 FOR SHARE`, [d.jobId]);
  const job = rows[0]?.state;
  if (!job) throw new GantryError(ErrorCode.NOT_FOUND, `job ${d.jobId} does not exist`);
  if (d.leaseToken !== job.lastLeaseToken) {
    throw new GantryError(ErrorCode.STALE_FENCE, `cannot ${action}: lease token ${d.leaseToken} of job ${d.jobId} is not its current lease (${job.lastLeaseToken})`);
  }
  const lease = job.lease;
  if (!lease) {
    if (job.lastLeaseEnd === 'FINISHED') throw new GantryError(ErrorCode.INVALID_TRANSITION, `cannot ${action}: job ${d.jobId} already finished as ${job.status}`);
    throw new GantryError(ErrorCode.STALE_FENCE, `cannot ${action}: lease ${d.leaseToken} of job ${d.jobId} has ended (${job.lastLeaseEnd ?? 'never granted'})`);
  }
  if (lease.runnerId !== d.runnerId) {
    throw new GantryError(ErrorCode.STALE_FENCE, `cannot ${action}: lease ${lease.token} of job ${d.jobId} is held by runner ${lease.runnerId}, not ${d.runnerId}`);
  }
  if (Date.parse(now) >= Date.parse(lease.expiresAt)) {
    throw new GantryError(ErrorCode.STALE_FENCE, `cannot ${action}: lease ${lease.token} of job ${d.jobId} expired at ${lease.expiresAt}`);
  }
  return job;
}
