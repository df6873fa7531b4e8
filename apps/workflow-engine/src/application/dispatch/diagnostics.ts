import { Inject, Injectable } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';


/*
 * The structured diagnostics of on_enter dispatch (docs/workflow-engine.md, "Diagnostics"): a
 * constant sentence as the message, every identifier a field of its own (AC-G2), and the rule the
 * record reports as `rule`.
 */
@Injectable()
export class DispatchDiagnostics {

  constructor(@InjectPinoLogger('on-enter') private readonly log: PinoLogger) {}

  /** AC-A6: declared, and not executed. */
  notExecuted(f: { workflowId: string; stepId: string; stepName: string; actionType: string; position: number; taskId: string; skipReason: string; entryPath?: string }): void {
    this.log.warn({ rule: 'AC-A6', ...f }, 'on_enter action not executed');
  }

  /** AC-A6 / AC-B9(d): the declaration changed since the entry was recorded. */
  declarationChanged(f: { workflowId: string; stepId: string; taskId: string; entrySeq: number; entryDigest: string; currentDigest: string }): void {
    this.log.warn({ rule: 'AC-B9(d)', ...f }, 'step declaration changed since the entry; entry finished');
  }

  /** AC-B9(e). */
  unresolvable(f: { taskId: string; stepId: string; workflowId: string; entrySeq: number }): void {
    this.log.warn({ rule: 'AC-B9(e)', ...f }, 'step entry cannot be resolved; finished unexecuted');
  }

  /** AC-C1 (and AC-E2 for a seat without a profile). */
  fanOutParticipantFailed(f: { taskId: string; stepId: string; participantId: string; agentProfileId: string; cause: string; workflowId: string; entrySeq: number }): void {
    this.log.error({ rule: 'AC-C1', ...f }, 'fan-out run not queued for a participant');
  }

  /** AC-C2. */
  clearFailed(f: { workflowId: string; stepId: string; taskId: string; cause: string; entrySeq: number }): void {
    this.log.error({ rule: 'AC-C2', ...f }, 'clear_decisions failed; the rest of the entry does not run');
  }

  /** AC-C3. */
  actionFailed(f: { workflowId: string; stepId: string; actionType: string; cause: string; taskId: string; position: number; trigger: string }): void {
    this.log.error({ rule: 'AC-C3', ...f }, 'on_enter action failed');
  }

  /** AC-E1. */
  fanOutMatchedNobody(f: { stepId: string; stepName: string; role: string; taskId: string; workflowId: string }): void {
    this.log.warn({ rule: 'AC-E1', ...f }, 'fan-out matched no participant');
  }

  /** AC-E3. */
  fanOutWithoutRole(f: { workflowId: string; stepId: string; taskId: string }): void {
    this.log.error({ rule: 'AC-E3', ...f }, 'fan-out declared without a role');
  }

  /** AC-G1. */
  fanOutFinished(f: { taskId: string; stepId: string; role: string; matching: number; enqueued: number; suppressed: number; failed: number; workflowId: string; entrySeq: number }): void {
    this.log.info({ rule: 'AC-G1', ...f }, 'fan-out finished');
  }

  /** AC-B7. */
  allocationFailed(f: { taskId: string; stepId: string; workflowId: string; cause: string }): void {
    this.log.error({ rule: 'AC-B7', ...f }, 'step entry could not be recorded; the move did not happen');
  }

  /** AC-L3. */
  runQueueSilent(f: { taskId: string; stepId: string; entrySeq: number; position: number; cause: string }): void {
    this.log.error({ rule: 'AC-L3', ...f }, 'the job service did not answer; the entry is scanned again after a pause');
  }

  /** AC-L3: a claim, marker or action append of the entry met its stream kept busy past its patience. */
  streamBusy(f: { taskId: string; workflowId: string; stepId: string; entrySeq: number; cause: string }): void {
    this.log.error({ rule: 'AC-L3', ...f }, 'the step entry\'s stream stayed busy; the dispatch stopped and the entry is scanned again after a pause');
  }

  /** AC-L3: a read or an append of the dispatch could not reach the engine's database (refused, lost, restarting). */
  databaseUnreachable(f: { taskId: string; workflowId: string; stepId: string; entrySeq: number; cause: string }): void {
    this.log.error({ rule: 'AC-L3', ...f }, 'the database could not be reached; the dispatch stopped and the entry is scanned again after a pause');
  }

  /** AC-F1: the loser of a claim is a normal outcome, reported at INFO only. */
  leftToHolder(f: { taskId: string; workflowId: string; stepId: string; entrySeq: number; position: number | null; holder: string | null; reason: string }): void {
    this.log.info({ rule: 'AC-F1', ...f }, 'step entry left to the process that holds it');
  }
}
