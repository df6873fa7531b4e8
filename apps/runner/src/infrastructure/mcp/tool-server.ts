import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { CallToolResult, JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { z } from 'zod';
import { ErrorCode, isGantryError, pathToFirst, REVIEW_DECISION_TOOL, reservedKeyIssue, reservedKeyPath } from '@gantry/contracts';
import type { GantryToolName } from '@gantry/contracts';
import { isRequestCharset, requestText } from '@gantry/service-runtime';
import { BearerSecret } from './bearer-secret.js';
import {
  CommitLogInputSchema,
  ImplementationLogInputSchema,
  JobStatusUpdateInputSchema,
  QuestionInputSchema,
  ReviewDecisionInputSchema,
  TestResultLogInputSchema,
  type AgentStatus,
  type JobReporter,
  type ReviewDecisions,
} from './job-reporter.js';

export type ToolServerLogLevel = 'info' | 'warn' | 'error';
/** Structured log sink: a message and fields, never an interpolated string. */
export type ToolServerLog = (level: ToolServerLogLevel, message: string, fields: Record<string, unknown>) => void;

export interface McpToolServerOptions {
  jobId: string;
  correlationId?: string;
  reporter: JobReporter;
  /** Given for a REVIEW job only: then the server also offers record_decision. */
  reviewDecisions?: ReviewDecisions;
  log?: ToolServerLog;
  /** 127.0.0.1 unless told otherwise: the agent runs on the same host. */
  host?: string;
  /** 0 (a free port) unless told otherwise. */
  port?: number;
  secret?: BearerSecret;
}

/** What the agent has reported so far, counted only when the job service accepted it. */
export interface AgentProgress {
  implementationLogged: boolean;
  commitsLogged: string[];
  testResult: 'PASSED' | 'FAILED' | null;
  lastStatus: AgentStatus | null;
  questionsAsked: number;
  decisionsRecorded: number;
}

export interface McpToolServer {
  /** `http://127.0.0.1:<port>/mcp` */
  readonly url: string;
  readonly secret: BearerSecret;
  progress(): AgentProgress;
  close(): Promise<void>;
}

export const MCP_PATH = '/mcp';

/**
 * The per-job MCP tool server: Streamable HTTP in stateless JSON mode (a fresh SDK server and
 * transport per request, so no session state to lose), bearer secret checked on every request.
 */
export async function startMcpToolServer(options: McpToolServerOptions): Promise<McpToolServer> {
  const secret = options.secret ?? BearerSecret.generate();
  const log = options.log ?? jsonLinesToStderr;
  const baseFields = { jobId: options.jobId, ...(options.correlationId ? { correlationId: options.correlationId } : {}) };
  const progress: AgentProgress = { implementationLogged: false, commitsLogged: [], testResult: null, lastStatus: null, questionsAsked: 0, decisionsRecorded: 0 };
  const tools = new ToolHandlers(options.reporter, progress, (level, message, fields) => log(level, message, { ...baseFields, ...fields }), options.reviewDecisions ?? null);

  const http = createServer((req, res) => {
    serve(req, res, secret, tools).catch((error: unknown) => {
      log('error', 'mcp request failed', { ...baseFields, error: error instanceof Error ? error.message : String(error) });
      if (!res.headersSent) jsonRpcError(res, 500, -32603, 'Internal error');
      else res.end();
    });
  });
  const address = await listen(http, options.host ?? '127.0.0.1', options.port ?? 0);
  const url = `http://${address.address}:${address.port}${MCP_PATH}`;
  log('info', 'mcp tool server listening', { ...baseFields, url });

  let closed: Promise<void> | null = null;
  return {
    url,
    secret,
    progress: () => ({ ...progress, commitsLogged: [...progress.commitsLogged] }),
    // Idempotent: the daemon closes on every way out of a job, and some paths overlap.
    close: () =>
      (closed ??= (async () => {
        tools.stopTakingCalls();
        await new Promise<void>((resolve, reject) => {
          http.close((error) => (error ? reject(error) : resolve()));
          http.closeAllConnections();
        });
        await tools.settled();
      })()),
  };
}

async function serve(req: IncomingMessage, res: ServerResponse, secret: BearerSecret, tools: ToolHandlers): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://localhost').pathname;
  if (path !== MCP_PATH) return jsonRpcError(res, 404, -32601, 'Not found');
  if (!secret.matchesAuthorization(req.headers.authorization)) {
    tools.log('warn', 'mcp request refused: missing or wrong bearer secret', { method: req.method });
    res.setHeader('WWW-Authenticate', 'Bearer realm="gantry-runner"');
    return jsonRpcError(res, 401, -32001, 'Unauthorized');
  }
  // Stateless: there is no session to stream to (GET) or to end (DELETE).
  if (req.method !== 'POST') {
    res.setHeader('Allow', 'POST');
    return jsonRpcError(res, 405, -32000, 'Method not allowed');
  }
  const body = await readBody(req, res, tools);
  if (body === null) return;
  const server = tools.mcpServer();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => {
    for (const [part, closing] of [['transport', transport.close()], ['server', server.close()]] as const) {
      closing.catch((error: unknown) => tools.log('warn', `mcp request: closing its ${part} failed`, { error: error instanceof Error ? error.message : String(error) }));
    }
  });
  await server.connect(transport);
  refuseBadCalls(transport, tools);
  await transport.handleRequest(req, res, body);
}

