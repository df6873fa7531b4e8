import { readFile } from 'node:fs/promises';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

interface HttpServerEntry {
  type: 'http';
  url: string;
  headers?: Record<string, string>;
}

/** The stand-in's MCP client: reads the server from the --mcp-config file(s) like the real CLI. */
export class StandInReporter {
  private constructor(
    private readonly client: Client,
    private readonly beforeCall: (name: string) => void,
  ) {}

  /** `beforeCall` is told of each tool call before it is sent (the stand-in records it). */
  static async fromMcpConfig(configs: string[], beforeCall: (name: string) => void = () => undefined, serverName = 'gantry'): Promise<StandInReporter> {
    let entry: HttpServerEntry | undefined;
    for (const config of configs) {
      const text = config.trimStart().startsWith('{') ? config : await readFile(config, 'utf8');
      const candidate = (JSON.parse(text) as { mcpServers?: Record<string, HttpServerEntry> }).mcpServers?.[serverName];
      if (candidate) entry = candidate;
    }
    if (!entry || entry.type !== 'http' || typeof entry.url !== 'string') {
      throw new Error(`no http MCP server "${serverName}" in --mcp-config`);
    }
    const client = new Client({ name: 'stand-in-claude', version: '0.1.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(entry.url), { requestInit: { headers: entry.headers ?? {} } }));
    return new StandInReporter(client, beforeCall);
  }

  /** Calls a tool; a refusal is printed and the work goes on, as a real agent would carry on. */
  async call(name: string, args: Record<string, unknown>): Promise<void> {
    this.beforeCall(name);
    const result = await this.client.callTool({ name, arguments: args });
    if (result.isError) {
      const text = (result.content as Array<{ text?: string }>).map((c) => c.text ?? '').join(' ');
      process.stderr.write(`stand-in: tool ${name} refused: ${text}\n`);
    }
  }

  /** Sends a tool call and does not wait for its reply (its answer, or its failure, is dropped). */
  send(name: string, args: Record<string, unknown>): void {
    this.beforeCall(name);
    this.client.callTool({ name, arguments: args }).catch(() => undefined);
  }

  async close(): Promise<void> {
    await this.client.close();
  }
}
