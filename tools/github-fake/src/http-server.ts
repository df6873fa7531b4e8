import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { ApiError, DOCUMENTATION, notFound } from './errors.js';
import type { AutoCheck, FakeGitHub } from './fake-github.js';
import { GraphQLEndpoint } from './graphql.js';
import { cloneUrl } from './render.js';
import type { DeliveryRule, WebhookDispatcher, WebhookTarget } from './webhooks.js';

/*
 * The HTTP face of the fake: GitHub's REST routes, POST /graphql, and the control API under /_fake/.
 * node:http and a route table, no framework: the fake must answer exactly what GitHub answers
 * (status codes, bodies, headers), and a framework's own error pages and body parsing would get in
 * the way of that.
 */

/**
 * `primary_rate_limit`, `secondary_rate_limit`, `server_error`, `base_branch_modified`: the request is
 * refused and nothing happens (`base_branch_modified` is GitHub's 405 "Base branch was modified. Review and try the merge again." to a
 * merge when someone pushed to the base branch while GitHub was merging — a 405, not the 409 of a head that is not
 * `sha`: the head is unchanged, the merge may be tried again). `lost_response`: the request takes effect, then the connection is closed without an
 * answer (a reply lost on the way). `delayed_response`: it takes effect and the answer waits
 * `delayMs` (time for a test to SIGKILL the caller between GitHub's effect and the caller's record).
 * `forbidden`: the token lacks a permission the request needs, and nothing happens — REST 403, GraphQL
 * 200 with a `FORBIDDEN` error, both "Resource not accessible by personal access token" (a fine-grained
 * token's wording; an App's says "by integration").
 * `stale_read`: a read of a pull request (`GET /repos/{o}/{r}/pulls/{n}`) answered by a replica of GitHub that has not
 * caught up with the PR's last change — the PR as it was last answered before that change, its `updated_at` earlier
 * (or the same: GitHub's times are to the second, and the change may have come in the same second) (the PR as it is
 * when no earlier answer differs); any other request is answered as usual.
 */
export type FaultKind = 'primary_rate_limit' | 'secondary_rate_limit' | 'server_error' | 'base_branch_modified' | 'lost_response' | 'delayed_response' | 'forbidden' | 'stale_read';
const FAULT_KINDS: FaultKind[] = ['primary_rate_limit', 'secondary_rate_limit', 'server_error', 'base_branch_modified', 'lost_response', 'delayed_response', 'forbidden', 'stale_read'];
/** How many earlier versions of a PR a stale read may answer from. */
const PULL_VERSIONS_KEPT = 8;

export interface Fault {
  kind: FaultKind;
  /** How many matching requests fail (default 1). */
  count?: number;
  method?: string;
  /** A substring of the request path (`/graphql` for GraphQL). */
  path?: string;
  /** Secondary rate limit: the `retry-after` header in seconds (absent when not given). */
  retryAfterSeconds?: number;
  /** Primary rate limit: when the limit resets, in seconds from now (default 1). */
  resetInSeconds?: number;
  /** Server error: the status (default 502). Primary and secondary rate limit: 403 (default) or 429 — GitHub answers either limit with either. */
  status?: number;
  /** Delayed response: how long the answer waits (default 5000 ms). */
  delayMs?: number;
  /** The first moment (ISO time) a request may meet the fault; one that comes earlier is answered as usual. */
  notBefore?: string;
}

export interface RequestLogEntry {
  at: string;
  requestId: string;
  method: string;
  path: string;
  status: number;
  operationName: string | null;
  /** The GraphQL mutations/fields at the top of the document (e.g. enablePullRequestAutoMerge). */
  graphqlFields: string[];
  fault: FaultKind | null;
  /** False while a delayed answer waits, and for a lost one. */
  answered: boolean;
}

interface RateWindow {
  used: number;
  resetAt: number;
}

const RATE_LIMIT = 5000;
const MAX_LOGGED_REQUESTS = 10_000;
const ACTOR = 'gantry';
/** Who check runs and statuses set through the control API come from. */
const CI = 'github-fake-ci';

