import { effortForThinkingBudget, GantryToolNames, JobKinds, KIND_DEFAULTS, qualifiedToolName, RequestedAllowedToolSchema, RequestedModelSchema, resolveAgentConfig, withGantryTools } from './agent-config.js';

describe('agent configuration', () => {
  it.each([
    ['IDEA_GRILL', 'claude-sonnet-4-6', 12000, 'acceptEdits', 'high'],
    ['IDEA_MAKE_PLAN', 'claude-opus-4-7', 24000, 'acceptEdits', 'xhigh'],
    ['PLAN_CHAT', 'claude-sonnet-4-6', 6000, 'acceptEdits', 'medium'],
    ['TASK_IMPLEMENTATION', 'claude-sonnet-4-6', 6000, 'bypassPermissions', 'medium'],
    ['SPRINT_IMPLEMENTATION', 'claude-sonnet-4-6', 6000, 'bypassPermissions', 'medium'],
  ] as const)('%s defaults to %s, budget %d, %s (--effort %s)', (kind, model, budget, mode, effort) => {
    const config = resolveAgentConfig(kind);
    expect(config).toMatchObject({ model, thinkingBudget: budget, permissionMode: mode });
    expect(config.allowedTools.length).toBeGreaterThan(0);
    expect(config.maxTurns).toBe(KIND_DEFAULTS[kind].maxTurns);
    expect(effortForThinkingBudget(config.thinkingBudget)).toBe(effort);
  });

  it('takes a REVIEW job model and budget from the agent profile, with acceptEdits', () => {
    const config = resolveAgentConfig('REVIEW', null, null, null, { id: 'reviewer', model: 'claude-opus-4-7', thinkingBudget: 30000 });
    expect(config).toMatchObject({ model: 'claude-opus-4-7', thinkingBudget: 30000, permissionMode: 'acceptEdits' });
    expect(effortForThinkingBudget(config.thinkingBudget)).toBe('max');
  });

  it('refuses to resolve a REVIEW job without an agent profile', () => {
    expect(() => resolveAgentConfig('REVIEW')).toThrow(/agent profile/);
  });

  it('does not let the agent profile change the model of a kind with its own default', () => {
    expect(resolveAgentConfig('PLAN_CHAT', null, null, null, { id: 'p', model: 'other', thinkingBudget: 1 }).model).toBe('claude-sonnet-4-6');
  });

  it('applies product, then sprint, then job overrides, each field on its own', () => {
    const config = resolveAgentConfig(
      'TASK_IMPLEMENTATION',
      { model: 'claude-opus-4-7', thinkingBudget: 12000 },
      { thinkingBudget: 20000, allowedTools: ['Read'] },
      { thinkingBudget: 0 },
    );
    expect(config).toEqual({
      model: 'claude-opus-4-7',
      thinkingBudget: 0,
      permissionMode: 'bypassPermissions',
      // an override's list, with the gantry tools the agent always gets
      allowedTools: ['Read', ...GantryToolNames.map(qualifiedToolName)],
      maxTurns: KIND_DEFAULTS.TASK_IMPLEMENTATION.maxTurns,
    });
    expect(effortForThinkingBudget(config.thinkingBudget)).toBeNull();
  });

  it('records every gantry tool once in the resolved list, as the command line gets it', () => {
    const config = resolveAgentConfig('PLAN_CHAT', null, null, { allowedTools: ['Read', 'mcp__gantry__log_commit'] });
    expect(config.allowedTools).toEqual(['Read', 'mcp__gantry__log_commit', ...GantryToolNames.filter((t) => t !== 'log_commit').map(qualifiedToolName)]);
    expect(withGantryTools(config.allowedTools)).toEqual(config.allowedTools);
  });

  it('overrides apply on top of the agent profile for REVIEW too', () => {
    const config = resolveAgentConfig('REVIEW', { model: 'claude-sonnet-4-6' }, null, null, { id: 'r', model: 'claude-opus-4-7', thinkingBudget: 100 });
    expect(config.model).toBe('claude-sonnet-4-6');
    expect(config.thinkingBudget).toBe(100);
  });

  it('returns a fresh tool list, so a caller cannot change the defaults table', () => {
    const config = resolveAgentConfig('PLAN_CHAT');
    config.allowedTools.push('Bash');
    expect(KIND_DEFAULTS.PLAN_CHAT.allowedTools).not.toContain('Bash');
  });

  it('gives no kind the tools to claim or renew its own job', () => {
    for (const kind of JobKinds) {
      expect(KIND_DEFAULTS[kind].allowedTools.some((t) => /claim|heartbeat|renew|wait_for_job/.test(t))).toBe(false);
    }
  });

  it.each([
    [0, null], [1, 'medium'], [6000, 'medium'], [6001, 'high'], [12000, 'high'], [12001, 'xhigh'], [24000, 'xhigh'], [24001, 'max'],
  ] as const)('maps a thinking budget of %d to --effort %s', (budget, effort) => {
    expect(effortForThinkingBudget(budget)).toBe(effort);
  });
});

describe('a model and an allowed tool as a request gives them: what the agent command line carries as one argument', () => {
  it('a model may not start with "-" nor hold a NUL', () => {
    expect(['claude-opus-4', 'opus[1m]', 'x-y'].filter((m) => !RequestedModelSchema.safeParse(m).success)).toEqual([]);
    expect(['--dangerously-skip-permissions', '-m', 'opus\u0000x', ''].filter((m) => RequestedModelSchema.safeParse(m).success)).toEqual([]);
  });

  it('an allowed tool may not start with "-" (first in the list, it would be an option) and is one rule of the list', () => {
    expect(['Read', 'Bash(git commit:*)', 'mcp__gantry__log_commit'].filter((t) => !RequestedAllowedToolSchema.safeParse(t).success)).toEqual([]);
    expect(['-x', '--dangerously-skip-permissions', 'Read,Write', 'Read Write', 'Bash(git', ''].filter((t) => RequestedAllowedToolSchema.safeParse(t).success)).toEqual([]);
  });
});
