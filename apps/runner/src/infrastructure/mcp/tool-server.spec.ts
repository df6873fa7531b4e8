import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { BearerSecret } from './bearer-secret.js';
import { RecordingReporter } from '../../stand-in-agent/testing/recording-reporter.js';
import { writeMcpConfigFile } from './mcp-config-file.js';
import { startMcpToolServer, type McpToolServer, type ToolServerLog } from './tool-server.js';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';


const SHA = '9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807';

async function connect(url: string, authorization: string | null): Promise<Client> {
  const client = new McpClient({ name: 'test-agent', version: '0.0.0' });
  const headers: Record<string, string> = authorization ? { Authorization: authorization } : {};
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

function textOf(result: Awaited<ReturnType<Client['callTool']>>): string {
  const content = result.content as Array<{ type: string; text: string }>;
  return content.map((c) => c.text).join('\n');
}

describe('the MCP tool server a runner hosts for one job', () => {
  let reporter: RecordingReporter;
  let server: McpToolServer;
  let client: Client;
  let logLines: string[];

  beforeEach(async () => {
    reporter = new RecordingReporter();
    logLines = [];
    const log: ToolServerLog = (level, message, fields) => logLines.push(JSON.stringify({ level, message, ...fields }));
    server = await startMcpToolServer({ jobId: 'job-1', correlationId: 'corr-1', reporter, log });
    client = await connect(server.url, server.secret.authorizationHeader());
  });
  afterEach(async () => {
    await client.close();
    await server.close();
  });

  it('listens on 127.0.0.1 on a port of its own', () => {
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    expect(server.url).not.toMatch(/:0\//);
  });

  it('offers exactly the five story-log and status tools, nothing to claim, heartbeat or inspect the queue', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['ask_question', 'log_commit', 'log_implementation', 'log_test_result', 'update_job_status']);
  });

  it('forwards every tool call to the job reporter and tracks what the agent reported', async () => {
    const implementation = await client.callTool({
      name: 'log_implementation',
      arguments: { summary: 'Start T-12 on feat/story-3', branch: 'feat/story-3', plan: '1. schema 2. migration' },
    });
    const commit = await client.callTool({ name: 'log_commit', arguments: { hash: SHA, message: 'feat: schema', summary: 'adds the jobs table' } });
    const tests = await client.callTool({ name: 'log_test_result', arguments: { status: 'PASSED', summary: '12 tests green' } });
    const status = await client.callTool({ name: 'update_job_status', arguments: { status: 'PARTIAL', summary: 'schema done, UI left' } });
    const question = await client.callTool({ name: 'ask_question', arguments: { question: 'Which column name?', options: ['pushed_at', 'pushedAt'] } });

    expect(reporter.calls).toEqual([
      { method: 'logImplementation', input: { summary: 'Start T-12 on feat/story-3', branch: 'feat/story-3', plan: '1. schema 2. migration' } },
      { method: 'logCommit', input: { hash: SHA, message: 'feat: schema', summary: 'adds the jobs table' } },
      { method: 'logTestResult', input: { status: 'PASSED', summary: '12 tests green' } },
      { method: 'updateJobStatus', input: { status: 'PARTIAL', summary: 'schema done, UI left' } },
      { method: 'askQuestion', input: { question: 'Which column name?', options: ['pushed_at', 'pushedAt'] } },
    ]);
    expect([implementation, commit, tests, status, question].map((r) => r.isError ?? false)).toEqual([false, false, false, false, false]);
    expect(JSON.parse(textOf(implementation))).toEqual({ entryId: 'log-1' });
    expect(JSON.parse(textOf(question))).toEqual({ questionId: 'q-1', answer: null });
    expect(server.progress()).toEqual({
      implementationLogged: true,
      commitsLogged: [SHA],
      testResult: 'PASSED',
      lastStatus: 'PARTIAL',
      questionsAsked: 1,
      decisionsRecorded: 0,
    });
    expect(logLines.some((l) => l.includes('"tool":"log_commit"') && l.includes('"correlationId":"corr-1"'))).toBe(true);
  });

  it.each([
    ['log_commit', { hash: 'not-a-hash', message: 'm', summary: 's' }],
    ['log_commit', { hash: SHA, message: 'm' }],
    ['log_commit', { hash: 'abc1234', message: 'm', summary: 's' }],
    ['log_test_result', { status: 'GREEN', summary: 's' }],
    ['update_job_status', { status: 'DONE', summary: 's', lease: 7 }],
    ['log_implementation', { summary: '   ' }],
    ['ask_question', { question: 'pick', options: ['only one'] }],
  ])('refuses invalid input to %s and forwards nothing (%o)', async (name, args) => {
    const result = await client.callTool({ name, arguments: args });
    expect(result.isError).toBe(true);
    expect(textOf(result)).toMatch(new RegExp(`^INVALID_COMMAND: invalid arguments for ${name}: `));
    expect(reporter.calls).toEqual([]);
    expect(server.progress().implementationLogged).toBe(false);
  });

  it('can be closed twice, as overlapping cleanup paths will', async () => {
    await server.close();
    await expect(server.close()).resolves.toBeUndefined();
    await expect(fetch(server.url, { method: 'POST', headers: { Authorization: server.secret.authorizationHeader() } })).rejects.toThrow();
  });

  it('closing waits for a call still being recorded after its agent went away: what the run reports next sees it', async () => {
    let answer!: () => void;
    const answered = new Promise<void>((resolve) => (answer = resolve));
    const slow = Object.assign(new RecordingReporter(), {
      logTestResult: async (entry: unknown) => {
        reporter.calls.push({ method: 'logTestResult', input: entry });
        await answered;
        return { entryId: 'log-slow' };
      },
    });
    const own = await startMcpToolServer({ jobId: 'job-slow', reporter: slow, log: () => undefined });
    const agent = await connect(own.url, own.secret.authorizationHeader());
    void agent.callTool({ name: 'log_test_result', arguments: { status: 'PASSED', summary: 'green' } }).catch(() => undefined);
    while (reporter.calls.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    // The agent exits without waiting for the answer.
    await agent.close();
    let closed = false;
    const closing = own.close().then(() => (closed = true));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(closed).toBe(false);
    answer();
    await closing;
    expect(own.progress().testResult).toBe('PASSED');
  });

  it('an unknown tool is refused', async () => {
    const result = await client.callTool({ name: 'claim_job', arguments: {} });
    expect(result.isError).toBe(true);
    expect(textOf(result)).toMatch(/^INVALID_COMMAND: no tool "claim_job" is offered; the tools are log_implementation, /);
  });

  it("passes the job service's refusal to the agent as a tool error and does not count the report", async () => {
    reporter.refuseWith = new GantryError(ErrorCode.STALE_FENCE, 'the lease of job-1 was taken over');
    const result = await client.callTool({ name: 'log_test_result', arguments: { status: 'FAILED', summary: 'red' } });
    expect(result.isError).toBe(true);
    expect(textOf(result)).toBe('STALE_FENCE: the lease of job-1 was taken over');
    expect(server.progress().testResult).toBeNull();
    expect(logLines.some((l) => l.includes('"code":"STALE_FENCE"'))).toBe(true);
  });

  it('reports an unexpected reporter failure as an internal tool error', async () => {
    reporter.refuseWith = new Error('nats: timeout');
    const result = await client.callTool({ name: 'update_job_status', arguments: { status: 'DONE', summary: 'done' } });
    expect(result.isError).toBe(true);
    expect(textOf(result)).toBe('INTERNAL: the runner could not record this call: nats: timeout');
    expect(server.progress().lastStatus).toBeNull();
  });

  it('refuses a client with a wrong bearer secret', async () => {
    await expect(connect(server.url, BearerSecret.generate().authorizationHeader())).rejects.toThrow(/401|Unauthorized/);
    expect(reporter.calls).toEqual([]);
  });

  it('refuses every request without the right bearer, even a tool call sent by hand', async () => {
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'log_test_result', arguments: { status: 'PASSED', summary: 'x' } } });
    const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
    for (const authorization of [undefined, 'Bearer', `Basic ${server.secret.reveal()}`, `Bearer ${server.secret.reveal()}x`]) {
      const response = await fetch(server.url, { method: 'POST', body, headers: authorization ? { ...headers, Authorization: authorization } : headers });
      expect(response.status).toBe(401);
    }
    expect(reporter.calls).toEqual([]);
  });

  it('refuses tool arguments with a __proto__ key, which would otherwise be dropped or read through as fields, and forwards nothing', async () => {
    for (const args of ['{"summary":"x","__proto__":{"status":"FAILED"}}', '{"status":"PASSED","summary":"x","__proto__":{}}']) {
      const result = await client.callTool({ name: 'log_test_result', arguments: JSON.parse(args) as Record<string, unknown> });
      expect(result.isError).toBe(true);
      expect(textOf(result)).toMatch(/^INVALID_COMMAND: the key "__proto__" is not accepted.*\(at arguments\.__proto__\)/);
    }
    expect(reporter.calls).toEqual([]);
    expect(logLines.filter((l) => l.includes('agent tool call refused') && l.includes('"tool":"log_test_result"'))).toHaveLength(2);
    // constructor and prototype are keys like any other: refused by the tool's schema as unknown ones
    const other = await client.callTool({ name: 'log_test_result', arguments: { status: 'PASSED', summary: 'x', constructor: 'c' } });
    expect(other.isError).toBe(true);
    expect(reporter.calls).toEqual([]);
  });

  it('answers only POST on /mcp', async () => {
    const authorization = server.secret.authorizationHeader();
    expect((await fetch(server.url, { method: 'GET', headers: { Authorization: authorization } })).status).toBe(405);
    expect((await fetch(server.url.replace('/mcp', '/other'), { method: 'POST', headers: { Authorization: authorization } })).status).toBe(404);
  });

  it('never writes the secret into its logs or its printed form', async () => {
    await client.callTool({ name: 'log_implementation', arguments: { summary: 'start' } });
    await connect(server.url, 'Bearer wrong-secret-value').catch(() => undefined);
    const secret = server.secret.reveal();
    expect(logLines.length).toBeGreaterThan(2);
    expect(logLines.join('\n')).not.toContain(secret);
    expect(JSON.stringify(server)).not.toContain(secret);
    expect(inspect(server, { depth: 5 })).not.toContain(secret);
    expect(`${server.secret}`).not.toContain(secret);
  });
});