/** `version`: the revision of the pull request a read answers (a `stale_read` answers an earlier one). */
type Handler = (
  match: RegExpExecArray,
  query: URLSearchParams,
  body: Record<string, unknown>,
) => Promise<{ status: number; body: unknown; headers?: Record<string, string>; version?: number }>;


/** How long an idle kept-alive connection stays open (see the constructor). */
const KEEP_ALIVE_MS = 120_000;
export class HttpFrontend {
  private readonly server: Server;
  private readonly graphql: GraphQLEndpoint;
  private readonly faults: (Fault & { remaining: number })[] = [];
  /** The versions of each PR answered to reads, by path and revision (a `stale_read` answers an earlier one). */
  private readonly pullVersions = new Map<string, { version: number; answer: unknown }[]>();
  private readonly log: RequestLogEntry[] = [];
  private readonly rate = new Map<string, RateWindow>();
  private tokens: string[] | null;
  private readonly routes: { method: string; pattern: RegExp; handler: Handler }[];

  constructor(
    private readonly fake: FakeGitHub,
    private readonly webhooks: WebhookDispatcher,
    tokens: string[] | null,
    private readonly logLine: (message: string, fields: Record<string, unknown>) => void,
  ) {
    this.tokens = tokens;
    this.graphql = new GraphQLEndpoint(fake);
    this.server = createServer((req, res) => {
      // handle() answers its own failures; what escapes it still ends the request.
      this.handle(req, res).catch((error: unknown) => {
        this.logLine('request failed', { path: req.url, error: error instanceof Error ? error.stack : String(error) });
        res.destroy();
      });
    });
    // Node closes a kept-alive connection after 5 s idle. A test that runs the fake in its own process
    // and blocks that process for longer (synchronous git on a loaded machine) had both the client's
    // and the server's idle timers overdue, and its next request went out on a connection the server
    // then closed: ECONNRESET, a request lost for nothing. GitHub keeps idle connections far longer.
    this.server.keepAliveTimeout = KEEP_ALIVE_MS;
    this.routes = this.restRoutes();
  }

