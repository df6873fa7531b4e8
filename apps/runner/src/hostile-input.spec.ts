import { resolve } from 'node:path';
import type { z } from 'zod';
import { ErrorCode, GantryError, reservedKeyPath, withGantryTools, type AgentConfig } from '@gantry/contracts';
import { buildAgentCommand, type AgentSession } from './domain/agent-command.js';
import { jobWorkspaceOf } from './application/job-workspace.js';
import { parseStandInArguments } from './stand-in-agent/cli-arguments.js';
import { RecordingReporter } from './stand-in-agent/testing/recording-reporter.js';
import {
  CommitLogInputSchema,
  ImplementationLogInputSchema,
  JobStatusUpdateInputSchema,
  QuestionInputSchema,
  ReviewDecisionInputSchema,
  TestResultLogInputSchema,
  type ReviewDecisions,
} from './infrastructure/mcp/job-reporter.js';
import { startMcpToolServer, type McpToolServer } from './infrastructure/mcp/tool-server.js';

/**
 * Bad input gets a typed refusal and changes nothing (docs/jobs.md, "What the runner takes"): the
 * runner's own doors, sent a table of hostile requests in the manner of
 * tools/system-tests/src/hostile-input.spec.ts.
 *
 * The tool server the agent talks to: every tool, over HTTP as the agent sends it, with hostile
 * requests built from each tool's valid example. The tool's input schema is the oracle: a call it
 * refuses (or one with a NUL, bytes that are not UTF-8, a key `__proto__`) must be answered with a
 * typed refusal — an HTTP 4xx with a JSON-RPC error, or a tool error whose text starts with its code —
 * and forward nothing; no request may get a 5xx, an untyped answer or none. The server must still
 * serve afterwards.
 */

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const SHA = '9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807';
const tools: { name: string; schema: z.ZodType; example: Record<string, Json> }[] = [
  { name: 'log_implementation', schema: ImplementationLogInputSchema, example: { summary: 'Start T-12 on feat/story-3', branch: 'feat/story-3', plan: '1. schema' } },
  { name: 'log_commit', schema: CommitLogInputSchema, example: { hash: SHA, message: 'feat: schema', summary: 'adds the jobs table' } },
  { name: 'log_test_result', schema: TestResultLogInputSchema, example: { status: 'PASSED', summary: '12 tests green' } },
  { name: 'update_job_status', schema: JobStatusUpdateInputSchema, example: { status: 'FAILED', summary: 'stopped', error: 'the build broke' } },
  { name: 'ask_question', schema: QuestionInputSchema, example: { question: 'Which column?', context: 'two names', options: ['a', 'b'] } },
  { name: 'record_decision', schema: ReviewDecisionInputSchema, example: { verdict: 'approve', comment: 'checked the tests' } },
];

const ACCEPT = 'application/json, text/event-stream';

interface Row {
  what: string;
  /** The HTTP body as sent. */
  body: string | Buffer;
  /** Headers in place of the agent's own (bearer, JSON, Accept). */
  headers?: Record<string, string | null>;
  /** The tool's schema takes the call: it may be forwarded. */
  takes?: boolean;
}

const call = (name: Json, args: Json, id: Json = 1) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

const HOLE = '\u0001hostile\u0001';

/** The example with `text` (JSON) in place of the value at `key`, or without it (`text` undefined). */
function withField(example: Record<string, Json>, key: string, text: string | undefined): Record<string, Json> {
  const copy = structuredClone(example);
  if (text === undefined) {
    delete copy[key];
    return copy;
  }
  Object.defineProperty(copy, key, { value: HOLE, enumerable: true, configurable: true, writable: true });
  return JSON.parse(JSON.stringify(copy).replace(JSON.stringify(HOLE), () => text)) as Record<string, Json>;
}

