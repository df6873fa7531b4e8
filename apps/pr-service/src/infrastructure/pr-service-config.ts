import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { ErrorCode, GantryError } from '@gantry/contracts';

/** How the pr-service reaches GitHub: a token (a PAT or an installation token) or a GitHub App. */
export type GitHubAuth =
  | { kind: 'token'; token: string }
  | { kind: 'app'; appId: string; privateKey: string; installationId: number };

export interface PrServiceConfig {
  /** REST base URL: https://api.github.com, a GitHub Enterprise `https://<host>/api/v3`, or the local fake. */
  apiUrl: string;
  auth: GitHubAuth | null;
  /** Webhook secrets accepted (several while one is rotated); empty: every delivery is refused. */
  webhookSecrets: string[];
  /** Seconds to wait after a secondary rate limit that names no retry-after (GitHub asks for at least 60). */
  secondaryRateLimitWaitS: number;
  /** How often a request refused by a rate limit is sent again after the wait. */
  rateLimitRetries: number;
  /** How often every open pull request is read again (a base that moved can make it conflict without any webhook). */
  resyncIntervalMs: number;
  /** Where the pr-service fetches branches to find the files of a conflict. */
  gitDir: string;
  gitTimeoutMs: number;
  /** How many pull requests are worked on at once. */
  reconcileConcurrency: number;
}

const positiveInt = (name: string, fallback: number, max = 2 ** 31 - 1) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return fallback;
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0 || n > max) {
        ctx.addIssue({ code: 'custom', message: `${name} must be a whole number from 0 to ${max}` });
        return z.NEVER;
      }
      return n;
    });

const EnvSchema = z.object({
  GANTRY_GITHUB_API_URL: z.url().optional(),
  GANTRY_GITHUB_TOKEN: z.string().optional(),
  GANTRY_GITHUB_APP_ID: z.string().optional(),
  GANTRY_GITHUB_APP_PRIVATE_KEY: z.string().optional(),
  GANTRY_GITHUB_APP_PRIVATE_KEY_PATH: z.string().optional(),
  GANTRY_GITHUB_APP_INSTALLATION_ID: positiveInt('GANTRY_GITHUB_APP_INSTALLATION_ID', 0),
  GANTRY_GITHUB_WEBHOOK_SECRETS: z.string().optional(),
  GANTRY_GITHUB_SECONDARY_RATE_LIMIT_WAIT_S: positiveInt('GANTRY_GITHUB_SECONDARY_RATE_LIMIT_WAIT_S', 60, 3600),
  GANTRY_GITHUB_RATE_LIMIT_RETRIES: positiveInt('GANTRY_GITHUB_RATE_LIMIT_RETRIES', 3, 100),
  GANTRY_PR_RESYNC_INTERVAL_MS: positiveInt('GANTRY_PR_RESYNC_INTERVAL_MS', 60_000),
  GANTRY_PR_GIT_DIR: z.string().optional(),
  GANTRY_PR_GIT_TIMEOUT_MS: positiveInt('GANTRY_PR_GIT_TIMEOUT_MS', 120_000),
  GANTRY_PR_RECONCILE_CONCURRENCY: positiveInt('GANTRY_PR_RECONCILE_CONCURRENCY', 8, 256),
});

/** The pr-service's own settings (docs/pr-service.md); a refusal names the variable, never its value. */
export function loadPrServiceConfig(env: Record<string, string | undefined> = process.env): PrServiceConfig {
  const parsed = EnvSchema.safeParse(env);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
    throw new GantryError(ErrorCode.INVALID_COMMAND, `pr-service settings: ${problems}`);
  }
  const e = parsed.data;
  return {
    apiUrl: (e.GANTRY_GITHUB_API_URL ?? 'https://api.github.com').replace(/\/+$/, ''),
    auth: authOf(e),
    webhookSecrets: (e.GANTRY_GITHUB_WEBHOOK_SECRETS ?? '').split(',').map((s) => s.trim()).filter((s) => s !== ''),
    secondaryRateLimitWaitS: e.GANTRY_GITHUB_SECONDARY_RATE_LIMIT_WAIT_S,
    rateLimitRetries: e.GANTRY_GITHUB_RATE_LIMIT_RETRIES,
    resyncIntervalMs: e.GANTRY_PR_RESYNC_INTERVAL_MS,
    gitDir: e.GANTRY_PR_GIT_DIR?.trim() || join(tmpdir(), 'gantry-pr-service-git'),
    gitTimeoutMs: e.GANTRY_PR_GIT_TIMEOUT_MS,
    reconcileConcurrency: Math.max(1, e.GANTRY_PR_RECONCILE_CONCURRENCY),
  };
}

function authOf(e: z.infer<typeof EnvSchema>): GitHubAuth | null {
  const token = e.GANTRY_GITHUB_TOKEN?.trim();
  const appId = e.GANTRY_GITHUB_APP_ID?.trim();
  if (token && appId) throw new GantryError(ErrorCode.INVALID_COMMAND, 'pr-service settings: set GANTRY_GITHUB_TOKEN or GANTRY_GITHUB_APP_ID, not both');
  if (token) return { kind: 'token', token };
  if (!appId) return null;
  const privateKey = e.GANTRY_GITHUB_APP_PRIVATE_KEY ?? (e.GANTRY_GITHUB_APP_PRIVATE_KEY_PATH ? readFileSync(e.GANTRY_GITHUB_APP_PRIVATE_KEY_PATH, 'utf8') : undefined);
  if (!privateKey || e.GANTRY_GITHUB_APP_INSTALLATION_ID === 0) {
    throw new GantryError(
      ErrorCode.INVALID_COMMAND,
      'pr-service settings: a GitHub App needs GANTRY_GITHUB_APP_PRIVATE_KEY (or _PATH) and GANTRY_GITHUB_APP_INSTALLATION_ID',
    );
  }
  return { kind: 'app', appId, privateKey, installationId: e.GANTRY_GITHUB_APP_INSTALLATION_ID };
}
