import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  addStepParticipant,
  createTask,
  getTask,
  importWorkflow,
  listJobs,
  listStepEntries,
  moveTask,
  registerAgentProfile,
  type JobView,
  type TaskView,
} from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { WorkflowSystem } from './workflow-system.js';

/*
 * The shipped Office Default template end to end (docs/workflow-engine.md, "Office Default", V44):
 * a task's implementation job finishes in the runner, the engine moves the task Work → Review and
 * queues one REVIEW job per reviewer; the runner runs them with the stand-in agent, which decides
 * through the runner's record_decision tool under each job's claim; a rejection sends the task
 * back to Work, re-entering Review fans out again, and approvals carry it through Approval to Done.
 * The session of the task reaches its jobs' command lines (AC-S1).
 */
const flags = (argv: string[]) => {
  const f: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) if (argv[i]!.startsWith('--')) f[argv[i]!] = argv[i + 1]!;
  return f;
};

describe('Office Default end to end: runner, stand-in agent, job service, workflow engine', () => {
  const system = new WorkflowSystem();
  let reviewScript: string;

  beforeAll(async () => {
    await system.start();
    const counters = join(system.root, 'verdicts');
    await mkdir(counters, { recursive: true });
    reviewScript = join(system.root, 'review-script.json');
    // What a REVIEW run does (it carries no stand-in section of its own): reviewer A (its model) rejects its first review.
    await writeFile(reviewScript, JSON.stringify({ behaviour: 'review', verdicts: { 'claude-opus-4-7': ['reject', 'approve'], '*': ['approve'] }, verdictCounterDir: counters, recordArgvTo: system.recordFile('reviews') }));
    await system.startRunner('runner-wf', { concurrency: 2, env: { CLAUDE_STAND_IN_DEFAULT_SCRIPT: reviewScript } });
    const profiles = [['reviewer-a', 'claude-opus-4-7'], ['reviewer-b', 'claude-sonnet-4-6'], ['approver', 'claude-haiku-4-5']] as const;
    for (const [id, model] of profiles) await system.request(registerAgentProfile, { agentProfileId: id, model, thinkingBudget: 6000, idempotencyKey: `product-e2e/profile:${id}` });
    await system.request(importWorkflow, { workflowId: 'office', template: 'office_default', idempotencyKey: 'product-e2e/import:office' });
  }, 120_000);
  afterAll(() => system.stop(), 60_000);

  const task = (taskId: string): Promise<TaskView> => system.request(getTask, { taskId });
  const jobsOf = async (taskId: string, kind: JobView['kind']) => (await system.request(listJobs, { taskId, kind: [kind], limit: 100 })).jobs;
  const at = (taskId: string, stepId: string, entrySeq: number) =>
    eventually(async () => {
      const t = await task(taskId);
      return t.placement.stepId === stepId && t.currentEntry?.entrySeq === entrySeq ? t : null;
    }, { what: `${taskId} at ${stepId} (entry ${entrySeq})`, timeoutMs: 90_000, intervalMs: 200 });

  it('V44 / V43 AC-R1: Work → Review (each reviewer a REVIEW job, decisions through the runner) → a rejection back to Work → Review fans out again → Approval → Done', async () => {
    const taskId = `T-${randomUUID().slice(0, 8)}`;
    await system.request(createTask, { taskId, productId: 'product-e2e', title: 'Add the cart migration', workflowId: 'office', idempotencyKey: `product-e2e/task:${taskId}` });
    const seat = (stepId: string, participantId: string, role: string, agentProfileId: string) =>
      system.request(addStepParticipant, { taskId, workflowId: 'office', stepId, participantId, role, agentProfileId, decisionRequired: true, position: 0, idempotencyKey: `product-e2e/seat:${taskId}-${participantId}` });
    await seat('review', 'seat-a', 'reviewer', 'reviewer-a');
    await seat('review', 'seat-b', 'reviewer', 'reviewer-b');
    await seat('approval', 'seat-c', 'approver', 'approver');

    // the implementation turn: its job finishing DONE moves the task Work → Review
    const implementation = system.recordFile(`${taskId}-implementation`);
    const first = await system.enqueue({ taskId, payload: { standIn: { behaviour: 'commit', files: { 'src/cart.ts': 'export const cart = 1;\n' }, recordArgvTo: implementation } } });
    expect((await system.terminal(first)).status).toBe('DONE');
    await at(taskId, 'review', 1);
    // reviewer A rejects (its first review), so the task goes back to Work
    await at(taskId, 'work', 1);
    const firstRound = await eventually(async () => {
      const j = await jobsOf(taskId, 'REVIEW');
      return j.length === 2 ? j : null;
    }, { what: 'two REVIEW jobs of round 1' });
    expect(firstRound.map((j) => j.agentProfileId).sort()).toEqual(['reviewer-a', 'reviewer-b']);
    expect(firstRound.every((j) => j.reason === 'review_started')).toBe(true);

    // the second implementation turn: Review is entered again and fans out again
    const second = await system.enqueue({ taskId, payload: { standIn: { behaviour: 'commit', files: { 'src/cart.ts': 'export const cart = 2;\n' }, recordArgvTo: implementation } } });
    expect((await system.terminal(second)).status).toBe('DONE');
    await at(taskId, 'review', 2);
    // both approve this round: Approval, whose approver approves: Done
    await at(taskId, 'approval', 1);
    const done = await at(taskId, 'done', 1);
    expect(done.placement).toMatchObject({ workflowId: 'office', stepId: 'done', admitted: true });

    const reviews = await jobsOf(taskId, 'REVIEW');
    expect(reviews.map((j) => j.agentProfileId).sort()).toEqual(['approver', 'reviewer-a', 'reviewer-a', 'reviewer-b', 'reviewer-b']);
    for (const job of reviews) expect((await system.terminal(job.jobId)).status).toBe('DONE');
    const { entries } = await system.request(listStepEntries, { taskId });
    expect(entries.map((e) => [e.stepId, e.entrySeq, e.termination, e.markers.map((m) => m.runs.length)])).toEqual([
      ['approval', 1, 'completed', [0, 1]],
      ['review', 1, 'completed', [0, 2]],
      ['review', 2, 'completed', [0, 2]],
    ]);
    // The decisions came from the REVIEW jobs through the runner's tool, each under its claim.
    const reviewerRuns = await system.agentStarts(system.recordFile('reviews'));
    expect(reviewerRuns).toHaveLength(5);
    expect(reviewerRuns.every((r) => flags(r.argv)['--allowedTools']!.split(',').includes('mcp__gantry__record_decision'))).toBe(true);

    // AC-S1: the first implementation job began the task's agent session, the second continued it.
    const [begun, continued] = await system.agentStarts(implementation);
    const session = (await task(taskId)).session;
    expect(flags(begun!.argv)['--session-id']).toBe(session.sessionId);
    expect(flags(continued!.argv)['--resume']).toBe(session.sessionId);
    expect(session.started).toBe(true);
  }, 240_000);

  it('V44 AC-S1: a step\'s session actions reach the next job\'s command line — a fresh session after reset_agent_context, --permission-mode plan in plan mode, the auto-started job', async () => {
    const record = system.recordFile('planned');
    await system.request(importWorkflow, {
      workflowId: 'planning',
      idempotencyKey: 'product-e2e/import:planning',
      yaml: `
name: Planning
steps:
  - id: backlog
    name: Backlog
  - id: plan
    name: Plan
    on_enter:
      - type: auto_start_agent
        config:
          prompt: Write the plan for this task.
          payload: { standIn: { behaviour: commit, files: { PLAN.md: "1. migrate\\n" }, recordArgvTo: ${JSON.stringify(record)} } }
      - type: enable_plan_mode
      - type: reset_agent_context
`,
    });
    const taskId = `T-${randomUUID().slice(0, 8)}`;
    await system.request(createTask, { taskId, productId: 'product-e2e', title: 'Plan the migration', workflowId: 'planning', idempotencyKey: `product-e2e/task:${taskId}` });
    const before = (await task(taskId)).session.sessionId;
    await system.request(moveTask, { taskId, toStepId: 'plan', idempotencyKey: `product-e2e/move:${taskId}` });
    const [job] = await eventually(async () => {
      const j = await jobsOf(taskId, 'TASK_IMPLEMENTATION');
      return j.length === 1 ? j : null;
    }, { what: 'the auto-started job' });
    expect((await system.terminal(job!.jobId)).status).toBe('DONE');
    const [start] = await system.agentStarts(record);
    const after = await task(taskId);
    expect(after.session.sessionId).not.toBe(before);
    expect(flags(start!.argv)).toMatchObject({ '--permission-mode': 'plan', '--session-id': after.session.sessionId });
    expect(job!.prompts).toEqual(['Write the plan for this task.']);
  }, 120_000);
});
