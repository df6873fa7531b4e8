import { open } from 'node:fs/promises';
import { MCP_SERVER_NAME } from '@gantry/contracts';
import type { BearerSecret } from './bearer-secret.js';

/**
 * Writes the `--mcp-config` file the agent CLI reads:
 * `{"mcpServers":{"gantry":{"type":"http","url":…,"headers":{"Authorization":"Bearer …"}}}}`.
 * The file holds the job's secret, so it is created owner-only (0600) and re-chmodded if it existed.
 * Put it outside the worktree, or the agent might commit it.
 */
export async function writeMcpConfigFile(path: string, server: { url: string; secret: BearerSecret }): Promise<void> {
  const config = {
    mcpServers: {
      [MCP_SERVER_NAME]: { type: 'http', url: server.url, headers: { Authorization: server.secret.authorizationHeader() } },
    },
  };
  const file = await open(path, 'w', 0o600);
  try {
    await file.chmod(0o600);
    await file.writeFile(`${JSON.stringify(config, null, 2)}\n`);
  } finally {
    await file.close();
  }
}
