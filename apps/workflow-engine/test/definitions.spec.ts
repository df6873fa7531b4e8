import { ErrorCode, getWorkflow, importWorkflow } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { expectDiscreteFields } from './expectations.js';
import { WorkflowWorld } from './harness.js';

/* Workflow definitions from YAML (docs/workflow-engine.md, "Definitions"): V42. */
describe('workflow definitions', () => {
  const world = new WorkflowWorld('wf_definitions');

  beforeAll(async () => {
    await world.start();
    await world.profile('rev-a');
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  const withUnknown = `
name: With a custom action
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    on_enter:
      - type: clear_decisions
      - type: send_slack_message
        config: { channel: reviews }
      - type: queue_run_for_each_participant
        config: { role: reviewer }
`;

  it('V42: a YAML workflow with an action type the engine does not know loads with a warning, and the rest of an entry runs', async () => {
    const reply = await world.importYaml('custom', withUnknown);
    expect(reply).toMatchObject({ workflowId: 'custom', version: 1, warnings: [{ stepId: 'review', trigger: 'on_enter', position: 1, type: 'send_slack_message' }] });
    const atImport = (await world.logged((r) => r.rule === 'AC-A6' && r.workflowId === 'custom', 'the import warning')).find((r) => r.rule === 'AC-A6' && r.workflowId === 'custom' && r.taskId === undefined);
    expect(atImport).toMatchObject({ level: 'warn', actionType: 'send_slack_message', stepId: 'review', position: 1 });
    const { taskId } = await world.task('custom');
    await world.seat(taskId, 'custom', 'review', 'reviewer', 'rev-a');
    await world.move(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => [m.kind, m.state, m.skipReason])).toEqual([
      ['clear_decisions', 'done', null],
      ['send_slack_message', 'skipped', 'unrecognised'],
      ['queue_run_for_each_participant', 'done', null],
    ]);
    expectDiscreteFields((await world.logged((r) => r.rule === 'AC-A6' && r.taskId === taskId, 'the dispatch warning')).find((r) => r.rule === 'AC-A6' && r.taskId === taskId), { workflowId: 'custom', stepId: 'review', stepName: 'Review', actionType: 'send_slack_message' });
    await eventually(async () => (await world.jobs(taskId, 'REVIEW')).length === 1, { what: 'the fan-out after the unknown action' });
  });

  it('V42: an invalid YAML workflow is refused at import with its zod issues, and nothing changes', async () => {
    await world.importYaml('kept', withUnknown);
    const count = async () => Number((await world.db.query(`SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM idempotency_receipts) AS n`)).rows[0].n);
    const before = await count();
    const invalid = `
name: Broken
steps:
  - id: review
    name: Review
    wip_limit: 0
    on_enter:
      - type: queue_run_for_each_participant
        config: { role: 5 }
      - type: move_to_next
`;
    const refusal = await world.client.request(importWorkflow, { workflowId: 'kept', yaml: invalid, idempotencyKey: world.key('import') }).catch((e: unknown) => e);
    expect(refusal).toMatchObject({ code: ErrorCode.INVALID_COMMAND });
    expect((refusal as { issues: { path: (string | number)[] }[] }).issues.map((i) => i.path.join('.')).sort()).toEqual([
      'steps.0.on_enter.0.config.role',
      'steps.0.on_enter.1.type',
      'steps.0.wip_limit',
    ]);
    const notYaml = await world.client.request(importWorkflow, { workflowId: 'kept', yaml: 'name: [', idempotencyKey: world.key('import') }).catch((e: unknown) => e);
    expect(notYaml).toMatchObject({ code: ErrorCode.INVALID_COMMAND, issues: [expect.objectContaining({ code: 'invalid_yaml' })] });
    expect(await count()).toBe(before);
    const kept = await world.client.request(getWorkflow, { workflowId: 'kept' });
    expect(kept.version).toBe(1);
    expect(kept.definition.steps.map((s) => s.id)).toEqual(['work', 'review']);
  });

  const refusedWith = async (workflowId: string, yaml: string) => {
    const refusal = await world.client.request(importWorkflow, { workflowId, yaml, idempotencyKey: world.key('import') }).catch((e: unknown) => e);
    expect(refusal).toMatchObject({ code: ErrorCode.INVALID_COMMAND });
    return (refusal as { issues: { path: (string | number)[]; code?: string; message: string }[] }).issues;
  };
  const steps = (onEnter: string) => `
name: Limits
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    on_enter:
${onEnter}`;

  it("a step's configure_session model or allowed tool the agent's command line cannot carry is refused at import, naming the step and the field, and nothing changes", async () => {
    const count = async () => Number((await world.db.query(`SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM idempotency_receipts) AS n`)).rows[0].n);
    const before = await count();
    const hostile = `
name: Hostile session
steps:
  - id: work
    name: Work
    on_enter:
      - type: configure_session
        config: { model: "--dangerously-skip-permissions", allowed_tools: ["-x"] }
`;
    const refusal = await world.client.request(importWorkflow, { workflowId: 'hostile-session', yaml: hostile, idempotencyKey: world.key('import') }).catch((e: unknown) => e);
    expect(refusal).toMatchObject({
      code: ErrorCode.INVALID_COMMAND,
      issues: [
        { path: ['steps', 0, 'on_enter', 0, 'config', 'model'], message: expect.stringMatching(/^step work: a model name does not start with "-"/) },
        { path: ['steps', 0, 'on_enter', 0, 'config', 'allowed_tools', 0], message: expect.stringMatching(/^step work: allowed tool "-x" starts with "-"/) },
      ],
    });
    expect(await count()).toBe(before);
    await expect(world.client.request(getWorkflow, { workflowId: 'hostile-session' })).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
  });

  it('a definition larger than one event may be (YAML aliases), nested deeper than a request may be, or with more than 100 actions on a trigger is refused, and nothing changes', async () => {
    const count = async () => Number((await world.db.query(`SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM idempotency_receipts) AS n`)).rows[0].n);
    const before = await count();
    // 70 KB of YAML whose aliases make a definition of over a megabyte: more than the bus takes in one message.
    const bomb = steps(Array.from({ length: 20 }, (_, i) => `      - type: queue_run_for_each_participant
        config: { role: reviewer, payload: { blob: ${i === 0 ? `&blob "${'x'.repeat(60_000)}"` : '*blob'} } }`).join('\n'));
    expect(bomb.length).toBeLessThan(70_000);
    expect(await refusedWith('bomb', bomb)).toEqual([expect.objectContaining({ path: [], code: 'too_big' })]);
    // A payload no run could carry: every service refuses a request nested deeper than 100 levels.
    const deep = steps(`      - type: queue_run_for_each_participant
        config: { role: reviewer, payload: { x: ${'['.repeat(150)}${']'.repeat(150)} } }`);
    expect(await refusedWith('deep', deep)).toEqual([expect.objectContaining({ path: [], code: 'too_deep' })]);
    const long = steps('      - type: clear_decisions\n'.repeat(101));
    expect((await refusedWith('long', long)).map((i) => i.path.join('.'))).toEqual(['steps.1.on_enter']);
    expect(await count()).toBe(before);
    for (const workflowId of ['bomb', 'deep', 'long']) {
      await expect(world.client.request(getWorkflow, { workflowId })).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
    }
  });

  it('a value JSON cannot hold (.nan, !!binary, a key that is a list) or YAML nested past the reader\'s stack is refused on its path, and nothing is stored', async () => {
    expect(await refusedWith('nan', steps('      - type: queue_run_for_each_participant\n        config: { role: reviewer, payload: { ratio: .nan, raw: !!binary aGVsbG8=, map: { [1, 2]: 3 } } }'))).toEqual([
      expect.objectContaining({ path: ['steps', 1, 'on_enter', 0, 'config', 'payload', 'ratio'], code: 'not_json' }),
      expect.objectContaining({ path: ['steps', 1, 'on_enter', 0, 'config', 'payload', 'raw'], code: 'not_json' }),
      expect.objectContaining({ path: ['steps', 1, 'on_enter', 0, 'config', 'payload', 'map', '[1, 2]'], code: 'not_json' }),
    ]);
    const deeper = await refusedWith('deeper', steps(`      - type: queue_run_for_each_participant\n        config: { role: reviewer, payload: { x: ${'['.repeat(5_000)}${']'.repeat(5_000)} } }`));
    expect(deeper).toEqual([{ path: [], code: 'too_deep', message: 'the definition is nested deeper than 100 levels' }]);
    for (const workflowId of ['nan', 'deeper']) {
      await expect(world.client.request(getWorkflow, { workflowId })).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
    }
  });

  it('a quorum asking more approvals (n_approve:K) than the step declares seats is accepted with a warning naming the step, K and the seats', async () => {
    const reply = await world.importYaml('short-quorum', `
name: Short quorum
steps:
  - id: review
    name: Review
    participants:
      - { role: reviewer, agent_profile_id: rev-a, decision_required: true }
    on_turn_complete:
      - { type: move_to_next, guard: { wait_for_quorum: 'n_approve:2' } }
      - { type: move_to_step, config: { step_id: review }, guard: { wait_for_quorum: 'n_approve:1' } }
  - id: done
    name: Done
`);
    expect(reply.version).toBe(1);
    expect(reply.warnings).toEqual([
      { stepId: 'review', trigger: 'on_turn_complete', position: 0, type: 'move_to_next', message: expect.stringMatching(/^step review: n_approve:2 asks for 2 approvals and the step declares 1 decision-required seats/) },
    ]);
  });

  it('a definition declaring more than 1000 actions in all is refused: its answer, a warning per unknown action type, would not fit one message', async () => {
    const many = `name: Many\nsteps:\n${Array.from({ length: 100 }, (_, i) => `  - id: s${i}\n    name: S${i}\n    on_enter:\n${'      - type: custom_hook\n'.repeat(100)}`).join('')}`;
    expect(await refusedWith('many', many)).toEqual([expect.objectContaining({ path: ['steps'], code: 'too_many_actions' })]);
    await expect(world.client.request(getWorkflow, { workflowId: 'many' })).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
  });

  it('a definition wrong in thousands of places is answered with a refusal that fits one message: the first 100 issues and how many more', async () => {
    // 10 steps of 1000 seats, each with three mistakes: 30,000 issues.
    const wrong = `name: Wrong everywhere\nsteps:\n${Array.from({ length: 10 }, (_, i) => `  - id: s${i}\n    name: S${i}\n    participants:\n${'      - { role: 5 }\n'.repeat(1000)}`).join('')}`;
    const issues = await refusedWith('wrong', wrong);
    expect(issues).toHaveLength(101);
    expect(issues[0]).toMatchObject({ path: ['steps', 0, 'participants', 0, 'role'] });
    expect(issues[100]).toMatchObject({ path: [], code: 'too_many_issues', message: 'and 29900 more issues' });
  });

  it('a workflow\'s description is stored with its version and read back; a changed description is a new version, the same one none', async () => {
    const described = (description: string) => `
name: Described
description: ${description}
steps:
  - id: work
    name: Work
`;
    const versions = [
      await world.importYaml('described', described('Implement, then review')),
      await world.importYaml('described', described('Implement, then review')),
      await world.importYaml('described', described('Implement, review, approve')),
    ];
    expect(versions.map((r) => r.version)).toEqual([1, 1, 2]);
    expect((await world.client.request(getWorkflow, { workflowId: 'described' })).definition.description).toBe('Implement, review, approve');
    // Without one, the definition has none (a workflow imported before descriptions were kept reads the same).
    await world.importYaml('undescribed', 'name: Plain\nsteps:\n  - { id: work, name: Work }\n');
    expect((await world.client.request(getWorkflow, { workflowId: 'undescribed' })).definition).not.toHaveProperty('description');
  });

  it('a definition holding text the log keeps otherwise (a NUL, a credential) is stored as kept: importing it again makes no new version', async () => {
    // A NUL becomes U+FFFD in the log, a credential `***`; the import compared the text as written with
    // the text as kept, so every import of the same YAML was a new version.
    const withNul = `
name: With a NUL
steps:
  - id: work
    name: Work
    prompt: "before\\0after"
`;
    const nul = [await world.importYaml('nul', withNul), await world.importYaml('nul', withNul)];
    expect(nul.map((r) => r.version)).toEqual([1, 1]);
    expect((await world.client.request(getWorkflow, { workflowId: 'nul' })).definition.steps[0]!.prompt).toBe('before\uFFFDafter');
    // Over HTTP no client scrubbed the YAML before it came: the engine's log masks the key.
    const withKey = `
name: With a credential
steps:
  - id: work
    name: Work
    prompt: "call it with api_key=abcdefgh12345678zz"
`;
    const viaHttp = [];
    for (let i = 0; i < 2; i++) viaHttp.push(await world.post(world.engine, 'import_workflow', { workflowId: 'keyed', yaml: withKey, idempotencyKey: world.key('import') }));
    expect(viaHttp.map((r) => (r.result as { version: number } | undefined)?.version)).toEqual([1, 1]);
    expect((await world.client.request(getWorkflow, { workflowId: 'keyed' })).definition.steps[0]!.prompt).not.toContain('abcdefgh12345678zz');
  });

  it('a config key PostgreSQL cannot keep as it is (a NUL) is kept as the log keeps text, not failed as an internal error', async () => {
    const nulKey = `
name: NUL key
steps:
  - id: work
    name: Work
    on_enter:
      - type: queue_run
        config: { target: primary, payload: { "a\\0b": 1 } }
`;
    const first = await world.importYaml('nulkey', nulKey);
    const again = await world.importYaml('nulkey', nulKey);
    expect([first.version, again.version]).toEqual([1, 1]);
    const stored = await world.client.request(getWorkflow, { workflowId: 'nulkey' });
    expect(stored.definition.steps[0]!.onEnter[0]!.config).toEqual({ target: 'primary', payload: { 'a\uFFFDb': 1 } });
  });

  it('a YAML tag the reader does not know is refused as invalid YAML, and the line it is on is printed nowhere', async () => {
    // The YAML reader warned of the tag through process.emitWarning: the author's line, credential and
    // all, went to the engine's stderr, past its logger and scrubber, and the value was taken as text.
    const tagged = `
name: Tagged
steps:
  - id: work
    name: Work
    prompt: !vault "api_key=abcdefgh12345678zz"
`;
    const answer = await world.post(world.engine, 'import_workflow', { workflowId: 'tagged', yaml: tagged, idempotencyKey: world.key('import') });
    expect(answer).toMatchObject({ ok: false, error: { code: ErrorCode.INVALID_COMMAND, issues: [expect.objectContaining({ path: [], code: 'invalid_yaml', message: expect.stringContaining('!vault') })] } });
    await expect(world.client.request(getWorkflow, { workflowId: 'tagged' })).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
    expect(world.engine.output()).not.toContain('abcdefgh12345678zz');
  });

  it('the Office Default template imports as Work → Review → Approval → Done; importing the same definition again makes no new version', async () => {
    const first = await world.client.request(importWorkflow, { workflowId: 'office', template: 'office_default', idempotencyKey: world.key('import') });
    const again = await world.client.request(importWorkflow, { workflowId: 'office', template: 'office_default', idempotencyKey: world.key('import') });
    expect([first.version, again.version]).toEqual([1, 1]);
    const office = await world.client.request(getWorkflow, { workflowId: 'office' });
    expect(office.definition.steps.map((s) => s.name)).toEqual(['Work', 'Review', 'Approval', 'Done']);
  });
});