  listen(port: number, host: string): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        const address = this.server.address();
        resolve(typeof address === 'object' && address ? address.port : port);
      });
    });
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  // ---------------------------------------------------------------------------------------------

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://github-fake');
    const method = (req.method ?? 'GET').toUpperCase();
    const requestId = githubRequestId();
    res.setHeader('x-github-request-id', requestId);
    let raw: Buffer;
    try {
      raw = await readBody(req);
    } catch {
      res.destroy();
      return;
    }
    try {
      if (url.pathname === '/health' || url.pathname === '/ready' || url.pathname === '/_fake/health') {
        return send(res, 200, { status: 'ok' });
      }
      if (url.pathname.startsWith('/_fake/')) return await this.control(method, url, raw, res);
      const page = /^\/([^/]+)\/([^/]+)\/pull\/(\d+)$/.exec(url.pathname);
      if (method === 'GET' && page) return await this.pullPage(page, res);
      await this.api(method, url, raw, requestId, req, res);
    } catch (error) {
      this.logLine('request failed', { method, path: url.pathname, error: error instanceof Error ? error.stack : String(error) });
      if (!res.headersSent) send(res, 500, { message: 'Server Error', documentation_url: DOCUMENTATION.root, status: '500' });
    }
  }

  private async api(method: string, url: URL, raw: Buffer, requestId: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const isGraphQL = url.pathname === '/graphql';
    let body: Record<string, unknown> = {};
    let parseProblem = false;
    if (raw.length > 0) {
      try {
        const parsed: unknown = JSON.parse(raw.toString('utf8'));
        if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) body = parsed as Record<string, unknown>;
        else parseProblem = true;
      } catch {
        parseProblem = true;
      }
    }
    const entry: RequestLogEntry = {
      at: new Date().toISOString(),
      requestId,
      method,
      path: url.pathname,
      status: 0,
      operationName: isGraphQL && typeof body.operationName === 'string' ? body.operationName : null,
      graphqlFields: isGraphQL && typeof body.query === 'string' ? topLevelFields(body.query) : [],
      fault: null,
      answered: false,
    };
    this.log.push(entry);
    // A long-running fake (npm start) keeps the most recent requests only.
    if (this.log.length > MAX_LOGGED_REQUESTS) this.log.splice(0, this.log.length - MAX_LOGGED_REQUESTS);
    let afterEffect: Fault | null = null;
    const reply = (status: number, answered: unknown, headers: Record<string, string> = {}, version?: number) => {
      entry.status = status;
      const payload = version !== undefined ? this.pullAsReplicated(url.pathname, version, answered, afterEffect?.kind === 'stale_read') : answered;
      if (afterEffect?.kind === 'lost_response') {
        res.destroy();
        return;
      }
      const answer = () => {
        for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
        send(res, status, payload);
        entry.answered = true;
      };
      if (afterEffect?.kind === 'delayed_response') setTimeout(answer, afterEffect.delayMs ?? 5000).unref();
      else answer();
    };

    // Authentication first, as on GitHub: a bad token is 401 whatever else is wrong.
    const token = tokenOf(req.headers.authorization);
    if (this.tokens) {
      if (token === null) return reply(401, { message: 'Requires authentication', documentation_url: DOCUMENTATION.root, status: '401' });
      if (!this.tokens.includes(token)) return reply(401, { message: 'Bad credentials', documentation_url: DOCUMENTATION.root, status: '401' });
    }
    const resource = isGraphQL ? 'graphql' : 'core';
    const window = this.rateWindow(`${token ?? 'anonymous'}:${resource}`);

    const fault = this.takeFault(method, url.pathname);
    if (fault) entry.fault = fault.kind;
    if (fault?.kind === 'lost_response' || fault?.kind === 'delayed_response' || fault?.kind === 'stale_read') afterEffect = fault;
    else if (fault) {
      const failure = this.faultResponse(fault, window, resource);
      return reply(failure.status, failure.body, failure.headers);
    }
    window.used += 1;
    const rateHeaders = rateLimitHeaders(window, resource);

    if (parseProblem) return reply(400, { message: 'Problems parsing JSON', documentation_url: DOCUMENTATION.root, status: '400' }, rateHeaders);

    if (isGraphQL) {
      if (method !== 'POST') return reply(404, { message: 'Not Found', documentation_url: DOCUMENTATION.root, status: '404' }, rateHeaders);
      const result = await this.graphql.handle(body, ACTOR);
      return reply(200, result, rateHeaders);
    }

    for (const route of this.routes) {
      if (route.method !== method) continue;
      const match = route.pattern.exec(url.pathname);
      if (!match) continue;
      try {
        const result = await route.handler(match, url.searchParams, body);
        return reply(result.status, result.body, { ...rateHeaders, ...result.headers }, result.version);
      } catch (error) {
        if (error instanceof ApiError) return reply(error.status, error.body(), { ...rateHeaders, ...error.headers });
        throw error;
      }
    }
    return reply(404, notFound().body(), rateHeaders);
  }

  private rateWindow(key: string): RateWindow {
    const now = Date.now();
    let window = this.rate.get(key);
    if (!window || window.resetAt <= now) {
      window = { used: 0, resetAt: now + 3_600_000 };
      this.rate.set(key, window);
    }
    return window;
  }

  /**
   * A read of a PR as GitHub's replicas serve it: the versions answered are kept (by the PR's revision — not by its
   * `updated_at`, which is to the second and the same for two changes in one second), and a stale read is answered with
   * the latest one before the PR's current version, as a replica behind the others would: its `updated_at` earlier, or
   * the same when the change came in the same second.
   */
  private pullAsReplicated(path: string, version: number, current: unknown, stale: boolean): unknown {
    const versions = this.pullVersions.get(path) ?? [];
    if (!stale) {
      const kept = versions.filter((v) => v.version !== version);
      kept.push({ version, answer: current });
      this.pullVersions.set(path, kept.slice(-PULL_VERSIONS_KEPT));
      return current;
    }
    const earlier = versions.filter((v) => v.version < version).at(-1);
    return earlier?.answer ?? current;
  }

  private takeFault(method: string, path: string): Fault | null {
    const now = Date.now();
    const index = this.faults.findIndex(
      (f) => (!f.method || f.method.toUpperCase() === method) && (!f.path || path.includes(f.path)) && (!f.notBefore || Date.parse(f.notBefore) <= now),
    );
    if (index === -1) return null;
    const fault = this.faults[index]!;
    fault.remaining -= 1;
    if (fault.remaining <= 0) this.faults.splice(index, 1);
    return fault;
  }

  /**
   * GitHub's rate-limit answers: the primary limit is 403 or 429 with `x-ratelimit-remaining: 0` and the
   * reset time (GraphQL: 200 with a RATE_LIMITED error); the secondary limit is 403 or 429 (GitHub
   * documents both) with its message and, sometimes, `retry-after`. These are what Octokit's
   * throttling plugin recognises.
   */
  private faultResponse(fault: Fault, window: RateWindow, resource: string): { status: number; body: unknown; headers: Record<string, string> } {
    const headers = rateLimitHeaders(window, resource);
    if (fault.kind === 'primary_rate_limit') {
      const reset = Math.ceil(Date.now() / 1000) + (fault.resetInSeconds ?? 1);
      const limited = { ...headers, 'x-ratelimit-remaining': '0', 'x-ratelimit-used': String(RATE_LIMIT), 'x-ratelimit-reset': String(reset) };
      if (resource === 'graphql') {
        return { status: 200, headers: limited, body: { errors: [{ type: 'RATE_LIMITED', message: `API rate limit already exceeded for user ID ${1}.` }] } };
      }
      const status = fault.status === 429 ? 429 : 403;
      return {
        status,
        headers: limited,
        body: {
          message: 'API rate limit exceeded for user ID 1. If you reach out to GitHub Support for help, please include the request ID.',
          documentation_url: 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api',
          status: String(status),
        },
      };
    }
    if (fault.kind === 'secondary_rate_limit') {
      const status = fault.status === 429 ? 429 : 403;
      return {
        status,
        headers: fault.retryAfterSeconds !== undefined ? { ...headers, 'retry-after': String(fault.retryAfterSeconds) } : headers,
        body: {
          message:
            'You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID.',
          documentation_url: 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits',
          status: String(status),
        },
      };
    }
    if (fault.kind === 'forbidden') {
      const message = 'Resource not accessible by personal access token';
      if (resource === 'graphql') return { status: 200, headers, body: { data: null, errors: [{ type: 'FORBIDDEN', message }] } };
      return { status: 403, headers, body: { message, documentation_url: DOCUMENTATION.root, status: '403' } };
    }
    if (fault.kind === 'base_branch_modified') {
      return { status: 405, headers, body: { message: 'Base branch was modified. Review and try the merge again.', documentation_url: DOCUMENTATION.mergePull, status: '405' } };
    }
    const status = fault.status ?? 502;
    return { status, headers, body: { message: status === 502 ? 'Server Error' : 'Internal Server Error', documentation_url: DOCUMENTATION.root, status: String(status) } };
  }

  /** The PR's `html_url`: a plain page saying what GitHub's page would (for people following a demo). */
  private async pullPage(match: RegExpExecArray, res: ServerResponse): Promise<void> {
    const fake = this.fake;
    const text = await fake
      .run(async () => {
        const record = fake.repository(decodeURIComponent(match[1]!), decodeURIComponent(match[2]!));
        const pull = fake.pull(record, Number(match[3]));
        const state = pull.mergedAt ? `merged (${pull.mergeCommitSha})` : pull.state;
        return [
          `${record.owner}/${record.name} #${pull.number}: ${pull.title}`,
          `${pull.headRef} (${pull.headSha}) into ${pull.baseRef}`,
          `state: ${state}${pull.draft ? ', draft' : ''}; mergeable_state: ${fake.mergeableState(pull)}${pull.autoMerge ? `; auto-merge (${pull.autoMerge.mergeMethod})` : ''}`,
        ].join('\n');
      })
      .catch(() => null);
    if (text === null) return send(res, 404, { message: 'Not Found' });
    const html = `<!doctype html><meta charset="utf-8"><title>pull request</title><pre>${text.replace(/[&<>]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;' })[c]!)}</pre>\n`;
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-length': Buffer.byteLength(html) });
    res.end(html);
  }

  // ---------------------------------------------------------------------------------------------
  // REST routes

  private restRoutes(): { method: string; pattern: RegExp; handler: Handler }[] {
    const fake = this.fake;
    const repo = '^/repos/([^/]+)/([^/]+)';
    const route = (method: string, path: string, handler: Handler) => ({ method, pattern: new RegExp(`${repo}${path}$`), handler });
    const ok = (body: unknown, status = 200, headers?: Record<string, string>) => ({ status, body, headers });
    const locked = (handler: Handler): Handler => (match, query, body) => fake.run(() => handler(match, query, body));
    const recordOf = (m: RegExpExecArray) => fake.repository(decodeURIComponent(m[1]!), decodeURIComponent(m[2]!));
    const pullNumber = (value: string) => {
      const number = Number(value);
      if (!Number.isInteger(number) || number <= 0) throw notFound();
      return number;
    };
    return [
      route('GET', '', locked(async (m) => ok(fake.renderRepository(recordOf(m))))),
      route(
        'POST',
        '/pulls',
        locked(async (m, _q, body) => {
          const record = recordOf(m);
          const pull = await fake.createPull(record, body, ACTOR);
          const rendered = await fake.renderPullFull(pull);
          return ok(rendered, 201, { location: rendered.url });
        }),
      ),
      route(
        'GET',
        '/pulls',
        locked(async (m, query) => {
          const pulls = fake.listPulls(recordOf(m), query);
          const { page, perPage, last } = pageOf(query, pulls.length);
          return ok(
            pulls.slice((page - 1) * perPage, page * perPage).map((p) => fake.renderPullSimple(p)),
            200,
            linkHeader(`${fake.ctx.baseUrl}/repos/${m[1]}/${m[2]}/pulls`, query, page, last),
          );
        }),
      ),
      route(
        'GET',
        '/pulls/(\\d+)',
        locked(async (m) => {
          const pull = fake.pull(recordOf(m), pullNumber(m[3]!));
          return { ...ok(await fake.renderPullFull(pull)), version: pull.revision ?? 0 };
        }),
      ),
      route(
        'PATCH',
        '/pulls/(\\d+)',
        locked(async (m, _q, body) => {
          const record = recordOf(m);
          const pull = await fake.updatePull(record, fake.pull(record, pullNumber(m[3]!)), body, ACTOR);
          return ok(await fake.renderPullFull(pull));
        }),
      ),
      route(
        'PUT',
        '/pulls/(\\d+)/merge',
        locked(async (m, _q, body) => {
          const record = recordOf(m);
          const { sha } = await fake.mergePull(record, fake.pull(record, pullNumber(m[3]!)), body, ACTOR);
          return ok({ sha, merged: true, message: 'Pull Request successfully merged' });
        }),
      ),
      route(
        'GET',
        '/pulls/(\\d+)/merge',
        locked(async (m) => {
          // 204 when merged, 404 when not (GitHub's "check if a pull request has been merged").
          const pull = fake.pull(recordOf(m), pullNumber(m[3]!));
          if (!pull.mergedAt) throw notFound();
          return ok(null, 204);
        }),
      ),
      route(
        'POST',
        '/check-runs',
        locked(async (m, _q, body) => {
          const record = recordOf(m);
          const run = await fake.createCheckRun(record, body, ACTOR);
          return ok(fake.renderCheckRun(run), 201);
        }),
      ),
      route('GET', '/check-runs/(\\d+)', locked(async (m) => ok(fake.renderCheckRun(fake.checkRun(recordOf(m), Number(m[3])))))),
      route(
        'PATCH',
        '/check-runs/(\\d+)',
        locked(async (m, _q, body) => {
          const record = recordOf(m);
          const run = await fake.updateCheckRun(record, fake.checkRun(record, Number(m[3])), body, ACTOR);
          return ok(fake.renderCheckRun(run));
        }),
      ),
      route(
        'GET',
        '/commits/(.+)/check-runs',
        locked(async (m, query) => {
          const runs = await fake.listCheckRuns(recordOf(m), decodeURIComponent(m[3]!), query);
          const { page, perPage, last } = pageOf(query, runs.length);
          return ok(
            { total_count: runs.length, check_runs: runs.slice((page - 1) * perPage, page * perPage).map((r) => fake.renderCheckRun(r)) },
            200,
            linkHeader(`${fake.ctx.baseUrl}/repos/${m[1]}/${m[2]}/commits/${m[3]}/check-runs`, query, page, last),
          );
        }),
      ),
      route(
        'GET',
        '/commits/(.+)/status',
        // GitHub pages the combined status's statuses (per_page, at most 100); its state and total_count are of them all.
        locked(async (m, query) => {
          const combined = await fake.combinedStatus(recordOf(m), decodeURIComponent(m[3]!));
          const { page, perPage, last } = pageOf(query, combined.statuses.length);
          return ok(
            { ...combined, statuses: combined.statuses.slice((page - 1) * perPage, page * perPage) },
            200,
            linkHeader(`${fake.ctx.baseUrl}/repos/${m[1]}/${m[2]}/commits/${m[3]}/status`, query, page, last),
          );
        }),
      ),
      route('POST', '/statuses/([^/]+)', locked(async (m, _q, body) => ok(await fake.createStatus(recordOf(m), decodeURIComponent(m[3]!), body, ACTOR), 201))),
    ];
  }

  // ---------------------------------------------------------------------------------------------
  // Control API (tests and tools; not GitHub's)

  private async control(method: string, url: URL, raw: Buffer, res: ServerResponse): Promise<void> {
    const fake = this.fake;
    let body: Record<string, unknown> = {};
    if (raw.length > 0) {
      try {
        body = JSON.parse(raw.toString('utf8')) as Record<string, unknown>;
      } catch {
        return send(res, 400, { message: 'Problems parsing JSON' });
      }
    }
    const path = url.pathname.slice('/_fake'.length);
    const repoMatch = /^\/repositories\/([^/]+)\/([^/]+)(\/.*)?$/.exec(path);
    try {
      if (method === 'POST' && path === '/repositories') {
        const record = await fake.run(() => fake.createRepository(body as never));
        return send(res, 201, repositorySummary(record));
      }
      if (repoMatch) {
        const [, owner, name, rest = ''] = repoMatch;
        const record = () => fake.repository(decodeURIComponent(owner!), decodeURIComponent(name!));
        if (method === 'GET' && rest === '') return send(res, 200, await fake.run(async () => repositorySummary(record())));
        if (method === 'PATCH' && rest === '') return send(res, 200, await fake.run(async () => repositorySummary(fake.updateRepository(record(), body))));
        if (method === 'POST' && rest === '/commits') return send(res, 201, await fake.run(() => fake.commit(record(), body as never)));
        if (method === 'GET' && rest.startsWith('/branches/')) {
          const branch = decodeURIComponent(rest.slice('/branches/'.length));
          const sha = await fake.run(async () => fake.git(record()).readBranches().get(branch) ?? null);
          return sha ? send(res, 200, { branch, sha }) : send(res, 404, { message: `no branch ${branch}` });
        }
        // What CI does, without a token: the same operations as the REST endpoints, by "ci".
        if (method === 'POST' && rest === '/check-runs') {
          return send(res, 201, await fake.run(async () => fake.renderCheckRun(await fake.createCheckRun(record(), body, CI))));
        }
        const checkRunMatch = /^\/check-runs\/(\d+)$/.exec(rest);
        if (method === 'PATCH' && checkRunMatch) {
          return send(
            res,
            200,
            await fake.run(async () => {
              const r = record();
              return fake.renderCheckRun(await fake.updateCheckRun(r, fake.checkRun(r, Number(checkRunMatch[1])), body, CI));
            }),
          );
        }
        const statusMatch = /^\/statuses\/([0-9a-f]{40})$/.exec(rest);
        if (method === 'POST' && statusMatch) return send(res, 201, await fake.run(() => fake.createStatus(record(), statusMatch[1]!, body, CI)));
        const reviewMatch = /^\/pulls\/(\d+)\/reviews$/.exec(rest);
        if (method === 'POST' && reviewMatch) {
          return send(
            res,
            201,
            await fake.run(async () => {
              const r = record();
              return fake.submitReview(r, fake.pull(r, Number(reviewMatch[1])), body as never);
            }),
          );
        }
        if (method === 'GET' && rest === '/pulls') {
          return send(
            res,
            200,
            await fake.run(async () => {
              const r = record();
              const pulls = fake.state.pulls.filter((p) => p.repository === `${r.owner}/${r.name}`);
              return Promise.all(pulls.map((p) => fake.renderPullFull(p)));
            }),
          );
        }
      }
      if (method === 'POST' && path === '/refresh') {
        await fake.run(async () => undefined);
        return send(res, 200, { ok: true });
      }
      if (method === 'PUT' && path === '/mergeability') {
        const mode = body.mode === 'manual' ? 'manual' : 'auto';
        await fake.run(async () => fake.setMergeabilityMode(mode));
        return send(res, 200, { mode });
      }
      if (method === 'POST' && path === '/mergeability/compute') {
        await fake.run(() => fake.computeAllMergeability());
        return send(res, 200, { ok: true });
      }
      if (method === 'PUT' && path === '/clock') {
        return send(res, 200, { now: await fake.run(async () => fake.holdClock(body.held === true)) });
      }
      if (method === 'PUT' && path === '/auto-checks') {
        const checks = Array.isArray(body.checks) ? (body.checks as AutoCheck[]) : [];
        await fake.run(async () => {
          fake.autoChecks = checks;
        });
        return send(res, 200, { checks });
      }
      if (method === 'GET' && path === '/deliveries') {
        const filter = { event: url.searchParams.get('event') ?? undefined, action: url.searchParams.get('action') ?? undefined };
        return send(res, 200, this.webhooks.list(filter).map(deliveryView));
      }
      if (method === 'POST' && path === '/deliveries/hold') {
        this.webhooks.hold();
        return send(res, 200, { holding: true });
      }
      if (method === 'POST' && path === '/deliveries/release') {
        this.webhooks.release(Array.isArray(body.order) ? (body.order as string[]) : undefined);
        return send(res, 200, { holding: false });
      }
      if (method === 'POST' && path === '/deliveries/rules') {
        this.webhooks.addRule(body as unknown as DeliveryRule);
        return send(res, 201, { ok: true });
      }
      const deliveryMatch = /^\/deliveries\/([^/]+)\/(redeliver|drop)$/.exec(path);
      if (method === 'POST' && deliveryMatch) {
        const [, id, verb] = deliveryMatch;
        const delivery = verb === 'redeliver' ? await this.webhooks.redeliver(id!) : this.webhooks.drop(id!);
        return send(res, 200, deliveryView(delivery));
      }
      if (method === 'PUT' && path === '/webhooks') {
        this.webhooks.setTargets(Array.isArray(body.webhooks) ? (body.webhooks as WebhookTarget[]) : []);
        return send(res, 200, { ok: true });
      }
      if (method === 'POST' && path === '/faults') {
        const fault = body as unknown as Fault;
        if (!FAULT_KINDS.includes(fault.kind)) return send(res, 400, { message: `unknown fault kind ${String(fault.kind)}` });
        if (fault.notBefore !== undefined && Number.isNaN(Date.parse(fault.notBefore))) return send(res, 400, { message: `notBefore is not a time: ${String(fault.notBefore)}` });
        this.faults.push({ ...fault, remaining: fault.count ?? 1 });
        return send(res, 201, { ok: true });
      }
      if (method === 'DELETE' && path === '/faults') {
        this.faults.length = 0;
        return send(res, 200, { ok: true });
      }
      if (method === 'GET' && path === '/requests') return send(res, 200, this.log);
      if (method === 'PUT' && path === '/tokens') {
        this.tokens = Array.isArray(body.tokens) ? (body.tokens as string[]) : null;
        return send(res, 200, { ok: true });
      }
      return send(res, 404, { message: `no control route ${method} ${path}` });
    } catch (error) {
      if (error instanceof ApiError) return send(res, error.status, error.body());
      return send(res, 400, { message: error instanceof Error ? error.message : String(error) });
    }
  }
}

