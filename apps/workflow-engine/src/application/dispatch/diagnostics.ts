import { Inject, Injectable } from '@nestjs/common';
import { JsonLogger } from '@gantry/service-runtime';

/*
 * The structured diagnostics of on_enter dispatch (docs/workflow-engine.md, "Diagnostics"): a
 * constant sentence as the message, every identifier a field of its own (AC-G2), and the rule the
 * record reports as `rule`.
 */
@Injectable()
export class DispatchDiagnostics {
  private readonly log;

  constructor(@Inject(JsonLogger) logger: JsonLogger) {
    this.log = logger.forComponent('on-enter');
  }

  /** AC-A6: declared, and not executed. */
  notExecuted(f: { workflowId: string; stepId: string; stepName: string; actionType: string; position: number; taskId: string; skipReason: string; entryPath?: string }): void {
    this.log.warn('on_enter action not executed', { rule: 'AC-A6', ...f });
  }

  /** AC-A6 / AC-B9(d): the declaration changed since the entry was recorded. */
  declarationChanged(f: { workflowId: string; stepId: string; taskId: string; entrySeq: number; entryDigest: string; currentDigest: string }): void {
    this.log.warn('step declaration changed since the entry; entry finished', { rule: 'AC-B9(d)', ...f });
  }

  /** AC-B9(e). */
  unresolvable(f: { taskId: string; stepId: string; workflowId: string; entrySeq: number }): void {
    this.log.warn('step entry cannot be resolved; finished unexecuted', { rule: 'AC-B9(e)', ...f });
  }

  /** AC-C1 (and AC-E2 for a seat without a profile). */
  fanOutParticipantFailed(f: { taskId: string; stepId: string; participantId: string; agentProfileId: string; cause: string; workflowId: string; entrySeq: number }): void {
    this.log.error('fan-out run not queued for a participant', { rule: 'AC-C1', ...f });
  }

  /** AC-C2. */
  clearFailed(f: { workflowId: string; stepId: string; taskId: string; cause: string; entrySeq: number }): void {
    this.log.error('clear_decisions failed; the rest of the entry does not run', { rule: 'AC-C2', ...f });
  }

  /** AC-C3. */
  actionFailed(f: { workflowId: string; stepId: string; actionType: string; cause: string; taskId: string; position: number; trigger: string }): void {
    this.log.error('on_enter action failed', { rule: 'AC-C3', ...f });
  }

  /** AC-E1. */
  fanOutMatchedNobody(f: { stepId: string; stepName: string; role: string; taskId: string; workflowId: string }): void {
    this.log.warn('fan-out matched no participant', { rule: 'AC-E1', ...f });
  }

  /** AC-E3. */
  fanOutWithoutRole(f: { workflowId: string; stepId: string; taskId: string }): void {
    this.log.error('fan-out declared without a role', { rule: 'AC-E3', ...f });
  }

  /** AC-G1. */
  fanOutFinished(f: { taskId: string; stepId: string; role: string; matching: number; enqueued: number; suppressed: number; failed: number; workflowId: string; entrySeq: number }): void {
    this.log.log('fan-out finished', { rule: 'AC-G1', ...f });
  }

  /** AC-B7. */
  allocationFailed(f: { taskId: string; stepId: string; workflowId: string; cause: string }): void {
    this.log.error('step entry could not be recorded; the move did not happen', { rule: 'AC-B7', ...f });
  }

  /** AC-L3. */
  runQueueSilent(f: { taskId: string; stepId: string; entrySeq: number; position: number; cause: string }): void {
    this.log.error('the job service did not answer; the entry resumes at the next start or takeover', { rule: 'AC-L3', ...f });
  }

  /** AC-F1: the loser of a claim is a normal outcome, reported at INFO only. */
  leftToHolder(f: { taskId: string; workflowId: string; stepId: string; entrySeq: number; position: number | null; holder: string | null; reason: string }): void {
    this.log.log('step entry left to the process that holds it', { rule: 'AC-F1', ...f });
  }
}
