import { randomUUID } from 'node:crypto';
import type {
  AgentQuestion,
  CommitLogEntry,
  ImplementationLogEntry,
  JobReporter,
  JobStatusUpdate,
  QuestionReceipt,
  ReviewDecision,
  ReviewDecisionReceipt,
  ReviewDecisions,
  StoryLogReceipt,
  TestResultLogEntry,
} from '../mcp/job-reporter.js';
import type { JobLeaseSession } from './job-lease-session.js';

export type ReporterLog = (message: string, fields: Record<string, unknown>) => void;

/**
 * The MCP tools' real backend: each story-log call becomes the job service's command under the
 * claim's lease token, so a refusal (STALE_FENCE after a lost lease, a malformed hash) reaches the
 * agent as a tool error. It also keeps what the runner itself needs at the finish: the last test
 * result with its summary and the agent's own last status report.
 * update_job_status and ask_question go to the job service's report_agent_status and ask_question;
 * the last status is kept here too, because it feeds the PARTIAL classification at verify.
 */
export class CommandJobReporter implements JobReporter, ReviewDecisions {
  private lastTest: TestResultLogEntry | null = null;
  private implementationEntries = 0;
  private commitEntries = 0;
  private lastUpdate: JobStatusUpdate | null = null;
  private readonly questions: { questionId: string; question: AgentQuestion }[] = [];
  /** Each call is a report (or a story-log entry) of its own: two identical calls are two. */
  private sequence = 0;
  /** The agent's calls not ended yet, with what this reporter keeps of them (see settled). */
  private readonly inFlight = new Set<Promise<unknown>>();

  constructor(
    private readonly session: JobLeaseSession,
    private readonly taskId: string | null,
    private readonly log: ReporterLog = () => undefined,
  ) {}

  logImplementation(entry: ImplementationLogEntry): Promise<StoryLogReceipt> {
    return this.tracked(() => this.logImplementationNow(entry));
  }

  private async logImplementationNow(entry: ImplementationLogEntry): Promise<StoryLogReceipt> {
    await this.session.logImplementation({
      summary: entry.summary,
      ...(entry.branch ? { branch: entry.branch } : {}),
      ...(entry.plan ? { plan: entry.plan } : {}),
      ...(this.taskId ? { taskId: this.taskId } : {}),
    }, ++this.sequence);
    this.implementationEntries += 1;
    return { entryId: `${this.session.jobId}/implementation/${randomUUID()}` };
  }

  logCommit(entry: CommitLogEntry): Promise<StoryLogReceipt> {
    return this.tracked(() => this.logCommitNow(entry));
  }

  private async logCommitNow(entry: CommitLogEntry): Promise<StoryLogReceipt> {
    await this.session.logCommit({ commitSha: entry.hash, message: entry.message, summary: entry.summary });
    this.commitEntries += 1;
    return { entryId: `${this.session.jobId}/commit/${entry.hash}` };
  }

  logTestResult(entry: TestResultLogEntry): Promise<StoryLogReceipt> {
    return this.tracked(() => this.logTestResultNow(entry));
  }

  private async logTestResultNow(entry: TestResultLogEntry): Promise<StoryLogReceipt> {
    await this.session.logTestResult({ status: entry.status, summary: entry.summary }, ++this.sequence);
    this.lastTest = entry;
    return { entryId: `${this.session.jobId}/test-result/${randomUUID()}` };
  }

  updateJobStatus(update: JobStatusUpdate): Promise<void> {
    return this.tracked(() => this.updateJobStatusNow(update));
  }

  private async updateJobStatusNow(update: JobStatusUpdate): Promise<void> {
    await this.session.reportAgentStatus(
      { status: update.status, summary: update.summary, ...(update.error ? { error: update.error } : {}) },
      ++this.sequence,
    );
    this.lastUpdate = update;
    this.log('agent reported its status', { jobId: this.session.jobId, status: update.status });
  }

  askQuestion(question: AgentQuestion): Promise<QuestionReceipt> {
    return this.tracked(() => this.askQuestionNow(question));
  }

  private async askQuestionNow(question: AgentQuestion): Promise<QuestionReceipt> {
    const receipt = await this.session.askQuestion(
      { question: question.question, ...(question.context ? { context: question.context } : {}), ...(question.options ? { options: question.options } : {}) },
      ++this.sequence,
    );
    this.questions.push({ questionId: receipt.questionId, question });
    this.log('agent asked a question', { jobId: this.session.jobId, questionId: receipt.questionId });
    return { questionId: receipt.questionId, answer: receipt.answer };
  }

  /** A REVIEW job's decision, forwarded to the workflow engine under the claim. */
  recordDecision(decision: ReviewDecision): Promise<ReviewDecisionReceipt> {
    return this.tracked(() => this.recordDecisionNow(decision));
  }

  private async recordDecisionNow(decision: ReviewDecision): Promise<ReviewDecisionReceipt> {
    const reply = await this.session.recordReviewDecision(decision, ++this.sequence);
    this.log('agent recorded its review decision', { jobId: this.session.jobId, verdict: decision.verdict, decisionId: reply.decisionId, moved: reply.moved !== null });
    return { decisionId: reply.decisionId, moved: reply.moved !== null };
  }

  private tracked<T>(call: () => Promise<T>): Promise<T> {
    const pending = call();
    this.inFlight.add(pending);
    const done = () => this.inFlight.delete(pending);
    pending.then(done, done);
    return pending;
  }

  /**
   * Waits until every call the agent made has ended. A call the job service has not answered yet (it
   * is sent again under its key while the claim's lease runs, through a job service restart) can
   * outlive the agent, which may have stopped waiting for it and exited: what this reporter keeps is
   * read once they have ended, or the runner would judge the run on a story log the job service
   * still completes (and finish it without pushing its work).
   */
  async settled(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  /** Story-log entries the job service accepted from the agent, by kind. */
  get storyLog(): { implementation: number; commits: number; testResults: boolean } {
    return { implementation: this.implementationEntries, commits: this.commitEntries, testResults: this.lastTest !== null };
  }

  /** The last test result the job service accepted, with its summary. */
  get lastTestResult(): TestResultLogEntry | null {
    return this.lastTest;
  }

  /** The agent's last own report through update_job_status. */
  get lastStatusUpdate(): JobStatusUpdate | null {
    return this.lastUpdate;
  }

  get questionsAsked(): readonly { questionId: string; question: AgentQuestion }[] {
    return this.questions;
  }
}