describe('the --mcp-config file', () => {
  let dir: string;
  let server: McpToolServer;
  const reporter = new RecordingReporter();

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gantry-mcp-config-'));
    server = await startMcpToolServer({ jobId: 'job-2', reporter, log: () => undefined });
  });
  afterAll(async () => {
    await server.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('is owner-only and points the CLI at the server with the bearer header', async () => {
    const path = join(dir, 'mcp-config.json');
    await writeMcpConfigFile(path, server);
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    expect(JSON.parse(await readFile(path, 'utf8'))).toEqual({
      mcpServers: { gantry: { type: 'http', url: server.url, headers: { Authorization: `Bearer ${server.secret.reveal()}` } } },
    });
  });

  it('tightens the mode of a file that already existed with a looser one', async () => {
    const path = join(dir, 'existing.json');
    await writeFile(path, 'stale', { mode: 0o644 });
    await writeMcpConfigFile(path, server);
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    expect(await readFile(path, 'utf8')).not.toContain('stale');
  });

  it('is enough for a client to reach the tools', async () => {
    const path = join(dir, 'client.json');
    await writeMcpConfigFile(path, server);
    const entry = JSON.parse(await readFile(path, 'utf8')).mcpServers.gantry;
    const client = await connect(entry.url, entry.headers.Authorization);
    try {
      const result = await client.callTool({ name: 'log_implementation', arguments: { summary: 'from the config file' } });
      expect(result.isError ?? false).toBe(false);
      expect(reporter.calls).toContainEqual({ method: 'logImplementation', input: { summary: 'from the config file' } });
    } finally {
      await client.close();
    }
  });
});

