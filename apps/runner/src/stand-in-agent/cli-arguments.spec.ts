import { CliUsageError, parseStandInArguments } from './cli-arguments.js';

describe("the stand-in agent's command line", () => {
  it('reads every flag the runner passes, in the runner’s order', () => {
    expect(
      parseStandInArguments([
        '-p', 'Do the task in /tmp/job/payload.json',
        '--model', 'claude-sonnet-4-6',
        '--permission-mode', 'bypassPermissions',
        '--effort', 'medium',
        '--allowedTools', 'Read,Bash(git commit:*),mcp__gantry__log_commit',
        '--mcp-config', '/tmp/job/mcp.json',
        '--add-dir', '/srv/wt',
        '--output-format', 'text',
      ]),
    ).toEqual({
      print: true,
      prompt: 'Do the task in /tmp/job/payload.json',
      model: 'claude-sonnet-4-6',
      permissionMode: 'bypassPermissions',
      effort: 'medium',
      allowedTools: ['Read', 'Bash(git commit:*)', 'mcp__gantry__log_commit'],
      mcpConfig: ['/tmp/job/mcp.json'],
      addDir: ['/srv/wt'],
      outputFormat: 'text',
      sessionId: null,
      resume: null,
    });
  });

  it('takes the session flags the runner adds for a task\'s session', () => {
    const base = ['-p', 'work in /tmp/p.json', '--output-format', 'text'];
    expect(parseStandInArguments([...base, '--session-id', '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182'])).toMatchObject({ sessionId: '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182', resume: null });
    expect(parseStandInArguments([...base, '--resume', '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182'])).toMatchObject({ sessionId: null, resume: '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182' });
  });

  it('takes flags in any order, --flag=value, the long print flag and variadic lists', () => {
    const args = parseStandInArguments(['--model=opus', '--add-dir', '/a', '/b', '--print', 'the prompt', '--allowed-tools', 'Read', 'Edit']);
    expect(args).toMatchObject({ print: true, model: 'opus', addDir: ['/a', '/b'], allowedTools: ['Read', 'Edit'], prompt: 'the prompt' });
  });

  it.each([
    [['-p', 'x', '--max-turns', '5'], "error: unknown option '--max-turns'"],
    [['-p', 'x', '--thinking-budget=6000'], "error: unknown option '--thinking-budget'"],
    [['-p', 'x', '--model'], "error: option '--model <model>' argument missing"],
    [['-p', 'x', '--effort', 'extreme'], "error: option '--effort <level>' argument 'extreme' is invalid. Allowed choices are low, medium, high, xhigh, max."],
    [['-p', 'x', '--permission-mode', 'yolo'], "error: option '--permission-mode <mode>' argument 'yolo' is invalid. Allowed choices are acceptEdits, bypassPermissions, default, dontAsk, plan."],
    [['-p', 'x', 'y'], 'error: too many arguments. Expected 1 argument but got 2.'],
    [['--print=yes', 'x'], "error: option '-p, --print' does not take a value"],
  ])('refuses %j like the real CLI', (argv, message) => {
    expect(() => parseStandInArguments(argv)).toThrow(new CliUsageError(message));
  });
});