function hostileValues(value: Json): { what: string; text: string }[] {
  const wrong = [
    { what: 'null', text: 'null' },
    { what: 'an object', text: '{"x":1}' },
  ];
  if (typeof value === 'string') {
    wrong.push(
      { what: 'a number for a string', text: '42' },
      { what: 'an empty string', text: '""' },
      { what: 'blanks only', text: '"  \\t\\n "' },
      { what: 'a NUL character', text: JSON.stringify(`${value}\u0000x`) },
      { what: 'a NUL alone', text: JSON.stringify('\u0000') },
      { what: 'a leading -', text: JSON.stringify(`-${value}`) },
      { what: 'a leading --', text: JSON.stringify('--upload-pack=touch /tmp/pwned') },
      { what: 'path separators and ..', text: JSON.stringify(`../../${value}/..\\x`) },
      { what: 'a 100 kB string', text: JSON.stringify('a'.repeat(100_000)) },
    );
  } else if (Array.isArray(value)) {
    wrong.push(
      { what: 'an empty array', text: '[]' },
      { what: 'an array of 1000', text: JSON.stringify(Array.from({ length: 1000 }, (_, i) => `o${i}`)) },
      { what: 'a NUL in an item', text: JSON.stringify(['a\u0000', 'b']) },
    );
  }
  return wrong;
}

/** Bytes that are not UTF-8, spliced into the example's first string value of a tool call. */
function notUtf8(name: string, example: Record<string, Json>, bytes: number[]): Buffer {
  const key = Object.keys(example).find((k) => typeof example[k] === 'string')!;
  const [before, after] = JSON.stringify(call(name, withField(example, key, JSON.stringify('\u0002')))).split('\\u0002');
  return Buffer.concat([Buffer.from(before!), Buffer.from(bytes), Buffer.from(after!)]);
}

function rowsOf(tool: (typeof tools)[number]): Row[] {
  const { name, example } = tool;
  const valid = JSON.stringify(call(name, example));
  const rows: Row[] = [
    { what: 'no bearer', body: valid, headers: { authorization: null } },
    { what: 'a wrong bearer', body: valid, headers: { authorization: 'Bearer not-the-secret-of-this-job' } },
    { what: 'the secret as Basic', body: valid, headers: { authorization: 'Basic <secret>' } },
    { what: 'a bearer with a blank inside', body: valid, headers: { authorization: 'Bearer not the secret' } },
    { what: 'the secret with a character more', body: valid, headers: { authorization: 'Bearer <secret>x' } },
    { what: 'the secret without Bearer', body: valid, headers: { authorization: '<secret>' } },
    { what: 'not JSON', body: '{"jsonrpc":"2.0", ' },
    { what: 'an empty body', body: '' },
    { what: 'a JSON number', body: '42' },
    { what: 'JSON null', body: 'null' },
    { what: 'an empty array', body: '[]' },
    { what: 'not JSON-RPC', body: JSON.stringify({ method: 'tools/call', params: { name, arguments: example } }) },
    { what: 'as text/plain', body: valid, headers: { 'content-type': 'text/plain' } },
    { what: 'without Accept', body: valid, headers: { accept: null } },
    { what: 'declared charset=utf-16le', body: Buffer.from(valid, 'utf16le'), headers: { 'content-type': 'application/json; charset=utf-16le' } },
    { what: 'a body of 5 MB', body: JSON.stringify(call(name, { ...example, zzPadding: 'a'.repeat(5 * 1024 * 1024) })) },
    { what: 'arrays nested 100000 deep', body: JSON.stringify(call(name, { ...example, deep: HOLE })).replace(JSON.stringify(HOLE), `${'['.repeat(100_000)}${']'.repeat(100_000)}`), takes: false },
    { what: 'a byte that is never UTF-8 (FF)', body: notUtf8(name, example, [0xff]) },
    { what: 'a truncated multi-byte sequence (E2 82)', body: notUtf8(name, example, [0xe2, 0x82]) },
    { what: 'an overlong encoding of / (C0 AF)', body: notUtf8(name, example, [0xc0, 0xaf]) },
    { what: 'a UTF-16 surrogate encoded as UTF-8 (ED A0 80)', body: notUtf8(name, example, [0xed, 0xa0, 0x80]) },
    { what: 'a UTF-8 byte order mark before the JSON', body: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(valid)]) },
    { what: 'an unknown method', body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'jobs/claim', params: {} }) },
    { what: 'a call without a tool name', body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { arguments: example } }) },
    { what: 'a tool name that is a number', body: JSON.stringify(call(42, example)) },
    { what: 'an unknown tool', body: JSON.stringify(call('claim_job', example)) },
    { what: 'the tool name with ../', body: JSON.stringify(call(`../${name}`, example)) },
    { what: 'the tool name with a NUL', body: JSON.stringify(call(`${name}\u0000`, example)) },
    { what: 'the tool name in upper case', body: JSON.stringify(call(name.toUpperCase(), example)) },
    { what: 'arguments that are an array', body: JSON.stringify(call(name, [example])) },
    { what: 'arguments that are a string', body: JSON.stringify(call(name, 'x')) },
    { what: 'arguments with an unknown field', body: JSON.stringify(call(name, { ...example, leaseToken: 7 })) },
    { what: 'arguments with a key __proto__', body: JSON.stringify(call(name, example)).replace('"arguments":{', '"arguments":{"__proto__":{"status":"FAILED"},') },
    { what: 'no arguments', body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name } }) },
  ];
  for (const key of Object.keys(example)) {
    rows.push({ what: `without ${key}`, body: JSON.stringify(call(name, withField(example, key, undefined))) });
    for (const hostile of hostileValues(example[key]!)) rows.push({ what: `${key}: ${hostile.what}`, body: JSON.stringify(call(name, withField(example, key, hostile.text))) });
  }
  return rows.map((row) => ({ ...row, takes: row.takes ?? schemaTakes(tool, row) }));
}

