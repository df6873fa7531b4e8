import { ErrorCode, type AgentConfig, type JobKind } from '@gantry/contracts';
import { buildAgentCommand, renderPrompt } from './agent-command.js';
import { defaultPromptTemplates } from './prompt-templates.js';

const payloadPath = '/var/lib/gantry/jobs/job-1/payload.json';
const mcpConfigPath = '/var/lib/gantry/jobs/job-1/mcp-config.json';
const worktreeDir = '/srv/worktrees/product-7';
const gantryTools =
  'mcp__gantry__log_implementation,mcp__gantry__log_commit,mcp__gantry__log_test_result,mcp__gantry__update_job_status,mcp__gantry__ask_question';

/** The kind defaults (docs/jobs.md, "Kinds and their configuration"); REVIEW takes its values from an agent profile. */
const configs: Record<JobKind, AgentConfig> = {
  IDEA_GRILL: { model: 'claude-sonnet-4-6', thinkingBudget: 12000, permissionMode: 'acceptEdits', allowedTools: ['Read', 'Grep'], maxTurns: 30 },
  IDEA_MAKE_PLAN: { model: 'claude-opus-4-7', thinkingBudget: 24000, permissionMode: 'acceptEdits', allowedTools: ['Read', 'Grep', 'Glob'], maxTurns: 40 },
  PLAN_CHAT: { model: 'claude-sonnet-4-6', thinkingBudget: 6000, permissionMode: 'acceptEdits', allowedTools: ['Read'], maxTurns: 10 },
  TASK_IMPLEMENTATION: { model: 'claude-sonnet-4-6', thinkingBudget: 6000, permissionMode: 'bypassPermissions', allowedTools: ['Read', 'Edit', 'Write', 'Bash(git commit:*)'], maxTurns: 80 },
  SPRINT_IMPLEMENTATION: { model: 'claude-sonnet-4-6', thinkingBudget: 6000, permissionMode: 'bypassPermissions', allowedTools: ['Read', 'Edit', 'Write', 'Bash(git commit:*)'], maxTurns: 120 },
  REVIEW: { model: 'claude-opus-4-7', thinkingBudget: 0, permissionMode: 'acceptEdits', allowedTools: ['Read', 'Grep'], maxTurns: 20 },
};

const expected: Record<JobKind, { model: string; mode: string; effort: string | null; tools: string }> = {
  IDEA_GRILL: { model: 'claude-sonnet-4-6', mode: 'acceptEdits', effort: 'high', tools: `Read,Grep,${gantryTools}` },
  IDEA_MAKE_PLAN: { model: 'claude-opus-4-7', mode: 'acceptEdits', effort: 'xhigh', tools: `Read,Grep,Glob,${gantryTools}` },
  PLAN_CHAT: { model: 'claude-sonnet-4-6', mode: 'acceptEdits', effort: 'medium', tools: `Read,${gantryTools}` },
  TASK_IMPLEMENTATION: { model: 'claude-sonnet-4-6', mode: 'bypassPermissions', effort: 'medium', tools: `Read,Edit,Write,Bash(git commit:*),${gantryTools}` },
  SPRINT_IMPLEMENTATION: { model: 'claude-sonnet-4-6', mode: 'bypassPermissions', effort: 'medium', tools: `Read,Edit,Write,Bash(git commit:*),${gantryTools}` },
  REVIEW: { model: 'claude-opus-4-7', mode: 'acceptEdits', effort: null, tools: `Read,Grep,${gantryTools}` },
};

