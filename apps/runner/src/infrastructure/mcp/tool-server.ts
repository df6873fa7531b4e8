import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { CallToolResult, JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { isGantryError, REVIEW_DECISION_TOOL, reservedKeyIssue, reservedKeyPath } from '@gantry/contracts';
import type { GantryToolName } from '@gantry/contracts';
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
  const server = tools.mcpServer();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => {
    for (const [part, closing] of [['transport', transport.close()], ['server', server.close()]] as const) {
      closing.catch((error: unknown) => tools.log('warn', `mcp request: closing its ${part} failed`, { error: error instanceof Error ? error.message : String(error) }));
    }
  });
  await server.connect(transport);
  refuseReservedKeys(transport, tools);
  await transport.handleRequest(req, res);
}

/**
 * A call whose arguments hold a key `__proto__` is refused as INVALID_COMMAND, forwarded nowhere:
 * the SDK's schema of a tool call would drop the key with its value before the tool's own schema
 * sees it (docs/architecture.md, "Commands"). Checked on each message as the transport parsed it.
 */
function refuseReservedKeys(transport: StreamableHTTPServerTransport, tools: ToolHandlers): void {
  const deliver = transport.onmessage;
  if (!deliver) return;
  transport.onmessage = (message, extra) => {
    const request = message as { id?: string | number; method?: string; params?: { name?: unknown; arguments?: unknown } };
    const path = request.id !== undefined && request.method !== undefined ? reservedKeyPath(request.params) : undefined;
    if (path === undefined) return deliver(message, extra);
    const text = `INVALID_COMMAND: ${reservedKeyIssue(path).message} (at ${path.join('.')})`;
    tools.log('warn', 'agent tool call refused', { tool: typeof request.params?.name === 'string' ? request.params.name : null, code: 'INVALID_COMMAND', error: text });
    const answer: JSONRPCMessage =
      request.method === 'tools/call'
        ? { jsonrpc: '2.0', id: request.id!, result: { isError: true, content: [{ type: 'text', text }] } }
        : { jsonrpc: '2.0', id: request.id!, error: { code: -32602, message: text } };
    transport.send(answer).catch((error: unknown) => tools.log('warn', 'mcp request: its refusal could not be sent', { error: error instanceof Error ? error.message : String(error) }));
  };
}

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

  mcpServer(): McpServer {
    const server = new McpServer({ name: 'gantry-runner', version: '0.1.0' });
    server.registerTool(
      'log_implementation',
      {
        description: 'Story log, at the start: the task, the branch and your plan. Required before the job can finish.',
        inputSchema: ImplementationLogInputSchema,
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
      { description: 'Story log, after every commit: hash, message and a summary of the change.', inputSchema: CommitLogInputSchema },
      (input) =>
        this.forward('log_commit', async () => {
          const receipt = await this.reporter.logCommit(input);
          this.progress.commitsLogged.push(input.hash);
          return receipt;
        }),
    );
    server.registerTool(
      'log_test_result',
      { description: 'Story log, at the end: PASSED or FAILED with a summary of the checks. Required before the job can finish.', inputSchema: TestResultLogInputSchema },
      (input) =>
        this.forward('log_test_result', async () => {
          const receipt = await this.reporter.logTestResult(input);
          this.progress.testResult = input.status;
          return receipt;
        }),
    );
    server.registerTool(
      'update_job_status',
      { description: 'Your own report of progress or outcome: IN_PROGRESS, DONE, PARTIAL or FAILED.', inputSchema: JobStatusUpdateInputSchema },
      (input) =>
        this.forward('update_job_status', async () => {
          await this.reporter.updateJobStatus(input);
          this.progress.lastStatus = input.status;
          return { recorded: true };
        }),
    );
    server.registerTool(
      'ask_question',
      { description: 'Ask a human when you cannot continue without a decision. Stop working if no answer comes back.', inputSchema: QuestionInputSchema },
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
