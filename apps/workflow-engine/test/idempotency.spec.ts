import { randomUUID } from 'node:crypto';
import {
  addStepParticipant,
  canonicalHash,
  createTask,
  deleteTask,
  ErrorCode,
  importWorkflow,
  moveTask,
  recordDecision,
  recordReviewDecision,
  registerAgentProfile,
  registerProduct,
  removeStepParticipant,
  returnTasksToTodo,
  startTask,
  switchWorkflow,
  updateTask,
} from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { WorkflowWorld } from './harness.js';

/*
 * The idempotency rules of every workflow command that changes something (docs/workflow-engine.md,
 * "Idempotency of the commands"), one row per command, each checked through NATS against the engine
 * and job service processes: a repeat answers as the first time and writes nothing; the key with
 * another request is IDEMPOTENCY_CONFLICT and writes nothing; two first attempts at once have one
 * effect and one answer; the same key in two products' scopes is two actions.
 */

type Product = 'product-t' | 'product-u';
type Fence = { jobId: string; runnerId: string; leaseToken: number };
/** What a row's requests are about: a fresh task (or workflow, profile, seat …) and, where a request needs one, a second. */
interface Subject {
  product: Product;
  id: string;
  other: string;
  fence?: Fence;
}
type Send = (s: Subject, idempotencyKey: string) => Promise<unknown>;
interface Row {
  command: string;
  setup: (product: Product) => Promise<Subject>;
  send: Send;
  /** The same key with another request: each must be refused. */
  otherRequests: { what: string; send: Send }[];
  /** A change under another key between an answer and its repeat, which a repeat decided again (not answered from its receipt) would undo. */
  meanwhile?: (s: Subject) => Promise<void>;
}