function repositorySummary(record: { owner: string; name: string; gitDir: string; defaultBranch: string; settings: unknown; protection: unknown }) {
  return {
    fullName: `${record.owner}/${record.name}`,
    cloneUrl: cloneUrl(record as never),
    gitDir: record.gitDir,
    defaultBranch: record.defaultBranch,
    settings: record.settings,
    protection: record.protection,
  };
}

function deliveryView(delivery: { id: string; hookId: number; url: string; event: string; action: string | null; body: string; state: string; createdAt: string; attempts: unknown[] }) {
  return {
    id: delivery.id,
    hookId: delivery.hookId,
    url: delivery.url,
    event: delivery.event,
    action: delivery.action,
    state: delivery.state,
    createdAt: delivery.createdAt,
    attempts: delivery.attempts,
    payload: JSON.parse(delivery.body) as unknown,
  };
}

/** GitHub's `per_page` (default 30, at most 100) and `page` (from 1), and the last page for `total` items. */
function pageOf(query: URLSearchParams, total: number): { page: number; perPage: number; last: number } {
  const perPage = Math.min(Math.max(Number(query.get('per_page') ?? 30) || 30, 1), 100);
  const page = Math.max(Number(query.get('page') ?? 1) || 1, 1);
  return { page, perPage, last: Math.max(Math.ceil(total / perPage), 1) };
}

