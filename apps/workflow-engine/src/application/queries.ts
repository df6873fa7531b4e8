import { Controller, Inject } from '@nestjs/common';
import { ErrorCode, GantryError, getTask, getTaskSession, listStepEntries, type MarkerView, type ReplyOf, type RequestOf, type SessionView, type StepEntryView } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { CommandHandler } from '@gantry/service-runtime';
import { effectivePermissionMode, taskExists, type Task, type TaskAtStep } from '../domain/index.js';
import { stepEntryPairsOf, stepSeats } from '../infrastructure/persistence/read-models.js';
import { loadTask, loadTaskAtStep } from '../infrastructure/persistence/streams.js';

/** The queries, folded from the streams (the log is the authority for a single task). */
@Controller()
export class WorkflowQueries {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  private async task(taskId: string): Promise<Task> {
    const task = await loadTask(this.store, taskId);
    if (!taskExists(task)) throw new GantryError(ErrorCode.NOT_FOUND, `task ${taskId} does not exist`);
    return task;
  }

  @CommandHandler(getTask)
  async getTask(request: RequestOf<typeof getTask>): Promise<ReplyOf<typeof getTask>> {
    const task = await this.task(request.taskId);
    const at = task.placement;
    const seats = await stepSeats(this.store.pool, at.workflowId, at.stepId, task.taskId);
    const pair = await loadTaskAtStep(this.store, task.taskId, at.workflowId, at.stepId);
    return {
      taskId: task.taskId,
      productId: task.productId,
      title: task.title,
      primaryAgentProfileId: task.primaryAgentProfileId,
      placement: { ...at },
      currentEntry: task.currentEntry,
      participants: seats.map((s) => ({ participantId: s.participantId, taskId: s.taskId, role: s.role, agentProfileId: s.agentProfileId, decisionRequired: s.decisionRequired, position: s.position })),
      decisions: pair.decisions.map((d) => ({ ...d })),
      session: sessionView(task),
      createdAt: task.createdAt,
    };
  }

  @CommandHandler(getTaskSession)
  async getTaskSession(request: RequestOf<typeof getTaskSession>): Promise<ReplyOf<typeof getTaskSession>> {
    return sessionView(await this.task(request.taskId));
  }

  @CommandHandler(listStepEntries)
  async listStepEntries(request: RequestOf<typeof listStepEntries>): Promise<ReplyOf<typeof listStepEntries>> {
    const task = await this.task(request.taskId);
    const entries: StepEntryView[] = [];
    for (const { workflowId, stepId } of await stepEntryPairsOf(this.store.pool, task.taskId, request.stepId)) {
      entries.push(...entryViews(task.taskId, workflowId, stepId, await loadTaskAtStep(this.store, task.taskId, workflowId, stepId)));
    }
    return { entries };
  }
}

export function sessionView(task: Task): SessionView {
  const s = task.session;
  return { taskId: task.taskId, sessionId: s.sessionId, started: s.started, settings: s.settings, planMode: s.planMode, mode: s.mode, permissionMode: effectivePermissionMode(s) };
}

function entryViews(taskId: string, workflowId: string, stepId: string, pair: TaskAtStep): StepEntryView[] {
  return Object.values(pair.entries)
    .sort((a, b) => a.entrySeq - b.entrySeq)
    .map((record) => ({
      taskId,
      workflowId,
      stepId,
      entrySeq: record.entrySeq,
      entryPath: record.entryPath,
      declarationDigest: record.declarationDigest,
      openedByEpoch: record.openedByEpoch,
      openedAt: record.openedAt,
      terminal: record.termination !== null,
      termination: record.termination,
      markers: positionsOf(record).map(({ position, kind }): MarkerView => {
        const m = record.markers[position];
        return m
          ? { position, kind: m.kind, state: m.state, epoch: m.epoch, skipReason: m.skipReason, failure: m.failure, runs: m.runs }
          : { position, kind, state: 'absent', epoch: null, skipReason: null, failure: null, runs: [] };
      }),
    }));
}

/** The positions marked at allocation, and any marked since (a changed declaration's skipped ones). */
function positionsOf(record: TaskAtStep['entries'][number]): { position: number; kind: string }[] {
  const all = new Map(record.markedPositions.map((p) => [p.position, p]));
  for (const m of Object.values(record.markers)) if (!all.has(m.position)) all.set(m.position, { position: m.position, kind: m.kind });
  return [...all.values()].sort((a, b) => a.position - b.position);
}
