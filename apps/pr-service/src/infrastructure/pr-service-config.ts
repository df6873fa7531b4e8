import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defineSettings, setting, type Refuse, type SettingValues } from '@gantry/service-runtime';

/** How the pr-service reaches GitHub: a token (a PAT or an installation token) or a GitHub App. */
export type GitHubAuth =
  | { kind: 'token'; token: string }
  | { kind: 'app'; appId: string; privateKey: string; installationId: number };

/** The pr-service's own settings (docs/configuration.md, docs/pr-service.md); the shared ones are the runtime's. */
export interface PrServiceConfig {
  /** REST base URL: https://api.github.com, a GitHub Enterprise `https://<host>/api/v3`, or the local fake. */
  apiUrl: string;
  auth: GitHubAuth | null;
  /** Webhook secrets accepted (several while one is rotated); empty: every delivery is refused. */
  webhookSecrets: string[];
  /** Seconds to wait after a secondary rate limit that names no retry-after (GitHub asks for at least 60). */
  secondaryRateLimitWaitS: number;
  /** How often a request refused by a secondary rate limit is sent again after the wait (a primary limit is not waited out: the run ends). */
  rateLimitRetries: number;
  /** How often every open pull request is read again (a base that moved can make it conflict without any webhook). */
  resyncIntervalMs: number;
  /** Where the pr-service fetches branches to find the files of a conflict. */
  gitDir: string;
  gitTimeoutMs: number;
  /** How many pull requests are worked on at once. */
  reconcileConcurrency: number;
}

export const PR_SERVICE_CONFIG = Symbol('pr-service:config');

const count = (fallback: number, max = 2 ** 31 - 1) => setting.wholeNumber({ min: 0, max, default: fallback });

const variables = {
  GANTRY_GITHUB_API_URL: setting.url({ protocols: ['https:', 'http:'], default: 'https://api.github.com' }),
  GANTRY_GITHUB_TOKEN: setting.secret(),
  GANTRY_GITHUB_APP_ID: setting.text(),
  GANTRY_GITHUB_APP_PRIVATE_KEY: setting.secret(),
  GANTRY_GITHUB_APP_PRIVATE_KEY_PATH: setting.text(),
  GANTRY_GITHUB_APP_INSTALLATION_ID: setting.wholeNumber({ min: 1 }),
  GANTRY_GITHUB_WEBHOOK_SECRETS: setting.secret(),
  GANTRY_GITHUB_SECONDARY_RATE_LIMIT_WAIT_S: count(60, 3600),
  GANTRY_GITHUB_RATE_LIMIT_RETRIES: count(3, 100),
  GANTRY_PR_RESYNC_INTERVAL_MS: count(60_000),
  GANTRY_PR_GIT_DIR: setting.text(),
  GANTRY_PR_GIT_TIMEOUT_MS: count(120_000),
  GANTRY_PR_RECONCILE_CONCURRENCY: setting.wholeNumber({ min: 1, max: 256, default: 8 }),
};

type Values = SettingValues<typeof variables>;

export const prServiceSettings = defineSettings({
  name: 'prs',
  token: PR_SERVICE_CONFIG,
  variables,
  build: (v, refuse): PrServiceConfig => ({
    apiUrl: v.GANTRY_GITHUB_API_URL.replace(/\/+$/, ''),
    auth: authOf(v, refuse),
    webhookSecrets: (v.GANTRY_GITHUB_WEBHOOK_SECRETS ?? '').split(',').map((s) => s.trim()).filter((s) => s !== ''),
    secondaryRateLimitWaitS: v.GANTRY_GITHUB_SECONDARY_RATE_LIMIT_WAIT_S,
    rateLimitRetries: v.GANTRY_GITHUB_RATE_LIMIT_RETRIES,
    resyncIntervalMs: v.GANTRY_PR_RESYNC_INTERVAL_MS,
    gitDir: v.GANTRY_PR_GIT_DIR ?? join(tmpdir(), 'gantry-pr-service-git'),
    gitTimeoutMs: v.GANTRY_PR_GIT_TIMEOUT_MS,
    reconcileConcurrency: v.GANTRY_PR_RECONCILE_CONCURRENCY,
  }),
});

function authOf(v: Values, refuse: Refuse<keyof typeof variables>): GitHubAuth | null {
  const token = v.GANTRY_GITHUB_TOKEN;
  const appId = v.GANTRY_GITHUB_APP_ID;
  if (token && appId) refuse('GANTRY_GITHUB_TOKEN', 'and GANTRY_GITHUB_APP_ID are both set: set one');
  if (token) return { kind: 'token', token };
  if (!appId) return null;
  const privateKey = v.GANTRY_GITHUB_APP_PRIVATE_KEY ?? (v.GANTRY_GITHUB_APP_PRIVATE_KEY_PATH ? readPrivateKey(v.GANTRY_GITHUB_APP_PRIVATE_KEY_PATH, refuse) : undefined);
  if (!privateKey) refuse('GANTRY_GITHUB_APP_PRIVATE_KEY', '(or GANTRY_GITHUB_APP_PRIVATE_KEY_PATH) is required with GANTRY_GITHUB_APP_ID');
  if (v.GANTRY_GITHUB_APP_INSTALLATION_ID === undefined) refuse('GANTRY_GITHUB_APP_INSTALLATION_ID', 'is required with GANTRY_GITHUB_APP_ID');
  return { kind: 'app', appId, privateKey, installationId: v.GANTRY_GITHUB_APP_INSTALLATION_ID };
}

function readPrivateKey(file: string, refuse: Refuse<keyof typeof variables>): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    return refuse('GANTRY_GITHUB_APP_PRIVATE_KEY_PATH', `cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}
