import { z } from 'zod';
import { BranchNameSchema, GitShaSchema, TestResultStatusSchema } from '@gantry/contracts';

/*
 * What the agent may tell the runner about its job, one schema per MCP tool, bounded like the job
 * service's story-log commands (@gantry/contracts jobs) so that what passes here passes there. The runner forwards
 * each call to the job service under the job's lease token; the agent never sees that token, and is
 * offered nothing that claims, heartbeats or inspects the queue.
 */

export const ImplementationLogInputSchema = z.strictObject({
  summary: z.string().trim().min(1).max(20_000).describe('What you start on: the task, the branch and the plan in a few sentences.'),
  branch: BranchNameSchema.optional().describe('The branch you work on.'),
  plan: z.string().trim().min(1).max(20_000).optional().describe('Your plan, step by step.'),
});
export type ImplementationLogEntry = z.infer<typeof ImplementationLogInputSchema>;

export const CommitLogInputSchema = z.strictObject({
  hash: GitShaSchema.describe('The full commit hash, as `git rev-parse HEAD` prints it.'),
  message: z.string().trim().min(1).max(10_000).describe('The commit message.'),
  summary: z.string().trim().min(1).max(20_000).describe('What the commit changes and why.'),
});
export type CommitLogEntry = z.infer<typeof CommitLogInputSchema>;

export const TestResultLogInputSchema = z.strictObject({
  status: TestResultStatusSchema.describe('PASSED when every check you ran passed.'),
  summary: z.string().trim().min(1).max(20_000).describe('The checks you ran and their outcome.'),
});
export type TestResultLogEntry = z.infer<typeof TestResultLogInputSchema>;

export const AgentStatuses = ['IN_PROGRESS', 'DONE', 'PARTIAL', 'FAILED'] as const;
export type AgentStatus = (typeof AgentStatuses)[number];

export const JobStatusUpdateInputSchema = z.strictObject({
  status: z.enum(AgentStatuses).describe('IN_PROGRESS while working; DONE, PARTIAL (only part of the plan) or FAILED when you stop.'),
  summary: z.string().trim().min(1).max(20_000).describe('Where you are and what is left.'),
  error: z.string().trim().min(1).max(20_000).optional().describe('The concrete error, when FAILED.'),
});
export type JobStatusUpdate = z.infer<typeof JobStatusUpdateInputSchema>;

export const QuestionInputSchema = z.strictObject({
  question: z.string().trim().min(1).max(10_000).describe('The question a human must answer before you can continue.'),
  context: z.string().trim().min(1).max(50_000).optional().describe('What led to the question.'),
  options: z.array(z.string().trim().min(1).max(500)).min(2).max(20).optional().describe('The choices, when there are some.'),
});
export type AgentQuestion = z.infer<typeof QuestionInputSchema>;

export interface StoryLogReceipt {
  entryId: string;
}

export interface QuestionReceipt {
  questionId: string;
  /** Set only when an answer was already available; the agent is otherwise told to stop and wait. */
  answer: string | null;
}

/**
 * One method per MCP tool. The real implementation sends the job service's story-log / status /
 * question commands over NATS with the job's lease token; refusals come back as `GantryError`s
 * (e.g. STALE_FENCE once the lease is lost) and reach the agent as tool errors.
 */
export interface JobReporter {
  logImplementation(entry: ImplementationLogEntry): Promise<StoryLogReceipt>;
  logCommit(entry: CommitLogEntry): Promise<StoryLogReceipt>;
  logTestResult(entry: TestResultLogEntry): Promise<StoryLogReceipt>;
  updateJobStatus(update: JobStatusUpdate): Promise<void>;
  askQuestion(question: AgentQuestion): Promise<QuestionReceipt>;
}

export const ReviewDecisionInputSchema = z.strictObject({
  verdict: z.enum(['approve', 'reject']).describe('approve when the work may move on; reject to send it back.'),
  comment: z.string().trim().min(1).max(20_000).describe('Why: what you checked, and what must change when you reject.'),
});
export type ReviewDecision = z.infer<typeof ReviewDecisionInputSchema>;

export interface ReviewDecisionReceipt {
  decisionId: string;
  /** The decision completed a quorum and the task moved on (or back). */
  moved: boolean;
}

/**
 * A REVIEW job's decision: the real implementation sends the workflow engine's
 * record_review_decision under the job's claim; a job that lost its claim is refused (STALE_FENCE).
 */
export interface ReviewDecisions {
  recordDecision(decision: ReviewDecision): Promise<ReviewDecisionReceipt>;
}