/** GitHub's pagination: a Link header with next/last (and prev/first) when there is more than one page. */
function linkHeader(base: string, query: URLSearchParams, page: number, last: number): Record<string, string> {
  if (last <= 1) return {};
  const at = (n: number) => {
    const q = new URLSearchParams(query);
    q.set('page', String(n));
    return `<${base}?${q}>`;
  };
  const links: string[] = [];
  if (page > 1) links.push(`${at(page - 1)}; rel="prev"`, `${at(1)}; rel="first"`);
  if (page < last) links.push(`${at(page + 1)}; rel="next"`, `${at(last)}; rel="last"`);
  return { link: links.join(', ') };
}

function rateLimitHeaders(window: RateWindow, resource: string): Record<string, string> {
  return {
    'x-ratelimit-limit': String(RATE_LIMIT),
    'x-ratelimit-remaining': String(Math.max(RATE_LIMIT - window.used, 0)),
    'x-ratelimit-used': String(window.used),
    'x-ratelimit-reset': String(Math.ceil(window.resetAt / 1000)),
    'x-ratelimit-resource': resource,
    'x-github-api-version-selected': '2022-11-28',
  };
}

/** `Authorization: token X` or `Bearer X` (both accepted by GitHub). */
function tokenOf(header: string | undefined): string | null {
  if (!header) return null;
  const match = /^(?:token|bearer)\s+(.+)$/i.exec(header.trim());
  return match ? match[1]!.trim() : null;
}