/** Whether the tool's schema takes the call as the agent sent it (false when it is not a well-formed, authorized call of this tool). */
function schemaTakes(tool: (typeof tools)[number], row: Row): boolean {
  if (row.headers) return false;
  let message: { jsonrpc?: unknown; id?: unknown; method?: unknown; params?: { name?: unknown; arguments?: unknown } };
  try {
    message = JSON.parse(typeof row.body === 'string' ? row.body : new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(row.body)) as typeof message;
  } catch {
    return false;
  }
  if (message?.jsonrpc !== '2.0' || message.id === undefined || message.method !== 'tools/call' || message.params?.name !== tool.name) return false;
  const args = message.params.arguments;
  if (reservedKeyPath(args) !== undefined || JSON.stringify(args ?? null).includes('\\u0000')) return false;
  return tool.schema.safeParse(args).success;
}

interface Answer {
  status?: number;
  body: unknown;
}

async function send(server: McpToolServer, row: Row): Promise<Answer> {
  const headers: Record<string, string> = { authorization: server.secret.authorizationHeader(), 'content-type': 'application/json', accept: ACCEPT };
  for (const [key, value] of Object.entries(row.headers ?? {})) {
    if (value === null) delete headers[key];
    else headers[key] = value.replace('<secret>', server.secret.reveal());
  }
  try {
    const response = await fetch(server.url, { method: 'POST', headers, body: row.body, signal: AbortSignal.timeout(60_000) });
    const text = await response.text();
    try {
      return { status: response.status, body: JSON.parse(text) };
    } catch {
      return { status: response.status, body: `not JSON: ${text.slice(0, 200)}` };
    }
  } catch (error) {
    return { body: `no answer: ${String(error)}` };
  }
}

type RpcAnswer = { error?: { code?: unknown; message?: unknown }; result?: { isError?: boolean; content?: { text?: string }[] } };

/** What is wrong with an answer, or null. */
function fault(answer: Answer, takes: boolean): string | null {
  const { status, body } = answer;
  if (typeof body === 'string') return body;
  if (status === undefined || status >= 500) return `HTTP ${status}: ${JSON.stringify(body).slice(0, 200)}`;
  const rpc = body as RpcAnswer;
  if (takes) return status === 200 && rpc.result && !rpc.result.isError ? null : `refused, though its schema takes it: ${status} ${JSON.stringify(body).slice(0, 300)}`;
  if (status !== 200) {
    if (typeof rpc.error?.code !== 'number' || typeof rpc.error.message !== 'string') return `HTTP ${status} without a JSON-RPC error`;
    return null;
  }
  if (rpc.error) return typeof rpc.error.code === 'number' && rpc.error.code <= -32600 && rpc.error.code >= -32603 ? null : `JSON-RPC error ${JSON.stringify(rpc.error)}`;
  const text = rpc.result?.content?.map((c) => c.text).join('\n') ?? '';
  if (!rpc.result?.isError) return `answered ok, though it is refused: ${text.slice(0, 200)}`;
  if (!text.startsWith(`${ErrorCode.INVALID_COMMAND}: `)) return `a tool error without its code: ${text.slice(0, 200)}`;
  return null;
}

class RecordingDecisions implements ReviewDecisions {
  constructor(private readonly reporter: RecordingReporter) {}
  recordDecision(decision: unknown) {
    this.reporter.calls.push({ method: 'recordDecision' as never, input: decision });
    return Promise.resolve({ decisionId: 'd-1', moved: false });
  }
}

