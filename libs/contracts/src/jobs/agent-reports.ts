import { z } from 'zod';
import { CommandMetaSchema } from '../envelope.js';
import { defineCommand, defineEvent } from '../registry.js';
import { jobExampleIds } from './events.js';
import { aboutItsJob, ExternalRefSchema, IdempotencyKeySchema, JobIdSchema, LeaseTokenSchema, RunnerIdSchema, TimestampSchema } from './values.js';

/*
 * What the agent tells about its own job through the runner's MCP tools `update_job_status` and
 * `ask_question`, recorded by the job service under the claim's fencing token. These are the agent's
 * words, not facts: the finishing rule never reads them (the runner's verification facts decide).
 * They live in a stream of their own per job, `agentreports-<jobId>`.
 */

const fenced = { jobId: JobIdSchema, runnerId: RunnerIdSchema, leaseToken: LeaseTokenSchema };
const fencedExample = { jobId: jobExampleIds.jobId, runnerId: jobExampleIds.runnerId, leaseToken: 1 };

export const AgentReportedStatusSchema = z.enum(['IN_PROGRESS', 'DONE', 'PARTIAL', 'FAILED']);
export type AgentReportedStatus = z.infer<typeof AgentReportedStatusSchema>;

/** A question id is `question-<uuid>`: one token, so it can name a stream or a subject. */
export const QuestionIdSchema = z
  .string()
  .regex(/^question-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, 'a question id is question-<lower-case uuid>');

export function agentReportsStreamId(jobId: string): string {
  return `agentreports-${jobId}`;
}

const questionExample = {
  question: 'The plan says to drop the coupons table, but two reports still read it. Drop it anyway?',
  context: 'reports/monthly.sql and reports/coupons.sql select from coupons.',
  options: ['drop it and delete the reports', 'keep the table'],
};

// ---------------------------------------------------------------------------------------------
// report_agent_status

export const reportAgentStatus = defineCommand({
  context: 'jobs',
  name: 'report_agent_status',
  affinity: aboutItsJob,
  request: CommandMetaSchema.extend({
    ...fenced,
    status: AgentReportedStatusSchema,
    summary: z.string().min(1).max(20_000),
    error: z.string().min(1).max(20_000).optional(),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: z.object({ jobId: JobIdSchema, status: AgentReportedStatusSchema, reportedAt: TimestampSchema }),
  examples: {
    valid: [
      { ...fencedExample, status: 'PARTIAL', summary: 'migration written; the backfill is left', idempotencyKey: 'runner/agent-status:0f3c5e7a9b1d' },
      { ...fencedExample, status: 'FAILED', summary: 'tests fail', error: 'cart.spec.ts: expected 3, got 2', idempotencyKey: 'runner/agent-status:1a2b' },
    ],
    invalid: [
      // the agent's status is one of its four words, not a job status
      { ...fencedExample, status: 'SKIPPED', summary: 'x', idempotencyKey: 'runner/agent-status:1' },
      // a report under a claim carries its token
      { jobId: jobExampleIds.jobId, runnerId: jobExampleIds.runnerId, status: 'DONE', summary: 'x', idempotencyKey: 'runner/agent-status:1' },
    ],
  },
});

// ---------------------------------------------------------------------------------------------
// ask_question

export const askQuestion = defineCommand({
  context: 'jobs',
  name: 'ask_question',
  affinity: aboutItsJob,
  request: CommandMetaSchema.extend({
    ...fenced,
    question: z.string().min(1).max(10_000),
    context: z.string().min(1).max(50_000).optional(),
    options: z.array(z.string().min(1).max(500)).min(2).max(20).optional(),
    idempotencyKey: IdempotencyKeySchema,
  }),
  /** answer is null until a person answers; the agent is told to stop and wait. */
  reply: z.object({ jobId: JobIdSchema, questionId: QuestionIdSchema, answer: z.string().nullable() }),
  examples: {
    valid: [{ ...fencedExample, ...questionExample, idempotencyKey: 'runner/question:5e7a9b1d' }],
    invalid: [
      // a question says something
      { ...fencedExample, question: '', idempotencyKey: 'runner/question:1' },
      // one option is no choice
      { ...fencedExample, question: 'Drop it?', options: ['yes'], idempotencyKey: 'runner/question:1' },
    ],
  },
});

export const agentReportCommandContracts = [reportAgentStatus, askQuestion] as const;

// ---------------------------------------------------------------------------------------------
// events (stream agentreports-<jobId>)

export const AgentStatusReported = defineEvent({
  context: 'jobs',
  type: 'AgentStatusReported',
  schemaVersion: 1,
  data: z.object({
    ...fenced,
    status: AgentReportedStatusSchema,
    summary: z.string().min(1),
    error: z.string().min(1).nullable(),
    reportedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...fencedExample, status: 'PARTIAL', summary: 'migration written; the backfill is left', error: null, reportedAt: '2026-11-30T06:10:00.000Z' }],
    // error is null or a text, never omitted
    invalid: [{ ...fencedExample, status: 'DONE', summary: 'done', reportedAt: '2026-11-30T06:10:00.000Z' }],
  },
});

export const AgentQuestionAsked = defineEvent({
  context: 'jobs',
  type: 'AgentQuestionAsked',
  schemaVersion: 1,
  data: z.object({
    ...fenced,
    questionId: QuestionIdSchema,
    taskId: ExternalRefSchema.nullable(),
    question: z.string().min(1),
    context: z.string().min(1).nullable(),
    options: z.array(z.string().min(1)).nullable(),
    askedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      {
        ...fencedExample,
        questionId: 'question-2b4d6f8a-0c1e-4a3b-9d5f-7a9b1c3d5e7f',
        taskId: 'T-533',
        ...questionExample,
        askedAt: '2026-11-30T06:11:00.000Z',
      },
    ],
    invalid: [{ ...fencedExample, questionId: 'q-1', taskId: null, question: 'x', context: null, options: null, askedAt: '2026-11-30T06:11:00.000Z' }],
  },
});

export const agentReportEventContracts = [AgentStatusReported, AgentQuestionAsked] as const;

export type AgentStatusReportedData = z.output<typeof AgentStatusReported.data>;
export type AgentQuestionAskedData = z.output<typeof AgentQuestionAsked.data>;
