import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jest } from '@jest/globals';

/*
 * jest.preset.cjs resolves the `source` export condition so workspace libraries load from their
 * TypeScript sources. eventsource-parser (used by the MCP SDK's HTTP client) publishes a `source`
 * condition too, pointing at TypeScript that Jest does not transform inside node_modules. Until the
 * preset uses a workspace-specific condition name, resolve that one module to its own built file.
 * This is a resolution fix, not a stand-in: the module loaded is the package's real code.
 */
const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '../../../../../..');
jest.unstable_mockModule('eventsource-parser/stream', () => import(join(repoRoot, 'node_modules/eventsource-parser/dist/stream.js')));

export async function loadMcpClientSdk() {
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
  return { Client, StreamableHTTPClientTransport };
}
