import { allowedToolProblem, effortForThinkingBudget, ErrorCode, GantryError, withGantryTools, type AgentConfig, type JobKind } from '@gantry/contracts';
import { defaultPromptTemplates, PAYLOAD_PATH_PLACEHOLDER } from './prompt-templates.js';

/** What the runner spawns for one job: no shell, the arguments exactly as the agent CLI parses them. */
export interface AgentCommand {
  bin: string;
  args: string[];
}

export interface AgentCommandInput {
  kind: JobKind;
  /** The configuration resolved at claim (product → sprint → job overrides already applied). */
  config: AgentConfig;
  /** Absolute path of the job's payload JSON, filled into the kind's prompt. */
  payloadPath: string;
  /** Absolute path of the `--mcp-config` file that points the agent at the runner's tool server. */
  mcpConfigPath: string;
  /** Absolute path of the leased worktree the agent works in. */
  worktreeDir: string;
  /** The agent CLI; `claude` unless configured (the stand-in agent in tests and local runs). */
  bin?: string;
  promptTemplates?: Record<JobKind, string>;
  /** The task's agent session, for a job of a task the workflow engine keeps one for. */
  session?: AgentSession | null;
}

/**
 * What the task's session adds to a job's command line (docs/workflow-engine.md, AC-S1): a session
 * no job started yet is begun with `--session-id`, one a job started is continued with `--resume`;
 * the session's settings (plan mode is `--permission-mode plan`) win over the job's configuration.
 */
export interface AgentSession {
  sessionId: string;
  resume: boolean;
  permissionMode: AgentConfig['permissionMode'] | null;
  model: string | null;
  thinkingBudget: number | null;
  allowedTools: string[] | null;
}

export const DEFAULT_AGENT_BIN = 'claude';

/**
 * The agent command line:
 * `claude -p <prompt> --model <m> --permission-mode <p> [--effort <e>] --allowedTools <a,b>
 *  --mcp-config <file> --add-dir <dir> --output-format text [--session-id <id> | --resume <id>]`.
 *
 * `maxTurns` is recorded on the job only and never passed (docs/jobs.md, "Kinds and their
 * configuration"), although the CLI does take `--max-turns`. The allowed tools are the ones
 * recorded at claim, where the gantry tools were added (`withGantryTools`); adding them again here
 * changes nothing for such a list.
 */
export function buildAgentCommand(input: AgentCommandInput): AgentCommand {
  for (const [name, path] of [
    ['payload path', input.payloadPath],
    ['MCP config path', input.mcpConfigPath],
    ['worktree directory', input.worktreeDir],
  ] as const) {
    if (!path.startsWith('/')) refuse(`the ${name} must be absolute, got "${path}"`);
  }
  const bin = input.bin ?? DEFAULT_AGENT_BIN;
  if (bin.trim() === '') refuse('the agent binary must not be empty');

  const template = (input.promptTemplates ?? defaultPromptTemplates)[input.kind];
  const session = input.session ?? null;
  const effort = effortForThinkingBudget(session?.thinkingBudget ?? input.config.thinkingBudget);

  return {
    bin,
    args: [
      '-p',
      renderPrompt(template, input.payloadPath),
      '--model',
      optionValue('model', session?.model ?? input.config.model),
      '--permission-mode',
      optionValue('permission mode', session?.permissionMode ?? input.config.permissionMode),
      ...(effort === null ? [] : ['--effort', effort]),
      '--allowedTools',
      optionValue('allowed tools', allowedToolsArgument(session?.allowedTools ?? input.config.allowedTools)),
      '--mcp-config',
      input.mcpConfigPath,
      '--add-dir',
      input.worktreeDir,
      '--output-format',
      'text',
      ...(session === null ? [] : [session.resume ? '--resume' : '--session-id', optionValue('session id', session.sessionId)]),
    ],
  };
}

/**
 * A value of the job's (or its task session's) as the argument of its option, or the job's refusal:
 * one that starts with `-` would be read by the CLI as an option of its own (`--model
 * --dangerously-skip-permissions`; `--resume` takes its value only when one follows), and no process
 * can be given an argument with a NUL (docs/jobs.md, "What the runner takes").
 */
function optionValue(name: string, value: string): string {
  if (value.startsWith('-')) refuse(`the ${name} ${JSON.stringify(value.slice(0, 200))} starts with "-": the agent CLI would read it as an option`);
  if (value.includes('\u0000')) refuse(`the ${name} has a NUL character, which no command line can carry`);
  return value;
}

/** The kind's prompt with every `$PAYLOAD_PATH` replaced; a template without the placeholder is a defect. */
export function renderPrompt(template: string, payloadPath: string): string {
  if (!template.includes(PAYLOAD_PATH_PLACEHOLDER)) {
    refuse(`the prompt template does not mention ${PAYLOAD_PATH_PLACEHOLDER}, so the agent could not find its payload`);
  }
  return template.split(PAYLOAD_PATH_PLACEHOLDER).join(payloadPath);
}

function allowedToolsArgument(configured: readonly string[]): string {
  for (const tool of configured) {
    // One configured rule must stay one rule of the CLI's list (@gantry/contracts; the enqueue refuses such a tool already).
    const problem = allowedToolProblem(tool);
    if (problem) refuse(problem);
  }
  return withGantryTools(configured).join(',');
}

function refuse(sentence: string): never {
  throw new GantryError(ErrorCode.INVALID_COMMAND, sentence);
}