describe('idempotency of the workflow commands', () => {
  const world = new WorkflowWorld('wf_idem');
  const short = () => randomUUID().slice(0, 8);
  const keyOf = (product: Product, command: string, rest = randomUUID()) => `${product}/${command}:${rest}`;

  const yaml = (name: string) => `
name: ${name}
steps:
  - id: todo
    name: To do
  - id: review
    name: Review
    participants: [{ id: lead, role: lead, agent_profile_id: rev-idem, decision_required: true }]
    on_enter:
      - type: queue_run
        config: { target: 'participant_role:lead' }
    on_turn_complete:
      - { type: move_to_next, guard: { wait_for_quorum: all_approve } }
  - id: done
    name: Done
`;

  beforeAll(async () => {
    await world.start();
    await world.client.request(registerProduct, {
      productId: 'product-u', repository: 'acme/other', cloneUrl: '/srv/git/other.git', targetBranch: 'main', prStrategy: 'STORY',
      mergeMethod: 'SQUASH', requiredChecks: [], idempotencyKey: 'product-u/register:1',
    });
    await world.profile('rev-idem');
    await world.importYaml('idem', yaml('Idempotency'));
    await world.importYaml('idem-b', 'name: Other\nsteps:\n  - id: triage\n    name: Triage\n  - id: fix\n    name: Fix\n');
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  /** Every entry's dispatch has finished: what a command set going has all been written. */
  const settled = () =>
    eventually(async () => (await world.db.query(`SELECT count(*)::int AS n FROM step_entries WHERE NOT terminal`)).rows[0].n === 0, { what: 'every step entry terminal' });

  /** What the commands have written so far: every event of the engine, and every job queued in the job service. */
  const written = async () => {
    await settled();
    const engine = (await world.db.query(`SELECT count(*)::int AS n FROM events`)).rows[0].n as number;
    const enqueued = (await world.jobsDb.query(`SELECT count(*)::int AS n FROM events WHERE type = 'JobEnqueued'`)).rows[0].n as number;
    return { engine, enqueued };
  };
  const since = (before: { engine: number; enqueued: number }, after: { engine: number; enqueued: number }) => ({
    engine: after.engine - before.engine,
    enqueued: after.enqueued - before.enqueued,
  });

  const newTask = async (product: Product, stepId?: string) => {
    const taskId = `T-${short()}`;
    await world.client.request(createTask, {
      taskId, productId: product, title: `Task ${taskId}`, workflowId: 'idem', ...(stepId ? { stepId } : {}), idempotencyKey: keyOf(product, 'fixture-task'),
    });
    return taskId;
  };
  const newSeat = async (product: Product, taskId: string) => {
    const participantId = `seat-${short()}`;
    await world.client.request(addStepParticipant, {
      taskId, workflowId: 'idem', stepId: 'review', participantId, role: 'reviewer', agentProfileId: 'rev-idem', decisionRequired: true, position: 1,
      idempotencyKey: keyOf(product, 'fixture-seat'),
    });
    return participantId;
  };
  /** A REVIEW job the engine queued for the task's lead seat, claimed as a runner claims it. */
  const claimedReview = async (product: Product) => {
    const taskId = await newTask(product);
    await world.client.request(moveTask, { taskId, toStepId: 'review', idempotencyKey: keyOf(product, 'fixture-move') });
    await settled();
    const [job] = await world.jobs(taskId, 'REVIEW');
    return { taskId, fence: await world.claimAsRunner(job!.jobId, 'REVIEW', `runner-${short()}`) };
  };

  const rows: Row[] = [
    {
      command: 'import_workflow',
      setup: async (product) => ({ product, id: `idem-${short()}`, other: '' }),
      send: (s, idempotencyKey) => world.client.request(importWorkflow, { workflowId: s.id, yaml: yaml('First'), idempotencyKey }),
      meanwhile: async (s) => {
        await world.client.request(importWorkflow, { workflowId: s.id, yaml: yaml('Second'), idempotencyKey: keyOf(s.product, 'import_workflow') });
      },
      otherRequests: [
        { what: 'another YAML', send: (s, idempotencyKey) => world.client.request(importWorkflow, { workflowId: s.id, yaml: yaml('Second'), idempotencyKey }) },
        { what: 'another workflow', send: (s, idempotencyKey) => world.client.request(importWorkflow, { workflowId: `${s.id}-x`, yaml: yaml('First'), idempotencyKey }) },
      ],
    },
    {
      command: 'register_agent_profile',
      setup: async (product) => ({ product, id: `profile-${short()}`, other: '' }),
      send: (s, idempotencyKey) => world.client.request(registerAgentProfile, { agentProfileId: s.id, model: 'claude-opus-4-7', thinkingBudget: 1000, idempotencyKey }),
      meanwhile: async (s) => {
        await world.client.request(registerAgentProfile, { agentProfileId: s.id, model: 'claude-sonnet-4-5', thinkingBudget: 1000, idempotencyKey: keyOf(s.product, 'register_agent_profile') });
      },
      otherRequests: [
        { what: 'another model', send: (s, idempotencyKey) => world.client.request(registerAgentProfile, { agentProfileId: s.id, model: 'claude-sonnet-4-5', thinkingBudget: 1000, idempotencyKey }) },
        { what: 'another budget', send: (s, idempotencyKey) => world.client.request(registerAgentProfile, { agentProfileId: s.id, model: 'claude-opus-4-7', thinkingBudget: 2000, idempotencyKey }) },
      ],
    },
    {
      command: 'add_step_participant',
      setup: async (product) => ({ product, id: await newTask(product), other: `seat-${short()}` }),
      send: (s, idempotencyKey) => world.client.request(addStepParticipant, {
        taskId: s.id, workflowId: 'idem', stepId: 'review', participantId: s.other, role: 'reviewer', agentProfileId: 'rev-idem', decisionRequired: true, position: 1, idempotencyKey,
      }),
      meanwhile: async (s) => {
        await world.client.request(removeStepParticipant, { participantId: s.other, idempotencyKey: keyOf(s.product, 'remove_step_participant') });
      },
      otherRequests: [
        {
          what: 'another role',
          send: (s, idempotencyKey) => world.client.request(addStepParticipant, {
            taskId: s.id, workflowId: 'idem', stepId: 'review', participantId: s.other, role: 'tester', agentProfileId: 'rev-idem', decisionRequired: true, position: 1, idempotencyKey,
          }),
        },
        {
          what: 'not decision-required',
          send: (s, idempotencyKey) => world.client.request(addStepParticipant, {
            taskId: s.id, workflowId: 'idem', stepId: 'review', participantId: s.other, role: 'reviewer', agentProfileId: 'rev-idem', decisionRequired: false, position: 1, idempotencyKey,
          }),
        },
      ],
    },
    {
      command: 'remove_step_participant',
      setup: async (product) => {
        const taskId = await newTask(product);
        return { product, id: await newSeat(product, taskId), other: await newSeat(product, taskId) };
      },
      send: (s, idempotencyKey) => world.client.request(removeStepParticipant, { participantId: s.id, idempotencyKey }),
      otherRequests: [{ what: 'another seat', send: (s, idempotencyKey) => world.client.request(removeStepParticipant, { participantId: s.other, idempotencyKey }) }],
    },
    {
      command: 'create_task',
      setup: async (product) => ({ product, id: `T-${short()}`, other: '' }),
      send: (s, idempotencyKey) => world.client.request(createTask, { taskId: s.id, productId: s.product, title: 'First', workflowId: 'idem', idempotencyKey }),
      otherRequests: [
        { what: 'another title', send: (s, idempotencyKey) => world.client.request(createTask, { taskId: s.id, productId: s.product, title: 'Second', workflowId: 'idem', idempotencyKey }) },
        { what: 'another step', send: (s, idempotencyKey) => world.client.request(createTask, { taskId: s.id, productId: s.product, title: 'First', workflowId: 'idem', stepId: 'review', idempotencyKey }) },
      ],
    },
    {
      command: 'move_task',
      setup: async (product) => ({ product, id: await newTask(product), other: '' }),
      send: (s, idempotencyKey) => world.client.request(moveTask, { taskId: s.id, toStepId: 'review', idempotencyKey }),
      otherRequests: [{ what: 'another step', send: (s, idempotencyKey) => world.client.request(moveTask, { taskId: s.id, toStepId: 'done', idempotencyKey }) }],
    },
    {
      command: 'update_task',
      setup: async (product) => ({ product, id: await newTask(product), other: '' }),
      send: (s, idempotencyKey) => world.client.request(updateTask, { taskId: s.id, title: 'First', workflowStepId: 'review', idempotencyKey }),
      otherRequests: [
        { what: 'another title', send: (s, idempotencyKey) => world.client.request(updateTask, { taskId: s.id, title: 'Second', workflowStepId: 'review', idempotencyKey }) },
        { what: 'no step change', send: (s, idempotencyKey) => world.client.request(updateTask, { taskId: s.id, title: 'First', idempotencyKey }) },
      ],
    },
    {
      command: 'start_task',
      // Created at a later step (a creation is no entry), so a start takes each back to the start step.
      setup: async (product) => ({ product, id: await newTask(product, 'done'), other: await newTask(product, 'done') }),
      send: (s, idempotencyKey) => world.client.request(startTask, { taskId: s.id, idempotencyKey }),
      otherRequests: [{ what: 'another task', send: (s, idempotencyKey) => world.client.request(startTask, { taskId: s.other, idempotencyKey }) }],
    },
    {
      command: 'switch_workflow',
      setup: async (product) => ({ product, id: await newTask(product), other: '' }),
      send: (s, idempotencyKey) => world.client.request(switchWorkflow, { taskId: s.id, toWorkflowId: 'idem-b', idempotencyKey }),
      otherRequests: [{ what: 'another step', send: (s, idempotencyKey) => world.client.request(switchWorkflow, { taskId: s.id, toWorkflowId: 'idem-b', toStepId: 'fix', idempotencyKey }) }],
    },
    {
      command: 'delete_task',
      setup: async (product) => ({ product, id: await newTask(product), other: await newTask(product) }),
      send: (s, idempotencyKey) => world.client.request(deleteTask, { taskId: s.id, idempotencyKey }),
      otherRequests: [{ what: 'another task', send: (s, idempotencyKey) => world.client.request(deleteTask, { taskId: s.other, idempotencyKey }) }],
    },
    {
      command: 'return_tasks_to_todo',
      setup: async (product) => ({ product, id: await newTask(product, 'done'), other: await newTask(product, 'done') }),
      send: (s, idempotencyKey) => world.client.request(returnTasksToTodo, { taskIds: [s.id], idempotencyKey }),
      meanwhile: async (s) => {
        await world.client.request(moveTask, { taskId: s.id, toStepId: 'done', idempotencyKey: keyOf(s.product, 'move_task') });
      },
      otherRequests: [
        { what: 'one more task', send: (s, idempotencyKey) => world.client.request(returnTasksToTodo, { taskIds: [s.id, s.other], idempotencyKey }) },
        { what: 'another task', send: (s, idempotencyKey) => world.client.request(returnTasksToTodo, { taskIds: [s.other], idempotencyKey }) },
        {
          what: 'a sprint run named',
          send: (s, idempotencyKey) => world.client.request(returnTasksToTodo, { sprintRunId: `sprintrun-${randomUUID()}`, taskIds: [s.id], idempotencyKey }),
        },
      ],
    },
    {
      command: 'record_decision',
      // At the review step by creation: the lead's approval is the quorum, and moves the task on.
      setup: async (product) => ({ product, id: await newTask(product, 'review'), other: '' }),
      send: (s, idempotencyKey) => world.client.request(recordDecision, { taskId: s.id, stepId: 'review', participantId: 'lead', verdict: 'approve', actor: 'person-1', idempotencyKey }),
      otherRequests: [
        {
          what: 'another verdict',
          send: (s, idempotencyKey) => world.client.request(recordDecision, { taskId: s.id, stepId: 'review', participantId: 'lead', verdict: 'reject', actor: 'person-1', idempotencyKey }),
        },
        {
          what: 'another person deciding',
          send: (s, idempotencyKey) => world.client.request(recordDecision, { taskId: s.id, stepId: 'review', participantId: 'lead', verdict: 'approve', actor: 'person-2', idempotencyKey }),
        },
        {
          what: 'a comment',
          send: (s, idempotencyKey) =>
            world.client.request(recordDecision, { taskId: s.id, stepId: 'review', participantId: 'lead', verdict: 'approve', actor: 'person-1', comment: 'fine', idempotencyKey }),
        },
      ],
    },
    {
      command: 'record_review_decision',
      setup: async (product) => {
        const { taskId, fence } = await claimedReview(product);
        return { product, id: taskId, other: '', fence };
      },
      send: (s, idempotencyKey) => world.client.request(recordReviewDecision, { ...s.fence!, verdict: 'approve', idempotencyKey }),
      otherRequests: [
        { what: 'another verdict', send: (s, idempotencyKey) => world.client.request(recordReviewDecision, { ...s.fence!, verdict: 'reject', idempotencyKey }) },
        { what: 'a comment', send: (s, idempotencyKey) => world.client.request(recordReviewDecision, { ...s.fence!, verdict: 'approve', comment: 'fine', idempotencyKey }) },
      ],
    },
  ];

  it('a row for every workflow command that takes an idempotency key', () => {
    const keyed = [importWorkflow, registerAgentProfile, addStepParticipant, removeStepParticipant, createTask, moveTask, updateTask, startTask, switchWorkflow, deleteTask, returnTasksToTodo, recordDecision, recordReviewDecision];
    expect(rows.map((r) => r.command).sort()).toEqual(keyed.map((c) => c.name).sort());
  });

  it('record_decision: a decision recorded before the person counted in its request (its receipt under the request without them) answers a repeat by the same person; another person under the key is IDEMPOTENCY_CONFLICT; neither writes anything', async () => {
    const taskId = await newTask('product-t', 'review');
    const key = keyOf('product-t', 'record_decision');
    const request = { taskId, stepId: 'review', participantId: 'lead', verdict: 'approve' as const, actor: 'person-1', idempotencyKey: key };
    const first = await world.client.request(recordDecision, request);
    // the receipt as the version before the change stored it: hashed over the request without the actor
    const { actor: _actor, ...withoutActor } = request;
    const rewritten = await world.db.query(`UPDATE idempotency_receipts SET request_hash = $3 WHERE scope = $1 AND key = $2`, ['workflow.record_decision', key, canonicalHash(withoutActor)]);
    expect(rewritten.rowCount).toBe(1);

    const before = await written();
    expect(await world.client.request(recordDecision, request)).toEqual(first);
    const other = await world.client.request(recordDecision, { ...request, actor: 'person-2' }).then((reply) => ({ answered: reply }), (error: unknown) => (error as { code?: string }).code);
    expect(other).toEqual(ErrorCode.IDEMPOTENCY_CONFLICT);
    // a former request that is not this one (another verdict) is no answer to it either
    const verdict = await world.client.request(recordDecision, { ...request, verdict: 'reject' }).then((reply) => ({ answered: reply }), (error: unknown) => (error as { code?: string }).code);
    expect(verdict).toEqual(ErrorCode.IDEMPOTENCY_CONFLICT);
    expect(since(before, await written())).toEqual({ engine: 0, enqueued: 0 });
    expect(await world.client.request(recordDecision, request)).toEqual(first);
  });

  describe.each(rows.map((row) => [row.command, row] as const))('%s', (command, row) => {
    it('the same key with the same request gets the stored answer and writes nothing more', async () => {
      const subject = await row.setup('product-t');
      const key = keyOf('product-t', command);
      const first = await row.send(subject, key);
      await row.meanwhile?.(subject);
      const before = await written();
      expect(await row.send(subject, key)).toEqual(first);
      expect(since(before, await written())).toEqual({ engine: 0, enqueued: 0 });
    });

    it('the same key with another request is IDEMPOTENCY_CONFLICT and changes nothing', async () => {
      const subject = await row.setup('product-t');
      const key = keyOf('product-t', command);
      const first = await row.send(subject, key);
      const before = await written();
      const outcomes: Record<string, unknown> = {};
      for (const other of row.otherRequests) outcomes[other.what] = await other.send(subject, key).then((reply) => ({ answered: reply }), (error: unknown) => (error as { code?: string }).code);
      expect(outcomes).toEqual(Object.fromEntries(row.otherRequests.map((o) => [o.what, ErrorCode.IDEMPOTENCY_CONFLICT])));
      expect(since(before, await written())).toEqual({ engine: 0, enqueued: 0 });
      // The key still answers its own request as it did.
      expect(await row.send(subject, key)).toEqual(first);
    });

    it('two first attempts at once have one effect, and both callers get the same answer', async () => {
      const alone = await row.setup('product-t');
      let before = await written();
      await row.send(alone, keyOf('product-t', command));
      const once = since(before, await written());
      expect(once.engine).toBeGreaterThan(0);

      const subject = await row.setup('product-t');
      const key = keyOf('product-t', command);
      before = await written();
      const [a, b] = await Promise.all([row.send(subject, key), row.send(subject, key)]);
      expect(b).toEqual(a);
      expect(since(before, await written())).toEqual(once);
    });

    it('the same key in two products\' scopes names two actions: neither is refused, each has its effect', async () => {
      const rest = randomUUID();
      const effects = [];
      for (const product of ['product-t', 'product-u'] as const) {
        const subject = await row.setup(product);
        const before = await written();
        await row.send(subject, keyOf(product, command, rest));
        effects.push(since(before, await written()));
      }
      expect(effects[0]!.engine).toBeGreaterThan(0);
      expect(effects[1]).toEqual(effects[0]);
    });
  });
});
