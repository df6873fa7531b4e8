import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { retry } from '@octokit/plugin-retry';
import { throttling } from '@octokit/plugin-throttling';
import { Octokit } from '@octokit/rest';
import Bottleneck from 'bottleneck';
import { verify } from '@octokit/webhooks-methods';
import type { GitHubFake } from '../index.js';

/*
 * What the fake's own tests use: real Octokit clients (with the retry and throttling plugins a PR
 * service uses), a webhook receiver that checks signatures, and a git clone to push from.
 */

export const RetryingOctokit = Octokit.plugin(retry, throttling);
export type RetryingOctokitInstance = InstanceType<typeof RetryingOctokit>;

export interface ThrottleEvents {
  secondary: { retryAfter: number; retryCount: number }[];
  primary: { retryAfter: number; retryCount: number }[];
}

/** An Octokit as a PR service would configure it; rate-limit waits shortened by `retryAfterBaseValue`. */
export function octokitFor(fake: GitHubFake, options: { auth?: string; retryAfterBaseValue?: number; fallbackSecondaryRateRetryAfter?: number } = {}) {
  const events: ThrottleEvents = { secondary: [], primary: [] };
  const octokit = new RetryingOctokit({
    auth: options.auth ?? 'test-token',
    baseUrl: fake.url,
    log: { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined },
    // 405 and 409 are answers, not transient failures: a merge must not be retried on them. 429 is a
    // rate limit, which the throttling plugin waits out.
    retry: { doNotRetry: [400, 401, 403, 404, 405, 409, 410, 422, 429, 451], retryAfterBaseValue: options.retryAfterBaseValue ?? 10 },
    throttle: {
      // The plugin paces writes (1 s apart) and writes that notify people (3 s apart, e.g. opening a
      // PR), as GitHub asks of real clients; the fake does not need it.
      write: new Bottleneck.Group({ maxConcurrent: 1, minTime: 0 }),
      notifications: new Bottleneck.Group({ maxConcurrent: 1, minTime: 0 }),
      retryAfterBaseValue: options.retryAfterBaseValue ?? 10,
      fallbackSecondaryRateRetryAfter: options.fallbackSecondaryRateRetryAfter ?? 2,
      onRateLimit: (retryAfter: number, _options: unknown, _octokit: unknown, retryCount: number) => {
        events.primary.push({ retryAfter, retryCount });
        return retryCount < 2;
      },
      onSecondaryRateLimit: (retryAfter: number, _options: unknown, _octokit: unknown, retryCount: number) => {
        events.secondary.push({ retryAfter, retryCount });
        return retryCount < 2;
      },
    },
  });
  return { octokit, events };
}

export interface ReceivedDelivery {
  id: string;
  event: string;
  headers: Record<string, string | string[] | undefined>;
  signatureValid: boolean;
  body: Record<string, any>;
}

/** An HTTP server that records every webhook delivery and whether its signature verifies. */
export async function startWebhookReceiver(secret: string): Promise<{ url: string; received: ReceivedDelivery[]; close(): Promise<void>; waitFor(predicate: (d: ReceivedDelivery) => boolean, count?: number): Promise<ReceivedDelivery[]> }> {
  const received: ReceivedDelivery[] = [];
  const waiters: (() => void)[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      void verify(secret, raw, String(req.headers['x-hub-signature-256'] ?? '')).then(
        (signatureValid) => {
          received.push({ id: String(req.headers['x-github-delivery']), event: String(req.headers['x-github-event']), headers: req.headers, signatureValid, body: JSON.parse(raw) });
          res.writeHead(202).end();
          for (const wake of waiters.splice(0)) wake();
        },
        () => res.writeHead(400).end(),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${address.port}/webhooks/github`,
    received,
    close: () => new Promise((resolve) => server.close(() => resolve())),
    /** Resolves once `count` matching deliveries arrived (waits on arrivals, not on time). */
    async waitFor(predicate, count = 1) {
      for (;;) {
        const matching = received.filter(predicate);
        if (matching.length >= count) return matching;
        await new Promise<void>((resolve) => waiters.push(resolve));
      }
    },
  };
}

/** A work tree cloned from a hosted repository, to commit and push with plain git. */
export class Clone {
  readonly dir: string;

  constructor(cloneUrl: string) {
    this.dir = mkdtempSync(path.join(tmpdir(), 'github-fake-clone-'));
    // The identity is written by the clone itself: two git processes fewer per clone.
    execFileSync('git', ['clone', '-q', '-c', 'user.name=Agent', '-c', 'user.email=agent@example.com', cloneUrl, this.dir]);
  }

  git(...args: string[]): string {
    return execFileSync('git', ['-C', this.dir, ...args], { encoding: 'utf8' }).trim();
  }

  /**
   * Commits `files` on `branch` (created from `from` when new) and pushes it; returns the commit.
   * Five git processes: whether the origin has the branch is read from the remote-tracking refs the
   * pruning fetch just wrote (the origin's branches as they are), and the commit from the branch's
   * ref file, rather than by `ls-remote` and `rev-parse` (each a fork of the test process).
   */
  commitAndPush(branch: string, files: Record<string, string>, message: string, from = 'origin/main'): string {
    this.git('fetch', '-q', '--prune', 'origin');
    const exists = this.ref(`refs/remotes/origin/${branch}`) !== null;
    this.git('checkout', '-q', '-B', branch, exists ? `origin/${branch}` : from);
    for (const [file, content] of Object.entries(files)) {
      mkdirSync(path.dirname(path.join(this.dir, file)), { recursive: true });
      writeFileSync(path.join(this.dir, file), content);
    }
    if (Object.keys(files).length > 0) this.git('add', '--', ...Object.keys(files));
    this.git('commit', '-q', '-m', message);
    this.git('push', '-q', 'origin', `HEAD:refs/heads/${branch}`);
    const sha = this.ref(`refs/heads/${branch}`);
    if (sha === null) throw new Error(`the clone has no ${branch} after committing on it`);
    return sha;
  }

  /** The commit a ref of the clone names (its loose file, else its packed-refs line), or null. */
  private ref(name: string): string | null {
    try {
      const loose = readFileSync(path.join(this.dir, '.git', name), 'utf8').trim();
      if (/^[0-9a-f]{40}$/.test(loose)) return loose;
    } catch {
      // not a loose ref
    }
    let packed = '';
    try {
      packed = readFileSync(path.join(this.dir, '.git', 'packed-refs'), 'utf8');
    } catch {
      return null;
    }
    for (const line of packed.split('\n')) if (line.endsWith(` ${name}`) && /^[0-9a-f]{40} /.test(line)) return line.slice(0, 40);
    return null;
  }

  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
