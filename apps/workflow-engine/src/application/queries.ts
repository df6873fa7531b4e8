import { Controller, Inject } from '@nestjs/common';
import {
  ErrorCode,
  GantryError,
  getTask,
  getTaskSession,
  listStepEntries,
  StepIdSchema,
  WorkflowIdSchema,
  type MarkerView,
  type ReplyOf,
  type RequestOf,
  type SessionView,
  type StepEntryView,
} from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { CommandHandler, cutPage, decodeCursor, encodeCursor } from '@gantry/service-runtime';
import { effectivePermissionMode, stepEntryRecordsOf, taskExists, type StepEntryRecord, type Task, type TaskAtStepEvent } from '../domain/index.js';
import { stepEntryKeysOf, stepSeats, type StepEntryKey } from '../infrastructure/persistence/read-models.js';
import { loadTask, loadTaskAtStep, streamIds } from '../infrastructure/persistence/streams.js';

/** A list_step_entries cursor: the key of the page's last entry. */
function entryCursor(key: StepEntryKey): string {
  return encodeCursor({ q: 'list_step_entries', workflowId: key.workflowId, stepId: key.stepId, entrySeq: key.entrySeq });
}

function entryAfter(cursor: string): StepEntryKey {
  return decodeCursor(cursor, (decoded) => {
    const { q, workflowId, stepId, entrySeq } = decoded;
    if (q !== 'list_step_entries' || !WorkflowIdSchema.safeParse(workflowId).success || !StepIdSchema.safeParse(stepId).success) return undefined;
    // entry_seq is an integer column: a larger number would be PostgreSQL's out-of-range error, an INTERNAL.
    if (typeof entrySeq !== 'number' || !Number.isInteger(entrySeq) || entrySeq < 1 || entrySeq > 2 ** 31 - 1) return undefined;
    return { workflowId: workflowId as string, stepId: stepId as string, entrySeq };
  });
}

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

  /**
   * A page of the task's step entries by (workflow, step, entrySeq), read on after the cursor's
   * entry: the keys come from the step_entries read model, each entry's record from its (task,
   * step) stream, each stream read once a page (docs/workflow-engine.md, "Step entries").
   */
  @CommandHandler(listStepEntries)
  async listStepEntries(request: RequestOf<typeof listStepEntries>): Promise<ReplyOf<typeof listStepEntries>> {
    const task = await this.task(request.taskId);
    const after = request.cursor ? entryAfter(request.cursor) : null;
    const keys = await stepEntryKeysOf(this.store.pool, { taskId: task.taskId, stepId: request.stepId, after, limit: request.limit + 1 });
    // The pair's state keeps only its open entries and the latest: the records are folded from the log.
    const wanted = new Map<string, Set<number>>();
    for (const { workflowId, stepId, entrySeq } of keys.slice(0, request.limit)) {
      const pair = `${workflowId}~${stepId}`;
      wanted.set(pair, (wanted.get(pair) ?? new Set()).add(entrySeq));
    }
    const records = new Map<string, Map<number, StepEntryRecord>>();
    for (const [pair, entrySeqs] of wanted) {
      const [workflowId, stepId] = pair.split('~') as [string, string];
      const events = await this.store.readStream(streamIds.taskAtStep(task.taskId, workflowId, stepId));
      records.set(pair, stepEntryRecordsOf(events as unknown as TaskAtStepEvent[], entrySeqs));
    }
    const page = cutPage(keys, request.limit, (key) => {
      // The row and its record are written by one append: a row without its record cannot be read.
      const record = records.get(`${key.workflowId}~${key.stepId}`)!.get(key.entrySeq)!;
      return entryView(task.taskId, key.workflowId, key.stepId, record);
    });
    return { entries: page.items, nextCursor: page.last ? entryCursor(page.last) : null };
  }
}

export function sessionView(task: Task): SessionView {
  const s = task.session;
  return { taskId: task.taskId, sessionId: s.sessionId, started: s.started, settings: s.settings, planMode: s.planMode, mode: s.mode, permissionMode: effectivePermissionMode(s) };
}

function entryView(taskId: string, workflowId: string, stepId: string, record: StepEntryRecord): StepEntryView {
  return {
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
  };
}

/** The positions marked at allocation, and any marked since (a changed declaration's skipped ones). */
function positionsOf(record: StepEntryRecord): { position: number; kind: string }[] {
  const all = new Map(record.markedPositions.map((p) => [p.position, p]));
  for (const m of Object.values(record.markers)) if (!all.has(m.position)) all.set(m.position, { position: m.position, kind: m.kind });
  return [...all.values()].sort((a, b) => a.position - b.position);
}