/** GitHub's request ids look like `CDE2:5B3D:1A2B3C:1B2C3D:6543210F`. */
function githubRequestId(): string {
  const hex = (bytes: number) => randomBytes(bytes).toString('hex').toUpperCase();
  return `${hex(2)}:${hex(2)}:${hex(3)}:${hex(3)}:${hex(4)}`;
}

function topLevelFields(query: string): string[] {
  // Enough to tell which mutation or query a request made, for the request log.
  const open = query.indexOf('{');
  if (open === -1) return [];
  const fields: string[] = [];
  let depth = 0;
  const tokenPattern = /[{}()]|[A-Za-z_][A-Za-z0-9_]*/g;
  let parens = 0;
  tokenPattern.lastIndex = open;
  let match: RegExpExecArray | null;
  while ((match = tokenPattern.exec(query))) {
    const token = match[0];
    if (token === '(') parens++;
    else if (token === ')') parens--;
    else if (token === '{') depth++;
    else if (token === '}') depth--;
    else if (depth === 1 && parens === 0) fields.push(token);
    if (depth === 0 && token === '}') break;
  }
  return fields.filter((f, i) => fields.indexOf(f) === i && !/^(on|true|false|null)$/.test(f));
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (status === 204 || body === null) {
    res.writeHead(status);
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
