import { ErrorCode, GantryError, MAX_JOB_INPUT_BYTES } from '@gantry/contracts';
import { MAX_REQUEST_DEPTH } from '@gantry/service-runtime';
import { DEFAULT_PROMPT_ROOM, parseWorkflowYaml } from './workflow-yaml.js';
import { OFFICE_DEFAULT_YAML } from '../domain/index.js';

function refusal(yaml: string): GantryError {
  try {
    parseWorkflowYaml(yaml);
  } catch (error) {
    if (error instanceof GantryError) return error;
    throw error;
  }
  throw new Error('expected the definition to be refused');
}

describe('workflow definitions from YAML', () => {
  it('the shipped Office Default parses: Work → Review → Approval → Done, Review and Approval clear then fan out, and advance on quorum', () => {
    const { definition, unknownActions } = parseWorkflowYaml(OFFICE_DEFAULT_YAML);
    expect(unknownActions).toEqual([]);
    expect(definition.steps.map((s) => s.id)).toEqual(['work', 'review', 'approval', 'done']);
    const review = definition.steps[1]!;
    expect(review.onEnter).toEqual([
      { type: 'clear_decisions', config: {}, guard: null },
      { type: 'queue_run_for_each_participant', config: { role: 'reviewer', reason: 'review_started' }, guard: null },
    ]);
    expect(definition.steps[2]!.onEnter[1]!.config).toEqual({ role: 'approver', reason: 'approval_started' });
    expect(review.onTurnComplete.map((a) => a.guard)).toEqual([{ wait_for_quorum: 'all_approve' }, { wait_for_quorum: 'any_reject' }]);
    expect(definition.startStepId).toBe('work');
  });

  it('keeps the workflow\'s description; one longer than 10,000 characters is refused on its path', () => {
    const yaml = (description: string) => `name: Described\ndescription: ${JSON.stringify(description)}\nsteps:\n  - { id: work, name: Work }\n`;
    expect(parseWorkflowYaml(yaml('Implement, then review')).definition.description).toBe('Implement, then review');
    expect(refusal(yaml('x'.repeat(10_001))).issues!.map((i) => i.path.join('.'))).toEqual(['description']);
  });

  it('normalises the authored snake_case: absent lists are empty, absent settings null, seats numbered in order', () => {
    const { definition } = parseWorkflowYaml(`
name: Small
steps:
  - id: triage
    name: Triage
    wip_limit: 2
    participants:
      - { role: reviewer, agent_profile_id: p1, decision_required: true }
      - { id: lead, role: reviewer, agent_profile_id: '', decision_required: false, position: 7 }
`);
    expect(definition).toEqual({
      name: 'Small',
      startStepId: 'triage',
      ceoAgentProfileId: null,
      steps: [
        {
          id: 'triage', name: 'Triage', wipLimit: 2, prompt: null, agentProfileId: null,
          participants: [
            { id: 'triage-seat-0', role: 'reviewer', agentProfileId: 'p1', decisionRequired: true, position: 0 },
            { id: 'lead', role: 'reviewer', agentProfileId: '', decisionRequired: false, position: 7 },
          ],
          onEnter: [], onTurnStart: [], onTurnComplete: [], onExit: [],
        },
      ],
    });
  });

  it('accepts an action type the engine does not know and says where it is declared', () => {
    const { definition, unknownActions } = parseWorkflowYaml(`
name: With a custom action
steps:
  - id: review
    name: Review
    on_enter:
      - type: clear_decisions
      - type: send_slack_message
        config: { channel: reviews }
      - type: queue_run_for_each_participant
        config: { role: reviewer }
`);
    expect(unknownActions).toEqual([{ stepId: 'review', trigger: 'on_enter', position: 1, type: 'send_slack_message' }]);
    expect(definition.steps[0]!.onEnter[1]).toEqual({ type: 'send_slack_message', config: { channel: 'reviews' }, guard: null });
  });

  it('refuses an invalid definition with its zod issues, on the paths the author wrote', () => {
    const error = refusal(`
name: Broken
start_step: review
steps:
  - id: review
    name: Review
    wip_limit: 0
    on_enter:
      - type: queue_run_for_each_participant
        config: { role: 5 }
      - type: move_to_next
`);
    expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
    expect(error.issues!.map((i) => i.path.join('.')).sort()).toEqual(['steps.0.on_enter.0.config.role', 'steps.0.on_enter.1.type', 'steps.0.wip_limit']);
  });

  it("refuses a configure_session model or allowed tool the agent's command line cannot carry (a leading -, a NUL, a comma outside a rule), naming the step and the field", () => {
    const error = refusal(`
name: Hostile session
steps:
  - id: work
    name: Work
    on_enter:
      - type: configure_session
        config: { model: "--dangerously-skip-permissions", allowed_tools: ["Read", "-x", "Bash(git:*),Write"] }
  - id: review
    name: Review
    on_turn_start:
      - type: configure_session
        config: { model: "opus\\0x" }
`);
    expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
    expect(error.issues!.map((i) => [i.path.join('.'), i.message])).toEqual([
      ['steps.0.on_enter.0.config.model', expect.stringMatching(/^step work: a model name does not start with "-"/)],
      ['steps.0.on_enter.0.config.allowed_tools.1', expect.stringMatching(/^step work: .*"-"/)],
      ['steps.0.on_enter.0.config.allowed_tools.2', expect.stringMatching(/^step work: allowed tool "Bash\(git:\*\),Write" has a comma/)],
      ['steps.1.on_turn_start.0.config.model', expect.stringMatching(/^step review: .*NUL/)],
    ]);
    // What the runner takes is imported as before.
    expect(parseWorkflowYaml(`
name: Session
steps:
  - id: work
    name: Work
    on_enter:
      - type: configure_session
        config: { model: claude-opus-4, allowed_tools: ["Read", "Bash(git commit:*)"] }
`).definition.steps[0]!.onEnter[0]!.config).toEqual({ model: 'claude-opus-4', allowed_tools: ['Read', 'Bash(git commit:*)'] });
  });

  it('refuses a quorum guard that names no rule the engine has (n_approve:0, n_approve:abc, a rule it does not know) and a guard on an action that moves nothing, each on its path', () => {
    const guarded = (guard: string, type = 'move_to_next') => `name: Guards\nsteps:\n  - id: a\n    name: A\n    on_turn_complete:\n      - { type: ${type}, guard: ${guard} }\n  - id: b\n    name: B\n`;
    for (const rule of ['n_approve:0', 'n_approve:abc', 'n_approve:', 'n_approve:-1', 'n_approve:1.5', 'most_approve']) {
      const error = refusal(guarded(`{ wait_for_quorum: '${rule}' }`));
      expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
      expect(error.issues!.map((i) => i.path.slice(0, 4).join('.'))).toEqual(['steps.0.on_turn_complete.0']);
    }
    expect(refusal(guarded('{ wait_for_quorum: n_approve:1, requires_approval: true }')).issues!.map((i) => i.path.slice(0, 4).join('.'))).toEqual(['steps.0.on_turn_complete.0']);
    expect(refusal(guarded('{ wait_for_quorum: all_approve }', 'queue_run_for_each_participant')).issues!.map((i) => i.path.join('.'))).toContain('steps.0.on_turn_complete.0.guard');
    expect(parseWorkflowYaml(guarded('{ wait_for_quorum: n_approve:2 }')).definition.steps[0]!.onTurnComplete[0]!.guard).toEqual({ wait_for_quorum: 'n_approve:2' });
  });

  it('refuses unknown keys, a missing name and a move to a step the workflow lacks', () => {
    expect(refusal('name: x\nsteps:\n  - { id: a, name: A, colour: red }\n').issues!.map((i) => i.path.join('.'))).toEqual(['steps.0']);
    expect(refusal('steps:\n  - { id: a, name: A }\n').issues!.map((i) => i.path.join('.'))).toEqual(['name']);
    const moved = refusal('name: x\nsteps:\n  - id: a\n    name: A\n    on_turn_complete:\n      - { type: move_to_step, config: { step_id: zz } }\n');
    expect(moved.issues!.map((i) => i.path.join('.'))).toEqual(['steps.0.on_turn_complete.0.config.step_id']);
  });

  it('refuses a __proto__ key anywhere, naming where, rather than storing its config as {}; constructor and prototype are kept as data', () => {
    const proto = refusal(`
name: Proto
steps:
  - id: review
    name: Review
    on_enter:
      - type: queue_run_for_each_participant
        config: { __proto__: { role: reviewer } }
`);
    expect(proto.code).toBe(ErrorCode.INVALID_COMMAND);
    expect(proto.issues).toEqual([expect.objectContaining({ path: ['steps', 0, 'on_enter', 0, 'config', '__proto__'], code: 'reserved_key' })]);
    expect(refusal('name: x\n__proto__: { a: 1 }\nsteps:\n  - { id: a, name: A }\n').issues!.map((i) => i.path.join('.'))).toEqual(['__proto__']);
    const { definition } = parseWorkflowYaml(`
name: Keys
steps:
  - id: review
    name: Review
    on_enter:
      - type: send_slack_message
        config: { constructor: c, prototype: { toString: t } }
`);
    expect(JSON.stringify(definition.steps[0]!.onEnter[0]!.config)).toBe('{"constructor":"c","prototype":{"toString":"t"}}');
    expect(({} as Record<string, unknown>).role).toBeUndefined();
  });

  it('refuses an action whose job the job service would refuse for its size: its prompt (or the step\'s) and payload over MAX_JOB_INPUT_BYTES as JSON', () => {
    const blob = (bytes: number) => 'b'.repeat(bytes);
    const yaml = (prompt: number, payload: number) => `
name: Large
steps:
  - id: work
    name: Work
    prompt: ${'p'.repeat(prompt)}
    on_enter:
      - { type: auto_start_agent, config: { payload: { blob: ${blob(payload)} } } }
      - { type: queue_run, config: { target: primary, prompt: short, payload: { blob: ${blob(payload)} } } }
`;
    // the step prompt (JSON: its characters and quotes) and the payload (JSON: {"blob":"…"}) fill the bound exactly
    const fits = MAX_JOB_INPUT_BYTES - 100_002 - 11;
    expect(parseWorkflowYaml(yaml(100_000, fits)).definition.steps[0]!.onEnter).toHaveLength(2);
    const error = refusal(yaml(100_000, fits + 1));
    expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
    expect(error.issues).toEqual([
      { path: ['steps', 0, 'on_enter', 0, 'config'], code: 'too_big', message: expect.stringContaining(`${MAX_JOB_INPUT_BYTES + 1} bytes of prompt and payload as JSON; a job carries at most ${MAX_JOB_INPUT_BYTES} (MAX_JOB_INPUT_BYTES)`) },
    ]);
    // a queue_run without a prompt of its own leaves room for the engine's
    const queueRun = (payload: number) => `
name: Large
steps:
  - id: work
    name: Work
    on_enter:
      - { type: queue_run, config: { target: primary, payload: { blob: ${blob(payload)} } } }
`;
    expect(parseWorkflowYaml(queueRun(MAX_JOB_INPUT_BYTES - DEFAULT_PROMPT_ROOM - 11)).definition.steps).toHaveLength(1);
    expect(refusal(queueRun(MAX_JOB_INPUT_BYTES - DEFAULT_PROMPT_ROOM - 10)).issues!.map((i) => i.path.join('.'))).toEqual(['steps.0.on_enter.0.config']);
  });

  it('refuses a number JSON cannot hold (.nan, .inf, -.inf, 1e400) in a config or payload, on its path, rather than storing it as null', () => {
    const withValue = (value: string) => `
name: Numbers
steps:
  - id: work
    name: Work
    on_enter:
      - type: queue_run
        config: { target: primary, payload: { ratio: ${value}, ok: 1.5 } }
      - type: send_slack_message
        config: { weight: ${value} }
`;
    for (const value of ['.nan', '.NaN', '.inf', '-.inf', '+.Inf', '1e400']) {
      const error = refusal(withValue(value));
      expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
      expect(error.issues).toEqual([
        { path: ['steps', 0, 'on_enter', 0, 'config', 'payload', 'ratio'], code: 'not_json', message: expect.stringContaining('JSON') },
        { path: ['steps', 0, 'on_enter', 1, 'config', 'weight'], code: 'not_json', message: expect.stringContaining('JSON') },
      ]);
      expect(error.message).toContain('steps.0.on_enter.0.config.payload.ratio');
    }
    expect(parseWorkflowYaml(withValue('2.5')).definition.steps[0]!.onEnter[0]!.config).toEqual({ target: 'primary', payload: { ratio: 2.5, ok: 1.5 } });
  });

  it('refuses an integer too large to be kept exactly (past 2^53), on its path, rather than storing a different number', () => {
    const withId = (id: string) => `name: Ids\nsteps:\n  - id: work\n    name: Work\n    on_enter:\n      - type: queue_run\n        config: { target: primary, payload: { issue: ${id} } }\n`;
    for (const id of ['12345678901234567890', '9007199254740993', '-9007199254740993', '0x1FFFFFFFFFFFFF1']) {
      const error = refusal(withId(id));
      expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
      expect(error.issues).toEqual([{ path: ['steps', 0, 'on_enter', 0, 'config', 'payload', 'issue'], code: 'not_json', message: expect.stringContaining(id) }]);
    }
    const kept = (id: string) => (parseWorkflowYaml(withId(id)).definition.steps[0]!.onEnter[0]!.config as { payload: { issue: unknown } }).payload.issue;
    expect(kept('9007199254740991')).toBe(9007199254740991);
    expect(kept("'12345678901234567890'")).toBe('12345678901234567890');
    expect(kept('1e20')).toBe(1e20);
    expect(refusal(withId('{ 12345678901234567890: x }')).issues).toEqual([expect.objectContaining({ path: ['steps', 0, 'on_enter', 0, 'config', 'payload', 'issue', '12345678901234567000'], code: 'not_json' })]);
  });

  it('refuses what YAML can say and JSON cannot (!!binary, !!set, !!omap, !!timestamp, a key that is a list or a map), on its path, rather than storing a look-alike', () => {
    const withConfig = (config: string) => `name: Odd\nsteps:\n  - id: work\n    name: Work\n    on_enter:\n      - type: send_slack_message\n        config: ${config}\n`;
    const cases: [string, (string | number)[]][] = [
      ['{ blob: !!binary aGVsbG8= }', ['blob']],
      ['{ tags: !!set { a, b } }', ['tags']],
      ['{ order: !!omap [ { a: 1 }, { b: 2 } ] }', ['order']],
      ['{ at: !!timestamp 2001-12-14 }', ['at']],
      ['{ nested: { [1, 2]: 3 } }', ['nested', '[1, 2]']],
      ['{ nested: { { x: 1 }: 2 } }', ['nested', '{ x: 1 }']],
    ];
    for (const [config, path] of cases) {
      const error = refusal(withConfig(config));
      expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
      expect(error.issues).toEqual([{ path: ['steps', 0, 'on_enter', 0, 'config', ...path], code: 'not_json', message: expect.any(String) }]);
    }
    // the same text as plain scalars is kept as written
    expect(parseWorkflowYaml(withConfig("{ blob: aGVsbG8=, at: '2001-12-14', '[ 1, 2 ]': 3, 1: one, true: yes }")).definition.steps[0]!.onEnter[0]!.config).toEqual({ blob: 'aGVsbG8=', at: '2001-12-14', '[ 1, 2 ]': 3, 1: 'one', true: 'yes' });
  });

  it('refuses YAML nested deeper than a definition may be with that limit, not with the reader running out of stack', () => {
    const flow = (depth: number) => `name: Deep\nsteps:\n  - id: work\n    name: Work\n    on_enter:\n      - type: send_slack_message\n        config: { p: ${'['.repeat(depth)}${']'.repeat(depth)} }\n`;
    const block = (depth: number) => `name: Deep\nsteps:\n  - id: work\n    name: Work\n    on_enter:\n      - type: send_slack_message\n        config:\n${Array.from({ length: depth }, (_, i) => `${' '.repeat(10 + i)}a:\n`).join('')}${' '.repeat(10 + depth)}x\n`;
    for (const text of [flow(150), flow(5_000), flow(20_000), block(150), block(3_000)]) {
      const error = refusal(text);
      expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
      expect(error.issues).toEqual([{ path: [], code: 'too_deep', message: `the definition is nested deeper than ${MAX_REQUEST_DEPTH} levels` }]);
      expect(error.message).not.toContain('call stack');
    }
    expect(parseWorkflowYaml(flow(80)).definition.steps).toHaveLength(1);
  });

  it('warns, and does not refuse, a quorum of n_approve:K asking more approvals than the step declares decision-required seats: seats may be added per task', () => {
    const { definition, quorumShortfalls } = parseWorkflowYaml(`
name: Quorum
steps:
  - id: review
    name: Review
    participants:
      - { role: reviewer, agent_profile_id: p1, decision_required: true }
      - { role: reviewer, agent_profile_id: p2, decision_required: true }
      - { role: observer, agent_profile_id: p3, decision_required: false }
    on_enter:
      - { type: ensure_participant_seat, config: { role: lead, agent_profile_id: p4, decision_required: true } }
    on_turn_complete:
      - { type: move_to_next, guard: { wait_for_quorum: 'n_approve:4' } }
      - { type: move_to_next, guard: { wait_for_quorum: 'n_approve:3' } }
      - { type: move_to_step, config: { step_id: review }, guard: { wait_for_quorum: any_reject } }
  - id: done
    name: Done
    on_turn_complete:
      - { type: move_to_previous, guard: { wait_for_quorum: 'n_approve:1' } }
`);
    expect(definition.steps).toHaveLength(2);
    expect(quorumShortfalls).toEqual([
      { stepId: 'review', trigger: 'on_turn_complete', position: 0, type: 'move_to_next', rule: 'n_approve:4', approvals: 4, declaredSeats: 3 },
      { stepId: 'done', trigger: 'on_turn_complete', position: 0, type: 'move_to_previous', rule: 'n_approve:1', approvals: 1, declaredSeats: 0 },
    ]);
    expect(parseWorkflowYaml(OFFICE_DEFAULT_YAML).quorumShortfalls).toEqual([]);
  });

  it('refuses text that is not YAML', () => {
    const error = refusal('name: [unclosed\n');
    expect(error.issues).toEqual([expect.objectContaining({ path: [], code: 'invalid_yaml' })]);
  });
});