describe('the agent command line', () => {
  it.each(Object.keys(expected) as JobKind[])('for a %s job is exactly the CLI invocation of its resolved configuration', (kind) => {
    const command = buildAgentCommand({ kind, config: configs[kind], payloadPath, mcpConfigPath, worktreeDir });
    const e = expected[kind];
    expect(command).toEqual({
      bin: 'claude',
      args: [
        '-p',
        defaultPromptTemplates[kind].split('$PAYLOAD_PATH').join(payloadPath),
        '--model',
        e.model,
        '--permission-mode',
        e.mode,
        ...(e.effort ? ['--effort', e.effort] : []),
        '--allowedTools',
        e.tools,
        '--mcp-config',
        mcpConfigPath,
        '--add-dir',
        worktreeDir,
        '--output-format',
        'text',
      ],
    });
  });

  it.each([
    [0, null],
    [6000, 'medium'],
    [6001, 'high'],
    [12000, 'high'],
    [24000, 'xhigh'],
    [24001, 'max'],
  ])('a thinking budget of %i gives --effort %s', (thinkingBudget, effort) => {
    const { args } = buildAgentCommand({
      kind: 'TASK_IMPLEMENTATION',
      config: { ...configs.TASK_IMPLEMENTATION, thinkingBudget },
      payloadPath,
      mcpConfigPath,
      worktreeDir,
    });
    const at = args.indexOf('--effort');
    if (effort === null) {
      expect(at).toBe(-1);
    } else {
      expect(args[at + 1]).toBe(effort);
      expect(args.filter((a) => a === '--effort')).toHaveLength(1);
    }
  });

  it('continues or begins the task\'s agent session, and its settings win over the job\'s (plan mode is --permission-mode plan)', () => {
    const session = { sessionId: '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182', resume: false, permissionMode: 'plan' as const, model: 'claude-opus-4-7', thinkingBudget: 24001, allowedTools: ['Read'] };
    const fresh = buildAgentCommand({ kind: 'TASK_IMPLEMENTATION', config: configs.TASK_IMPLEMENTATION, payloadPath, mcpConfigPath, worktreeDir, session }).args;
    const flag = (args: string[], name: string) => args[args.indexOf(name) + 1];
    expect([flag(fresh, '--permission-mode'), flag(fresh, '--model'), flag(fresh, '--effort'), flag(fresh, '--allowedTools')]).toEqual(['plan', 'claude-opus-4-7', 'max', `Read,${gantryTools}`]);
    expect(fresh.slice(-2)).toEqual(['--session-id', session.sessionId]);
    expect(fresh).not.toContain('--resume');
    const resumed = buildAgentCommand({ kind: 'TASK_IMPLEMENTATION', config: configs.TASK_IMPLEMENTATION, payloadPath, mcpConfigPath, worktreeDir, session: { ...session, resume: true, permissionMode: null, model: null, thinkingBudget: null, allowedTools: null } }).args;
    expect(resumed.slice(-2)).toEqual(['--resume', session.sessionId]);
    expect([flag(resumed, '--permission-mode'), flag(resumed, '--model')]).toEqual(['bypassPermissions', 'claude-sonnet-4-6']);
  });

  it('never passes max turns, whatever it is set to', () => {
    const { args } = buildAgentCommand({
      kind: 'SPRINT_IMPLEMENTATION',
      config: { ...configs.SPRINT_IMPLEMENTATION, maxTurns: 987654 },
      payloadPath,
      mcpConfigPath,
      worktreeDir,
    });
    expect(args.some((a) => /max.?turns/i.test(a))).toBe(false);
    expect(args).not.toContain('987654');
  });

  it('uses the configured binary, such as the stand-in agent', () => {
    const command = buildAgentCommand({
      kind: 'PLAN_CHAT',
      config: configs.PLAN_CHAT,
      payloadPath,
      mcpConfigPath,
      worktreeDir,
      bin: '/work/main/apps/runner/bin/stand-in-claude',
    });
    expect(command.bin).toBe('/work/main/apps/runner/bin/stand-in-claude');
  });

  it('fills the payload path into the prompt and leaves no placeholder behind', () => {
    const { args } = buildAgentCommand({ kind: 'IDEA_GRILL', config: configs.IDEA_GRILL, payloadPath, mcpConfigPath, worktreeDir });
    expect(args[1]).toContain(payloadPath);
    expect(args[1]).not.toContain('$PAYLOAD_PATH');
  });

  it('does not repeat a gantry tool that the configuration already allows', () => {
    const { args } = buildAgentCommand({
      kind: 'PLAN_CHAT',
      config: { ...configs.PLAN_CHAT, allowedTools: ['mcp__gantry__log_commit', 'Read'] },
      payloadPath,
      mcpConfigPath,
      worktreeDir,
    });
    const tools = args[args.indexOf('--allowedTools') + 1]!.split(',');
    expect(tools.filter((t) => t === 'mcp__gantry__log_commit')).toHaveLength(1);
    expect(tools.slice(0, 2)).toEqual(['mcp__gantry__log_commit', 'Read']);
  });

  it.each(['Read,Write', 'Read Write', 'Bash(git commit:*'])(
    'refuses the tool name "%s", which the CLI would not read as one tool',
    (tool) => {
      expect(() =>
        buildAgentCommand({
          kind: 'PLAN_CHAT',
          config: { ...configs.PLAN_CHAT, allowedTools: [tool] },
          payloadPath,
          mcpConfigPath,
          worktreeDir,
        }),
      ).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_COMMAND }));
    },
  );

  it('keeps a tool rule whose blank or comma sits inside its parentheses as one entry', () => {
    const { args } = buildAgentCommand({
      kind: 'TASK_IMPLEMENTATION',
      config: { ...configs.TASK_IMPLEMENTATION, allowedTools: ['Bash(git commit:*)', 'Bash(echo a,b)'] },
      payloadPath,
      mcpConfigPath,
      worktreeDir,
    });
    expect(args[args.indexOf('--allowedTools') + 1]).toBe(`Bash(git commit:*),Bash(echo a,b),${gantryTools}`);
  });

  it('refuses relative paths for the payload, the MCP config and the worktree', () => {
    for (const override of [{ payloadPath: 'payload.json' }, { mcpConfigPath: 'mcp.json' }, { worktreeDir: 'wt' }]) {
      expect(() =>
        buildAgentCommand({ kind: 'PLAN_CHAT', config: configs.PLAN_CHAT, payloadPath, mcpConfigPath, worktreeDir, ...override }),
      ).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_COMMAND }));
    }
  });

  it('refuses a prompt template that has no place for the payload path', () => {
    expect(() => renderPrompt('Do the work.', payloadPath)).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_COMMAND }));
  });

  it('every default prompt template mentions the payload path', () => {
    for (const template of Object.values(defaultPromptTemplates)) expect(template).toContain('$PAYLOAD_PATH');
  });
});