describe('hostile input to the tool server a runner hosts for one job', () => {
  let reporter: RecordingReporter;
  let server: McpToolServer;
  const logLines: string[] = [];

  beforeAll(async () => {
    reporter = new RecordingReporter();
    server = await startMcpToolServer({
      jobId: 'job-hostile',
      reporter,
      reviewDecisions: new RecordingDecisions(reporter),
      log: (level, message, fields) => logLines.push(JSON.stringify({ level, message, ...fields })),
    });
  });
  afterAll(async () => {
    await server.close();
  });

  it.each(tools.map((t) => [t.name, t] as const))('%s answers each hostile request with a typed refusal and forwards nothing it refuses', async (_name, tool) => {
    const faults: string[] = [];
    for (const row of rowsOf(tool)) {
      const before = reporter.calls.length;
      const progress = server.progress();
      const answer = await send(server, row);
      const wrong = fault(answer, row.takes!);
      if (wrong) faults.push(`${row.what} | ${wrong}`);
      else if (!row.takes && (reporter.calls.length !== before || JSON.stringify(server.progress()) !== JSON.stringify(progress))) faults.push(`${row.what} | refused, yet forwarded`);
    }
    // Still serving: the example itself is forwarded.
    const after = await send(server, { what: 'the example', body: JSON.stringify(call(tool.name, tool.example)) });
    expect({ faults, still: fault(after, true) }).toEqual({ faults: [], still: null });
    expect(logLines.join('\n')).not.toContain(server.secret.reveal());
  }, 300_000);
});

/**
 * The claimed job's values that reach the agent's command line: each must stay the value of its
 * option as the CLI parses it (the stand-in agent parses as the real one does), or the job is refused
 * INVALID_COMMAND before any agent starts — never read as an option of its own.
 */
describe("hostile values of a claimed job on the agent's command line", () => {
  const config: AgentConfig = { model: 'claude-sonnet-4-6', thinkingBudget: 6000, permissionMode: 'acceptEdits', allowedTools: ['Read'], maxTurns: 10 };
  const paths = { payloadPath: '/var/lib/gantry/jobs/job-1/payload.json', mcpConfigPath: '/var/lib/gantry/jobs/job-1/mcp-config.json', worktreeDir: '/srv/worktrees/w' };
  const session: AgentSession = { sessionId: '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182', resume: false, permissionMode: null, model: null, thinkingBudget: null, allowedTools: null };
  const texts = ['--dangerously-skip-permissions', '-p', '--model=other', '-', '--', '-x y', 'a b', 'a\nb', 'a\u0000b', '--permission-mode=bypassPermissions'];
  const rows: { what: string; config?: Partial<AgentConfig>; session?: Partial<AgentSession> }[] = [
    ...texts.map((text) => ({ what: `model ${JSON.stringify(text)}`, config: { model: text } })),
    ...texts.map((text) => ({ what: `the session's model ${JSON.stringify(text)}`, session: { model: text } })),
    ...texts.map((text) => ({ what: `a first allowed tool ${JSON.stringify(text)}`, config: { allowedTools: [text, 'Read'] } })),
    ...texts.map((text) => ({ what: `the session's allowed tool ${JSON.stringify(text)}`, session: { allowedTools: [text] } })),
    ...texts.map((text) => ({ what: `session id ${JSON.stringify(text)}`, session: { sessionId: text } })),
  ];

  it('keeps each value the value of its option, or refuses the job INVALID_COMMAND', () => {
    const faults: string[] = [];
    for (const row of rows) {
      const jobConfig = { ...config, ...row.config };
      const jobSession = row.session ? { ...session, ...row.session } : null;
      let args: string[];
      try {
        args = buildAgentCommand({ kind: 'PLAN_CHAT', config: jobConfig, ...paths, session: jobSession }).args;
      } catch (error) {
        if (!(error instanceof GantryError && error.code === ErrorCode.INVALID_COMMAND)) faults.push(`${row.what} | refused untyped: ${String(error)}`);
        continue;
      }
      if (args.some((arg) => arg.includes('\u0000'))) {
        faults.push(`${row.what} | a NUL on the command line, which no process can be given`);
        continue;
      }
      let parsed;
      try {
        parsed = parseStandInArguments(args);
      } catch (error) {
        faults.push(`${row.what} | the CLI could not parse the command line: ${String(error)}`);
        continue;
      }
      const expected = {
        model: jobSession?.model ?? jobConfig.model,
        permissionMode: jobConfig.permissionMode,
        allowedTools: withGantryTools(jobSession?.allowedTools ?? jobConfig.allowedTools),
        sessionId: jobSession?.sessionId ?? null,
        print: true,
      };
      const got = { model: parsed.model, permissionMode: parsed.permissionMode, allowedTools: parsed.allowedTools, sessionId: parsed.sessionId, print: parsed.print };
      if (JSON.stringify(got) !== JSON.stringify(expected)) faults.push(`${row.what} | read as ${JSON.stringify(got)}`);
    }
    expect(faults).toEqual([]);
  });
});

