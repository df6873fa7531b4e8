import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { GitHubFakeControl } from './control-client.js';
import { FakeGitHub, type AutoCheck, type CreateRepositoryInput } from './fake-github.js';
import { HttpFrontend } from './http-server.js';
import { WebhookDispatcher, type WebhookTarget } from './webhooks.js';

export { GitHubFakeControl } from './control-client.js';
export type { CreateRepositoryRequest, DeliveryView, PullView, RepositorySummary } from './control-client.js';
export type { Fault, FaultKind, RequestLogEntry } from './http-server.js';
export type { DeliveryRule, DeliveryState, WebhookTarget } from './webhooks.js';
export { githubGraphQLSchema } from './graphql.js';
export type { AutoCheck, CreateRepositoryInput, RepositoryUpdate } from './fake-github.js';

export interface GitHubFakeOptions {
  /** Where repositories and state.json live; default a fresh temporary directory that close() removes. */
  dataDir?: string;
  port?: number;
  host?: string;
  webhooks?: WebhookTarget[];
  /** How long `mergeable` stays null after a push or a base move (default 50 ms in-process). */
  mergeabilityDelayMs?: number;
  /** How often branches are read to notice pushes (default 100 ms). */
  refPollMs?: number;
  /** Accepted tokens; absent: any token (or none) is accepted. */
  tokens?: string[];
  /** Repositories to host at start (one already hosted, from an earlier run, gets these settings again). */
  repositories?: CreateRepositoryInput[];
  /** Checks reported by themselves on every new PR head, like CI (default none). */
  autoChecks?: AutoCheck[];
  /** Structured log lines (default: none). */
  log?: (message: string, fields: Record<string, unknown>) => void;
}

export interface GitHubFake {
  /** REST base URL (Octokit's `baseUrl`); GraphQL is `${url}/graphql`. */
  url: string;
  port: number;
  dataDir: string;
  control: GitHubFakeControl;
  close(): Promise<void>;
}

/** Starts the fake on a port of its own; close() stops it (and removes a temporary data dir). */
export async function startGitHubFake(options: GitHubFakeOptions = {}): Promise<GitHubFake> {
  const temporary = options.dataDir === undefined;
  const dataDir = options.dataDir ?? mkdtempSync(path.join(tmpdir(), 'github-fake-'));
  const log = options.log ?? (() => undefined);
  const webhooks = new WebhookDispatcher(options.webhooks ?? [], log);
  const render = { baseUrl: '' };
  const fake = new FakeGitHub({ dataDir, render, webhooks, mergeabilityDelayMs: options.mergeabilityDelayMs ?? 50, log });
  fake.load();
  const frontend = new HttpFrontend(fake, webhooks, options.tokens ?? null, log);
  const host = options.host ?? '127.0.0.1';
  const port = await frontend.listen(options.port ?? 0, host);
  render.baseUrl = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  fake.autoChecks = options.autoChecks ?? [];
  for (const repository of options.repositories ?? []) {
    await fake.run(async () => {
      const hosted = fake.findRepository(repository.owner, repository.name);
      if (!hosted) return fake.createRepository(repository);
      return fake.updateRepository(hosted, { ...repository.settings, requiredChecks: repository.requiredChecks, strict: repository.strict });
    });
  }
  // GitHub notices pushes on its own; so does the fake, by looking at the branches regularly.
  const poll = setInterval(() => {
    void fake.poll().catch((error: unknown) => log('push detection failed', { error: String(error) }));
  }, options.refPollMs ?? 100);
  poll.unref();
  log('github fake listening', { url: render.baseUrl, dataDir });
  let closing: Promise<void> | null = null;
  return {
    url: render.baseUrl,
    port,
    dataDir,
    control: new GitHubFakeControl(render.baseUrl),
    close() {
      closing ??= (async () => {
        clearInterval(poll);
        fake.close();
        await frontend.close();
        await fake.idle();
        await webhooks.close();
        if (temporary) rmSync(dataDir, { recursive: true, force: true });
      })();
      return closing;
    },
  };
}