describe('the tool server of a REVIEW job (docs/workflow-engine.md, AC-R1)', () => {
  let decisions: { calls: unknown[]; refuseWith: Error | null; recordDecision(d: unknown): Promise<{ decisionId: string; moved: boolean }> };
  let review: McpToolServer;
  let reviewer: Client;

  let reporter: RecordingReporter;

  beforeEach(async () => {
    reporter = new RecordingReporter();
    decisions = {
      calls: [],
      refuseWith: null,
      recordDecision(d) {
        if (this.refuseWith) return Promise.reject(this.refuseWith);
        this.calls.push(d);
        return Promise.resolve({ decisionId: 'decision-1', moved: false });
      },
    };
    review = await startMcpToolServer({ jobId: 'job-2', reporter, reviewDecisions: decisions, log: () => undefined });
    reviewer = await connect(review.url, review.secret.authorizationHeader());
  });
  afterEach(async () => {
    await reviewer.close();
    await review.close();
  });

  it('offers record_decision besides the five tools; other jobs are not offered it', async () => {
    expect((await reviewer.listTools()).tools.map((t) => t.name).sort()).toEqual(['ask_question', 'log_commit', 'log_implementation', 'log_test_result', 'record_decision', 'update_job_status']);
    const plain = await startMcpToolServer({ jobId: 'job-3', reporter, log: () => undefined });
    const other = await connect(plain.url, plain.secret.authorizationHeader());
    expect((await other.listTools()).tools.map((t) => t.name)).not.toContain('record_decision');
    await other.close();
    await plain.close();
  });

  it('forwards the decision and counts it', async () => {
    const result = await reviewer.callTool({ name: 'record_decision', arguments: { verdict: 'reject', comment: 'the migration is not reversible' } });
    expect(result.isError ?? false).toBe(false);
    expect(JSON.parse(textOf(result))).toEqual({ decisionId: 'decision-1', moved: false });
    expect(decisions.calls).toEqual([{ verdict: 'reject', comment: 'the migration is not reversible' }]);
    expect(review.progress().decisionsRecorded).toBe(1);
  });

  it('a decision without a comment or with another verdict is refused and forwarded nowhere', async () => {
    for (const args of [{ verdict: 'approve' }, { verdict: 'maybe', comment: 'x' }]) {
      const result = await reviewer.callTool({ name: 'record_decision', arguments: args });
      expect(result.isError).toBe(true);
    }
    expect(decisions.calls).toEqual([]);
  });

  it('a job that lost its claim gets the refusal as a tool error, and the decision does not count', async () => {
    decisions.refuseWith = new GantryError(ErrorCode.STALE_FENCE, 'job job-2 no longer holds the claim');
    const result = await reviewer.callTool({ name: 'record_decision', arguments: { verdict: 'approve', comment: 'fine' } });
    expect(result.isError).toBe(true);
    expect(textOf(result)).toBe('STALE_FENCE: job job-2 no longer holds the claim');
    expect(review.progress().decisionsRecorded).toBe(0);
  });
});
