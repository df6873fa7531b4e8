import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KIND_DEFAULTS, type AgentConfig, type JobKind } from '@gantry/contracts';
import { buildAgentCommand, type AgentCommand } from '../../domain/agent-command.js';
import { writeMcpConfigFile } from '../../infrastructure/mcp/mcp-config-file.js';
import { startMcpToolServer, type McpToolServer } from '../../infrastructure/mcp/tool-server.js';
import { RecordingReporter } from './recording-reporter.js';
import { ensureStandInBuilt } from './stand-in-build.js';

/**
 * Everything the daemon will set up around one agent run, in miniature: a scratch directory outside
 * the worktree with the payload and the 0600 MCP config, the per-job tool server, the command line.
 */
export class StandInJob {
  private constructor(
    readonly scratch: string,
    readonly server: McpToolServer,
    readonly reporter: RecordingReporter,
    readonly command: AgentCommand,
  ) {}

  static async prepare(options: { worktreeDir: string; standIn: Record<string, unknown>; kind?: JobKind; config?: AgentConfig; attempt?: number }): Promise<StandInJob> {
    const bin = await ensureStandInBuilt();
    const scratch = await mkdtemp(join(tmpdir(), 'gantry-job-'));
    const reporter = new RecordingReporter();
    const server = await startMcpToolServer({ jobId: 'job-test', reporter, log: () => undefined });
    const payloadPath = join(scratch, 'payload.json');
    const mcpConfigPath = join(scratch, 'mcp-config.json');
    await writeFile(payloadPath, JSON.stringify({ taskId: 'T-1', standIn: options.standIn, gantry: { attempt: options.attempt ?? 1 } }));
    await writeMcpConfigFile(mcpConfigPath, server);
    const kind = options.kind ?? 'TASK_IMPLEMENTATION';
    const defaults = KIND_DEFAULTS[kind];
    const config: AgentConfig = options.config ?? {
      model: defaults.model ?? 'claude-opus-4-7',
      thinkingBudget: defaults.thinkingBudget ?? 0,
      permissionMode: defaults.permissionMode,
      allowedTools: [...defaults.allowedTools],
      maxTurns: defaults.maxTurns,
    };
    const command = buildAgentCommand({ kind, config, payloadPath, mcpConfigPath, worktreeDir: options.worktreeDir, bin });
    return new StandInJob(scratch, server, reporter, command);
  }

  async dispose(): Promise<void> {
    await this.server.close();
    await rm(this.scratch, { recursive: true, force: true });
  }
}
