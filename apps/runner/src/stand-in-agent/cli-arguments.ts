/**
 * The agent CLI's flags as the real `claude` parses them (commander): options may come in any
 * order, `--flag=value` works, the list options are variadic (they take values until the next
 * `-…`), an unknown option is an error. Only print mode is supported.
 */
export interface StandInArguments {
  print: boolean;
  prompt: string | null;
  model: string | null;
  permissionMode: string | null;
  effort: string | null;
  allowedTools: string[];
  mcpConfig: string[];
  addDir: string[];
  outputFormat: 'text' | 'json' | 'stream-json';
  sessionId: string | null;
  resume: string | null;
}

export class CliUsageError extends Error {}

type OptionSpec = { key: keyof StandInArguments; kind: 'boolean' | 'value' | 'variadic'; label: string; choices?: readonly string[] };

const options: Record<string, OptionSpec> = {
  '-p': { key: 'print', kind: 'boolean', label: '-p, --print' },
  '--print': { key: 'print', kind: 'boolean', label: '-p, --print' },
  '--model': { key: 'model', kind: 'value', label: '--model <model>' },
  '--permission-mode': {
    key: 'permissionMode',
    kind: 'value',
    label: '--permission-mode <mode>',
    choices: ['acceptEdits', 'bypassPermissions', 'default', 'dontAsk', 'plan'],
  },
  '--effort': { key: 'effort', kind: 'value', label: '--effort <level>', choices: ['low', 'medium', 'high', 'xhigh', 'max'] },
  '--allowedTools': { key: 'allowedTools', kind: 'variadic', label: '--allowedTools, --allowed-tools <tools...>' },
  '--allowed-tools': { key: 'allowedTools', kind: 'variadic', label: '--allowedTools, --allowed-tools <tools...>' },
  '--mcp-config': { key: 'mcpConfig', kind: 'variadic', label: '--mcp-config <configs...>' },
  '--add-dir': { key: 'addDir', kind: 'variadic', label: '--add-dir <directories...>' },
  '--output-format': { key: 'outputFormat', kind: 'value', label: '--output-format <format>', choices: ['text', 'json', 'stream-json'] },
  '--session-id': { key: 'sessionId', kind: 'value', label: '--session-id <uuid>' },
  '--resume': { key: 'resume', kind: 'value', label: '-r, --resume [value]' },
};

export function parseStandInArguments(argv: readonly string[]): StandInArguments {
  const parsed: StandInArguments = {
    print: false,
    prompt: null,
    model: null,
    permissionMode: null,
    effort: null,
    allowedTools: [],
    mcpConfig: [],
    addDir: [],
    outputFormat: 'text',
    sessionId: null,
    resume: null,
  };
  const positionals: string[] = [];
  let i = 0;
  while (i < argv.length) {
    const arg = argv[i++]!;
    if (arg === '--') {
      positionals.push(...argv.slice(i));
      break;
    }
    if (!arg.startsWith('-') || arg === '-') {
      positionals.push(arg);
      continue;
    }
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const name = eq === -1 ? arg : arg.slice(0, eq);
    const spec = options[name];
    if (!spec) throw new CliUsageError(`error: unknown option '${name}'`);
    if (spec.kind === 'boolean') {
      if (eq !== -1) throw new CliUsageError(`error: option '${spec.label}' does not take a value`);
      (parsed as unknown as Record<string, unknown>)[spec.key] = true;
      continue;
    }
    const values: string[] = [];
    if (eq !== -1) values.push(arg.slice(eq + 1));
    else if (i < argv.length && !argv[i]!.startsWith('-')) values.push(argv[i++]!);
    if (spec.kind === 'variadic') {
      while (i < argv.length && !argv[i]!.startsWith('-')) values.push(argv[i++]!);
    }
    if (values.length === 0) throw new CliUsageError(`error: option '${spec.label}' argument missing`);
    if (spec.choices && !spec.choices.includes(values[0]!)) {
      throw new CliUsageError(`error: option '${spec.label}' argument '${values[0]}' is invalid. Allowed choices are ${spec.choices.join(', ')}.`);
    }
    if (spec.kind === 'variadic') {
      const list = parsed[spec.key] as string[];
      for (const value of values) list.push(...(spec.key === 'allowedTools' ? splitTools(value) : [value]));
    } else {
      (parsed as unknown as Record<string, unknown>)[spec.key] = values[0];
    }
  }
  if (positionals.length > 1) throw new CliUsageError(`error: too many arguments. Expected 1 argument but got ${positionals.length}.`);
  parsed.prompt = positionals[0] ?? null;
  return parsed;
}

/** Commas and blanks separate tools, except inside a rule's parentheses (`Bash(git commit:*)`). */
function splitTools(value: string): string[] {
  const tools: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of value) {
    if (ch === '(') depth++;
    if (ch === ')') depth = Math.max(0, depth - 1);
    if (depth === 0 && (ch === ',' || /\s/.test(ch))) {
      if (current) tools.push(current);
      current = '';
    } else {
      current += ch;
    }
  }
  if (current) tools.push(current);
  return tools;
}