/**
 * The claimed job's values that become git's operands or paths under the worktree: each must be
 * refused INVALID_COMMAND (the job is finished FAILED before any agent starts, "The story log"), or
 * come out as a name git reads as a name and a path inside the worktree.
 */
describe('hostile values of a claimed job on its way to git and the worktree', () => {
  const job = {
    jobId: 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f',
    kind: 'TASK_IMPLEMENTATION' as const,
    payloads: [{ expectedChanges: [{ path: 'src/a.ts', contains: 'x' }] }] as Record<string, unknown>[],
    baseRef: 'main',
    repositoryUrl: 'https://github.com/acme/widgets.git',
    branch: 'feat/story-3',
    targetBranch: 'main',
    productId: 'product-42',
    storyId: null,
    taskId: null,
  };
  const defaults = { repositoryUrl: null, targetBranch: 'main', agentTimeoutMs: 60_000 };
  const names = ['-x', '--upload-pack=touch /tmp/pwned', '../x', 'a/../../b', '/etc/passwd', 'a\u0000b', 'a b', '.git', 'a/.git/b', 'a\\b', 'HEAD', '@{-1}', 'refs/heads/../x'];
  const paths = ['-x', '--output=/tmp/pwned', '../x', 'a/../../b', '/etc/passwd', 'a\u0000b', './a', 'a//b', ':(glob)*', 'a\\..\\..\\b', '.git/config', ''];
  const rows: { what: string; job: Partial<typeof job> }[] = [
    ...names.map((name) => ({ what: `branch ${JSON.stringify(name)}`, job: { branch: name } })),
    ...names.map((name) => ({ what: `base ref ${JSON.stringify(name)}`, job: { baseRef: name } })),
    ...names.map((name) => ({ what: `repository ${JSON.stringify(name)}`, job: { repositoryUrl: name } })),
    ...paths.map((path) => ({ what: `expected change path ${JSON.stringify(path)}`, job: { payloads: [{ expectedChanges: [{ path }] }] } })),
    { what: 'expectedChanges that is a string', job: { payloads: [{ expectedChanges: 'src/a.ts' as never }] } },
    { what: 'a timeoutMs of -1', job: { payloads: [{ timeoutMs: -1 } as never] } },
    { what: 'a timeoutMs of 1e308', job: { payloads: [{ timeoutMs: 1e308 } as never] } },
    { what: 'a timeoutMs that is a string', job: { payloads: [{ timeoutMs: '5' } as never] } },
  ];
  const worktree = '/srv/worktrees/w';

  it('refuses each INVALID_COMMAND, or keeps names git reads as names and paths inside the worktree', () => {
    const faults: string[] = [];
    for (const row of rows) {
      let workspace;
      try {
        workspace = jobWorkspaceOf({ ...job, ...row.job }, defaults);
      } catch (error) {
        if (!(error instanceof GantryError && error.code === ErrorCode.INVALID_COMMAND)) faults.push(`${row.what} | refused untyped: ${String(error)}`);
        continue;
      }
      const operands = [workspace.branch, workspace.baseRef, workspace.repositoryUrl].filter((v): v is string => v !== null);
      for (const operand of operands) {
        if (operand.startsWith('-') || operand.includes('\u0000') || operand.split('/').includes('..')) faults.push(`${row.what} | taken as ${JSON.stringify(operand)}`);
      }
      for (const change of workspace.expectedChanges) {
        const inside = resolve(worktree, change.path);
        if (!inside.startsWith(`${worktree}/`) || change.path.includes('\u0000')) faults.push(`${row.what} | a path taken as ${JSON.stringify(change.path)}`);
      }
    }
    expect(faults).toEqual([]);
  });
});