/** The most a request to the tool server may carry: far more than the largest call its tools take (docs/jobs.md, "What the runner takes"). */
export const MAX_TOOL_REQUEST_BYTES = 1024 * 1024;

/**
 * The request's JSON, read by the rule every Gantry door reads a body by (`requestText`,
 * @gantry/service-runtime): UTF-8 only, never decoded leniently — the SDK's own reading turned bytes
 * that are not UTF-8 into U+FFFD and forwarded the call. Null when the request was refused here
 * (answered with a JSON-RPC error): too large, in another charset, not UTF-8, not JSON, an empty batch.
 */
async function readBody(req: IncomingMessage, res: ServerResponse, tools: ToolHandlers): Promise<unknown> {
  const refuse = (status: number, code: number, message: string) => {
    tools.log('warn', 'mcp request refused', { status, error: message });
    jsonRpcError(res, status, code, message);
    return null;
  };
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(req.headers['content-type'] ?? '')?.[1];
  if (!isRequestCharset(charset)) {
    req.resume();
    return refuse(415, -32000, `${ErrorCode.INVALID_COMMAND}: the body's charset is ${charset}; a request is UTF-8 JSON`);
  }
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    bytes += chunk.length;
    if (bytes <= MAX_TOOL_REQUEST_BYTES) chunks.push(chunk);
  }
  if (bytes > MAX_TOOL_REQUEST_BYTES) return refuse(413, -32000, `${ErrorCode.INVALID_COMMAND}: the body (${bytes} bytes) is larger than ${MAX_TOOL_REQUEST_BYTES} bytes`);
  const read = requestText(Buffer.concat(chunks));
  if ('issue' in read) return refuse(400, -32700, `Parse error: ${ErrorCode.INVALID_COMMAND}: ${read.issue.message}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(read.text);
  } catch {
    return refuse(400, -32700, `Parse error: ${ErrorCode.INVALID_COMMAND}: the body is not valid JSON`);
  }
  // A message is an object, a batch an array of them (null, handed to the SDK as the body, had it wait for one to read).
  if (parsed === null || typeof parsed !== 'object') return refuse(400, -32600, `Invalid Request: ${ErrorCode.INVALID_COMMAND}: a JSON-RPC message is an object`);
  // JSON-RPC answers an empty batch with one error, not with nothing.
  if (Array.isArray(parsed) && parsed.length === 0) return refuse(400, -32600, `Invalid Request: ${ErrorCode.INVALID_COMMAND}: an empty batch`);
  return parsed;
}

/**
 * A call the tools cannot take is refused as INVALID_COMMAND and forwarded nowhere, checked on each
 * message as the transport parsed it (docs/jobs.md, "What the runner takes"): a tool this server does
 * not offer; arguments with a key `__proto__`, which the SDK's schema of a tool call would drop with
 * its value before the tool's own schema sees it (docs/architecture.md, "Commands"); a NUL, which no
 * story-log text has; arguments the tool's schema refuses. The refusal names its code, as the job
 * service's refusals reaching the agent do (the SDK's own said "MCP error -32602: Input validation error").
 */
function refuseBadCalls(transport: StreamableHTTPServerTransport, tools: ToolHandlers): void {
  const deliver = transport.onmessage;
  if (!deliver) return;
  transport.onmessage = (message, extra) => {
    const request = message as { id?: string | number; method?: string; params?: { name?: unknown; arguments?: unknown } };
    if (request.id === undefined || request.method === undefined) return deliver(message, extra);
    const problem = request.method === 'tools/call' ? tools.callProblem(request.params?.name, request.params?.arguments) : reservedKeyProblem(request.params, []);
    if (problem === null) return deliver(message, extra);
    const text = `${ErrorCode.INVALID_COMMAND}: ${problem}`;
    const tool = typeof request.params?.name === 'string' ? request.params.name.slice(0, 200) : null;
    tools.log('warn', 'agent tool call refused', { tool, code: ErrorCode.INVALID_COMMAND, error: text.slice(0, 2000) });
    const answer: JSONRPCMessage =
      request.method === 'tools/call'
        ? { jsonrpc: '2.0', id: request.id, result: { isError: true, content: [{ type: 'text', text }] } }
        : { jsonrpc: '2.0', id: request.id, error: { code: -32602, message: text } };
    transport.send(answer).catch((error: unknown) => tools.log('warn', 'mcp request: its refusal could not be sent', { error: error instanceof Error ? error.message : String(error) }));
  };
}

/** Why a value holding a key `__proto__` is refused (its path under `prefix`), or null. */
function reservedKeyProblem(value: unknown, prefix: string[]): string | null {
  const path = reservedKeyPath(value);
  return path === undefined ? null : `${reservedKeyIssue(path).message} (at ${[...prefix, ...path].join('.')})`;
}

/** The path of the first string holding a NUL in `value`, or undefined. */
function nulPath(value: unknown): (string | number)[] | undefined {
  return pathToFirst(value, (item) => (typeof item === 'string' && item.includes('\u0000') ? [] : undefined));
}

/** The arguments each gantry tool takes (the REVIEW job's decision tool besides). */
const TOOL_INPUTS = {
  log_implementation: ImplementationLogInputSchema,
  log_commit: CommitLogInputSchema,
  log_test_result: TestResultLogInputSchema,
  update_job_status: JobStatusUpdateInputSchema,
  ask_question: QuestionInputSchema,
} as const satisfies Record<GantryToolName, z.ZodType>;

class ToolHandlers {
  /** Calls being recorded: an agent may exit (or stop listening) before the job service answered them. */
  private readonly inFlight = new Set<Promise<CallToolResult>>();
  private closing = false;

  constructor(
    private readonly reporter: JobReporter,
    private readonly progress: AgentProgress,
    readonly log: ToolServerLog,
    private readonly reviewDecisions: ReviewDecisions | null,
  ) {}

  /** The tools this server offers, by name, with the schema of their arguments. */
  private offered(): Map<string, z.ZodType> {
    const offered = new Map<string, z.ZodType>(Object.entries(TOOL_INPUTS));
    if (this.reviewDecisions) offered.set(REVIEW_DECISION_TOOL, ReviewDecisionInputSchema);
    return offered;
  }

  /** Why a call of `name` with `args` is refused before any tool runs, or null. */
  callProblem(name: unknown, args: unknown): string | null {
    const offered = this.offered();
    const schema = typeof name === 'string' ? offered.get(name) : undefined;
    if (schema === undefined) return `no tool ${JSON.stringify(name ?? null).slice(0, 200)} is offered; the tools are ${[...offered.keys()].join(', ')}`;
    const reserved = reservedKeyProblem(args, ['arguments']);
    if (reserved !== null) return reserved;
    const nul = nulPath(args);
    if (nul !== undefined) return `a NUL character is not accepted (at ${['arguments', ...nul].join('.')})`;
    const parsed = schema.safeParse(args);
    if (parsed.success) return null;
    return `invalid arguments for ${name as string}: ${parsed.error.issues.map((i) => `${i.message}${i.path.length > 0 ? ` at ${i.path.join('.')}` : ''}`).join('; ')}`;
  }

  mcpServer(): McpServer {
    const server = new McpServer({ name: 'gantry-runner', version: '0.1.0' });
    server.registerTool(
      'log_implementation',
      {
        description: 'Story log, at the start: the task, the branch and your plan. Required before the job can finish.',
        inputSchema: TOOL_INPUTS.log_implementation,
      },
      (input) =>
        this.forward('log_implementation', async () => {
          const receipt = await this.reporter.logImplementation(input);
          this.progress.implementationLogged = true;
          return receipt;
        }),
    );
    server.registerTool(
      'log_commit',
      { description: 'Story log, after every commit: hash, message and a summary of the change.', inputSchema: TOOL_INPUTS.log_commit },
      (input) =>
        this.forward('log_commit', async () => {
          const receipt = await this.reporter.logCommit(input);
          this.progress.commitsLogged.push(input.hash);
          return receipt;
        }),
    );
    server.registerTool(
      'log_test_result',
      { description: 'Story log, at the end: PASSED or FAILED with a summary of the checks. Required before the job can finish.', inputSchema: TOOL_INPUTS.log_test_result },
      (input) =>
        this.forward('log_test_result', async () => {
          const receipt = await this.reporter.logTestResult(input);
          this.progress.testResult = input.status;
          return receipt;
        }),
    );
    server.registerTool(
      'update_job_status',
      { description: 'Your own report of progress or outcome: IN_PROGRESS, DONE, PARTIAL or FAILED.', inputSchema: TOOL_INPUTS.update_job_status },
      (input) =>
        this.forward('update_job_status', async () => {
          await this.reporter.updateJobStatus(input);
          this.progress.lastStatus = input.status;
          return { recorded: true };
        }),
    );
    server.registerTool(
      'ask_question',
      { description: 'Ask a human when you cannot continue without a decision. Stop working if no answer comes back.', inputSchema: TOOL_INPUTS.ask_question },
      (input) =>
        this.forward('ask_question', async () => {
          const receipt = await this.reporter.askQuestion(input);
          this.progress.questionsAsked += 1;
          return receipt;
        }),
    );
    const decisions = this.reviewDecisions;
    if (decisions) {
      server.registerTool(
        REVIEW_DECISION_TOOL,
        {
          description: 'Your review decision: approve or reject, with a comment saying why. It counts once the workflow engine recorded it; you may decide again, the last decision counts.',
          inputSchema: ReviewDecisionInputSchema,
        },
        (input) =>
          this.forward(REVIEW_DECISION_TOOL, async () => {
            const receipt = await decisions.recordDecision(input);
            this.progress.decisionsRecorded += 1;
            return receipt;
          }),
      );
    }
    return server;
  }

  /** From now on a call is refused without being forwarded: the run it belongs to is over. */
  stopTakingCalls(): void {
    this.closing = true;
  }

  /**
   * Resolves once every call already forwarded has its answer. What the run reports next (a push,
   * its finish) is judged by the job service on the story log these calls write, so the runner must
   * not decide on it while they are still on their way (docs/jobs.md, "Commands under a claim").
   */
  async settled(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  private forward(tool: GantryToolName | typeof REVIEW_DECISION_TOOL, call: () => Promise<unknown>): Promise<CallToolResult> {
    if (this.closing) {
      this.log('warn', 'agent tool call refused: the run is over', { tool });
      return Promise.resolve({ isError: true, content: [{ type: 'text', text: 'STALE_FENCE: the run of this job is over; nothing more is recorded for it' }] });
    }
    const forwarding = this.record(tool, call);
    this.inFlight.add(forwarding);
    forwarding.finally(() => this.inFlight.delete(forwarding)).catch(() => undefined);
    return forwarding;
  }

  private async record(tool: GantryToolName | typeof REVIEW_DECISION_TOOL, call: () => Promise<unknown>): Promise<CallToolResult> {
    try {
      const result = await call();
      this.log('info', 'agent tool call recorded', { tool });
      return { content: [{ type: 'text', text: JSON.stringify(result ?? {}) }] };
    } catch (error) {
      if (isGantryError(error)) {
        this.log('warn', 'agent tool call refused', { tool, code: error.code, error: error.message });
        return { isError: true, content: [{ type: 'text', text: `${error.code}: ${error.message}` }] };
      }
      const message = error instanceof Error ? error.message : String(error);
      this.log('error', 'agent tool call failed', { tool, error: message });
      return { isError: true, content: [{ type: 'text', text: `INTERNAL: the runner could not record this call: ${message}` }] };
    }
  }
}

function jsonRpcError(res: ServerResponse, status: number, code: number, message: string): void {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

function listen(server: Server, host: string, port: number): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

const jsonLinesToStderr: ToolServerLog = (level, message, fields) => {
  process.stderr.write(`${JSON.stringify({ level, time: new Date().toISOString(), message, ...fields })}\n`);
};
